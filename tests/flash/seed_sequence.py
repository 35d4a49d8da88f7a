"""The seed's (romless.py) register sequence, written out from the specification (tools.md A.4), not from
tg's driver: the golden traces in golden/ are generated from this model, so a golden can never simply
bless what tg happens to do.

Where tg deliberately differs from the seed, the model takes a named flag and the README says so:
- `restore_prescaler`: tg puts ROM_CNTL back when it closes the engine; the seed leaves the prescaler set.
- `pre_read`: tg reads a sector before touching it (to skip sectors that match and erases that are not
  needed); the seed always erases.

Reads are listed without their values (those come from the chip), writes with the exact value.

    uv run python tests/flash/seed_sequence.py   # rewrites golden/*.trace from this model
"""

from __future__ import annotations

from pathlib import Path

# tools.md A.2 register offsets and bits
ROM_CNTL, PAGE_MIRROR_CNTL = 0x5A380, 0x5A384
ROM_SW_CNTL, ROM_SW_STATUS, ROM_SW_COMMAND, ROM_SW_DATA = 0x5A3A0, 0x5A3A4, 0x5A3A8, 0x5A3B0
GPIO_PAD_MASK, GPIO_PAD_A, GPIO_PAD_EN = 0x5A504, 0x5A508, 0x5A510
NAMES = {
    ROM_CNTL: "ROM_CNTL",
    PAGE_MIRROR_CNTL: "PAGE_MIRROR_CNTL",
    ROM_SW_CNTL: "ROM_SW_CNTL",
    ROM_SW_STATUS: "ROM_SW_STATUS",
    ROM_SW_COMMAND: "ROM_SW_COMMAND",
    GPIO_PAD_MASK: "GPIO_PAD_MASK",
    GPIO_PAD_A: "GPIO_PAD_A",
    GPIO_PAD_EN: "GPIO_PAD_EN",
}
# The simulated board's power-on register values (a property of the simulated board, not of any driver).
POWER_ON = {ROM_CNTL: 0x08000003, PAGE_MIRROR_CNTL: 0x100, GPIO_PAD_MASK: 0xF80, GPIO_PAD_A: 0x780, GPIO_PAD_EN: 0x1780}
# The simulated engine raises DONE on the second STATUS read after the start.
STATUS_READS_UNTIL_DONE = 2


class SeedModel:
    def __init__(self, prescale: int = 8, restore_prescaler: bool = True) -> None:
        self.regs = dict(POWER_ON)
        self.lines: list[str] = []
        self.prescale = prescale
        self.restore_prescaler = restore_prescaler
        self._opened_rom_cntl = 0

    def r32(self, offset: int) -> int:
        self.lines.append(f"R32 {offset:06x}  {NAMES[offset]}")
        return self.regs.get(offset, 0)

    def w32(self, offset: int, value: int) -> None:
        name = NAMES.get(offset) or f"ROM_SW_DATA+0x{offset - ROM_SW_DATA:02x}"
        self.lines.append(f"W32 {offset:06x} {value:08x}  {name}")
        self.regs[offset] = value

    # Navi31SPI (A.4)
    def open(self) -> None:
        rc = self.r32(ROM_CNTL)
        self._opened_rom_cntl = rc
        self.w32(ROM_CNTL, (rc & 0xE0FFFFFF) | 1 << 28 | self.prescale << 24 | 1)

    def close(self) -> None:
        if self.restore_prescaler:
            self.w32(ROM_CNTL, self._opened_rom_cntl)

    def transfer(self, opcode: int, address: int = 0, address_len: int = 0, data_out: bytes = b"", data_in: int = 0):
        mask, a, en, pm, rc = (
            self.r32(x) for x in (GPIO_PAD_MASK, GPIO_PAD_A, GPIO_PAD_EN, PAGE_MIRROR_CNTL, ROM_CNTL)
        )
        self.w32(GPIO_PAD_MASK, mask & ~0x780)
        self.w32(GPIO_PAD_A, a & ~0x780)
        self.w32(GPIO_PAD_EN, en & ~0x780)
        self.w32(PAGE_MIRROR_CNTL, (pm & 0xF1FFFFFF) | 0x06000000)
        self.w32(ROM_CNTL, (rc & ~0xF) | 8)
        self.w32(ROM_SW_CNTL, 0)
        self.w32(ROM_SW_STATUS, 0)
        self.r32(ROM_SW_STATUS)
        self.w32(ROM_SW_COMMAND, ((address & 0xFFFFFF) << 8) | opcode)
        padded = data_out.ljust((len(data_out) + 3) & ~3, b"\0")
        for i in range(0, len(padded), 4):
            self.w32(ROM_SW_DATA + i, int.from_bytes(padded[i : i + 4], "big"))
        count = len(data_out) or data_in
        self.w32(ROM_SW_CNTL, (address_len << 16) | (0x80000 if data_in else 0) | count)
        self.r32(ROM_SW_CNTL)
        for _ in range(STATUS_READS_UNTIL_DONE):  # the first is the one the timeout f-string makes
            self.r32(ROM_SW_STATUS)
        if data_in:
            self.lines.append(f"RB  {ROM_SW_DATA:06x}  ROM_SW_DATA+0x00")
        self.w32(ROM_SW_CNTL, 0)
        self.w32(ROM_SW_STATUS, 0)
        self.w32(ROM_CNTL, rc)
        self.w32(PAGE_MIRROR_CNTL, pm)
        self.w32(GPIO_PAD_A, a)
        self.w32(GPIO_PAD_EN, en)
        self.w32(GPIO_PAD_MASK, mask)

    # GD25LQ16E (A.4)
    def read_register(self, opcode: int, count: int = 1) -> None:
        self.transfer(opcode, data_in=max(2, count))
        self.transfer(opcode, data_in=count)

    def rdid(self) -> None:
        self.read_register(0x9F, 4)

    def sfdp(self, count: int) -> None:
        for _ in range(2):
            self.transfer(0x5A, address=0, address_len=3, data_in=count)

    def read(self, address: int, count: int) -> None:
        for offset in range(0, count, 0x100):
            for _ in range(2):
                self.transfer(0x03, address=address + offset, address_len=3, data_in=min(0x100, count - offset))

    def wait_idle(self) -> None:
        self.read_register(0x05)  # the simulated chip of the golden tests is never busy (busy_scale 0)

    def write_enable(self) -> None:
        self.transfer(0x06)
        self.read_register(0x05)

    def erase_sector(self, address: int) -> None:
        self.write_enable()
        self.transfer(0x20, address=address, address_len=3)
        self.wait_idle()

    def program_page(self, address: int, data: bytes) -> None:
        self.write_enable()
        self.transfer(0x02, address=address, address_len=3, data_out=data)
        self.wait_idle()


def info_trace() -> list[str]:
    m = SeedModel()
    m.open()
    m.rdid()  # open_flash's JEDEC check
    for opcode in (0x05, 0x35, 0x15):
        m.read_register(opcode)
    m.sfdp(24)
    m.rdid()  # info prints a second RDID capture, read after the SFDP header
    m.close()
    return m.lines


def read_trace(address: int = 0, size: int = 0x40) -> list[str]:
    m = SeedModel()
    m.open()
    m.rdid()
    m.read(address, size)
    m.close()
    return m.lines


def flash_sector_trace(sector: int, sector_data: bytes, pre_read: bool = True) -> list[str]:
    m = SeedModel()
    m.open()
    m.rdid()
    m.read_register(0x35)  # the CMP check
    address = sector * 0x1000
    if pre_read:
        m.read(address, 0x1000)
    m.erase_sector(address)
    for offset in range(0, 0x1000, 0x100):
        page = sector_data[offset : offset + 0x100]
        if page != b"\xff" * 0x100:
            m.program_page(address + offset, page)
    m.read(address, 0x1000)
    m.close()
    return m.lines


def golden_text(lines: list[str]) -> str:
    return "# session 1\n" + "\n".join(lines) + "\n"


def main() -> None:
    from test_golden_traces import GOLDEN, SECTOR, deterministic_image, one_sector_image

    image = one_sector_image(deterministic_image())
    (GOLDEN / "info.trace").write_text(golden_text(info_trace()))
    (GOLDEN / "read_0_0x40.trace").write_text(golden_text(read_trace()))
    sector_data = image[5 * SECTOR : 6 * SECTOR]
    (GOLDEN / "flash_sector_5.trace").write_text(golden_text(flash_sector_trace(5, sector_data)))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    main()
