"""The SMUIO ROM_SW SPI engine of a Navi31 board, as a driver sees it through registers.

A write to ROM_SW_COMMAND latches a new instruction; the next write to ROM_SW_CNTL starts one chip-select
cycle with it (a zero control word is valid: a bare opcode such as WREN). Writes to CNTL with no new
instruction latched only clear it. CNTL holds the byte count in bits 8:0,
the number of command bytes minus one in bits 17:16 and RETURN_DATA_EN in bit 19. The stream on the wire
is the low byte of ROM_SW_COMMAND (the opcode), then ADDRESS[23:0] most significant byte first (only as
many address bytes as CNTL asks for), then for a transmit the DATA window read as big-endian dwords.
After the cycle the DATA window shows the receive capture of the *previous* transaction, in wire order;
drivers therefore issue every read twice. The window changes only when the transaction completes, which a
driver sees as STATUS bit 0 after a few polls: a driver that skips the DONE poll reads stale data, and one
that starts the next transaction before the DONE bit was seen is refused.
"""

from __future__ import annotations

from tg.drivers import navi31_regs as r
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import GD25Chip
from tg.drivers.sim.registers import GATED_STATUS


class SimProtocolError(RuntimeError):
    """The driver broke a rule the real hardware depends on; the simulator refuses instead of guessing."""


class RomSwEngine:
    def __init__(self, regs: dict[int, int], chip: GD25Chip, faults: Faults, done_after_polls: int = 2) -> None:
        self.regs = regs
        self.chip = chip
        self.faults = faults
        self.window = bytearray(b"\xff" * r.ROM_SW_DATA_SIZE)
        self.done_after_polls = done_after_polls
        self._previous_capture = b""
        self._status_cleared = False
        self._polls_until_done = 0
        self._armed = False
        self._window_on_done = b""
        self.transactions = 0

    # -- register side effects ------------------------------------------------------------------------------

    def write_status(self, value: int) -> None:
        if self.faults.status_stuck:
            return
        self.regs[r.ROM_SW_STATUS] = value
        self._status_cleared = value == 0

    def read_status(self) -> int:
        status = self.regs[r.ROM_SW_STATUS]
        if self._polls_until_done and not self.faults.gated:
            self._polls_until_done -= 1
            if self._polls_until_done == 0:
                self._complete()
                status = self.regs[r.ROM_SW_STATUS]
        return status

    def _complete(self) -> None:
        self.window[: len(self._window_on_done)] = self._window_on_done
        self.regs[r.ROM_SW_STATUS] |= 1

    def write_command(self, value: int) -> None:
        self.regs[r.ROM_SW_COMMAND] = value
        self._armed = True

    def write_control(self, value: int) -> None:
        self.regs[r.ROM_SW_CNTL] = value
        if self._armed:
            self._armed = False
            self._run(value)

    # -- one transaction -------------------------------------------------------------------------------------

    def _run(self, control: int) -> None:
        if self._polls_until_done and not self.faults.gated:
            raise SimProtocolError("ROM_SW transaction started before the previous one completed (no DONE poll)")
        self._check_preconditions()
        self._status_cleared = False
        if self.faults.gated:
            self.regs[r.ROM_SW_STATUS] = GATED_STATUS
            return
        count = control & 0x1FF
        command_bytes = ((control >> 16) & 0x3) + 1
        receive = bool(control & r.RETURN_DATA_EN)
        if count > r.ROM_SW_DATA_SIZE:
            raise SimProtocolError(f"ROM_SW_CNTL byte count 0x{count:x} exceeds the 256-byte data window")
        command = self.regs[r.ROM_SW_COMMAND]
        address = ((command >> 8) & 0xFFFFFF).to_bytes(3, "big")
        mosi = bytes([command & 0xFF]) + address[: command_bytes - 1]
        if not receive:
            mosi += self._transmit_bytes(count)
        capture = self.chip.transact(mosi, count if receive else 0)
        self._window_on_done = self._previous_capture
        self._previous_capture = capture if receive else b"\xff" * count
        self.transactions += 1
        self._polls_until_done = self.done_after_polls
        if self.done_after_polls == 0:
            self._complete()

    def _transmit_bytes(self, count: int) -> bytes:
        # Each DATA dword is sent most significant byte first; in memory a dword is little-endian,
        # so every group of four window bytes goes on the wire reversed.
        padded = (count + 3) & ~3
        stream = bytearray(padded)
        for i in range(0, padded, 4):
            stream[i : i + 4] = self.window[i : i + 4][::-1]
        return bytes(stream[:count])

    def _check_preconditions(self) -> None:
        problems = []
        for name, offset in (("MASK", r.GPIO_PAD_MASK), ("A", r.GPIO_PAD_A), ("EN", r.GPIO_PAD_EN)):
            if self.regs[offset] & r.SPI_GPIO_BITS:
                problems.append(f"GPIO_PAD_{name} still owns the SPI pins (0x{self.regs[offset]:08x})")
        if (self.regs[r.PAGE_MIRROR_CNTL] >> 25) & 0x7 != 0b011:
            problems.append(f"PAGE_MIRROR_CNTL bits 27:25 are not 0b011 (0x{self.regs[r.PAGE_MIRROR_CNTL]:08x})")
        if self.regs[r.ROM_CNTL] & 0xF != 8:
            problems.append(f"ROM_CNTL low nibble is not 8 (0x{self.regs[r.ROM_CNTL]:08x})")
        if not self._status_cleared:
            problems.append("ROM_SW_STATUS was not cleared before the transaction")
        if problems:
            raise SimProtocolError("ROM_SW transaction rejected: " + "; ".join(problems))
