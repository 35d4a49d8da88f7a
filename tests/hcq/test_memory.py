"""Raw memory handles and the bump allocator."""

from __future__ import annotations

import ctypes
import mmap
import sys

import pytest

from tg.hcq import BumpAllocator, HCQBuffer, HostMemory, Variable
from tg.hcq.memory import CACHE_LINE, HUGE_PAGE_SIZE, MAPPED_SIZE, PAGE_SIZE


def test_bump_allocator_aligns_and_offsets_from_its_base() -> None:
    bump = BumpAllocator(64, base=0x1000)
    assert bump.alloc(3) == 0x1000
    assert bump.alloc(8, alignment=8) == 0x1008
    assert bump.alloc(1, alignment=16) == 0x1010


def test_bump_allocator_wraps_to_the_start_when_full() -> None:
    bump = BumpAllocator(32, wrap=True)
    assert [bump.alloc(12) for _ in range(3)] == [0, 12, 0]


def test_bump_allocator_without_wrap_raises_when_full() -> None:
    bump = BumpAllocator(32, wrap=False)
    bump.alloc(30)
    with pytest.raises(RuntimeError, match="Out of memory"):
        bump.alloc(4)
    with pytest.raises(RuntimeError, match="Out of memory"):
        BumpAllocator(8).alloc(9)


def test_host_memory_is_cache_line_aligned_zeroed_and_viewable() -> None:
    memory = HostMemory(10000)
    handle = memory.handle()
    assert handle.va_addr % CACHE_LINE == 0 and handle.size == 10000
    assert bytes(handle.cpu_view()) == bytes(10000)
    part = handle.offset(100, 8)
    part.cpu_view()[:] = b"abcdefgh"
    assert part.va_addr == handle.va_addr + 100 and part.base is handle
    assert bytes(handle.cpu_view()[100:108]) == b"abcdefgh"


def test_small_host_memory_carries_less_than_a_cache_line_of_padding() -> None:
    """A model has hundreds of small buffers (norms, activations): a page of alignment padding each added MBs."""
    for size in (1, 2304, 10000, MAPPED_SIZE - 1):
        memory = HostMemory(size)
        assert isinstance(memory._storage, ctypes.Array)
        assert ctypes.sizeof(memory._storage) < size + CACHE_LINE
        assert memory.address % CACHE_LINE == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="anonymous mappings: Linux")
def test_host_memory_from_the_mapped_size_up_is_a_page_aligned_mapping_of_its_own() -> None:
    """Freed, such a buffer's pages go back to the system at once (freed heap blocks stay resident)."""
    memory = HostMemory(MAPPED_SIZE + 100)
    assert isinstance(memory._storage, mmap.mmap) and len(memory._storage) == MAPPED_SIZE + 100
    assert memory.address % PAGE_SIZE == 0 and bytes(memory.view) == bytes(MAPPED_SIZE + 100)


def test_offset_outside_the_buffer_raises() -> None:
    handle = HostMemory(16).handle()
    with pytest.raises(ValueError, match="outside"):
        handle.offset(8, 16)


def test_virtual_buffers_have_no_memory() -> None:
    virtual = HCQBuffer(Variable("addr", 0, 2**64 - 1), 16)
    with pytest.raises(RuntimeError, match="no host view"):
        virtual.cpu_view()
    with pytest.raises(ValueError, match="virtual"):
        virtual.offset(4)


def test_large_host_memory_is_huge_page_aligned_zeroed_and_asks_for_huge_pages() -> None:
    """Large host memory starts on a huge page and is marked for huge pages (the kernel grants them where it can;
    /proc/self/smaps shows the request as the `hg` VmFlag of the mapping)."""
    memory = HostMemory(HUGE_PAGE_SIZE * 2 + 123)
    handle = memory.handle()
    assert handle.va_addr % HUGE_PAGE_SIZE == 0 and handle.size == HUGE_PAGE_SIZE * 2 + 123
    view = handle.cpu_view()
    assert view[0] == 0 and view[-1] == 0 and bytes(view[: 1 << 16]) == bytes(1 << 16)
    view[-4:] = b"tail"
    assert bytes(view[-4:]) == b"tail"
    if not sys.platform.startswith("linux"):
        return
    flags = _smaps_vm_flags(handle.va_addr)
    assert "hg" in flags, flags


def _smaps_vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping that holds `address`, from /proc/self/smaps."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(part, 16) for part in head.split("-"))
                inside = low <= address < high
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")
