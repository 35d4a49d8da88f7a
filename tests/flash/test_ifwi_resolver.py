"""The IFWI item resolver against the synthetic image builder, which records where it put every item."""

from __future__ import annotations

import struct

import pytest

from tg.drivers.sim.ifwi import SGN_TABLE, build_ifwi
from tg.flash.ifwi import check_ifwi_size, resolve_ifwi_item


@pytest.mark.parametrize("seed", [0, 1])
def test_every_item_resolves_where_the_builder_put_it(seed: int) -> None:
    ifwi = build_ifwi(seed)
    for item, (offset, size) in ifwi.items.items():
        found = resolve_ifwi_item(ifwi.image, item)
        assert (found.offset, found.size) == (offset, size), hex(item)


def test_resolver_errors() -> None:
    image = bytearray(build_ifwi(0).image)
    with pytest.raises(ValueError, match="does not yet support requested item 0x42"):
        resolve_ifwi_item(image, 0x42)
    broken = bytearray(image)
    broken[0x2000:0x2004] = b"XXXX"
    with pytest.raises(ValueError, match="invalid PSP directory at 0x2000"):
        resolve_ifwi_item(broken, 0x02)
    broken = bytearray(image)
    broken[SGN_TABLE : SGN_TABLE + 4] = b"XXXX"
    with pytest.raises(ValueError, match=r"invalid \$SGN table pointer"):
        resolve_ifwi_item(broken, 0x83)
    broken = bytearray(image)
    struct.pack_into("<I", broken, SGN_TABLE + 0x10, 9)  # type 1's entry now claims type 9
    with pytest.raises(ValueError, match=r"missing \$SGN type 1"):
        resolve_ifwi_item(broken, 0x82)
    broken = bytearray(image)
    struct.pack_into("<I", broken, 0x12000 + 0x18, 0x300000)
    with pytest.raises(ValueError, match="item 0x08 extends beyond IFWI"):
        resolve_ifwi_item(broken, 0x08)
    with pytest.raises(ValueError, match="exactly 2 MiB"):
        check_ifwi_size(image[:-1])
