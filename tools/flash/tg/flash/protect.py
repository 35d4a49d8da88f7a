"""GD25LQ16E write protection: which part of the array the status registers protect, and clearing it.

The block-protect bits BP0-BP4 (SR1 bits 2-6) with CMP (SR2 bit 6) select a protected range; the chip
silently ignores programs and erases inside it, so a flash shows it only as a verify mismatch. The table
is the GD25LQ16E datasheet's (16 Mbit, 64 KiB blocks, 4 KiB sectors): BP4 selects 4 KiB-granular ranges,
BP3 the bottom instead of the top, BP2-BP0 the size; CMP protects the complement instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from tg.drivers import navi31_regs as regs
from tg.flash.errors import FlashError
from tg.flash.gd25 import GD25LQ16E, READ_SR1, READ_SR2, SR2_CMP, WRITE_STATUS

SR1_BP_BITS, SR1_SRP0 = 0x7C, 0x80
SR2_SRP1 = 0x01

# (BP2, BP1, BP0) -> fraction of the array protected, in 64 KiB blocks (BP4=0)
_BLOCKS = {0b001: 1, 0b010: 2, 0b011: 4, 0b100: 8, 0b101: 16}
# (BP2, BP1, BP0) -> KiB protected when BP4=1 (4 KiB sector granularity); 0b100 and 0b101 are both 32 KiB
_SECTORS_KIB = {0b001: 4, 0b010: 8, 0b011: 16, 0b100: 32, 0b101: 32}


@dataclass(frozen=True)
class Protection:
    sr1: int
    sr2: int
    start: int  # protected byte range [start, end); start == end when nothing is protected
    end: int

    @property
    def bp(self) -> int:
        return (self.sr1 >> 2) & 0x1F

    @property
    def cmp(self) -> bool:
        return bool(self.sr2 & SR2_CMP)

    @property
    def any(self) -> bool:
        return self.end > self.start

    def covers(self, start: int, size: int) -> bool:
        return self.any and start < self.end and self.start < start + size

    def describe_range(self) -> str:
        if not self.any:
            return "none"
        return f"0x{self.start:06x}-0x{self.end - 1:06x} ({(self.end - self.start) // 1024} KiB)"

    def describe_bits(self) -> str:
        srp = f"SRP0={self.sr1 >> 7 & 1} SRP1={self.sr2 & SR2_SRP1}"
        return f"SR1=0x{self.sr1:02x} SR2=0x{self.sr2:02x}: BP4..BP0={self.bp:05b} CMP={int(self.cmp)} {srp}"


def decode(sr1: int, sr2: int) -> Protection:
    bp = (sr1 >> 2) & 0x1F
    size_bits, bottom, sector_mode = bp & 0b111, bool(bp & 0b01000), bool(bp & 0b10000)
    if size_bits == 0:
        start, end = 0, 0
    elif size_bits >= 0b110:
        start, end = 0, regs.FLASH_SIZE
    else:
        size = _SECTORS_KIB[size_bits] * 1024 if sector_mode else _BLOCKS[size_bits] * 0x10000
        start, end = (0, size) if bottom else (regs.FLASH_SIZE - size, regs.FLASH_SIZE)
    if sr2 & SR2_CMP:
        if start == end:
            start, end = 0, regs.FLASH_SIZE
        elif (start, end) == (0, regs.FLASH_SIZE):
            start, end = 0, 0
        else:
            start, end = (end, regs.FLASH_SIZE) if start == 0 else (0, start)
    return Protection(sr1, sr2, start, end)


def read_protection(chip: GD25LQ16E) -> Protection:
    return decode(chip.read_register(READ_SR1), chip.read_register(READ_SR2))


def disable_protection(chip: GD25LQ16E) -> tuple[Protection, Protection]:
    """Clear BP0-BP4 and CMP (keeping SRP0/SRP1, QE and the lock bits); returns (before, after)."""
    before = read_protection(chip)
    if not before.any and not before.bp and not before.cmp:
        return before, before
    chip.write_enable()
    new_sr1, new_sr2 = before.sr1 & ~SR1_BP_BITS & 0xFC, before.sr2 & ~SR2_CMP & 0xFF
    chip.spi.transfer(WRITE_STATUS, data_out=bytes([new_sr1, new_sr2]))
    chip.wait_idle(1.0)
    after = read_protection(chip)
    if after.bp or after.cmp:
        hint = " (SRP0 is set: the WP# pin may be holding the status registers)" if after.sr1 & SR1_SRP0 else ""
        raise FlashError(f"status register write was ignored: {after.describe_bits()}{hint}")
    return before, after
