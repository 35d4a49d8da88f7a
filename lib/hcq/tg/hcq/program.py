"""Kernel arguments (args states), `Program` (the call every device's kernel answers) and `HCQProgram`.

    prg = dev.runtime("kernel_name", lib_bytes)
    seconds = prg(buf0, buf1, global_size=(n, 1, 1), vals=(7,), wait=True)

The buffers are raw device handles (`HCQBuffer`, what `Buffer.raw` returns). A call records
`wait(timeline) . memory_barrier . exec . signal(next timeline)` on a compute queue and submits it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from tg.hcq.flags import PROFILE
from tg.hcq.memory import HCQBuffer
from tg.hcq.profile import hcq_profile
from tg.hcq.queue import BoundSint
from tg.hcq.symbolic import is_symbolic, sint


@dataclass(frozen=True)
class ProgramCall:
    """The launch settings of one program call, as the caller passed them."""

    global_size: tuple[int, ...] = (1, 1, 1)
    local_size: tuple[int, ...] = (1, 1, 1)
    vals: tuple[int, ...] = ()
    wait: bool = False
    timeout: int | None = None


class Program:
    """A loaded kernel: `prg(*bufs, global_size=, local_size=, vals=, wait=, timeout=)` on every device.

    Subclasses implement `run`, which starts the kernel and, when the call waits, returns its run time in seconds.
    """

    def __init__(self, dev: Any, name: str) -> None:
        self.dev = dev
        self.name = name

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] = (1, 1, 1),
        vals: tuple[int, ...] = (),
        wait: bool = False,
        timeout: int | None = None,
    ) -> float | None:
        """Run the kernel. With `wait=True` block until it finished and return its run time in seconds."""
        return self.run(bufs, ProgramCall(global_size, local_size, vals, wait, timeout))

    def run(self, bufs: tuple[Any, ...], call: ProgramCall) -> float | None:
        raise NotImplementedError(f"{type(self).__name__} does not implement run")


class HCQArgsState:
    """Kernel arguments in device-visible memory `buf`; `bind_data` lists the symbolic ones, patched at submit."""

    def __init__(self, buf: HCQBuffer, prg: Any, bufs: tuple[HCQBuffer, ...], vals: tuple[sint, ...] = ()) -> None:
        self.buf = buf
        self.prg = prg
        self.bufs = bufs
        self.vals = vals
        self.bind_data: list[BoundSint] = []
        self.device_record: Any = None  # what a device's engine prepares from these arguments on first use

    def bind_sints_to_buf(self, *vals: sint, buf: HCQBuffer, fmt: str, offset: int = 0) -> None:
        """Write `vals` (format `fmt`, e.g. "Q" or "i") at `offset`; symbolic values are written at submit time."""
        view = buf.cpu_view()
        if not any(is_symbolic(value) for value in vals):  # every launch without variables: one pack, no records
            struct.pack_into(f"<{len(vals)}{fmt}", view, offset, *vals)
            return
        step = struct.calcsize("<" + fmt)
        for i, value in enumerate(vals):
            bound = BoundSint(view, offset + i * step, "<" + fmt, value)
            if is_symbolic(value):
                self.bind_data.append(bound)
            else:
                bound.write({})


class CLikeArgsState(HCQArgsState):
    """The C-like layout: one u64 address per buffer, then one int32 per value, packed, in order."""

    def __init__(self, buf: HCQBuffer, prg: Any, bufs: tuple[HCQBuffer, ...], vals: tuple[sint, ...] = ()) -> None:
        super().__init__(buf, prg, bufs, vals)
        self.bind_sints_to_buf(*(b.va_addr for b in bufs), buf=buf, fmt="Q")
        self.bind_sints_to_buf(*vals, buf=buf, fmt="i", offset=8 * len(bufs))

    @staticmethod
    def size_for(num_bufs: int, num_vals: int) -> int:
        return 8 * num_bufs + 4 * num_vals


class HCQProgram(Program):
    """A loaded kernel on an HCQ device. Subclasses load the binary; this class knows how to launch it."""

    args_state_t: type[HCQArgsState] = CLikeArgsState

    def __init__(self, dev: Any, name: str, kernargs_alloc_size: int = 0) -> None:
        super().__init__(dev, name)
        self.kernargs_alloc_size = kernargs_alloc_size

    def fill_kernargs(
        self, bufs: tuple[HCQBuffer, ...], vals: tuple[sint, ...] = (), kernargs: HCQBuffer | None = None
    ) -> HCQArgsState:
        """Lay out the arguments in `kernargs`, or in a fresh slice of the device's kernel-argument ring."""
        if kernargs is None:
            size = max(self.kernargs_alloc_size, CLikeArgsState.size_for(len(bufs), len(vals)), 8)
            kernargs = self.dev.kernargs_slice(size)
        return self.args_state_t(kernargs, self, tuple(bufs), tuple(vals))

    def run(self, bufs: tuple[HCQBuffer, ...], call: ProgramCall) -> float | None:
        """Record `wait(timeline) . memory_barrier . exec . signal(next timeline)` and submit it."""
        for buf in bufs:
            if not isinstance(buf, HCQBuffer):
                raise TypeError(f"{self.name}: program arguments must be raw buffers (Buffer.raw), got {buf!r}")
        dev = self.dev
        args_state = self.fill_kernargs(bufs, call.vals)
        queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).memory_barrier()
        if call.wait or PROFILE:
            with hcq_profile(dev, enabled=call.wait, desc=self.name, queue=queue) as (start, end):
                queue.exec(self, args_state, call.global_size, call.local_size)
        else:  # the common launch: no timestamps, so no profiling context to enter
            queue.exec(self, args_state, call.global_size, call.local_size)
        queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
        if not call.wait:
            return None
        dev.synchronize(call.timeout)
        return float(end.timestamp - start.timestamp) / 1e6
