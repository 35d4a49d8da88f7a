"""Where each item the PSP asks for lies in a Navi31 IFWI image (AMDVBFlash's recovery-layout types)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tg.drivers import navi31_regs as regs

ROM_ITEM_COUNT = 19  # Navi31 ROMItemCount (AMDVBFlash ASICDetails.xml): the most steps ifwi-all takes
MAGIC = bytes.fromhex("AA55AA55")
FIXED_ITEMS = {
    0x01: (0x0, 0x54),
    0x04: (0x10000, 0x1000),
    0x05: (0x11000, 0x1000),
    0x06: (0x12000, 0x20),
    0x07: (0x13000, 0x20),
    0x80: (0x1000, 4),
    0x89: (0x1F0000, 0x100),
}
PSP_DIRECTORIES = {0x02: 0x2000, 0x03: 0x3000}
SGN_POINTER = 0x1000
ISH_A = 0x12000


@dataclass(frozen=True)
class IfwiItem:
    item: int
    offset: int
    size: int


def _u32(image: bytes, offset: int) -> int:
    if offset < 0 or offset + 4 > len(image):
        raise ValueError(f"IFWI too short to read a dword at 0x{offset:x}")
    return struct.unpack_from("<I", image, offset)[0]


def _locate(image: bytes, item: int) -> tuple[int, int]:
    if item in FIXED_ITEMS:
        return FIXED_ITEMS[item]
    if item in PSP_DIRECTORIES:
        offset = PSP_DIRECTORIES[item]
        if image[offset : offset + 4] != b"$PSP":
            raise ValueError(f"invalid PSP directory at 0x{offset:x}")
        return offset, (_u32(image, offset + 8) + 1) * 0x10
    if 0x81 <= item <= 0x88:
        table = _u32(image, SGN_POINTER)
        if image[table : table + 4] != b"$SGN":
            raise ValueError("invalid $SGN table pointer")
        if item == 0x81:
            return table, (_u32(image, table + 8) + 1) * 0x10
        return _sgn_entry(image, table, item - 0x81)
    if item == 0x08:
        # The first ISH entry (firmware ID 0x13c); the PSP, not the host, picks the destination partition.
        return _u32(image, ISH_A + 0x10), _u32(image, ISH_A + 0x18)
    raise ValueError(f"IFWI resolver does not yet support requested item 0x{item:02x}")


def _sgn_entry(image: bytes, table: int, sign_type: int) -> tuple[int, int]:
    count = _u32(image, table + 8)
    found = []
    for index in range(count):
        at = table + 0x10 + index * 0x10
        if at + 0x10 > len(image):
            break
        entry_type, _, size, offset = struct.unpack_from("<IIII", image, at)
        if entry_type == sign_type:
            found.append((offset, size))
    if len(found) != 1:
        raise ValueError(f"missing $SGN type {sign_type}" if not found else f"duplicate $SGN type {sign_type}")
    return found[0]


def resolve_ifwi_item(image: bytes, item: int) -> IfwiItem:
    offset, size = _locate(image, item)
    if offset + size > len(image):
        raise ValueError(f"item 0x{item:02x} extends beyond IFWI")
    return IfwiItem(item, offset, size)


def check_ifwi_size(image: bytes) -> None:
    if len(image) != regs.FLASH_SIZE:
        raise ValueError("Navi31 IFWI image must be exactly 2 MiB")
