"""Allocators: how a device hands out, frees, fills and reads raw buffers (`HCQBuffer` or similar).

`LRUAllocator` keeps freed blocks in a cache keyed by (size, options) and hands them out again, so a
training loop that frees and reallocates the same shapes never reaches the system allocator after its
first step. `free_cache()` releases everything cached (done automatically when an allocation fails). Its cache
is shared by every thread that allocates (tg-llm serve's scheduler and capture threads): a lock keeps a block from
being handed out twice, or handed out while `free_cache` frees it.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BufferSpec:
    """Options of an allocation. `nolru` skips the free-block cache; the rest are hints to the device."""

    cpu_access: bool = False
    host: bool = False
    uncached: bool = False
    nolru: bool = False


DEFAULT_SPEC = BufferSpec()


class Allocator:
    """The allocation contract. Subclasses implement `_alloc` and `_free`, and the copies they support."""

    def __init__(self, device: Any = None) -> None:
        self.device = device

    def alloc(self, size: int, options: BufferSpec = DEFAULT_SPEC) -> Any:
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"allocation size must be a positive integer, got {size!r}")
        return self._alloc(size, options)

    def free(self, raw: Any, size: int, options: BufferSpec = DEFAULT_SPEC) -> None:
        self._free(raw, options)

    def _alloc(self, size: int, options: BufferSpec) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot allocate")

    def _free(self, raw: Any, options: BufferSpec) -> None:
        pass

    def _copyin(self, dest: Any, src: memoryview) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support copyin")

    def _copyout(self, dest: memoryview, src: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support copyout")

    def _offset(self, raw: Any, offset: int, size: int) -> Any:
        """A raw handle for a sub-range, sharing memory with `raw`."""
        return raw.offset(offset, size)

    def _as_buffer(self, raw: Any) -> memoryview | None:
        """A zero-copy host view of `raw`, or None when the device memory is not host-visible."""
        return None


class LRUAllocator(Allocator):
    """An allocator that caches freed blocks for reuse by later allocations of the same size and options."""

    def __init__(self, device: Any = None) -> None:
        super().__init__(device)
        self.cache: dict[tuple[int, BufferSpec], list[Any]] = defaultdict(list)
        self.cache_lock = threading.Lock()

    def alloc(self, size: int, options: BufferSpec = DEFAULT_SPEC) -> Any:
        with self.cache_lock:
            cached = self.cache.get((size, options))
            if cached:
                return cached.pop()
        try:
            return super().alloc(size, options)
        except MemoryError:
            self.free_cache()
            return super().alloc(size, options)

    def free(self, raw: Any, size: int, options: BufferSpec = DEFAULT_SPEC) -> None:
        if options.nolru:
            super().free(raw, size, options)
        else:
            with self.cache_lock:
                self.cache[(size, options)].append(raw)

    def cached_bytes(self) -> int:
        return sum(size * len(blocks) for (size, _), blocks in self.cache.items())

    def free_cache(self) -> None:
        """Really free every cached block."""
        with self.cache_lock:
            cached, self.cache = self.cache, defaultdict(list)
        for (_, options), blocks in cached.items():
            for raw in blocks:
                super().free(raw, 0, options)


class DeferredFrees:
    """Blocks freed while the device's queued work may still use them, released later instead of waited for.

    A free runs on whichever thread drops a buffer's last reference, or in a finalizer on any thread the garbage
    collector interrupts: a device's own engine thread included. Waiting there for the device waits for the very
    work that thread is running, a deadlock (a simulated AMD SDMA engine hung in its own copy; a CPU engine thread
    that dropped a `from_blob` buffer waited for its own command list, and every later wait on the device timed
    out). So a free only notes the block with the timeline value of the last work queued before it, and `release`
    (called where waiting is safe: the next allocation, `free_cache`) gives back the blocks whose work finished."""

    def __init__(self, release_block: Callable[[Any], None]) -> None:
        self._release_block = release_block
        self._pending: deque[tuple[Any, Any, int]] = deque()  # (block, timeline signal, last value queued before)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, device: Any, raw: Any) -> None:
        """Note `raw`, freed now on `device`."""
        self._pending.append((raw, device.timeline_signal, device.timeline_value - 1))

    def release(self, device: Any, wait: bool) -> None:
        """Release the blocks of `device` whose last use finished, in free order; with `wait`, wait for all of them."""
        with self._lock:
            while self._pending:
                raw, signal, last_use = self._pending[0]
                # (a device swaps its timeline signal only when idle: a block noted on the other one is free)
                if signal is device.timeline_signal and signal.value < last_use:
                    if not wait:
                        return
                    signal.wait(last_use)
                self._pending.popleft()
                self._release_block(raw)
