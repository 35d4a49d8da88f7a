"""The HCQ conformance suite (spec/hcq.md section 3.2): every HCQ device must pass all of it.

Add a device by adding its name to HCQ_DEVICES. The fixture kernel is `b = a + 1` on 2 floats
(`add_one`, one element per core_id), with kernel arguments laid out for (b, a) and for (a, b).
"""

from __future__ import annotations

import ctypes
import struct
import time
import types

import pytest

from tg.codegen.flags import Context
from tg.hcq import BufferSpec, Device, HCQBuffer, HCQSignal, Variable, profile_events
from tg.hcq import signal as hcq_signal

# how long a wait may go without progress before it fails: generous, a loaded machine can leave the engine thread
# unscheduled for seconds
DEADLINE_MS = 120_000

HCQ_DEVICES = ["CPU", "MOCKKFD+AMD", "MOCKPCI+AMD"]
WORD = Variable("addr", 0, 2**64 - 1)

# A device bug shows up as a hang: fail that test quickly instead of stalling the suite.
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=HCQ_DEVICES)
def dev(request):
    device = Device[request.param]
    device.synchronize()
    return device


@pytest.fixture
def setup(dev, kit):
    """The add_one program, two 2-float buffers a and b, and args states for b=a+1 and a=b+1."""
    prg = kit.load_program(dev, "add_one", kit.ADD_ONE)
    a = dev.allocator.alloc(8)
    b = dev.allocator.alloc(8)
    kit.write_floats(a, [0.0, 0.0])
    kit.write_floats(b, [0.0, 0.0])
    return prg, a, b, prg.fill_kernargs((b, a)), prg.fill_kernargs((a, b))


def sibling(dev, index: int):
    """Device `index` of the same kind and interface as `dev` (CPU:1, MOCKKFD+AMD:1)."""
    prefix = f"{dev.spec.iface}+{dev.spec.name}" if dev.spec.iface else dev.spec.name
    return Device[f"{prefix}:{index}"]


def queue_kinds(dev):
    return [dev.hw_compute_queue_t, dev.hw_copy_queue_t]


def submit_signal(dev, queue_t):
    queue_t().signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    return dev.timeline_value - 1


# --- signals and waits ---


def test_signal(dev) -> None:
    for queue_t in queue_kinds(dev):
        value = submit_signal(dev, queue_t)
        dev.timeline_signal.wait(value, timeout=DEADLINE_MS)
        assert dev.timeline_signal.value == value


def test_signal_update(dev) -> None:
    """A queue template signalling a virtual signal with a symbolic value, patched at each submit."""
    for queue_t in queue_kinds(dev):
        virtual = HCQSignal(HCQBuffer(WORD, 16))
        value = Variable("value", 0, 2**32)
        queue = queue_t().signal(virtual, value)
        for _ in range(2):
            target = dev.next_timeline()
            queue.submit(dev, {"addr": dev.timeline_signal.value_addr, "value": target})
            dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
            assert dev.timeline_signal.value == target


def test_wait(dev) -> None:
    for queue_t in queue_kinds(dev):
        ready = dev.new_signal(value=1)
        target = dev.next_timeline()
        queue_t().wait(ready, 1).signal(dev.timeline_signal, target).submit(dev)
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)


def test_wait_late_set(dev) -> None:
    """The device really blocks until the host sets the signal, and the host wait times out meanwhile."""
    for queue_t in queue_kinds(dev):
        late = dev.new_signal(value=0)
        target = dev.next_timeline()
        queue_t().wait(late, 1).signal(dev.timeline_signal, target).submit(dev)
        with pytest.raises(RuntimeError, match=r"Wait timeout: 300 ms! \(the signal is not set to"):
            dev.timeline_signal.wait(target, timeout=300)
        late.value = 1
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)


def test_wait_update(dev) -> None:
    for queue_t in queue_kinds(dev):
        gate = dev.new_signal(value=0)
        queue = queue_t().wait(HCQSignal(HCQBuffer(WORD, 16)), Variable("v", 0, 100))
        target = dev.next_timeline()
        queue.signal(dev.timeline_signal, target).submit(dev, {"addr": gate.value_addr, "v": 3})
        gate.value = 2
        with pytest.raises(RuntimeError, match="Wait timeout"):
            dev.timeline_signal.wait(target, timeout=200)
        gate.value = 3
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)


def test_wait_sleeps_instead_of_spinning(dev) -> None:
    never = dev.new_signal(value=0)
    start_cpu = time.thread_time()  # this thread's CPU time: what other processes and threads do does not count
    with pytest.raises(RuntimeError, match="Wait timeout"):
        never.wait(1, timeout=400)
    assert time.thread_time() - start_cpu < 0.2  # a spinning wait would burn ~0.4 s of CPU


def test_wait_timeout_resets_while_the_value_makes_progress(dev, monkeypatch: pytest.MonkeyPatch) -> None:
    """500 ms in total, but never 250 ms without progress: no timeout. The wait's clock is simulated (each look at it
    is 50 ms later, and every second look the value moves one step), so a loaded machine cannot stretch a step."""
    sig = dev.new_signal(value=0)
    clock_reads = []

    def clock() -> float:
        clock_reads.append(None)
        if len(clock_reads) % 2 == 0 and sig.value < 5:
            sig.value += 1
        return 0.05 * len(clock_reads)

    monkeypatch.setattr(hcq_signal, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr(sig, "_sleep", lambda target, seconds: None)
    sig.wait(5, timeout=250)
    assert 0.05 * len(clock_reads) >= 0.5
    sig.value = 5  # and with no progress, the same wait times out after 250 ms of the simulated clock
    with pytest.raises(RuntimeError, match="Wait timeout: 250 ms"):
        sig.wait(6, timeout=250)


def test_signal_slots_are_reused_after_the_signal_dies(dev) -> None:
    sig = dev.new_signal()
    address = sig.value_addr
    del sig
    assert dev.new_signal().value_addr == address


# --- exec ---


def test_exec_one_kernel(dev, setup, kit) -> None:
    prg, a, b, b_from_a, _ = setup
    target = dev.next_timeline()
    dev.hw_compute_queue_t().exec(prg, b_from_a, (1, 1, 1), (1, 1, 1)).signal(dev.timeline_signal, target).submit(dev)
    dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
    assert kit.read_floats(b, 2) == [1.0, 0.0]


def test_exec_2_kernels_100_times(dev, setup, kit) -> None:
    prg, a, b, b_from_a, a_from_b = setup
    prev, step = Variable("prev", 0, 2**32), Variable("step", 0, 2**32)
    queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, prev)
    queue.exec(prg, b_from_a, (1, 1, 1), (1, 1, 1)).exec(prg, a_from_b, (1, 1, 1), (1, 1, 1))
    queue.signal(dev.timeline_signal, step)
    for _ in range(100):
        target = dev.next_timeline()
        queue.submit(dev, {"prev": target - 1, "step": target})
    dev.timeline_signal.wait(target, timeout=10000)
    assert kit.read_floats(a, 1) == [200.0]


def test_exec_update(dev, setup, kit) -> None:
    """A symbolic launch size patched at submit: only core_id 0 runs."""
    prg, a, b, b_from_a, _ = setup
    size = Variable("n", 1, 2)
    target = dev.next_timeline()
    queue = dev.hw_compute_queue_t().exec(prg, b_from_a, (size, 1, 1), (size, 1, 1))
    queue.signal(dev.timeline_signal, target).submit(dev, {"n": 1})
    dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
    assert kit.read_floats(b, 2) == [1.0, 0.0]


def test_exec_update_fuzz(dev, kit) -> None:
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = dev.allocator.alloc(4 * 27)
    x, y, z = Variable("x", 1, 3), Variable("y", 1, 3), Variable("z", 1, 3)
    queue = dev.hw_compute_queue_t().exec(prg, prg.fill_kernargs((out,)), (x, y, z), (1, 1, 1))
    for xv in range(1, 4):
        for yv in range(1, 4):
            for zv in range(1, 4):
                kit.write_floats(out, [0.0] * 27)
                target = dev.next_timeline()
                queue.submit(dev, {"x": xv, "y": yv, "z": zv})
                dev.hw_compute_queue_t().signal(dev.timeline_signal, target).submit(dev)
                dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
                assert sum(kit.read_floats(out, 27)) == xv * yv * zv


def test_kernel_argument_values_are_patched_at_submit(dev, kit) -> None:
    prg = kit.load_program(dev, "scale_shift", kit.SCALE_SHIFT)
    x, out = dev.allocator.alloc(4 * 4), dev.allocator.alloc(4 * 4)
    kit.write_floats(x, [1.0, 2.0, 3.0, 4.0])
    args = prg.fill_kernargs((out, x), (4, Variable("scale", -10, 10), 1))
    queue = dev.hw_compute_queue_t().exec(prg, args, (1, 1, 1), (1, 1, 1))
    for scale in (2, -3):
        target = dev.next_timeline()
        queue.submit(dev, {"scale": scale})
        dev.hw_compute_queue_t().signal(dev.timeline_signal, target).submit(dev)
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
        assert kit.read_floats(out, 4) == [v * scale + 1 for v in (1.0, 2.0, 3.0, 4.0)]


# --- copies ---


def test_copy(dev, setup, kit) -> None:
    _, a, b, _, _ = setup
    kit.write_floats(a, [0.0, 1.0])
    target = dev.next_timeline()
    dev.hw_copy_queue_t().copy(b, a, 8).signal(dev.timeline_signal, target).submit(dev)
    dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
    assert kit.read_floats(b, 2) == [0.0, 1.0]


def test_copy_long(dev) -> None:
    size = 64 << 20
    src, dest = dev.allocator.alloc(size), dev.allocator.alloc(size)
    pattern = bytes(range(251)) * (size // 251 + 1)
    src.cpu_view()[:] = pattern[:size]
    target = dev.next_timeline()
    dev.hw_copy_queue_t().copy(dest, src, size).signal(dev.timeline_signal, target).submit(dev)
    dev.timeline_signal.wait(target, timeout=10000)
    assert dest.cpu_view() == src.cpu_view()
    dev.allocator.free(src, size)
    dev.allocator.free(dest, size)
    dev.allocator.free_cache()


@pytest.mark.parametrize("dest_offset, src_offset, size", [(1, 3, 1), (3, 0, 17), (5, 7, 1000), (0, 1, 4095)])
def test_copy_misaligned(dev, dest_offset: int, src_offset: int, size: int) -> None:
    src, dest = dev.allocator.alloc(8192), dev.allocator.alloc(8192)
    src.cpu_view()[:] = bytes((i * 7 + 3) % 256 for i in range(8192))
    dest.cpu_view()[:] = bytes(8192)  # the allocator may hand back used memory
    target = dev.next_timeline()
    queue = dev.hw_copy_queue_t().copy(dest.offset(dest_offset, size), src.offset(src_offset, size), size)
    queue.signal(dev.timeline_signal, target).submit(dev)
    dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
    view = dest.cpu_view()
    assert view[dest_offset : dest_offset + size] == src.cpu_view()[src_offset : src_offset + size]
    assert view[:dest_offset] == bytes(dest_offset)  # nothing written outside the range
    assert view[dest_offset + size :] == bytes(8192 - dest_offset - size)


def test_update_copy(dev, setup, kit) -> None:
    _, a, b, _, _ = setup
    kit.write_floats(a, [0.0, 1.0])
    virtual_dest = HCQBuffer(Variable("dest", 0, 2**64 - 1), 8)
    virtual_src = HCQBuffer(Variable("src", 0, 2**64 - 1), 8)
    target = dev.next_timeline()
    queue = dev.hw_copy_queue_t().copy(virtual_dest, virtual_src, 8).signal(dev.timeline_signal, target)
    queue.submit(dev, {"dest": b.va_addr, "src": a.va_addr})
    dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
    assert kit.read_floats(b, 2) == [0.0, 1.0]


def test_copies_overlap_compute(dev) -> None:
    """The copy engine keeps working while the compute engine is blocked: they are independent."""
    gate = dev.new_signal(value=0)
    compute_done, copy_done = dev.new_signal(value=0), dev.new_signal(value=0)
    src, dest = dev.allocator.alloc(64), dev.allocator.alloc(64)
    src.cpu_view()[:] = bytes(range(64))
    dev.hw_compute_queue_t().wait(gate, 1).signal(compute_done, 1).submit(dev)
    dev.hw_copy_queue_t().copy(dest, src, 64).signal(copy_done, 1).submit(dev)
    copy_done.wait(1, timeout=DEADLINE_MS)
    assert dest.cpu_view() == src.cpu_view() and compute_done.value == 0
    gate.value = 1
    compute_done.wait(1, timeout=DEADLINE_MS)


# --- bind, multiple devices, timeline rollover, barriers, profiling ---


def test_bind(dev, setup, kit) -> None:
    prg, a, b, b_from_a, _ = setup
    step = Variable("step", 0, 2**32)
    queue = dev.hw_compute_queue_t().exec(prg, b_from_a, (1, 1, 1), (1, 1, 1)).signal(dev.timeline_signal, step)
    queue.bind(dev)
    for _ in range(3):
        target = dev.next_timeline()
        queue.submit(dev, {"step": target})
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
    assert kit.read_floats(b, 1) == [1.0]
    other = Device[f"{dev.device}:7"] if ":" not in dev.device else None
    if other is not None:
        with pytest.raises(RuntimeError, match="bound to"):
            queue.submit(other, {"step": 1})


def test_multidevice_signal_wait(dev) -> None:
    first, second = sibling(dev, 0), sibling(dev, 1)
    shared = first.new_signal(value=0)
    second_target = second.next_timeline()
    second.hw_copy_queue_t().wait(shared, 0xFFF).signal(second.timeline_signal, second_target).submit(second)
    with pytest.raises(RuntimeError, match="Wait timeout"):
        second.timeline_signal.wait(second_target, timeout=200)
    first_target = first.next_timeline()
    first.hw_copy_queue_t().signal(shared, 0xFFF).signal(first.timeline_signal, first_target).submit(first)
    first.timeline_signal.wait(first_target, timeout=DEADLINE_MS)
    second.timeline_signal.wait(second_target, timeout=DEADLINE_MS)


def test_timeline_signal_rollover(dev) -> None:
    for queue_t in queue_kinds(dev):
        dev.synchronize()
        dev.timeline_value = (1 << 32) - 20
        dev.timeline_signal.value = dev.timeline_value - 1
        for _ in range(40):
            queue = queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
            queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
            dev.synchronize()
        assert dev.timeline_value < 100  # wrapped to the shadow signal instead of growing past 2**32


def test_memory_barrier(dev, setup, kit) -> None:
    prg, a, b, b_from_a, _ = setup
    for i in range(255):
        kit.write_floats(a, [float(i)])  # a host write, made visible to the kernel by the barrier
        target = dev.next_timeline()
        queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, target - 1).memory_barrier()
        queue.exec(prg, b_from_a, (1, 1, 1), (1, 1, 1)).signal(dev.timeline_signal, target).submit(dev)
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
        assert kit.read_floats(b, 1) == [i + 1.0]


def test_memory_barrier_before_copy(dev) -> None:
    """A host write, a compute-queue barrier, then a copy-queue copy of what the host wrote: the copy sees it."""
    src, dest = dev.allocator.alloc(4), dev.allocator.alloc(4)
    for i in range(256):
        src.cpu_view()[:] = struct.pack("<I", i)
        barrier = dev.next_timeline()
        queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, barrier - 1).memory_barrier()
        queue.signal(dev.timeline_signal, barrier).submit(dev)
        target = dev.next_timeline()
        copy = dev.hw_copy_queue_t().wait(dev.timeline_signal, target - 1).copy(dest, src, 4)
        copy.signal(dev.timeline_signal, target).submit(dev)
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
        assert struct.unpack("<I", dest.cpu_view())[0] == i


def test_small_copies_from_a_host_buffer(dev) -> None:
    host, dest = dev.allocator.alloc(1, BufferSpec(host=True)), dev.allocator.alloc(1)
    for i in range(256):
        host.cpu_view()[0] = i
        target = dev.next_timeline()
        queue = dev.hw_copy_queue_t().wait(dev.timeline_signal, target - 1).copy(dest, host, 1)
        queue.signal(dev.timeline_signal, target).submit(dev)
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
        assert dest.cpu_view()[0] == i


def test_profiling_timestamps_are_monotonic(dev, setup) -> None:
    prg, a, b, b_from_a, _ = setup
    stamps = [dev.new_signal() for _ in range(6)]
    queue = dev.hw_compute_queue_t()
    for stamp in stamps:
        queue.timestamp(stamp).exec(prg, b_from_a, (2, 1, 1), (1, 1, 1))
    target = dev.next_timeline()
    queue.signal(dev.timeline_signal, target).submit(dev)
    dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
    times = [s.timestamp for s in stamps]
    assert all(t > 0 for t in times) and times == sorted(times) and len(set(times)) == len(times)


def test_profile_flag_records_kernel_ranges(dev, setup) -> None:
    prg, a, b, _, _ = setup
    before = len(profile_events)
    with Context(PROFILE=1):
        for _ in range(3):
            prg(b, a, global_size=(2, 1, 1))
        dev.synchronize()
    events = profile_events[before:]
    assert [e.name for e in events] == ["add_one"] * 3
    assert all(e.device == dev.device and e.start_us <= e.end_us for e in events)
    assert all(earlier.end_us <= later.start_us for earlier, later in zip(events, events[1:], strict=False))


def test_program_wait_returns_the_kernel_time(dev, kit) -> None:
    spin = """
    void spin(float* out, int n, int core_id) {
      float x = 0;
      for (int i = 0; i < n; i++) x += 1e-9f * i;
      out[0] = x;
    }
    """
    prg = kit.load_program(dev, "spin", spin)
    out = dev.allocator.alloc(4)
    host_start = time.perf_counter()
    elapsed = prg(out, vals=(kit.spin_iterations(dev),), wait=True)
    host_elapsed = time.perf_counter() - host_start
    assert 0 < elapsed <= host_elapsed


def test_kernarg_ring_wraps(dev, setup, kit) -> None:
    prg, a, b, _, _ = setup
    ring = dev.kernargs_allocator
    first = prg.fill_kernargs((b, a)).buf.va_addr
    ring.next_offset = ring.size - 8  # the next slice does not fit at the end
    assert prg.fill_kernargs((b, a)).buf.va_addr == dev.kernargs_buf.va_addr
    assert dev.kernargs_buf.va_addr <= first < dev.kernargs_buf.va_addr + ring.size


def test_device_to_device_transfer(dev) -> None:
    first, second = sibling(dev, 0), sibling(dev, 1)
    src, dest = first.allocator.alloc(4096), second.allocator.alloc(4096)
    src.cpu_view()[:] = bytes(i % 256 for i in range(4096))
    first.allocator._transfer(dest, src, 4096, first, second)
    second.synchronize()
    assert dest.cpu_view() == src.cpu_view()


def test_signal_layout_is_value_then_timestamp(dev) -> None:
    sig = dev.new_signal(value=0x1234)
    raw = ctypes.string_at(sig.base_buf.va_addr, 16)
    assert struct.unpack("<QQ", raw)[0] == 0x1234


def test_write(dev) -> None:
    for queue_t in queue_kinds(dev):
        buf = dev.allocator.alloc(16)
        buf.cpu_view()[:] = bytes(16)  # the allocator may hand back a used block
        target = dev.next_timeline()
        queue = queue_t().write(buf, 0x42).write(buf.offset(8, 8), 0x1122334455667788, b64=True)
        queue.signal(dev.timeline_signal, target).submit(dev)
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
        assert struct.unpack("<IIQ", buf.cpu_view()) == (0x42, 0, 0x1122334455667788)


@pytest.mark.parametrize("bits_set", [True, False])
def test_poll_bit(dev, bits_set: bool) -> None:
    mask = 0x10
    flag = dev.allocator.alloc(4)
    flag.cpu_view()[:] = struct.pack("<I", 0 if bits_set else 0xFF)
    target = dev.next_timeline()
    queue = dev.hw_compute_queue_t().poll_bit(flag, mask if bits_set else 0, mask)
    queue.signal(dev.timeline_signal, target).submit(dev)
    with pytest.raises(RuntimeError, match="Wait timeout"):
        dev.timeline_signal.wait(target, timeout=150)  # still polling
    # another queue flips the bit: the poll sees the device write
    dev.hw_copy_queue_t().write(flag, 0x13 if bits_set else 0x0F).submit(dev)
    dev.timeline_signal.wait(target, timeout=DEADLINE_MS)


def test_poll_bit_value_must_be_zero_or_the_mask(dev) -> None:
    with pytest.raises(ValueError, match="0 or the mask"):
        dev.hw_compute_queue_t().poll_bit(dev.allocator.alloc(4), 1, 0x10)
