"""GPU memory for the AMD device: buffers from the driver interface, signals in GPU memory, and the allocator.

Every allocation comes from `AMDInterface.alloc` (VRAM, or host memory with `host=True`) and is an `HCQBuffer` whose
`va_addr` is the GPU virtual address; when the CPU can see the bytes (`GPUAllocation.cpu_address`, which KFD makes
the same address) `view` is a memoryview over them. VRAM is asked for CPU-visible (a resizable BAR), as the device's
kernel arguments, program images and signals must be, and so the host can copy through the mapping when the device
is idle. Copies otherwise go through host staging buffers and the SDMA queue, as on hardware.
"""

from __future__ import annotations

import ctypes
from collections import deque
from decimal import Decimal
from typing import Any

from tg.drivers.amd.iface import GPUAllocation
from tg.hcq.allocator import DEFAULT_SPEC, BufferSpec, DeferredFrees, LRUAllocator
from tg.hcq.memory import HCQBuffer
from tg.hcq.signal import SIGNAL_SIZE, HCQSignal, SignalPool, sleep_until

TIMESTAMP_TICKS_PER_US = 100  # the GPU clock counter RELEASE_MEM and SDMA TIMESTAMP write: 100 MHz
SLEEP_SLICE_MS = 5  # a waiting host thread looks at memory at least this often (an interrupt wakes it earlier)
STAGING_SIZE = 2 << 20
STAGING_COUNT = 4


def cpu_view(allocation: GPUAllocation) -> memoryview | None:
    """A memoryview over the CPU mapping of `allocation`, or None when the CPU cannot see it."""
    if not allocation.cpu_address:
        return None
    return memoryview((ctypes.c_uint8 * allocation.size).from_address(allocation.cpu_address)).cast("B")


def gpu_buffer(allocation: GPUAllocation, owner: Any, size: int | None = None) -> HCQBuffer:
    """The raw buffer of an allocation (its first `size` bytes: the driver rounds allocations up to pages)."""
    size = allocation.size if size is None else size
    view = cpu_view(allocation)
    return HCQBuffer(allocation.va_addr, size, None if view is None else view[:size], owner, meta=allocation)


class AMDDeviceError(RuntimeError):
    """A fault or hang the AMD device reported; raised once, after which the queues were reset."""


class AMDSignal(HCQSignal):
    """A signal in GPU memory: the GPU writes its value (RELEASE_MEM, SDMA FENCE) and its timestamp (GPU clock ticks,
    100 per microsecond). The host reads them through the CPU mapping, which may be at another address than the GPU
    address that queues name. A waiting host sleeps in the driver (woken by the interrupt a signal write raises), and
    a fault the driver reports ends the wait with its message."""

    def __init__(self, base_buf: HCQBuffer, value: int = 0, owner: Any = None, **kwargs: Any) -> None:
        view = base_buf.cpu_view()
        self._words = (ctypes.c_uint64 * 2).from_buffer(view)  # value, timestamp (what the CPU sees)
        kwargs.setdefault("timestamp_divider", TIMESTAMP_TICKS_PER_US)
        super().__init__(base_buf, value, owner, **kwargs)

    @property
    def value(self) -> int:
        return self._words[0]

    @value.setter
    def value(self, new_value: int) -> None:
        self._words[0] = new_value

    @property
    def timestamp(self) -> Decimal:
        """When the GPU last stamped the signal, in microseconds of the GPU clock."""
        return Decimal(self._words[1]) / self.timestamp_divider

    def _sleep(self, target: int, seconds: float) -> None:
        iface = getattr(self.owner, "iface", None)
        if iface is None:
            sleep_until(lambda: self.value >= target, seconds)
            return
        try:
            iface.sleep(max(1, min(SLEEP_SLICE_MS, int(seconds * 1000))))
        except AMDDeviceError:
            raise
        except RuntimeError as fault:  # the driver reported a fault: the queues stopped
            owner: Any = self.owner
            raise owner.fault_seen(fault) from fault


class AMDSignalPool(SignalPool):
    """16-byte signal slots carved from uncached host pages that the GPU can write (one pool per peer group)."""

    def __init__(self, device: Any, page_size: int = 0x1000) -> None:
        super().__init__(page_size)
        self.device = device
        self.allocations: list[GPUAllocation] = []

    def _add_page(self) -> None:
        page = self.device.iface.alloc(self.page_size, host=True, uncached=True, cpu_access=True)
        self.allocations.append(page)
        whole = gpu_buffer(page, self.device)
        self.free_slots.extend(whole.offset(start, SIGNAL_SIZE) for start in range(0, self.page_size, SIGNAL_SIZE))

    def new_signal(self, value: int = 0, **kwargs: Any) -> HCQSignal:
        return AMDSignal(self.acquire(), value, pool=self, **kwargs)


class AMDAllocator(LRUAllocator):
    """VRAM (or host memory with BufferSpec(host=True)) through the driver interface; copies through the CPU mapping
    when the device is idle, else through staging buffers on the SDMA queue, ordered on the device timeline."""

    def __init__(self, device: Any = None) -> None:
        super().__init__(device)
        self._staging: list[HCQBuffer] = []
        self._staging_marks: deque[int] = deque()  # timeline value after which each staging buffer is free again
        self._next_staging = 0
        self.reuse_after: dict[int, int] = {}  # id of a cached block -> the timeline value its last user signals
        self.freed = DeferredFrees(self._release_block)  # blocks to release after their last use

    # --- the free-block cache: a block comes back only once the work queued before its free has finished ---

    def free(self, raw: HCQBuffer, size: int, options: BufferSpec = DEFAULT_SPEC) -> None:
        """Cache the block (or free it, with nolru) noting the device's last submission: a kernel queued before the
        free may still write the block, so whoever gets it from the cache waits for that submission first (the host
        fills kernel arguments and copies through the mapping, which no queue orders after the old kernel)."""
        if not options.nolru:
            self.reuse_after[id(raw)] = self.device.timeline_value - 1
        super().free(raw, size, options)

    def alloc(self, size: int, options: BufferSpec = DEFAULT_SPEC) -> HCQBuffer:
        raw = super().alloc(size, options)
        last_use = self.reuse_after.pop(id(raw), 0)
        if self.device.timeline_signal.value < last_use:
            self.device.timeline_signal.wait(last_use)
        return raw

    def free_cache(self) -> None:
        super().free_cache()
        self.reuse_after.clear()
        self.freed.release(self.device, wait=True)

    def _alloc(self, size: int, options: BufferSpec) -> HCQBuffer:
        self.freed.release(self.device, wait=False)
        allocation = self.device.iface.alloc(size, host=options.host, uncached=options.uncached, cpu_access=True)
        return gpu_buffer(allocation, self.device, size)

    def _free(self, raw: HCQBuffer, options: BufferSpec) -> None:
        self.freed.add(self.device, raw)  # (released by a later allocation: see DeferredFrees, a free never waits)

    def _release_block(self, raw: HCQBuffer) -> None:
        if isinstance(raw.meta, GPUAllocation):
            self.device.iface.free(raw.meta)
        raw.view = None
        raw.meta = None

    def _as_buffer(self, raw: HCQBuffer) -> memoryview | None:
        return raw.view

    # --- copies ---

    def _staging_buffer(self) -> tuple[HCQBuffer, int]:
        """The next host staging buffer (waiting for the copy that last used it) and its index."""
        dev = self.device
        if not self._staging:
            for _ in range(STAGING_COUNT):
                allocation = dev.iface.alloc(STAGING_SIZE, host=True, cpu_access=True)
                self._staging.append(gpu_buffer(allocation, dev))
            self._staging_marks.extend([0] * STAGING_COUNT)
        index = self._next_staging
        self._next_staging = (index + 1) % STAGING_COUNT
        dev.timeline_signal.wait(self._staging_marks[index])
        return self._staging[index], index

    def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
        dev = self.device
        dev._raise_error_state()
        if dest.view is not None and dev.is_idle():
            dest.view[: src.nbytes] = src
            return
        for start in range(0, src.nbytes, STAGING_SIZE):
            chunk = src[start : start + STAGING_SIZE]
            staging, index = self._staging_buffer()
            staging.cpu_view()[: chunk.nbytes] = chunk
            queue = dev.hw_copy_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
            queue.copy(dest.offset(start, chunk.nbytes), staging, chunk.nbytes)
            self._staging_marks[index] = dev.next_timeline()
            queue.signal(dev.timeline_signal, self._staging_marks[index]).submit(dev)

    def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
        dev = self.device
        dev.synchronize()
        if src.view is not None:
            dest[:] = src.view[: dest.nbytes]
            return
        for start in range(0, dest.nbytes, STAGING_SIZE):
            size = min(STAGING_SIZE, dest.nbytes - start)
            staging, index = self._staging_buffer()
            queue = dev.hw_copy_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
            queue.copy(staging, src.offset(start, size), size)
            self._staging_marks[index] = dev.next_timeline()
            queue.signal(dev.timeline_signal, self._staging_marks[index]).submit(dev)
            dev.synchronize()
            dest[start : start + size] = staging.cpu_view()[:size]

    def _transfer(self, dest: HCQBuffer, src: HCQBuffer, size: int, src_dev: Any, dest_dev: Any) -> None:
        """Device-to-device copy on the source's SDMA queue, after both devices' earlier work; the destination's
        timeline then waits for it (cross-device ordering)."""
        queue = src_dev.hw_copy_queue_t().wait(src_dev.timeline_signal, src_dev.timeline_value - 1)
        queue.wait(dest_dev.timeline_signal, dest_dev.timeline_value - 1)
        queue.copy(dest, src, size).signal(src_dev.timeline_signal, src_dev.next_timeline()).submit(src_dev)
        if dest_dev is not src_dev:
            follow = dest_dev.hw_compute_queue_t().wait(src_dev.timeline_signal, src_dev.timeline_value - 1)
            follow.signal(dest_dev.timeline_signal, dest_dev.next_timeline()).submit(dest_dev)
