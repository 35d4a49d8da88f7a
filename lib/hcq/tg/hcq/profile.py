"""Profiling: time ranges measured with device timestamps on the monotonic clock.

`hcq_profile` brackets work with two timestamp signals. With `PROFILE=1` every range is also recorded
and, at the device's next `synchronize()`, turned into a `ProfileRangeEvent` in `profile_events`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tg.hcq.flags import PROFILE


@dataclass(frozen=True)
class ProfileRangeEvent:
    """Work named `name` ran on `device` from `start_us` to `end_us` (microseconds, monotonic clock)."""

    device: str
    name: str
    start_us: Decimal
    end_us: Decimal


@dataclass(frozen=True)
class PendingRange:
    """A range whose timestamps the device has not necessarily written yet."""

    start: Any
    end: Any
    name: str
    device: str


profile_events: list[ProfileRangeEvent] = []


@contextmanager
def hcq_profile(dev: Any, enabled: bool, desc: str, queue: Any = None) -> Iterator[tuple[Any, Any]]:
    """Yield (start, end) signals stamped around the body's commands.

    With `queue`, the timestamps go into that queue around what the body records; without, tiny
    queues of their own are submitted before and after the body. Nothing is stamped unless `enabled`
    or PROFILE is on (then both signals are None).
    """
    if not (enabled or PROFILE):
        yield None, None
        return
    start, end = dev.new_signal(), dev.new_signal()
    if queue is not None:
        queue.timestamp(start)
    else:
        _stamp_on_timeline(dev, start)
    try:
        yield start, end
    finally:
        if queue is not None:
            queue.timestamp(end)
        else:
            _stamp_on_timeline(dev, end)
        if PROFILE:
            dev.sig_prof_records.append(PendingRange(start, end, desc, dev.device))


def _stamp_on_timeline(dev: Any, signal: Any) -> None:
    """Timestamp `signal` in a queue of its own that joins the device timeline, so that `synchronize()` waits
    for the stamp (a queue that signals nothing could still be pending when synchronize returns)."""
    queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).timestamp(signal)
    queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)


def collect_profile(records: list[PendingRange]) -> None:
    """Turn finished ranges into events (called after a synchronize, when their timestamps are written)."""
    for record in records:
        profile_events.append(
            ProfileRangeEvent(record.device, record.name, record.start.timestamp, record.end.timestamp)
        )
    records.clear()
