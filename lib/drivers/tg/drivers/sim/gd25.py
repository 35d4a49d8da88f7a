"""A GigaDevice GD25LQ16E SPI NOR flash: 2 MiB, 4 KiB sectors, 256-byte pages.

The model follows the datasheet where a driver could notice: program only clears bits and wraps inside
its page; erase sets 0xFF; program, erase and status writes need WEL, clear it, and leave BUSY set for the
datasheet's typical time (scaled by `busy_scale`, so tests need not wait 50 ms per erase); while BUSY only
status reads are answered. BUSY is a wall-clock deadline, not a count of polls: a command interrupted
mid-erase leaves a chip that is simply idle a moment later, as a real one is; writes into a protected region (BP
bits with CMP) are ignored silently, exactly as the real chip does, so only a read-back catches them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tg.drivers.navi31_regs import FLASH_SIZE, PAGE_SIZE, SECTOR_SIZE
from tg.drivers.sim.faults import Faults

JEDEC_ID = bytes([0xC8, 0x60, 0x15])

SR1_BUSY, SR1_WEL = 0x01, 0x02
SR1_WRITABLE = 0xFC  # BP0-BP4 and SRP0; BUSY and WEL are read-only
SR2_WRITABLE = 0x43  # SRP1, QE, CMP; LB1-LB3 are one-time (set only), SUS is read-only
SR2_LOCK_BITS = 0x38
SR2_CMP = 0x40

# Typical busy times from the GD25LQ16E datasheet (tPP, tSE, tBE32, tBE64, tCE, tW), in seconds.
BUSY_SECONDS = {
    "program": 0.0006,
    "sector_erase": 0.05,
    "block32_erase": 0.15,
    "block64_erase": 0.25,
    "chip_erase": 15.0,
    "status_write": 0.005,
}
# The simulator's default: 1/100 of the datasheet times (a full flash needs 512 erases).
DEFAULT_BUSY_SCALE = 0.01

# Serial flash discoverable parameters: the header and the first parameter header (JEDEC basic table).
SFDP_TABLE = bytes.fromhex("5346445006010100ff000109300000ff") + bytes(
    [0xE5, 0x20, 0xF1, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x44, 0xEB, 0x08, 0x6B, 0x08, 0x3B, 0x42, 0xBB]
)


class GD25Chip:
    def __init__(self, data: bytearray | None = None, faults: Faults | None = None) -> None:
        self.data = data if data is not None else bytearray(b"\xff" * FLASH_SIZE)
        if len(self.data) != FLASH_SIZE:
            raise ValueError(f"flash image must be 0x{FLASH_SIZE:x} bytes")
        self.faults = faults or Faults()
        self.sr1 = 0x00
        self.sr2 = 0x00
        self.sr3 = 0x60  # output driver strength 25% (the power-on default)
        self.busy_until = 0.0  # time.time() when the running program/erase/status write ends
        self.busy_scale = DEFAULT_BUSY_SCALE
        self.jedec_rotation = 0  # rotates the RDID capture, as some bridges deliver it
        self.commands: list[int] = []  # every opcode received, for tests that count programs and erases
        # called with (start, size) after the array changed, and with None after a status register write:
        # a simulator session writes the change through to its state file, as the real part keeps it
        self.on_change: Callable[[tuple[int, int] | None], None] | None = None

    # -- the SPI interface: one chip-select cycle ------------------------------------------------------------

    def transact(self, mosi: bytes, rx_count: int) -> bytes:
        """Clock out `mosi` (opcode, address, data), then clock in `rx_count` bytes; return them."""
        if not mosi:
            return b"\xff" * rx_count
        opcode = mosi[0]
        self.commands.append(opcode)
        if opcode in (0x05, 0x35, 0x15):
            return self._read_status(opcode, rx_count)
        if self.busy:
            return b"\xff" * rx_count  # a busy chip ignores everything but status reads
        handler = self._HANDLERS.get(opcode)
        if handler is None:
            return b"\xff" * rx_count
        return handler(self, mosi, rx_count) or b"\xff" * rx_count

    @property
    def busy(self) -> bool:
        return self.faults.busy_forever and self.busy_until > 0 or time.time() < self.busy_until

    def _read_status(self, opcode: int, rx_count: int) -> bytes:
        value = {0x05: self.sr1 | (SR1_BUSY if self.busy else 0), 0x35: self.sr2, 0x15: self.sr3}[opcode]
        return bytes([value]) * rx_count

    def _start_busy(self, kind: str) -> None:
        self.sr1 &= ~SR1_WEL
        self.busy_until = time.time() + BUSY_SECONDS[kind] * self.busy_scale

    # -- commands ----------------------------------------------------------------------------------------------

    def _rdid(self, mosi: bytes, rx_count: int) -> bytes:
        # Manufacturer, memory type, capacity, then 0x00 until chip select rises. Some bridges deliver the
        # 4-byte capture rotated; `jedec_rotation` models that.
        capture = JEDEC_ID + b"\x00"
        shift = self.jedec_rotation % 4
        capture = capture[shift:] + capture[:shift]
        return (capture * (rx_count // 4 + 1))[:rx_count]

    def _wren(self, mosi: bytes, rx_count: int) -> None:
        if not self.faults.wel_never_sets:
            self.sr1 |= SR1_WEL

    def _wrdi(self, mosi: bytes, rx_count: int) -> None:
        self.sr1 &= ~SR1_WEL

    def _write_status(self, mosi: bytes, rx_count: int) -> None:
        if not self.sr1 & SR1_WEL or len(mosi) < 2:
            return
        self.sr1 = (self.sr1 & ~SR1_WRITABLE) | (mosi[1] & SR1_WRITABLE)
        if len(mosi) >= 3:
            locks = (self.sr2 | mosi[2]) & SR2_LOCK_BITS
            self.sr2 = (self.sr2 & ~(SR2_WRITABLE | SR2_LOCK_BITS)) | (mosi[2] & SR2_WRITABLE) | locks
        self._changed(None)
        self._start_busy("status_write")

    def _read(self, mosi: bytes, rx_count: int, dummy: int = 0) -> bytes | None:
        if len(mosi) < 4:
            return None
        address = _address(mosi) + dummy
        out = bytearray()
        while len(out) < rx_count:
            start = address % FLASH_SIZE
            take = min(rx_count - len(out), FLASH_SIZE - start)
            out += self.data[start : start + take]
            address = start + take
        return bytes(out)

    def _fast_read(self, mosi: bytes, rx_count: int) -> bytes | None:
        if len(mosi) < 4:
            return None
        # The dummy byte follows the address; if the controller sent only the address, it is clocked
        # in as the first received byte, which shows as 0xFF.
        if len(mosi) >= 5:
            return self._read(mosi, rx_count)
        data = self._read(mosi, max(rx_count - 1, 0)) or b""
        return (b"\xff" + data)[:rx_count]

    def _sfdp(self, mosi: bytes, rx_count: int) -> bytes | None:
        if len(mosi) < 4:
            return None
        address = _address(mosi) & 0xFF
        table = SFDP_TABLE + b"\xff" * 256
        body = table[address : address + rx_count]
        if len(mosi) >= 5:
            return body[:rx_count]
        return (b"\xff" + body)[:rx_count]  # dummy byte clocked in as data, as the ROM_SW engine does

    def _page_program(self, mosi: bytes, rx_count: int) -> None:
        if not self.sr1 & SR1_WEL or len(mosi) < 5:
            return
        address = _address(mosi)
        page = address & ~(PAGE_SIZE - 1)
        payload = mosi[4:]
        if len(payload) > PAGE_SIZE:
            payload = payload[-PAGE_SIZE:]  # the datasheet: only the last 256 bytes are kept
        if not self.is_protected(page, PAGE_SIZE):
            column = address & (PAGE_SIZE - 1)
            for i, byte in enumerate(payload):
                at = page + (column + i) % PAGE_SIZE  # wraps to the start of the same page
                self.data[at] = (self.data[at] & byte) | self.faults.stuck_bits.get(at, 0)
            self._changed((page, PAGE_SIZE))
        self._start_busy("program")

    def _erase(self, mosi: bytes, size: int, kind: str) -> None:
        if not self.sr1 & SR1_WEL:
            return
        if size == FLASH_SIZE:
            start = 0
        elif len(mosi) < 4:
            return
        else:
            start = _address(mosi) & ~(size - 1)
        if not self.is_protected(start, size):
            self.data[start : start + size] = b"\xff" * size
            for at, bits in self.faults.stuck_bits.items():
                if start <= at < start + size:
                    self.data[at] |= bits
            self._changed((start, size))
        self._start_busy(kind)

    def _changed(self, span: tuple[int, int] | None) -> None:
        if self.on_change is not None:
            self.on_change(span)

    def _sector_erase(self, mosi: bytes, rx_count: int) -> None:
        self._erase(mosi, SECTOR_SIZE, "sector_erase")

    def _block32_erase(self, mosi: bytes, rx_count: int) -> None:
        self._erase(mosi, 0x8000, "block32_erase")

    def _block64_erase(self, mosi: bytes, rx_count: int) -> None:
        self._erase(mosi, 0x10000, "block64_erase")

    def _chip_erase(self, mosi: bytes, rx_count: int) -> None:
        self._erase(mosi, FLASH_SIZE, "chip_erase")

    def _release_power_down(self, mosi: bytes, rx_count: int) -> bytes:
        return bytes([0x14]) * rx_count  # three dummy bytes are part of mosi; the electronic ID repeats

    def _manufacturer_device_id(self, mosi: bytes, rx_count: int) -> bytes:
        return (bytes([0xC8, 0x14]) * (rx_count // 2 + 1))[:rx_count]

    _HANDLERS = {
        0x9F: _rdid,
        0x06: _wren,
        0x04: _wrdi,
        0x01: _write_status,
        0x03: _read,
        0x0B: _fast_read,
        0x5A: _sfdp,
        0x02: _page_program,
        0x20: _sector_erase,
        0x52: _block32_erase,
        0xD8: _block64_erase,
        0x60: _chip_erase,
        0xC7: _chip_erase,
        0xAB: _release_power_down,
        0x90: _manufacturer_device_id,
    }

    # -- write protection --------------------------------------------------------------------------------------

    def protected_range(self) -> tuple[int, int]:
        """The protected [start, end) byte range from BP0-BP4 and CMP (the table GigaDevice shares with
        Winbond's 16 Mbit parts); (0, 0) when nothing is protected."""
        bp = (self.sr1 >> 2) & 0x1F
        level, bottom, sector_mode = bp & 0x7, bool(bp & 0x08), bool(bp & 0x10)
        if level == 0:
            start, end = 0, 0
        elif level >= 6:
            start, end = 0, FLASH_SIZE
        else:
            size = (SECTOR_SIZE << min(level - 1, 3)) if sector_mode else (0x10000 << (level - 1))
            start, end = (0, size) if bottom else (FLASH_SIZE - size, FLASH_SIZE)
        if self.sr2 & SR2_CMP:
            return _complement(start, end)
        return start, end

    def is_protected(self, start: int, size: int) -> bool:
        low, high = self.protected_range()
        if low == high:
            return False
        return start < high and low < start + size


def _complement(start: int, end: int) -> tuple[int, int]:
    if start == end:
        return 0, FLASH_SIZE
    if (start, end) == (0, FLASH_SIZE):
        return 0, 0
    return (end, FLASH_SIZE) if start == 0 else (0, start)


def _address(mosi: bytes) -> int:
    return (mosi[1] << 16) | (mosi[2] << 8) | mosi[3]
