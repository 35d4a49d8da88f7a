"""A synthetic Navi31 IFWI image in the recovery layout the PSP streams item by item.

It is never real firmware: random bytes with the structures the item resolver reads (the AA55AA55
magic, two $PSP directories, a $SGN table with seven signature entries, two ISH headers and the 0x89
block) at their places. The builder returns where it put every item, which is the simulator's own
answer to "which bytes does the firmware expect for item N", independent of the driver's resolver.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from tg.drivers.sim.gd25 import FLASH_SIZE

MAGIC = bytes.fromhex("AA55AA55")
SGN_TABLE = 0x4000
SGN_TYPES = 7
ISH_A, ISH_B = 0x12000, 0x13000


@dataclass(frozen=True)
class SyntheticIFWI:
    image: bytes
    items: dict[int, tuple[int, int]]  # item type -> (offset, size)


# The order in which the simulated firmware asks for items; phase 2 (0x2xx) marks the last one.
DEFAULT_TRANSFER_STATES = [
    0x001, 0x002, 0x003, 0x080, 0x081, 0x082, 0x083, 0x084, 0x085, 0x086, 0x087, 0x088,
    0x004, 0x005, 0x006, 0x007, 0x089, 0x208,
]  # fmt: skip


def build_ifwi(seed: int = 0) -> SyntheticIFWI:
    rng = random.Random(seed)
    image = bytearray(rng.randbytes(FLASH_SIZE))
    items: dict[int, tuple[int, int]] = {}
    image[0:4] = MAGIC
    items[0x01] = (0, 0x54)
    for item, offset, entries in ((0x02, 0x2000, 5), (0x03, 0x3000, 6)):
        image[offset : offset + 12] = b"$PSP" + struct.pack("<II", rng.getrandbits(32), entries)
        items[item] = (offset, (entries + 1) * 0x10)
    image[0x1000:0x1004] = struct.pack("<I", SGN_TABLE)
    items[0x80] = (0x1000, 4)
    image[SGN_TABLE : SGN_TABLE + 12] = b"$SGN" + struct.pack("<II", 0, SGN_TYPES)
    items[0x81] = (SGN_TABLE, (SGN_TYPES + 1) * 0x10)
    for index in range(SGN_TYPES):
        sign_type = index + 1
        offset, size = 0x20000 + index * 0x2000, 0x100 * sign_type
        struct.pack_into("<IIII", image, SGN_TABLE + 0x10 + index * 0x10, sign_type, 0, size, offset)
        items[0x81 + sign_type] = (offset, size)
    items[0x04], items[0x05] = (0x10000, 0x1000), (0x11000, 0x1000)
    items[0x06], items[0x07] = (ISH_A, 0x20), (ISH_B, 0x20)
    first_entry_offset, first_entry_size = 0x40000, 0x3000
    struct.pack_into("<I", image, ISH_A + 0x10, first_entry_offset)
    struct.pack_into("<I", image, ISH_A + 0x18, first_entry_size)
    items[0x08] = (first_entry_offset, first_entry_size)
    items[0x89] = (0x1F0000, 0x100)
    return SyntheticIFWI(bytes(image), items)
