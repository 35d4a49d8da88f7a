"""Hold Ctrl-C back while a register sequence runs, so that it always completes with its restores."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_pending: list[int] = []  # signals received by an active deferral, for code that waits and can give up


def interrupt_pending() -> bool:
    """Whether Ctrl-C arrived while it is held back: a wait that may never end (a silent remote server) checks
    this and gives up, so the deferral does not turn Ctrl-C into a hang."""
    return bool(_pending)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Delay SIGINT until the block ends, then raise KeyboardInterrupt. Outside the main thread (where
    signal handlers cannot be set) the block simply runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, _frame) -> None:
        received.append(signum)
        _pending.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        for _ in received:
            _pending.pop()
    if received:
        raise KeyboardInterrupt
