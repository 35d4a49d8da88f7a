"""Opening a Navi31 board and its flash chip from the CLI's global options."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tg.drivers import navi31_regs as regs
from tg.drivers.mmio import MMIOInterface
from tg.drivers.pci import DeviceMatch
from tg.drivers.transport import BoardRequest, Transport, check_request, open_board
from tg.flash.gd25 import GD25LQ16E
from tg.flash.interrupts import deferred_interrupt, interrupt_pending
from tg.flash.spi import Navi31SPI

NAVI31 = (DeviceMatch(0xFFFF, regs.NAVI31_DEVICE_IDS),)


@dataclass(frozen=True)
class BoardOptions:
    device: int = 0
    prescale: int = 8
    transport: Transport = Transport.AUTO
    sim_state: Path | None = None
    remote: str | None = None
    token: str | None = None

    def request(self, writes: bool = False) -> BoardRequest:
        """What to open; `writes`: the command writes the flash or firmware (auto then never picks native PCI)."""
        return BoardRequest(
            self.transport,
            self.device,
            regs.VENDOR_AMD,
            NAVI31,
            regs.BAR,
            self.sim_state,
            remote=self.remote,
            token=self.token,
            cancelled=interrupt_pending,
            writes=writes,
        )

    def check(self) -> None:
        """Everything about the options that can be checked without hardware."""
        if not 0 <= self.prescale <= 15:
            raise ValueError("prescale must be 0..15")
        check_request(self.request())


@contextmanager
def open_mmio(options: BoardOptions, writes: bool = False) -> Iterator[MMIOInterface]:
    """The board's BAR. When the command already failed, a failure while closing (a simulated board that
    finds registers unrestored because the link died) is shown as a warning, not in place of the cause."""
    connection = open_board(options.request(writes))
    for warning in connection.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    try:
        yield connection.mmio
    except BaseException:
        try:
            with deferred_interrupt():
                connection.close()
        except Exception as close_error:
            print(f"warning: {close_error}", file=sys.stderr)
        raise
    with deferred_interrupt():
        connection.close()


@contextmanager
def open_flash(options: BoardOptions, writes: bool = False) -> Iterator[GD25LQ16E]:
    """The board's flash chip, identified (an unknown JEDEC ID is refused) and ready for commands."""
    with open_mmio(options, writes) as mmio, Navi31SPI(mmio, options.prescale) as spi:
        chip = GD25LQ16E(spi)
        chip.identify()
        yield chip
