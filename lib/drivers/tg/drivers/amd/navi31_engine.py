"""What both engines of the simulated Navi31 share: the GPU clock, interrupts and the fault latch, and the queue
thread that sleeps until its doorbell rings and then fetches packets from the read pointer to the write pointer.

A queue runs in its own thread, never inside the doorbell write: the doorbell only records the new write pointer
and wakes the thread, as hardware does. A fault stops the queue (it takes no further packets), latches what went
wrong (queue, packet, address) and raises an interrupt so a driver blocked in `sleep` sees it at once; the latch
stays until `recover`.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.drivers.amd import packets as pk
from tg.drivers.amd.iface import GPUAllocation, GPUFault, QueueKind

if TYPE_CHECKING:
    from tg.drivers.amd.navi31 import Navi31

POLL_MIN_S = 0.0002  # a blocked wait re-reads memory at least this often at first (CPU writes are not announced)
POLL_MAX_S = 0.005
# Chaos mode (Navi31(chaos_seed=...)): before a packet an engine sometimes stalls, so queues interleave differently.
CHAOS_DELAY_CHANCE = 0.25
CHAOS_DELAY_MAX_S = 0.002


class PacketError(Exception):
    """A packet the engine rejects (unknown opcode, wrong length, bad field); stops the queue like hardware."""


class QueueReset(Exception):
    """Raised inside an engine's wait when `recover` or `close` abandons the queue's work."""


@dataclass(frozen=True)
class DeviceFault:
    """What a queue latched when it stopped. `address` is the faulting GPU address of a page fault (None else)."""

    queue: str
    packet: str
    detail: str
    address: int | None = None

    def message(self) -> str:
        where = f"queue {self.queue}, packet {self.packet}: {self.detail}"
        if self.address is not None:
            return f"MMU fault: 0x{self.address:X} | {where}"
        return f"HW fault: {where}"


class DeviceClock:
    """The GPU clock both engines read: a monotonic counter at 100 ticks per microsecond (strictly increasing, so
    two timestamps taken one after the other are ordered even when the host clock has not moved)."""

    def __init__(self) -> None:
        self._origin = time.perf_counter_ns()
        self._last = 0
        self._lock = threading.Lock()

    def ticks(self) -> int:
        now = (time.perf_counter_ns() - self._origin) * pk.GPU_CLOCK_TICKS_PER_US // 1000
        with self._lock:
            self._last = max(now, self._last + 1)
            return self._last


class Interrupts:
    """The interrupt line the driver sleeps on (EOP interrupts of RELEASE_MEM, SDMA traps) and the fault latch."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending = 0
        self.fault: DeviceFault | None = None
        self.delivered = 0  # every interrupt ever posted (tests count them)
        self.context_ids: deque[int] = deque(maxlen=4096)  # the latest interrupts' context ids

    def post(self, context_id: int = 0) -> None:
        with self._cond:
            self._pending += 1
            self.delivered += 1
            self.context_ids.append(context_id)
            self._cond.notify_all()

    def latch(self, fault: DeviceFault) -> None:
        with self._cond:
            if self.fault is None:  # the first fault is the cause; later ones are consequences
                self.fault = fault
            self._cond.notify_all()

    def wait(self, timeout_s: float) -> bool:
        """Wait for an interrupt or a fault; True if one came. Consumes the pending interrupts (auto-reset)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._pending and self.fault is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            self._pending = 0
            return True

    def clear(self) -> None:
        with self._cond:
            self.fault = None
            self._pending = 0


class SimDoorbell:
    """A queue's doorbell (tg.drivers.amd.iface.Doorbell): the write carries the new write pointer."""

    def __init__(self, engine: QueueEngine) -> None:
        self._engine = engine
        self.value = 0

    def write(self, value: int) -> None:
        self.value = value
        self._engine.ring_doorbell(value)


class QueueEngine(threading.Thread):
    """One hardware queue: a ring in GPU memory, read/write pointers (monotonic, in `unit` bytes: dwords for PM4,
    bytes for SDMA) and a thread that executes packets. Subclasses implement `execute_next`."""

    unit = 4
    kind = QueueKind.COMPUTE

    def __init__(self, device: Navi31, name: str, ring: GPUAllocation, read_ptr: int, write_ptr: int) -> None:
        super().__init__(name=f"navi31-{name}", daemon=True)
        if ring.size % self.unit or ring.size & (ring.size - 1):
            raise ValueError(f"{name}: the ring size {ring.size:#x} must be a power of two")
        self.device = device
        self.memory = device.memory
        self.queue_name = name
        self.ring = ring
        self.read_ptr_address = read_ptr
        self.write_ptr_address = write_ptr
        self.doorbell = SimDoorbell(self)
        self._cond = threading.Condition()
        self._announced = 0  # the write pointer the doorbell announced
        self.read_ptr = 0  # how far the engine has executed
        self.hung = False
        self._epoch = 0  # bumped by reset: waits and in-flight packets of an older epoch are abandoned
        self._closing = False
        self.packets_executed = 0
        self.waiting = False  # blocked in a WAIT_REG_MEM / POLL_REGMEM whose condition did not hold
        seed = device.chaos_seed
        self.chaos = None if seed is None else random.Random(f"{seed}:{name}")

    # -- driver side -------------------------------------------------------------------------------------------
    def ring_doorbell(self, value: int) -> None:
        with self._cond:
            self._announced = value
            self._cond.notify_all()
        self.memory.wake_waiters()

    def reset(self) -> None:
        """Queue reset (what the driver's recovery asks for): pointers back to 0, fault state cleared."""
        with self._cond:
            self._epoch += 1
            self._announced = 0
            self.read_ptr = 0
            self.hung = False
            self.doorbell.value = 0
            self._cond.notify_all()
        for address in (self.read_ptr_address, self.write_ptr_address):
            if self.memory.is_mapped(address, 8):  # (a queue whose memory is gone has nothing to clear)
                self.memory.write_u64(address, 0)
        self.memory.wake_waiters()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._epoch += 1
            self._cond.notify_all()
        self.memory.wake_waiters()

    @property
    def idle(self) -> bool:
        with self._cond:
            return self.hung or self.read_ptr >= self._announced

    # -- engine thread -----------------------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            with self._cond:
                while not self._closing and (self.hung or self.read_ptr >= self._announced):
                    self._cond.wait()
                if self._closing:
                    return
                epoch, start = self._epoch, self.read_ptr
            self._step(epoch, start)

    def _step(self, epoch: int, start: int) -> None:
        if self.chaos is not None and self.chaos.random() < CHAOS_DELAY_CHANCE:
            time.sleep(self.chaos.uniform(0, CHAOS_DELAY_MAX_S))  # shuffle how the engines interleave
        try:
            end = self.execute_next(start, epoch)
        except QueueReset:
            return
        except GPUFault as fault:
            self._halt(epoch, DeviceFault(self.queue_name, self.describe_packet(), str(fault), fault.address))
            return
        except PacketError as error:
            self._halt(epoch, DeviceFault(self.queue_name, self.describe_packet(), str(error)))
            return
        except Exception as error:  # an emulator error (illegal instruction, ...) is a device error, not a crash
            self._halt(epoch, DeviceFault(self.queue_name, self.describe_packet(), f"{type(error).__name__}: {error}"))
            return
        with self._cond:
            if self._epoch != epoch:  # reset while this packet ran: its progress belongs to the old queue
                return
            self.read_ptr = end
            self.packets_executed += 1
        try:
            self.memory.write_u64(self.read_ptr_address, end)
        except GPUFault as fault:  # the driver unmapped the queue's read pointer under a live queue
            self._halt(epoch, DeviceFault(self.queue_name, "read pointer write-back", str(fault), fault.address))

    def _halt(self, epoch: int, fault: DeviceFault) -> None:
        with self._cond:
            if self._epoch != epoch:
                return
            self.hung = True
        self.device.interrupts.latch(fault)

    def describe_packet(self) -> str:
        """The packet being executed, for a fault report."""
        return "?"

    def execute_next(self, position: int, epoch: int) -> int:
        """Execute the packet at `position` (ring units); return the position after it."""
        raise NotImplementedError

    @property
    def target(self) -> int:
        return self._announced

    # -- helpers for packets -----------------------------------------------------------------------------------
    def reset_since(self, epoch: int) -> bool:
        """Whether the queue was reset (or closed) after work of `epoch` began."""
        return self._epoch != epoch or self._closing

    def wait_until(self, condition: Callable[[], bool], epoch: int) -> None:
        """Block until `condition()` holds: woken by engine writes to memory, polling for CPU writes; abandoned
        (QueueReset) when the queue is reset or closed. A wait that never ends is the driver's timeout to report."""
        delay = POLL_MIN_S
        try:
            while True:
                generation = self.memory.generation
                if condition():
                    return
                if self.reset_since(epoch):
                    raise QueueReset
                self.waiting = True
                self.memory.wait_for_change(generation, delay)
                delay = min(delay * 2, POLL_MAX_S)
        finally:
            self.waiting = False


def compare(function: int, value: int, reference: int) -> bool:
    """WAIT_REG_MEM / POLL_REGMEM comparison `value FUNCTION reference`."""
    match function:
        case pk.CompareFunction.ALWAYS:
            return True
        case pk.CompareFunction.LT:
            return value < reference
        case pk.CompareFunction.LE:
            return value <= reference
        case pk.CompareFunction.EQ:
            return value == reference
        case pk.CompareFunction.NE:
            return value != reference
        case pk.CompareFunction.GE:
            return value >= reference
        case pk.CompareFunction.GT:
            return value > reference
    raise PacketError(f"compare function {function} is reserved")
