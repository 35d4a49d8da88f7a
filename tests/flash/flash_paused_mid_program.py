"""Run tg-flash (arguments after the first) with the simulated chip paused inside page program number N (the first
argument) until a SIGINT is pending, so that a test knows the flash is mid-sector when it presses Ctrl-C, however
loaded the machine is.

At the pause this prints `paused mid-program` on stdout (flushed, after every line printed before it). SIGINT is
blocked while paused: the signal stays pending until the pause ends, and is then delivered to whatever handler
tg-flash installed for the register sequence in flight, as a Ctrl-C pressed at that moment would be."""

from __future__ import annotations

import os
import signal
import sys
import time

from tg.drivers.sim.gd25 import GD25Chip
from tg.flash.cli import main

PAUSE_DEADLINE_S = 300.0  # generous: the test sends SIGINT as soon as it reads the marker line
PAGE_PROGRAM = 0x02


PAUSE_SIGNAL = signal.Signals[os.environ.get("PAUSE_SIGNAL", "SIGINT")]  # SIGTERM, SIGHUP: the same, for them


def pause_until_sigint_is_pending() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {PAUSE_SIGNAL})
    print("paused mid-program", flush=True)
    deadline = time.monotonic() + PAUSE_DEADLINE_S
    while PAUSE_SIGNAL not in signal.sigpending():
        if time.monotonic() > deadline:
            sys.exit(f"error: no {PAUSE_SIGNAL.name} arrived while paused")
        time.sleep(0.01)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {PAUSE_SIGNAL})  # delivered now, mid-transaction


def pause_at_program(number: int) -> None:
    original_transact = GD25Chip.transact
    programs = 0

    def transact(chip: GD25Chip, mosi: bytes, rx_count: int) -> bytes:
        nonlocal programs
        if mosi[:1] == bytes([PAGE_PROGRAM]):
            programs += 1
            if programs == number:
                pause_until_sigint_is_pending()
        return original_transact(chip, mosi, rx_count)

    GD25Chip.transact = transact  # type: ignore[method-assign]


if __name__ == "__main__":
    pause_at_program(int(sys.argv[1]))
    sys.argv = ["tg-flash", *sys.argv[2:]]
    main()
