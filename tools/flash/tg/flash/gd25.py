"""GigaDevice GD25LQ16E (2 MiB SPI NOR) commands over the Navi31 ROM_SW engine.

The engine's receive window shows the *previous* transaction's capture, so every read is issued twice
with the same parameters and the second result is used.
"""

from __future__ import annotations

from collections.abc import Callable

from tg.drivers import navi31_regs as regs
from tg.flash.errors import FlashError
from tg.flash.poll import wait_until
from tg.flash.spi import Navi31SPI

EXPECTED_JEDEC = bytes([0xC8, 0x60, 0x15])
CHIP_NAME = "GigaDevice GD25LQ16E"

READ_ID, READ_SR1, READ_SR2, READ_SR3, READ_SFDP = 0x9F, 0x05, 0x35, 0x15, 0x5A
WRITE_ENABLE, WRITE_STATUS, SECTOR_ERASE, PAGE_PROGRAM, READ_DATA = 0x06, 0x01, 0x20, 0x02, 0x03
# Opcodes that change the chip; read-only commands must never send them.
WRITE_OPCODES = frozenset({WRITE_ENABLE, WRITE_STATUS, SECTOR_ERASE, PAGE_PROGRAM, 0x52, 0xD8, 0x60, 0xC7})

SR1_BUSY, SR1_WEL, SR2_CMP = 0x01, 0x02, 0x40


def has_jedec(capture: bytes) -> bool:
    """True if C8 60 15 appears in the capture, also when the bridge delivered it rotated."""
    return EXPECTED_JEDEC in capture + capture[:2]


class GD25LQ16E:
    def __init__(self, spi: Navi31SPI) -> None:
        self.spi = spi
        self.jedec = b""

    # -- identification and status ---------------------------------------------------------------------------

    def _read_twice(self, opcode: int, count: int, address: int = 0, address_len: int = 0) -> bytes:
        self.spi.transfer(opcode, address=address, address_len=address_len, data_in=count)
        return self.spi.transfer(opcode, address=address, address_len=address_len, data_in=count)

    def rdid(self) -> bytes:
        return self.read_register_bytes(READ_ID, 4)

    def identify(self) -> bytes:
        """Read the JEDEC ID and refuse anything but a GD25LQ16E; the capture is kept in `jedec`."""
        capture = self.rdid()
        if not has_jedec(capture):
            raise FlashError(f"unexpected GD25LQ16E JEDEC capture: {capture.hex()} (refusing an unknown chip)")
        self.jedec = capture
        return capture

    def read_register_bytes(self, opcode: int, count: int) -> bytes:
        """A register read as the seed does it: primed with max(2, count) bytes, then `count` read."""
        self.spi.transfer(opcode, data_in=max(2, count))
        return self.spi.transfer(opcode, data_in=count)

    def read_register(self, opcode: int) -> int:
        return self.read_register_bytes(opcode, 1)[0]

    def status_registers(self) -> tuple[int, int, int]:
        return self.read_register(READ_SR1), self.read_register(READ_SR2), self.read_register(READ_SR3)

    def sfdp(self, count: int = 24) -> bytes:
        """The SFDP header. The engine clocks the dummy byte after the address in as data, so the
        capture starts with it and `SFDP` lands at offset 1; it is kept for diagnostics."""
        return self._read_twice(READ_SFDP, count, address=0, address_len=3)

    def wait_idle(self, timeout: float) -> None:
        wait_until(
            lambda: not self.read_register(READ_SR1) & SR1_BUSY,
            timeout,
            f"flash remained busy for {timeout}s",
            interval=0.002,
        )

    # -- writes ----------------------------------------------------------------------------------------------

    def write_enable(self) -> None:
        self.spi.transfer(WRITE_ENABLE)
        sr1 = self.read_register(READ_SR1)
        if not sr1 & SR1_WEL:
            raise FlashError(f"WREN failed (SR1=0x{sr1:02x})")

    def clear_cmp(self) -> bool:
        """Clear SR2.CMP, keeping every BP/QE/SRP bit; False if CMP was already clear."""
        sr1, sr2 = self.read_register(READ_SR1), self.read_register(READ_SR2)
        if not sr2 & SR2_CMP:
            return False
        self.write_enable()
        # BUSY and WEL are not writable; every protection field but CMP is written back unchanged.
        self.spi.transfer(WRITE_STATUS, data_out=bytes([sr1 & 0xFC, sr2 & ~SR2_CMP & 0xFF]))
        self.wait_idle(1.0)
        sr2 = self.read_register(READ_SR2)
        if sr2 & SR2_CMP:
            raise FlashError(f"failed to clear CMP (SR2=0x{sr2:02x})")
        return True

    def erase_sector(self, address: int) -> None:
        if address % regs.SECTOR_SIZE or not 0 <= address < regs.FLASH_SIZE:
            raise ValueError("sector address is not 4 KiB aligned")
        self.write_enable()
        self.spi.transfer(SECTOR_ERASE, address=address, address_len=3)
        self.wait_idle(2.0)

    def program_page(self, address: int, data: bytes) -> None:
        if not 1 <= len(data) <= regs.PAGE_SIZE:
            raise ValueError("page program needs 1..256 bytes")
        if address // regs.PAGE_SIZE != (address + len(data) - 1) // regs.PAGE_SIZE:
            raise ValueError("page program crosses a 256-byte boundary")
        if not 0 <= address < regs.FLASH_SIZE:
            raise ValueError("page program outside 2 MiB flash")
        self.write_enable()
        self.spi.transfer(PAGE_PROGRAM, address=address, address_len=3, data_out=data)
        self.wait_idle(1.0)

    # -- reads -----------------------------------------------------------------------------------------------

    def read(self, address: int, count: int, on_chunk: Callable[[int], None] | None = None) -> bytes:
        if address < 0 or count < 0 or address + count > regs.FLASH_SIZE:
            raise ValueError("read outside 2 MiB flash")
        out = bytearray()
        while len(out) < count:
            size = min(regs.ROM_SW_DATA_SIZE, count - len(out))
            out += self._read_twice(READ_DATA, size, address=address + len(out), address_len=3)
            if on_chunk is not None:
                on_chunk(size)
        return bytes(out)
