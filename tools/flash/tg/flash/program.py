"""Whole-flash operations on a GD25LQ16E: dump, verify and sector-by-sector programming.

Programming follows flashrom's safety model: read what is there first and leave sectors that already
match alone; erase only when the new data needs a 0 turned back into 1; program only pages that change;
read every written sector back before touching the next, so a failure leaves at most one sector wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tg.drivers import navi31_regs as regs
from tg.flash.errors import FlashError
from tg.flash.gd25 import GD25LQ16E

ERASED_PAGE = b"\xff" * regs.PAGE_SIZE


@dataclass(frozen=True)
class SectorRange:
    start: int
    count: int

    @classmethod
    def parse(cls, start: int, count: int | None) -> SectorRange:
        if count is None:
            count = regs.SECTOR_COUNT - start
        if not 0 <= start < regs.SECTOR_COUNT or not 1 <= count <= regs.SECTOR_COUNT - start:
            raise ValueError("invalid sector range")
        return cls(start, count)

    def sectors(self) -> range:
        return range(self.start, self.start + self.count)


@dataclass(frozen=True)
class SectorOutcome:
    sector: int
    action: str  # "skipped" (already matched), "programmed" (no erase needed) or "erased+programmed"
    pages_programmed: int


@dataclass(frozen=True)
class FlashSummary:
    sectors: int
    skipped: int
    erased: int
    pages_programmed: int
    cleared_cmp: bool


@dataclass(frozen=True)
class Mismatch:
    offset: int
    flash_byte: int
    image_byte: int

    def __str__(self) -> str:
        return f"0x{self.offset:06x}: flash={self.flash_byte:02x} image={self.image_byte:02x}"


class VerifyMismatch(FlashError):
    """A written sector did not read back as the image."""


def first_mismatch(flash: bytes, image: bytes, base: int = 0) -> Mismatch | None:
    if flash == image:
        return None
    for i, (a, b) in enumerate(zip(flash, image, strict=True)):
        if a != b:
            return Mismatch(base + i, a, b)
    return None


def check_image_size(image: bytes) -> None:
    if len(image) != regs.FLASH_SIZE:
        raise ValueError(f"image must be exactly 0x{regs.FLASH_SIZE:x} bytes (got 0x{len(image):x})")


def verify_against(chip: GD25LQ16E, image: bytes, on_sector: Callable[[int], None] | None = None) -> Mismatch | None:
    """Compare the flash with `image` sector by sector; the first differing byte, or None."""
    for sector in range(regs.SECTOR_COUNT):
        address = sector * regs.SECTOR_SIZE
        flash = chip.read(address, regs.SECTOR_SIZE)
        mismatch = first_mismatch(flash, image[address : address + regs.SECTOR_SIZE], address)
        if mismatch is not None:
            return mismatch
        if on_sector is not None:
            on_sector(sector)
    return None


def program_sector(chip: GD25LQ16E, sector: int, wanted: bytes) -> SectorOutcome:
    address = sector * regs.SECTOR_SIZE
    current = chip.read(address, regs.SECTOR_SIZE)
    if current == wanted:
        return SectorOutcome(sector, "skipped", 0)
    # Programming can only clear bits; if any wanted 1 sits on a current 0, the sector must be erased.
    current_bits, wanted_bits = int.from_bytes(current, "little"), int.from_bytes(wanted, "little")
    needs_erase = current_bits & wanted_bits != wanted_bits
    if needs_erase:
        chip.erase_sector(address)
        current = b"\xff" * regs.SECTOR_SIZE
    pages = 0
    for offset in range(0, regs.SECTOR_SIZE, regs.PAGE_SIZE):
        page = wanted[offset : offset + regs.PAGE_SIZE]
        if page != current[offset : offset + regs.PAGE_SIZE] and page != ERASED_PAGE:
            chip.program_page(address + offset, page)
            pages += 1
    written = chip.read(address, regs.SECTOR_SIZE)
    mismatch = first_mismatch(written, wanted, address)
    if mismatch is not None:
        raise VerifyMismatch(f"verify mismatch at {mismatch}")
    return SectorOutcome(sector, "erased+programmed" if needs_erase else "programmed", pages)


def program_image(
    chip: GD25LQ16E,
    image: bytes,
    sectors: SectorRange,
    clear_cmp: bool,
    on_sector: Callable[[SectorOutcome], None] | None = None,
    on_cleared_cmp: Callable[[], None] | None = None,
) -> FlashSummary:
    sr2 = chip.read_register(0x35)
    cleared = False
    if sr2 & 0x40:
        if not clear_cmp:
            raise FlashError("CMP protects the full array; rerun with --clear-cmp")
        cleared = chip.clear_cmp()
        if cleared and on_cleared_cmp is not None:
            on_cleared_cmp()
    skipped = erased = pages = 0
    for sector in sectors.sectors():
        address = sector * regs.SECTOR_SIZE
        try:
            outcome = program_sector(chip, sector, image[address : address + regs.SECTOR_SIZE])
        except VerifyMismatch as e:
            raise _explain_protection(chip, e, address) from None
        skipped += outcome.action == "skipped"
        erased += outcome.action == "erased+programmed"
        pages += outcome.pages_programmed
        if on_sector is not None:
            on_sector(outcome)
    return FlashSummary(sectors.count, skipped, erased, pages, cleared)


def _explain_protection(chip: GD25LQ16E, mismatch: VerifyMismatch, address: int) -> VerifyMismatch:
    """A chip ignores writes to a protected range without any error; when that is the cause, say so."""
    from tg.flash.protect import read_protection

    protection = read_protection(chip)
    if not protection.covers(address, regs.SECTOR_SIZE):
        return mismatch
    return VerifyMismatch(
        f"{mismatch}: sector 0x{address:06x} lies in the write-protected range {protection.describe_range()} "
        f"({protection.describe_bits()}), so the chip ignored the erase and program; `tg-flash wp status` "
        "shows the protection, `tg-flash wp disable --yes` clears it"
    )
