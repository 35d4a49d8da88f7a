"""Buffer: allocate, copyin/copyout, views, the LRU allocator, and errors on misuse."""

from __future__ import annotations

import numpy as np
import pytest

from tg.hcq import Buffer, BufferSpec, Device, LRUAllocator

# A device bug shows up as a hang: fail that test quickly instead of stalling the suite.
pytestmark = pytest.mark.timeout(60)


def test_copyin_copyout_roundtrip(kit) -> None:
    data = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    buf = Buffer("CPU", 1000, kit.float32).allocate()
    buf.copyin(data.data)
    out = np.empty_like(data)
    buf.copyout(memoryview(out))
    np.testing.assert_array_equal(out, data)
    np.testing.assert_array_equal(buf.numpy(), data)


def test_as_buffer_is_typed_by_the_dtype_format(kit) -> None:
    buf = Buffer("CPU", 3, kit.int32).allocate().copyin(np.array([1, -2, 3], np.int32).data)
    view = buf.as_buffer()
    assert view.format == "i" and view.tolist() == [1, -2, 3]


def test_as_buffer_copy_does_not_change_with_the_buffer(kit) -> None:
    buf = Buffer("CPU", 2, kit.int32).allocate().copyin(np.array([1, 2], np.int32).data)
    snapshot = buf.as_buffer()
    live = buf.as_buffer(allow_zero_copy=True)
    buf.copyin(np.array([5, 6], np.int32).data)
    assert snapshot.tolist() == [1, 2]
    assert live.tolist() == [5, 6]


def test_host_view_writes_reach_the_buffer(kit) -> None:
    buf = Buffer("CPU", 3, kit.int32).allocate().copyin(np.array([1, 2, 3], np.int32).data)
    view = buf.host_view()
    assert view is not None
    np.frombuffer(view, np.int32)[1] = 7
    assert buf.numpy().tolist() == [1, 7, 3]


def test_host_view_is_none_where_memory_is_not_host_visible(kit, monkeypatch) -> None:
    buf = Buffer("CPU", 3, kit.int32).allocate()
    monkeypatch.setattr(type(buf.allocator), "_as_buffer", lambda self, raw: None)
    assert buf.host_view() is None


def test_new_buffers_read_as_zero(kit) -> None:
    """Fresh memory from the OS is zero; a block the LRU cache hands back again may hold old data, so empty it."""
    Device["CPU"].allocator.free_cache()
    assert Buffer("CPU", 16, kit.float32).allocate().numpy().tolist() == [0.0] * 16


@pytest.mark.parametrize("size", [3, 5])
def test_copyin_of_the_wrong_size_raises(kit, size: int) -> None:
    buf = Buffer("CPU", 4, kit.float32).allocate()
    with pytest.raises(ValueError, match=r"copyin of \d+ bytes .* of 16 bytes"):
        buf.copyin(np.zeros(size, np.float32).data)


def test_copyout_of_the_wrong_size_or_readonly_raises(kit) -> None:
    buf = Buffer("CPU", 4, kit.float32).allocate()
    with pytest.raises(ValueError, match="copyout"):
        buf.copyout(memoryview(bytearray(8)))
    with pytest.raises(ValueError, match="writable"):
        buf.copyout(memoryview(bytes(16)))


def test_use_after_free_raises(kit) -> None:
    buf = Buffer("CPU", 4, kit.float32).allocate()
    buf.deallocate()
    with pytest.raises(RuntimeError, match="deallocated"):
        buf.copyin(bytes(16))
    with pytest.raises(RuntimeError, match="deallocated"):
        buf.as_buffer()
    with pytest.raises(RuntimeError, match="not allocated"):
        buf.deallocate()


def test_unallocated_buffer_raises(kit) -> None:
    with pytest.raises(RuntimeError, match="not allocated"):
        Buffer("CPU", 4, kit.float32).copyout(memoryview(bytearray(16)))


def test_view_shares_memory_at_an_offset(kit) -> None:
    base = Buffer("CPU", 8, kit.int32).allocate().copyin(np.arange(8, dtype=np.int32).data)
    view = base.view(3, kit.int32, offset=4 * 2)
    assert view.as_buffer().tolist() == [2, 3, 4]
    view.copyin(np.array([-1, -2, -3], np.int32).data)
    assert base.as_buffer().tolist() == [0, 1, -1, -2, -3, 5, 6, 7]
    # a view of a view is a view of the base
    inner = view.view(1, kit.int32, offset=4)
    assert inner.base is base and inner.as_buffer().tolist() == [-2]


def test_view_outside_the_base_raises(kit) -> None:
    base = Buffer("CPU", 4, kit.int32)
    with pytest.raises(ValueError, match="does not fit"):
        base.view(2, kit.int32, offset=12)


def test_view_of_a_freed_base_raises(kit) -> None:
    base = Buffer("CPU", 4, kit.int32).allocate()
    view = base.view(2, kit.int32, offset=0)
    base.deallocate()
    with pytest.raises(RuntimeError, match="deallocated"):
        view.as_buffer()


def test_lru_allocator_reuses_freed_blocks_and_frees_its_cache() -> None:
    freed = []

    class CountingAllocator(LRUAllocator):
        def _alloc(self, size, options):
            return bytearray(size)

        def _free(self, raw, options):
            freed.append(raw)

    allocator = CountingAllocator()
    first = allocator.alloc(64)
    allocator.free(first, 64)
    assert allocator.alloc(64) is first  # reused, not reallocated
    assert allocator.alloc(64) is not first
    allocator.free(first, 64)
    assert allocator.cached_bytes() == 64
    allocator.free_cache()
    assert freed == [first] and allocator.cached_bytes() == 0
    # nolru blocks bypass the cache
    other = allocator.alloc(32, BufferSpec(nolru=True))
    allocator.free(other, 32, BufferSpec(nolru=True))
    assert freed == [first, other]


def test_lru_allocator_never_hands_out_a_block_its_free_cache_is_freeing() -> None:
    """Another thread allocates while `free_cache` is freeing the cached block (held inside `_free`): it gets a new
    block, not the one being freed (tg-llm serve allocates on its scheduler and capture threads; a model load's
    free_cache beside them handed out freed memory and segfaulted)."""
    import threading

    freeing, go = threading.Event(), threading.Event()
    being_freed = []

    class SlowFreeAllocator(LRUAllocator):
        def _alloc(self, size, options):
            return bytearray(size)

        def _free(self, raw, options):
            being_freed.append(raw)
            freeing.set()
            assert go.wait(30)

    allocator = SlowFreeAllocator()
    block = allocator.alloc(64)
    allocator.free(block, 64)
    emptying = threading.Thread(target=allocator.free_cache)
    emptying.start()
    try:
        assert freeing.wait(30)
        assert allocator.alloc(64) is not block
    finally:
        go.set()
        emptying.join(30)
    assert being_freed == [block] and allocator.cached_bytes() == 0


def test_lru_allocator_frees_its_cache_when_memory_runs_out() -> None:
    class TinyAllocator(LRUAllocator):
        live = 0

        def _alloc(self, size, options):
            if self.live + size > 100:
                raise MemoryError("full")
            self.live += size
            return bytearray(size)

        def _free(self, raw, options):
            self.live -= len(raw)

    allocator = TinyAllocator()
    allocator.free(allocator.alloc(80), 80)
    assert len(allocator.alloc(60)) == 60  # only fits after the cached 80 bytes were really freed


def test_cpu_buffers_come_back_from_the_cache(kit) -> None:
    allocator = Device["CPU"].allocator
    buf = Buffer("CPU", 1024 + 7, kit.uint8).allocate()
    raw = buf.raw
    buf.deallocate()
    again = Buffer("CPU", 1024 + 7, kit.uint8).allocate()
    assert again.raw is raw
    again.deallocate()
    allocator.free_cache()
    assert allocator.cached_bytes() == 0


def test_negative_size_is_rejected(kit) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        Buffer("CPU", -1, kit.float32)


@pytest.mark.parametrize(
    "name", ["bool", "int8", "uint16", "int32", "int64", "uint64", "float16", "float32", "float64"]
)
def test_numpy_roundtrip_for_every_dtype_with_a_format(name: str) -> None:
    from tg.codegen.dtype import dtypes

    dtype = dtypes.by_name(name)
    data = (np.random.default_rng(3).standard_normal(33) * 100).astype(np.dtype(dtype.fmt))
    buf = Buffer("CPU", 33, dtype).allocate().copyin(data.data)
    assert buf.nbytes == data.nbytes
    np.testing.assert_array_equal(buf.numpy(), data)


def test_dtype_without_a_format_comes_back_as_bytes() -> None:
    from tg.codegen.dtype import dtypes

    buf = Buffer("CPU", 4, dtypes.bfloat16).allocate().copyin(bytes(range(8)))
    view = buf.as_buffer()
    assert view.format == "B" and bytes(view) == bytes(range(8))


def test_copyin_on_a_busy_device_does_not_wait_and_keeps_order(kit) -> None:
    dev = Device["CPU"]
    prg = kit.load_program(dev, "add_one", kit.ADD_ONE)
    a = kit.float_buffer("CPU", [1.0, 2.0])
    b = Buffer("CPU", 2, kit.float32).allocate()
    gate = dev.new_signal(value=0)
    # b = a + 1, queued behind a gate the host opens later: the device stays busy until then.
    queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).wait(gate, 1)
    queue.exec(prg, prg.fill_kernargs((b.raw, a.raw)), (2, 1, 1), (1, 1, 1))
    queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    new_values = np.array([10.0, 20.0], np.float32)
    a.copyin(new_values.data)  # returns at once although the kernel has not run yet
    new_values[:] = -1  # the caller may reuse its memory immediately
    assert not dev.is_idle()
    gate.value = 1
    assert b.numpy().tolist() == [2.0, 3.0]  # the queued kernel read the old contents
    assert a.numpy().tolist() == [10.0, 20.0]
    prg(b.raw, a.raw, global_size=(2, 1, 1), wait=True)
    assert b.numpy().tolist() == [11.0, 21.0]


def test_dropping_a_buffer_returns_its_memory_to_the_cache(kit) -> None:
    allocator = Device["CPU"].allocator
    allocator.free_cache()
    buf = Buffer("CPU", 3001, kit.uint8).allocate()
    raw = buf.raw
    del buf
    assert allocator.cache[(3001, BufferSpec())] == [raw]
    allocator.free_cache()
