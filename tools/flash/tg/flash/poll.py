"""Polling with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
MAX_TIMEOUT = 60.0
# Most waits (a ROM_SW transaction, a page program) end within a few polls, and each poll is already a
# register round trip; sleeping before those would dominate a full flash, so the first polls spin.
SPIN_POLLS = 8


def wait_until(
    condition: Callable[[], T], timeout: float, message: str | Callable[[], str], interval: float = 0.001
) -> T:
    """Return the first truthy `condition()`; raise TimeoutError(message) once `timeout` seconds pass."""
    if not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(f"timeout must be in (0, {MAX_TIMEOUT:g}] seconds")
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(message() if callable(message) else message)
        polls += 1
        if polls > SPIN_POLLS:
            time.sleep(interval)
