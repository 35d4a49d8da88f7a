"""The PSP early boot-firmware mailbox (C2PMSG): probe queries and IFWI item streaming.

Early item streaming works after the autonomous PSP boot and before a host driver loads SOS; a fully
initialised SOS rejects these commands (GET_TRANSFER_TYPE answers error 0x0A).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tg.drivers import navi31_regs as regs
from tg.drivers.mmio import MMIOInterface
from tg.flash.errors import FlashError
from tg.flash.poll import wait_until

READY = 0x80000000
GET_BOOT_PARTITION, GET_FB_STATE, GET_TRANSFER_TYPE = 0x01, 0x06, 0x07
START_TRANSFER, DATA_TRANSFER, END_TRANSFER, SPI_GET_MODEL_ID = 0x08, 0x09, 0x0A, 0x0B
COMMAND_NAMES = {
    GET_BOOT_PARTITION: "boot_partition",
    GET_FB_STATE: "fb_state",
    GET_TRANSFER_TYPE: "transfer_type",
    START_TRANSFER: "start_transfer",
    DATA_TRANSFER: "data_transfer",
    END_TRANSFER: "end_transfer",
    SPI_GET_MODEL_ID: "model_id",
}
PROBE_COMMANDS = (GET_BOOT_PARTITION, GET_FB_STATE, SPI_GET_MODEL_ID, GET_TRANSFER_TYPE)
ERROR_GATED = 0x0A

PSP_ERRORS = {
    0x01: "generic error",
    0x02: "out of bounds",
    0x03: "invalid parameter",
    0x04: "off-chip boot error",
    0x05: "address not set",
    0x06: "parse off-chip error",
    0x07: "address map error",
    0x08: "parse on-chip error",
    0x09: "full update error",
    0x0A: "partition update error",
    0x0B: "map on-chip error",
    0x0C: "write to SPI error",
    0x0D: "signature validation error",
    0x0E: "invalid command",
    0x0F: "signature not found",
    0x10: "state machine not initialized",
    0x11: "state machine transfer error",
    0x12: "initialization error",
}


def error_text(code: int) -> str:
    return PSP_ERRORS.get(code, "unknown error")


@dataclass(frozen=True)
class MailboxReply:
    command: int
    error: int
    response: int

    @property
    def name(self) -> str:
        return COMMAND_NAMES.get(self.command, f"0x{self.command:02x}")


@dataclass(frozen=True)
class StreamResult:
    item_type: int
    size: int
    seconds: float


class PSPMailbox:
    def __init__(self, mmio: MMIOInterface, log: Callable[[str], None] = lambda line: None) -> None:
        self.mmio = mmio
        self.log = log

    def command(self, cmd: int, data: int | None = None, timeout: float = 10.0) -> MailboxReply:
        status = self.mmio.read32(regs.PSP_COMMAND)
        if not status & READY:
            raise FlashError(f"PSP mailbox is not ready before command 0x{cmd:02x}: status=0x{status:08x}")
        if data is not None:
            self.mmio.write32(regs.PSP_COMMAND_DATA, data)
        self.mmio.write32(regs.PSP_COMMAND, cmd << 16)
        self.mmio.write32(regs.PSP_DOORBELL, 1)
        status = wait_until(
            lambda: self.mmio.read32(regs.PSP_COMMAND) & READY and self.mmio.read32(regs.PSP_COMMAND),
            timeout,
            f"PSP mailbox command 0x{cmd:02x} timed out",
        )
        return MailboxReply(cmd, status & 0xFFFF, self.mmio.read32(regs.PSP_COMMAND_DATA))

    def require(self, cmd: int, data: int | None = None, timeout: float = 10.0) -> MailboxReply:
        reply = self.command(cmd, data, timeout)
        if reply.error:
            raise FlashError(f"PSP {reply.name} failed: error=0x{reply.error:02x} ({error_text(reply.error)})")
        return reply

    def probe(self) -> list[MailboxReply]:
        """The read-only queries; failures are reported, not raised."""
        return [self.command(cmd) for cmd in PROBE_COMMANDS]

    def transfer_type(self) -> int:
        return self.require(GET_TRANSFER_TYPE).response

    def stream(self, payload: bytes, item_type: int, transfer_type: int | None = None) -> StreamResult:
        """Send one IFWI item: START, one DATA per little-endian dword, END. If anything fails before
        everything was sent, END is still sent (best effort) so the firmware leaves the transfer state."""
        if not payload:
            raise ValueError("payload must not be empty")
        if len(payload) > 0xFFFFFF:
            raise ValueError("payload exceeds the 24-bit size field")
        if len(payload) % 4:
            raise ValueError("payload size must be a multiple of 4 bytes")
        if not 0 <= item_type <= 0xFF:
            raise ValueError("item type must fit in 8 bits")
        if transfer_type is None:
            transfer_type = self.transfer_type()
        self.log(f"firmware transfer_type=0x{transfer_type:x}")
        if transfer_type & 0xFF != item_type:
            raise FlashError(f"firmware requests item 0x{transfer_type & 0xFF:02x}, not 0x{item_type:02x}")
        started = time.monotonic()
        self.require(START_TRANSFER, (len(payload) << 8) | item_type)
        sent = 0
        end_attempted = False
        try:
            for offset in range(0, len(payload), 4):
                self.require(DATA_TRANSFER, int.from_bytes(payload[offset : offset + 4], "little"))
                sent += 4
                if sent % 0x1000 == 0:
                    rate = sent / 1024 / max(time.monotonic() - started, 1e-9)
                    self.log(f"0x{sent:x}/0x{len(payload):x} ({rate:.1f} KiB/s)")
            end_attempted = True
            self.require(END_TRANSFER, (sent << 8) | item_type, timeout=60.0)
        except BaseException:
            if not end_attempted:
                self._end_quietly(sent, item_type)
            raise
        seconds = time.monotonic() - started
        self.log(f"stream complete: type=0x{item_type:02x} size=0x{len(payload):x} elapsed={seconds:.1f}s")
        return StreamResult(item_type, len(payload), seconds)

    def _end_quietly(self, sent: int, item_type: int) -> None:
        try:
            self.command(END_TRANSFER, (sent << 8) | item_type, timeout=10.0)
        except Exception:
            pass  # the original failure is the one worth reporting
