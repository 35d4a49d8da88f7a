"""A raw SPI dump through the ROM_INDEX/ROM_DATA aperture of the SMUIO ROM controller (fw dump).

This follows the seed (fw_live.py), which ran on hardware: every write to ROM_CNTL and ROM_INDEX on this
path goes through bswap32, the aperture enable (ROM_CNTL bit 29) included, and the restore writes
bswap32 of the values read at the start. The index takes the 64 KiB page number shifted right by 8.
ROM_DATA must be read one dword at a time: a block read would increment the MMIO address.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from tg.drivers import navi31_regs as regs
from tg.drivers.mmio import MMIOInterface
from tg.flash.errors import FlashError
from tg.flash.ifwi import MAGIC
from tg.flash.interrupts import deferred_interrupt


def bswap32(value: int) -> int:
    return int.from_bytes(value.to_bytes(4, "little"), "big")


def read_aperture(mmio: MMIOInterface, on_page: Callable[[int], None] | None = None) -> bytes:
    original_cntl = mmio.read32(regs.ROM_CNTL)
    if original_cntl == 0xFFFFFFFF:
        raise FlashError(
            "raw SMUIO ROM controller is unavailable; the SOC15 function-ROM aperture is not a raw SPI dump"
        )
    original_index = mmio.read32(regs.ROM_INDEX)
    out = bytearray()
    try:
        mmio.write32(regs.ROM_CNTL, bswap32(original_cntl | regs.ROM_APERTURE_ENABLE))
        for page in range(0, regs.FLASH_SIZE, regs.INDEX_PAGE):
            mmio.write32(regs.ROM_INDEX, bswap32(page >> 8))
            for _ in range(regs.INDEX_PAGE // 4):
                out += mmio.read32(regs.ROM_DATA).to_bytes(4, "little")
            if on_page is not None:
                on_page(page + regs.INDEX_PAGE)
    finally:
        with deferred_interrupt():
            mmio.write32(regs.ROM_INDEX, bswap32(original_index))
            mmio.write32(regs.ROM_CNTL, bswap32(original_cntl))
    return bytes(out)


def check_raw_dump(data: bytes) -> None:
    if len(data) != regs.FLASH_SIZE or data[:4] != MAGIC:
        raise FlashError(f"invalid raw flash dump: size=0x{len(data):x} magic={data[:4].hex()}")
    half = regs.FLASH_SIZE // 2
    if data[:half] == data[half:]:
        raise FlashError("ROM aperture contains mirrored 1 MiB halves; refusing to write a non-raw 2 MiB dump")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
