"""`HCQCompiled`: a device driven through HCQ queues, signals and a timeline.

Timeline protocol: `timeline_value` is always the NEXT value to signal. Work is enqueued as
`wait(timeline_signal, timeline_value - 1) ... signal(timeline_signal, next_timeline())`, so each
submission runs after the previous one and `synchronize()` waits for `timeline_value - 1`. When the value
passes 2**31 a synchronize swaps to a second (shadow) timeline signal restarting at 0, so values never
approach the 2**32 limit some hardware has on signal compares.

Devices with the same peer group (e.g. CPU:0 and CPU:1) share one signal pool, so a signal of one can be
waited on by the other's queues.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tg.hcq.allocator import BufferSpec
from tg.hcq.device import Compiled, DeviceSpec
from tg.hcq.memory import BumpAllocator, HCQBuffer
from tg.hcq.profile import collect_profile
from tg.hcq.signal import HCQSignal, SignalPool
from tg.hcq.symbolic import concrete

TIMELINE_WRAP = 1 << 31
KERNARGS_ALIGNMENT = 16


class HCQCompiled(Compiled):
    """Base class of HCQ devices. Subclasses pass their allocator, compiler, program and queue classes."""

    peer_groups: ClassVar[dict[str, list[HCQCompiled]]] = {}
    signal_pools: ClassVar[dict[str, SignalPool]] = {}

    def __init__(
        self,
        spec: DeviceSpec,
        allocator: Any,
        compiler: Any,
        program_class: Any,
        comp_queue_t: type | None,
        copy_queue_t: type | None,
        kernargs_size: int = 16 << 20,
    ) -> None:
        super().__init__(spec, allocator, compiler, program_class)
        self.hw_compute_queue_t = comp_queue_t
        self.hw_copy_queue_t = copy_queue_t
        self.peer_group = f"{spec.iface}+{spec.name}" if spec.iface else spec.name
        self.peer_groups.setdefault(self.peer_group, []).append(self)
        self.error_state: BaseException | None = None
        self.sig_prof_records: list[Any] = []
        self.timeline_value = 1
        self.timeline_signal = self.new_signal(value=0, is_timeline=True)
        self._shadow_timeline_signal = self.new_signal(value=0, is_timeline=True)
        self.kernargs_buf: HCQBuffer = allocator.alloc(kernargs_size, BufferSpec(cpu_access=True, nolru=True))
        self.kernargs_allocator = BumpAllocator(kernargs_size, base=self.kernargs_buf.va_addr, wrap=True)

    def new_signal(self, value: int = 0, **kwargs: Any) -> HCQSignal:
        """A signal from this peer group's pool (visible to every device of the group)."""
        pool = self.signal_pools.setdefault(self.peer_group, SignalPool())
        return pool.new_signal(value, owner=self, **kwargs)

    def next_timeline(self) -> int:
        value = self.timeline_value
        self.timeline_value += 1
        return value

    def kernargs_slice(self, size: int) -> HCQBuffer:
        address = self.kernargs_allocator.alloc(size, KERNARGS_ALIGNMENT)
        return self.kernargs_buf.offset(address - concrete(self.kernargs_buf.va_addr), size)

    def is_idle(self) -> bool:
        """True when everything submitted so far has finished."""
        return self.timeline_signal.value >= self.timeline_value - 1

    def synchronize(self, timeout: int | None = None) -> None:
        """Block until everything submitted so far finished; re-raise a device error, if one happened."""
        self._raise_error_state()
        try:
            self.timeline_signal.wait(self.timeline_value - 1, timeout)
        except RuntimeError as error:
            self._raise_error_state()
            self.error_state = error
            raise
        self._raise_error_state()
        if self.timeline_value > TIMELINE_WRAP:
            self._wrap_timeline_signal()
        collect_profile(self.sig_prof_records)

    def _raise_error_state(self) -> None:
        if self.error_state is not None:
            raise RuntimeError(f"{self.device} failed earlier: {self.error_state}") from self.error_state

    def _wrap_timeline_signal(self) -> None:
        """Swap to the shadow timeline signal, restarting values at 0 (only call when idle)."""
        self.timeline_signal, self._shadow_timeline_signal = self._shadow_timeline_signal, self.timeline_signal
        self.timeline_signal.value = 0
        self.timeline_value = 1
