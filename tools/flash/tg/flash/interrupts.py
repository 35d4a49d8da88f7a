"""Hold Ctrl-C, SIGTERM and SIGHUP back while a register sequence runs, so that it always completes with its
restores; outside such sequences, SIGTERM and SIGHUP interrupt like Ctrl-C (so `finally` restores and the
resume hint run) instead of killing the process on the spot."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_pending: list[int] = []  # signals received by an active deferral, for code that waits and can give up


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled like Ctrl-C: restores run, the command stops with 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}; controller registers were restored")


def interruption(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def interrupt_pending() -> bool:
    """Whether a signal arrived while it is held back: a wait that may never end (a silent remote server)
    checks this and gives up, so the deferral does not turn Ctrl-C into a hang."""
    return bool(_pending)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Delay SIGINT, SIGTERM and SIGHUP until the block ends, then raise for the first one received. Outside
    the main thread (where signal handlers cannot be set) the block simply runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, _frame) -> None:
        received.append(signum)
        _pending.append(signum)

    previous = {signum: signal.signal(signum, hold) for signum in HELD_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for _ in received:
            _pending.pop()
    if received:
        raise interruption(received[0])


@contextmanager
def termination_as_interrupt() -> Iterator[None]:
    """For the length of a command: SIGTERM and SIGHUP raise `Terminated` (as SIGINT raises KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame) -> None:
        raise Terminated(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
