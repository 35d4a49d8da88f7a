"""`HCQSignal`: a 16-byte slot in memory every device of a peer group can see.

Layout: a u64 value at +0 and a u64 timestamp (nanoseconds of `time.monotonic_ns`) at +8. Queues set the
value and timestamp after their previous commands complete and wait for `value >= target`. Waiting
sleeps on a condition variable that every signal write notifies (host writes through `value`, device
workers through `store_signal_value`), and rechecks now and then so a write that notified nobody (a
raw memory write) is still seen. A wait fails when the value makes no progress for `timeout` ms.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from tg.hcq.flags import HCQDEV_WAIT_TIMEOUT_MS
from tg.hcq.memory import HCQBuffer, HostMemory
from tg.hcq.symbolic import concrete, sint

SIGNAL_SIZE = 16
RECHECK_SECONDS = 0.02  # upper bound on how long a waiter sleeps before it looks at memory again
_signal_changed = threading.Condition()


def store_signal_value(value_addr: int, value: int) -> None:
    """Write a signal's value at a raw address and wake every waiter (what a device does)."""
    with _signal_changed:
        ctypes.c_uint64.from_address(value_addr).value = value
        _signal_changed.notify_all()


def notify_memory_changed() -> None:
    """Wake every waiter to look at memory again (after a device wrote something they may poll)."""
    with _signal_changed:
        _signal_changed.notify_all()


def load_signal_value(value_addr: int) -> int:
    return ctypes.c_uint64.from_address(value_addr).value


def sleep_until(condition: Callable[[], bool], seconds: float) -> None:
    """Sleep up to `seconds` (at most RECHECK_SECONDS) unless `condition()` is already true."""
    with _signal_changed:
        if not condition():
            _signal_changed.wait(min(seconds, RECHECK_SECONDS))


class HCQSignal:
    """A value + timestamp pair in device-visible memory. A symbolic `va_addr` makes a virtual signal:
    it can be recorded into queue templates, and the real address is supplied at submit time."""

    def __init__(
        self,
        base_buf: HCQBuffer,
        value: int = 0,
        owner: object | None = None,
        is_timeline: bool = False,
        timestamp_divider: int = 1000,
        pool: SignalPool | None = None,
    ) -> None:
        self.base_buf = base_buf
        self.owner = owner
        self.is_timeline = is_timeline
        self.timestamp_divider = timestamp_divider
        self.virtual = not isinstance(base_buf.va_addr, int)
        self._pool = pool
        if not self.virtual:
            self.value = value

    @property
    def value_addr(self) -> sint:
        return self.base_buf.va_addr

    @property
    def timestamp_addr(self) -> sint:
        if self.virtual:
            raise RuntimeError("a virtual signal has no timestamp address")
        return self.base_buf.va_addr + 8

    @property
    def value(self) -> int:
        if self.virtual:  # (checked inline: waits read the value in a loop)
            self._check_real()
        return ctypes.c_uint64.from_address(self.base_buf.va_addr).value  # type: ignore[arg-type]

    @value.setter
    def value(self, new_value: int) -> None:
        self._check_real()
        store_signal_value(concrete(self.value_addr), new_value)

    @property
    def timestamp(self) -> Decimal:
        """When the signal was last stamped, in microseconds of the monotonic clock."""
        self._check_real()
        return Decimal(ctypes.c_uint64.from_address(concrete(self.timestamp_addr)).value) / self.timestamp_divider

    def _check_real(self) -> None:
        if self.virtual:
            raise RuntimeError("a virtual signal has no memory; pass its address in var_vals at submit")

    def _owner_is_busy(self) -> bool:
        """A device that is running a long kernel is making progress even though no value changes."""
        is_busy = getattr(self.owner, "is_busy", None)
        return bool(is_busy and is_busy())

    def _sleep(self, target: int, seconds: float) -> None:
        """Block until the value may have changed. Backends with an OS event or a fault check override this. An owner
        that can run its queued work on the waiting thread (`run_pending_until`, the CPU device) does so first."""
        run_pending_until = getattr(self.owner, "run_pending_until", None)
        if run_pending_until is not None:
            run_pending_until(lambda: self.value >= target)
        sleep_until(lambda: self.value >= target, seconds)

    def wait(self, value: int, timeout: int | None = None) -> None:
        """Block until `self.value >= value`. Raises RuntimeError after `timeout` ms without progress
        (progress: the value changed, or the signal's device is busy executing a command)."""
        timeout_ms = HCQDEV_WAIT_TIMEOUT_MS.value if timeout is None else timeout
        last_seen = self.value
        last_progress = time.monotonic()
        while (current := self.value) < value:
            now = time.monotonic()
            if current != last_seen or self._owner_is_busy():
                last_seen, last_progress = current, now
            waited_ms = (now - last_progress) * 1000
            if waited_ms >= timeout_ms:
                raise RuntimeError(f"Wait timeout: {timeout_ms} ms! (the signal is not set to {value}, but {current})")
            self._sleep(value, (timeout_ms - waited_ms) / 1000)

    def __del__(self) -> None:
        if self._pool is not None:
            self._pool.release(self.base_buf)


class SignalPool:
    """Hands out 16-byte signal slots carved from host pages; slots come back when their signal dies."""

    def __init__(self, page_size: int = 4096) -> None:
        self.page_size = page_size
        self.pages: list[HostMemory] = []
        self.free_slots: list[HCQBuffer] = []
        self._lock = threading.Lock()

    def acquire(self) -> HCQBuffer:
        with self._lock:
            if not self.free_slots:
                self._add_page()
            return self.free_slots.pop()

    def release(self, slot: HCQBuffer) -> None:
        with self._lock:
            self.free_slots.append(slot)

    def _add_page(self) -> None:
        page = HostMemory(self.page_size)
        self.pages.append(page)
        whole = page.handle()
        self.free_slots.extend(whole.offset(start, SIGNAL_SIZE) for start in range(0, self.page_size, SIGNAL_SIZE))

    def new_signal(self, value: int = 0, **kwargs: Any) -> HCQSignal:
        return HCQSignal(self.acquire(), value, pool=self, **kwargs)
