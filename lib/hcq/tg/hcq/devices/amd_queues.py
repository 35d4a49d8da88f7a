"""The AMD device's hardware queues: commands encoded as PM4 (compute) or SDMA (copy) and rung in through a doorbell.

Compute: the commands of a submission are encoded into an indirect buffer (IB) in GPU memory; the ring carries only an
INDIRECT_BUFFER packet pointing at it. Copy: SDMA packets go straight into the ring, never across its end.

Each submission ends with a private "retired" write (the submission's sequence number, no interrupt), so the driver
knows which IBs and ring bytes the engine has finished with without depending on how the engine reports its read
pointer. A submission's memory is reused only after that write: a queue blocked on a signal keeps its IB.

Submit order (as hardware needs it): packets into memory, then the write pointer, then the doorbell, last.
"""

from __future__ import annotations

import ctypes
import dataclasses
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tg.drivers.amd import packets as p
from tg.drivers.amd.iface import GPUAllocation, QueueKind
from tg.hcq.commands import (
    Command,
    CopyCommand,
    ExecCommand,
    MemoryBarrierCommand,
    PollBitCommand,
    SignalCommand,
    TimestampCommand,
    WaitCommand,
    WriteCommand,
)
from tg.hcq.devices import amd_pm4 as pm4
from tg.hcq.devices import amd_sdma as sdma
from tg.hcq.flags import HCQDEV_WAIT_TIMEOUT_MS
from tg.hcq.queue import HWQueue
from tg.hcq.symbolic import concrete

PM4_RING_SIZE = 0x10000  # bytes: 4096 INDIRECT_BUFFER packets in flight
IB_AREA_SIZE = 16 << 20
SDMA_RING_SIZE = 1 << 20
ENCODED_EXEC_CACHE = 4096  # launches whose PM4 stays encoded (a replayed graph's launches are the same commands)
RETIRE_POLL_MS = 2


def _u64_at(allocation: GPUAllocation, offset: int = 0) -> ctypes.c_uint64:
    if not allocation.cpu_address:
        raise RuntimeError("the driver's queue memory must be visible to the CPU")
    return ctypes.c_uint64.from_address(allocation.cpu_address + offset)


def _words_view(allocation: GPUAllocation) -> memoryview:
    return memoryview((ctypes.c_uint32 * (allocation.size // 4)).from_address(allocation.cpu_address)).cast("B")


def _split_words(value: int, b64: bool) -> tuple[int, ...]:
    return (value & pm4.U32, (value >> 32) & pm4.U32) if b64 else (value & pm4.U32,)


# ------------------------------------------------------------------------------------------------------ encoding


def encode_pm4(command: Command, device: Any) -> list[int]:
    """The PM4 words of one resolved command on the compute queue."""
    if isinstance(command, SignalCommand):
        return pm4.signal(concrete(command.value_addr), concrete(command.value))
    if isinstance(command, WaitCommand):
        return pm4.wait(concrete(command.value_addr), concrete(command.value))
    if isinstance(command, ExecCommand):
        return pm4.program(command.program.dispatch(command))
    if isinstance(command, MemoryBarrierCommand):
        return pm4.memory_barrier()
    if isinstance(command, TimestampCommand):
        return pm4.timestamp(concrete(command.timestamp_addr))
    if isinstance(command, WriteCommand):
        return pm4.write_data(concrete(command.addr), *_split_words(concrete(command.value), command.b64))
    if isinstance(command, PollBitCommand):
        return pm4.wait_reg_mem(
            concrete(command.value), command.mask, mem=concrete(command.addr), op=p.CompareFunction.EQ
        )
    raise NotImplementedError(f"the AMD compute queue cannot run {type(command).__name__}")


def encode_sdma(command: Command, device: Any) -> list[int]:
    """The SDMA words of one resolved command on the copy queue."""
    if isinstance(command, CopyCommand):
        dest, src, size = concrete(command.dest_addr), concrete(command.src_addr), concrete(command.size)
        return sdma.copy(dest, src, size, device.max_copy_size)
    if isinstance(command, SignalCommand):
        return sdma.signal(concrete(command.value_addr), concrete(command.value))
    if isinstance(command, WaitCommand):
        return sdma.wait(concrete(command.value_addr), concrete(command.value))
    if isinstance(command, TimestampCommand):
        return sdma.timestamp(concrete(command.timestamp_addr))
    if isinstance(command, MemoryBarrierCommand):
        return sdma.nop()
    if isinstance(command, WriteCommand):
        return sdma.write(concrete(command.addr), *_split_words(concrete(command.value), command.b64))
    if isinstance(command, PollBitCommand):
        return sdma.poll_regmem(concrete(command.addr), concrete(command.value), command.mask, p.CompareFunction.EQ)
    raise NotImplementedError(f"the AMD copy queue cannot run {type(command).__name__}")


class EncodeCache:
    """Encoded launches by command (a frozen dataclass: equal commands encode equally), least recently used dropped:
    a replayed graph re-submits the same launch commands, and encoding a launch is most of a submit's Python work."""

    def __init__(self, size: int = ENCODED_EXEC_CACHE) -> None:
        self.size = size
        self.entries: OrderedDict[Command, list[int]] = OrderedDict()

    def words(self, command: Command, encode: Callable[[], list[int]]) -> list[int]:
        found = self.entries.get(command)
        if found is not None:
            self.entries.move_to_end(command)
            return found
        found = self.entries[command] = encode()
        if len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return found


# ------------------------------------------------------------------------------------------------------ rings


@dataclass
class InFlight:
    sequence: int  # the value the submission's retired write stores
    start: int  # the memory it used: [start, end) (IB area bytes for PM4, ring bytes for SDMA)
    end: int
    ring_end: int  # the write pointer after it (PM4: dwords)


class DriverQueue:
    """What both rings share: the driver's queue memory, the retired counter and the wait for retirement."""

    kind: QueueKind

    def __init__(self, device: Any, ring_size: int) -> None:
        self.device = device
        iface = device.iface
        # the ring is exactly ring_size bytes (the engine wraps at the size it is given; the driver rounds to pages)
        self.ring = dataclasses.replace(
            iface.alloc(ring_size, host=True, uncached=True, cpu_access=True), size=ring_size
        )
        self.read_ptr = iface.alloc(0x1000, host=True, uncached=True, cpu_access=True)
        self.write_ptr = iface.alloc(0x1000, host=True, uncached=True, cpu_access=True)
        self.retired_memory = iface.alloc(0x1000, host=True, uncached=True, cpu_access=True)
        self.retired = _u64_at(self.retired_memory)
        self.ring_view = _words_view(self.ring)
        self.ring_words = self.ring_view.cast("I")
        self.write_pointer = _u64_at(self.write_ptr)
        self.hw = iface.create_queue(self.kind, self.ring, self.read_ptr, self.write_ptr)
        self.reset_state()

    def reset_state(self) -> None:
        """Start over on an empty ring (a new queue, or after the driver reset the queues)."""
        self.put = 0
        self.sequence = 0
        self.retired.value = 0
        self.write_pointer.value = 0
        self.in_flight: deque[InFlight] = deque()

    def _wait_retired(self, done: Callable[[], bool], what: str) -> None:
        """Block until `done()` (the engine retired enough work), sleeping in the driver; fail after the wait timeout
        without progress (the queue is blocked, e.g. on a signal nobody sets)."""
        last, last_progress = self.retired.value, time.monotonic()
        timeout_s = HCQDEV_WAIT_TIMEOUT_MS.value / 1000
        while not done():
            now = time.monotonic()
            if self.retired.value != last:
                last, last_progress = self.retired.value, now
            elif now - last_progress > timeout_s:
                raise RuntimeError(f"{self.device.device}: the {self.kind.value} queue has no room for {what}: "
                                   f"the engine retired nothing for {timeout_s:.0f} s")  # fmt: skip
            self.device.iface.sleep(RETIRE_POLL_MS)

    def _retire(self) -> None:
        retired = self.retired.value
        while self.in_flight and self.in_flight[0].sequence <= retired:
            self.in_flight.popleft()

    def _ring_doorbell(self) -> None:
        self.write_pointer.value = self.put
        self.hw.doorbell.write(self.put)


class PM4Ring(DriverQueue):
    """The compute queue: IBs in a wrapping area of GPU memory, INDIRECT_BUFFER packets on the ring (dwords)."""

    kind = QueueKind.COMPUTE

    def __init__(self, device: Any) -> None:
        super().__init__(device, PM4_RING_SIZE)
        self.ib_area = device.iface.alloc(IB_AREA_SIZE, host=True, cpu_access=True)
        self.ib_view = _words_view(self.ib_area)
        self.ib_head = 0
        self.ring_dwords = PM4_RING_SIZE // 4

    def submit(self, chunks: list[list[int]]) -> None:
        """Run the PM4 `chunks` (one per command) as one or more IBs, each under the INDIRECT_BUFFER size limit."""
        ibs: list[list[int]] = [[]]
        for words in chunks:
            if len(ibs[-1]) + len(words) >= p.INDIRECT_BUFFER_MAX_DWORDS - 16:  # (room for the retired write)
                ibs.append([])
            ibs[-1].extend(words)
        for ib in ibs:
            self._submit_ib(ib)

    def _submit_ib(self, words: list[int]) -> None:
        self.sequence += 1
        words = words + pm4.release_mem(
            self.retired_memory.va_addr, self.sequence, p.ReleaseMemDataSel.VALUE_64, p.ReleaseMemIntSel.NONE
        )
        data = array("I", words).tobytes()
        start = self._reserve_ib(len(data))
        self.ib_view[start : start + len(data)] = data
        packet = pm4.indirect_buffer(self.ib_area.va_addr + start, len(words))
        self._wait_retired(lambda: self._ring_free() >= len(packet), "an indirect buffer packet")
        for i, word in enumerate(packet):
            self.ring_words[(self.put + i) % self.ring_dwords] = word
        self.put += len(packet)
        self.in_flight.append(InFlight(self.sequence, start, start + len(data), self.put))
        self._ring_doorbell()

    def _ring_free(self) -> int:
        self._retire()
        oldest = self.in_flight[0].ring_end - 4 if self.in_flight else self.put
        return self.ring_dwords - (self.put - oldest)

    def _reserve_ib(self, size: int) -> int:
        """Room for `size` bytes in the IB area, after the IBs that used it last retired."""
        size = (size + 255) // 256 * 256  # each IB on its own cache lines
        start = self.ib_head if self.ib_head + size <= IB_AREA_SIZE else 0

        def free() -> bool:
            self._retire()
            return not any(f.start < start + size and start < f.end for f in self.in_flight)

        self._wait_retired(free, f"an indirect buffer of {size} bytes")
        self.ib_head = start + size
        return start


class SDMARing(DriverQueue):
    """The copy queue: SDMA packets straight into the ring (bytes), never across its end."""

    kind = QueueKind.SDMA

    def __init__(self, device: Any) -> None:
        super().__init__(device, SDMA_RING_SIZE)
        self.ring_bytes = SDMA_RING_SIZE

    def submit(self, chunks: list[list[int]]) -> None:
        """Write the SDMA `chunks` (one per command) into the ring, as several submissions if they are long."""
        batch: list[int] = []
        limit = self.ring_bytes // 8  # dwords per submission: a quarter of the ring
        for words in chunks:
            if batch and len(batch) + len(words) > limit:
                self._submit(batch)
                batch = []
            batch.extend(words)
        self._submit(batch)

    def _submit(self, words: list[int]) -> None:
        self.sequence += 1
        words = words + sdma.fence(self.retired_memory.va_addr, self.sequence)
        data = array("I", words).tobytes()
        self._wait_retired(lambda: self._room_for(len(data)), f"an SDMA submission of {len(data)} bytes")
        zeros, start = sdma.ring_placement(self.put, len(data), self.ring_bytes)
        if zeros:
            tail = self.put % self.ring_bytes
            self.ring_view[tail : tail + zeros] = bytes(zeros)
        offset = start % self.ring_bytes
        self.ring_view[offset : offset + len(data)] = data
        self.put = start + len(data)
        self.in_flight.append(InFlight(self.sequence, start, self.put, self.put))
        self._ring_doorbell()

    def _room_for(self, size: int) -> bool:
        self._retire()
        oldest = self.in_flight[0].start if self.in_flight else self.put
        zeros, start = sdma.ring_placement(self.put, size, self.ring_bytes)
        return start + size - oldest <= self.ring_bytes


# ------------------------------------------------------------------------------------------------------ HWQueues


def memory_named(command: Command) -> tuple[Any, ...]:
    """The raw buffers (HCQBuffer) whose memory a command names: a signal's slot, a written or polled buffer, a
    copy's ends. (A launch's buffers are the kernel's arguments; kernels use the device's own memory.)"""
    owners = command.keep_alive if isinstance(command.keep_alive, tuple) else (command.keep_alive,)  # type: ignore[union-attr]
    return tuple(getattr(owner, "base_buf", owner) for owner in owners if owner is not None)


def map_peer_memory(device: Any, commands: tuple[Command, ...]) -> None:
    """Map into `device` the memory of another GPU that `commands` name (another device's signal, a copy to a buffer
    of another device), once, where the interface can (see AMDDevice.map_peer)."""
    for command in commands:
        if type(command) is not ExecCommand and type(command) is not MemoryBarrierCommand:
            for buf in memory_named(command):
                if getattr(buf, "owner", device) is not device:
                    device.map_peer(buf)


class AMDComputeQueue(HWQueue):
    """PM4 on the compute queue: kernels, signals, waits, timestamps, barriers, writes and polls."""

    supports_copy = False

    def _submit(self, device: Any, commands: tuple[Command, ...]) -> None:
        map_peer_memory(device, commands)
        cache = device.encode_cache
        chunks = [
            cache.words(c, lambda c=c: encode_pm4(c, device)) if type(c) is ExecCommand else encode_pm4(c, device)
            for c in commands
        ]
        device.compute_ring.submit(chunks)


class AMDCopyQueue(HWQueue):
    """SDMA on the copy queue: copies, signals, waits, timestamps, writes and polls."""

    supports_exec = False

    def _submit(self, device: Any, commands: tuple[Command, ...]) -> None:
        map_peer_memory(device, commands)
        device.sdma_ring.submit([encode_sdma(c, device) for c in commands])
