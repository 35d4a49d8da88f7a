"""GPU virtual memory of the simulated Navi31: VRAM, host-visible system memory and the page table over both.

Addresses are shared virtual addresses, as under KFD: every allocation is placed at a GPU virtual address that is
also the CPU address of its bytes in this process (VRAM is one anonymous mmap, each system-memory allocation its
own), so the driver side sees the same bytes at `cpu_address == va_addr` that the engines see through the page
table. The page table maps 4 KiB pages; an engine's access to a page it does not map raises GPUFault naming the
first unmapped byte. Freed ranges are unmapped at once, so a use after free faults as it would on hardware.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from tg.drivers.amd.iface import GPUFault

PAGE_SIZE = 0x1000
DEFAULT_VRAM_SIZE = 24 << 30  # a Radeon RX 7900 XTX's; sparse: pages are only backed once touched
# Linux's MAP_NORESERVE (Python's mmap module names it only from 3.13): without it the kernel's overcommit heuristic
# refuses a VRAM arena larger than RAM.
MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)


def round_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _address_of(buffer: mmap.mmap) -> int:
    holder = ctypes.c_char.from_buffer(buffer)
    try:
        return ctypes.addressof(holder)
    finally:
        del holder  # release the buffer export so the mmap can be closed later


@dataclass
class MappedRange:
    """One contiguous mapping of the page table: [start, start + size) backed by `view`."""

    start: int
    size: int
    view: memoryview
    host: bool
    backing: mmap.mmap | None = None  # system memory owns its mmap; VRAM ranges borrow the arena's
    foreign: bool = False  # memory this device only maps (another GPU's, or the CPU's): unmapping frees nothing

    @property
    def end(self) -> int:
        return self.start + self.size


class VRAMArena:
    """First-fit allocator over the VRAM mmap, in pages; freed blocks coalesce with their neighbours."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
        self.base = _address_of(self.buffer)
        self._free: list[tuple[int, int]] = [(0, size)]  # (offset, size), sorted by offset

    def allocate(self, size: int) -> int:
        for index, (offset, free) in enumerate(self._free):
            if free >= size:
                self._free[index : index + 1] = [(offset + size, free - size)] if free > size else []
                return offset
        raise MemoryError(f"out of VRAM: no free block of {size:#x} bytes (VRAM is {self.size:#x})")

    def release(self, offset: int, size: int) -> None:
        self.buffer.madvise(mmap.MADV_DONTNEED, offset, size)  # give the pages back to the host (they read as 0)
        index = bisect.bisect(self._free, (offset, size))
        self._free.insert(index, (offset, size))
        merged: list[tuple[int, int]] = []
        for start, length in self._free:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((start, length))
        self._free = merged

    def close(self) -> None:
        try:
            self.buffer.close()
        except BufferError:  # a view is still alive (an engine thread that did not stop): leave it to the GC
            pass


class WriteAnnouncer:
    """What the engines' waits need of GPU memory: writes by the engines bump `generation` and wake threads blocked
    in `wait_for_change` (a WAIT_REG_MEM or POLL_REGMEM); writes by the CPU are invisible to Python, so waiters
    also poll."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._waiters = 0
        self.generation = 0

    def _announce_write(self) -> None:
        self.generation += 1
        if self._waiters:  # only pay for the lock when an engine is blocked on memory
            with self._changed:
                self._changed.notify_all()

    def wait_for_change(self, generation: int, timeout: float) -> None:
        """Block until an engine writes memory after `generation` was read, or `timeout` seconds pass (CPU writes
        are not seen here, so callers re-check on the timeout too)."""
        with self._changed:
            self._waiters += 1
            try:
                if self.generation == generation:
                    self._changed.wait(timeout)
            finally:
                self._waiters -= 1

    def wake_waiters(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def read_u32(self, address: int) -> int:
        return int.from_bytes(self.read(address, 4), "little")

    def read_u64(self, address: int) -> int:
        return int.from_bytes(self.read(address, 8), "little")

    def write_u32(self, address: int, value: int) -> None:
        self.write(address, (value & 0xFFFFFFFF).to_bytes(4, "little"))

    def write_u64(self, address: int, value: int) -> None:
        self.write(address, (value & ((1 << 64) - 1)).to_bytes(8, "little"))

    def read(self, address: int, size: int) -> bytes:
        raise NotImplementedError

    def write(self, address: int, data: bytes) -> None:
        raise NotImplementedError


class SimMemory(WriteAnnouncer):
    """The GPUMemory of the simulated device (tg.drivers.amd.iface.GPUMemory), plus allocation and unmapping."""

    def __init__(self, vram_size: int = DEFAULT_VRAM_SIZE) -> None:
        super().__init__()
        self.vram = VRAMArena(vram_size)
        # The page table, replaced whole on every change (copy on write) so the engines read it without a lock.
        self._table: tuple[list[int], list[MappedRange]] = ([], [])
        self._lock = threading.Lock()

    # -- allocation --------------------------------------------------------------------------------------------
    def map_vram(self, size: int) -> MappedRange:
        size = round_up(max(size, 1), PAGE_SIZE)
        with self._lock:
            offset = self.vram.allocate(size)
            view = memoryview(self.vram.buffer)[offset : offset + size]
            mapped = MappedRange(self.vram.base + offset, size, view, host=False)
            self._insert(mapped)
        return mapped

    def map_host(self, size: int) -> MappedRange:
        size = round_up(max(size, 1), PAGE_SIZE)
        backing = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        mapped = MappedRange(_address_of(backing), size, memoryview(backing), host=True, backing=backing)
        with self._lock:
            self._insert(mapped)
        return mapped

    def unmap(self, address: int) -> None:
        with self._lock:
            starts, ranges = list(self._table[0]), list(self._table[1])
            index = bisect.bisect_left(starts, address)
            if index == len(starts) or starts[index] != address:
                raise ValueError(f"no allocation starts at 0x{address:X}")
            mapped = ranges.pop(index)
            starts.pop(index)
            self._table = (starts, ranges)
            mapped.view.release()
            if mapped.foreign:
                return
            if mapped.backing is not None:
                try:
                    mapped.backing.close()
                except BufferError:  # another device still maps it: the mmap goes when its last view does
                    pass
            else:
                self.vram.release(mapped.start - self.vram.base, mapped.size)

    def find(self, address: int) -> MappedRange | None:
        """The mapping that starts at `address` (an allocation of this device), if any."""
        starts, ranges = self._table
        index = bisect.bisect_left(starts, address)
        return ranges[index] if index < len(starts) and starts[index] == address else None

    def map_foreign(self, start: int, view: memoryview) -> MappedRange:
        """Map memory this device does not own at `start` (the same address its owner uses): another simulated
        GPU's allocation (its view) or CPU memory (a view of the process's own pages). The mapping must not outlive
        the memory, as with the KFD's user pointers."""
        mapped = MappedRange(start, len(view), view, host=True, foreign=True)
        with self._lock:
            starts, ranges = self._table
            index = bisect.bisect_right(starts, start) - 1
            overlaps = (index >= 0 and ranges[index].end > start) or (
                index + 1 < len(starts) and starts[index + 1] < start + len(view)
            )
            if overlaps:
                raise ValueError(f"0x{start:X}+0x{len(view):X} overlaps a mapping of this device")
            self._insert(mapped)
        return mapped

    def _insert(self, mapped: MappedRange) -> None:
        starts, ranges = list(self._table[0]), list(self._table[1])
        index = bisect.bisect_left(starts, mapped.start)
        starts.insert(index, mapped.start)
        ranges.insert(index, mapped)
        self._table = (starts, ranges)

    def close(self) -> None:
        with self._lock:
            ranges = self._table[1]
            self._table = ([], [])
            for mapped in ranges:
                try:
                    mapped.view.release()
                    if mapped.backing is not None:
                        mapped.backing.close()
                except BufferError:  # still in use by a thread that did not stop: leave it to the GC
                    pass
        self.vram.close()

    # -- translation -------------------------------------------------------------------------------------------
    def is_mapped(self, address: int, size: int = 1) -> bool:
        try:
            for _ in self._pieces(address, size, "read"):
                pass
        except GPUFault:
            return False
        return True

    def _pieces(self, address: int, size: int, access: str) -> Iterator[tuple[memoryview, int, int]]:
        """(view, offset, length) pieces covering [address, address + size); GPUFault at the first unmapped byte."""
        if address < 0 or address + size > 1 << 64:
            raise GPUFault(address & ((1 << 64) - 1), access)
        starts, ranges = self._table
        while size > 0:
            index = bisect.bisect_right(starts, address) - 1
            if index < 0 or index >= len(ranges) or ranges[index].end <= address:
                raise GPUFault(address, access)
            mapped = ranges[index]
            offset = address - mapped.start
            length = min(size, mapped.size - offset)
            yield mapped.view, offset, length
            address += length
            size -= length

    # -- GPUMemory ---------------------------------------------------------------------------------------------
    def _within(self, address: int, size: int) -> MappedRange | None:
        """The one mapping holding all of [address, address + size), if there is one (the common, fast case)."""
        starts, ranges = self._table
        index = bisect.bisect_right(starts, address) - 1
        if index >= 0:
            mapped = ranges[index]
            if address + size <= mapped.start + mapped.size:
                return mapped
        return None

    def read(self, address: int, size: int) -> bytes:
        mapped = self._within(address, size)
        if mapped is not None:
            offset = address - mapped.start
            return bytes(mapped.view[offset : offset + size])
        pieces = [bytes(view[offset : offset + length]) for view, offset, length in self._pieces(address, size, "read")]
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def write(self, address: int, data: bytes) -> None:
        mapped = self._within(address, len(data))
        if mapped is not None and isinstance(data, bytes):
            offset = address - mapped.start
            mapped.view[offset : offset + len(data)] = data
            self._announce_write()
            return
        source = memoryview(data).cast("B")
        done = 0
        for view, offset, length in list(self._pieces(address, len(source), "write")):
            view[offset : offset + length] = source[done : done + length]
            done += length
        self._announce_write()

    def copy(self, destination: int, source: int, size: int) -> None:
        """Copy `size` bytes view to view (no intermediate bytes object); faults like a read then a write."""
        done = 0
        while done < size:
            piece = min(size - done, 1 << 22)
            src = self._within(source + done, piece)
            dst = self._within(destination + done, piece)
            if src is None or dst is None:  # crossing mappings (or unmapped: the slow path raises the fault)
                self.write(destination + done, self.read(source + done, piece))
            else:
                s_off, d_off = source + done - src.start, destination + done - dst.start
                dst.view[d_off : d_off + piece] = src.view[s_off : s_off + piece]
            done += piece
        self._announce_write()
