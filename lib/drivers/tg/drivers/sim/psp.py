"""The PSP early-firmware mailbox (C2PMSG registers) with a scripted item-streaming state machine.

COMMAND reads with bit 31 set when the mailbox is ready. A driver writes COMMAND_DATA, then
`cmd << 16` to COMMAND (which clears bit 31), then 1 to DOORBELL; the firmware answers by setting
COMMAND to `0x80000000 | error` and COMMAND_DATA to its response, here after a few polls.

Streaming follows a script of transfer states `phase << 8 | item`: START_TRANSFER must name the item the
firmware asks for with that item's exact size, DATA_TRANSFER carries one little-endian dword, and
END_TRANSFER compares the received bytes with the item in the simulator's own copy of the IFWI. A good
END moves to the next state; a state with phase 2 is terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tg.drivers.sim.faults import Faults
from tg.drivers.sim.romsw import SimProtocolError

READY = 0x80000000
GET_BOOT_PARTITION, GET_FB_STATE, GET_TRANSFER_TYPE = 0x01, 0x06, 0x07
START_TRANSFER, DATA_TRANSFER, END_TRANSFER, SPI_GET_MODEL_ID = 0x08, 0x09, 0x0A, 0x0B
ERR_INVALID_PARAMETER, ERR_INVALID_COMMAND = 0x03, 0x0E
ERR_SIGNATURE, ERR_NOT_INITIALIZED, ERR_TRANSFER, ERR_GATED = 0x0D, 0x10, 0x11, 0x0A
WRITE_COMMANDS = (START_TRANSFER, DATA_TRANSFER, END_TRANSFER)


@dataclass
class PSPScript:
    """The firmware's transfer states and where each requested item lies in its IFWI copy."""

    states: list[int] = field(default_factory=list)
    items: dict[int, tuple[int, int]] = field(default_factory=dict)  # item -> (offset, size)
    position: int = 0


class PSPMailboxSim:
    def __init__(self, script: PSPScript, ifwi: bytes, faults: Faults, answer_after_polls: int = 2) -> None:
        self.script = script
        self.ifwi = ifwi
        self.faults = faults
        self.answer_after_polls = answer_after_polls
        self.command = READY
        self.data = 0
        self.log: list[int] = []  # every command the firmware ran, in order
        self._pending: tuple[int, int] | None = None
        self._polls = 0
        self._stream: bytearray | None = None
        self._stream_item = 0
        self._stream_size = 0
        self.streamed: list[int] = []  # items accepted by END_TRANSFER

    def ready(self) -> bool:
        return not self.faults.psp_not_ready and self._pending is None and bool(self.command & READY)

    def read_command(self) -> int:
        if self.faults.psp_not_ready:
            return self.command & ~READY
        if self._pending is not None:
            self._polls -= 1
            if self._polls <= 0:
                error, response = self._pending
                self._pending = None
                self.command = READY | error
                self.data = response
        return self.command

    def write_command(self, value: int) -> None:
        if not self.ready():
            # The firmware still owns the mailbox: a real PSP would take the new command as garbage or drop it.
            raise SimProtocolError(
                f"PSP COMMAND written (0x{value:08x}) while the mailbox is not ready (bit 31 clear); "
                "drivers must check the ready bit first"
            )
        self.command = value & 0x7FFFFFFF

    def doorbell(self, value: int) -> None:
        if value != 1 or self.command & READY:
            return
        cmd = (self.command >> 16) & 0xFF
        self.log.append(cmd)
        if cmd in self.faults.psp_errors:
            self._pending = (self.faults.psp_errors[cmd], 0)  # an injected failure: the command does nothing
        else:
            self._pending = self._run(cmd, self.data)
        self._polls = self.answer_after_polls

    def _state(self) -> int:
        states = self.script.states
        return states[min(self.script.position, len(states) - 1)] if states else 0

    def _run(self, cmd: int, argument: int) -> tuple[int, int]:
        if cmd == GET_BOOT_PARTITION:
            return 0, 0
        if cmd == GET_FB_STATE:
            return 0, 0x1
        if cmd == SPI_GET_MODEL_ID:
            return 0, 0xC86015
        if cmd == GET_TRANSFER_TYPE:
            return (ERR_GATED, 0) if self.faults.psp_gated else (0, self._state())
        if self.faults.psp_gated and cmd in WRITE_COMMANDS:
            return ERR_GATED, 0
        if cmd == START_TRANSFER:
            return self._start(argument)
        if cmd == DATA_TRANSFER:
            return self._data(argument)
        if cmd == END_TRANSFER:
            return self._end(argument)
        return ERR_INVALID_COMMAND, 0

    def _start(self, argument: int) -> tuple[int, int]:
        item, size = argument & 0xFF, argument >> 8
        expected = self.script.items.get(self._state() & 0xFF)
        if item != self._state() & 0xFF or expected is None or size != expected[1]:
            return ERR_INVALID_PARAMETER, 0
        self._stream, self._stream_item, self._stream_size = bytearray(), item, size
        return 0, 0

    def _data(self, argument: int) -> tuple[int, int]:
        if self._stream is None:
            return ERR_NOT_INITIALIZED, 0
        if len(self._stream) + 4 > self._stream_size:
            return ERR_TRANSFER, 0
        self._stream += argument.to_bytes(4, "little")
        return 0, 0

    def _end(self, argument: int) -> tuple[int, int]:
        stream, self._stream = self._stream, None
        if stream is None:
            return ERR_NOT_INITIALIZED, 0
        item, size = argument & 0xFF, argument >> 8
        if item != self._stream_item or size != len(stream) or size != self._stream_size:
            return ERR_TRANSFER, 0
        offset, length = self.script.items[item]
        if bytes(stream) != self.ifwi[offset : offset + length]:
            return ERR_SIGNATURE, 0
        self.streamed.append(item)
        self.script.position += 1
        return 0, 0
