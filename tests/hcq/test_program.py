"""CPU programs: load compiled C, run with buffers, values and launch sizes, time with wait=True."""

from __future__ import annotations

import numpy as np
import pytest

from tg.hcq import Buffer, Device

# A device bug shows up as a hang: fail that test quickly instead of stalling the suite.
pytestmark = pytest.mark.timeout(60)


def test_program_runs_with_buffers_and_values(kit) -> None:
    dev = Device["CPU"]
    prg = kit.load_program(dev, "scale_shift", kit.SCALE_SHIFT)
    n = 1000
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    src = Buffer("CPU", n, kit.float32).allocate().copyin(x.data)
    out = Buffer("CPU", n, kit.float32).allocate()
    chunks = (n + 63) // 64
    elapsed = prg(out.raw, src.raw, global_size=(chunks, 1, 1), vals=(n, 3, -2), wait=True)
    assert isinstance(elapsed, float) and 0 < elapsed < 10
    # bit-exact: the compiler must not fuse x*3-2 into an FMA (regression: -ffp-contract=off)
    np.testing.assert_array_equal(out.numpy(), x * np.float32(3) - np.float32(2))


def test_launch_runs_every_core_id_exactly_once(kit) -> None:
    dev = Device["CPU"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = Buffer("CPU", 100, kit.float32).allocate()
    out.copyin(memoryview(bytes(100 * 4)))  # allocators reuse memory: start from zeros
    assert prg(out.raw, global_size=(37, 1, 1)) is None
    dev.synchronize()
    assert out.numpy().tolist() == [1.0] * 37 + [0.0] * 63


def test_three_dimensional_global_size_covers_the_product(kit) -> None:
    dev = Device["CPU"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = Buffer("CPU", 30, kit.float32).allocate()
    out.copyin(memoryview(bytes(30 * 4)))  # allocators reuse memory: start from zeros
    prg(out.raw, global_size=(2, 3, 4), local_size=(8, 1, 1), wait=True)
    assert out.numpy().tolist() == [1.0] * 24 + [0.0] * 6


def test_unknown_function_name_is_a_clear_error(kit) -> None:
    dev = Device["CPU"]
    with pytest.raises(ValueError, match="no function named 'nope'"):
        dev.runtime("nope", dev.compiler.compile(kit.MARK))


def test_passing_a_buffer_object_instead_of_raw_is_a_clear_error(kit) -> None:
    dev = Device["CPU"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    with pytest.raises(TypeError, match=r"Buffer\.raw"):
        prg(Buffer("CPU", 1, kit.float32).allocate())


def test_kernels_on_many_cores_match_single_core(kit) -> None:
    from tg.codegen.flags import Context
    from tg.hcq.device import parse_device
    from tg.hcq.devices.cpu import CPUDevice

    n = 64 * 50
    x = np.arange(n, dtype=np.float32)
    results = []
    for cores in (1, 3):
        with Context(CPU_COUNT=cores):
            dev = CPUDevice(parse_device(f"CPU:{40 + cores}"))
        assert dev.cores.count == cores
        prg = kit.load_program(dev, "scale_shift", kit.SCALE_SHIFT)
        src, out = dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)
        src.cpu_view()[:] = x.tobytes()
        prg(out, src, global_size=(50, 1, 1), vals=(n, 2, 1), wait=True)
        results.append(np.frombuffer(out.cpu_view(), np.float32).copy())
    np.testing.assert_array_equal(results[0], x * 2 + 1)
    np.testing.assert_array_equal(results[1], results[0])


RENDEZVOUS = """
#include <time.h>
/* Each of two calls announces itself, then waits (up to 5 s) to see the other one inside the kernel at
   the same time. Only truly concurrent calls (the GIL released, two threads) can both succeed. */
void rendezvous(int* flags, int core_id) {
  __atomic_store_n(&flags[core_id], 1, __ATOMIC_SEQ_CST);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    if (__atomic_load_n(&flags[1 - core_id], __ATOMIC_SEQ_CST)) { flags[2 + core_id] = 1; return; }
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (now.tv_sec - start.tv_sec < 5);
}
"""


def test_two_core_threads_run_kernel_calls_concurrently(kit) -> None:
    from tg.codegen.flags import Context

    with Context(CPU_COUNT=2):
        dev = Device["CPU:62"]
    prg = kit.load_program(dev, "rendezvous", RENDEZVOUS)
    flags = Buffer("CPU:62", 4, kit.int32).allocate()
    prg(flags.raw, global_size=(2, 1, 1), wait=True)
    assert flags.as_buffer().tolist() == [1, 1, 1, 1]


def test_runtime_takes_a_name_and_a_binary(kit) -> None:
    from tg.hcq.devices.cpu import CPUProgram

    dev = Device["CPU"]
    lib = dev.compiler.compile(kit.MARK)
    assert isinstance(dev.runtime("mark", lib), CPUProgram)
    with pytest.raises(TypeError):
        dev.runtime(dev, "mark", lib)  # no other calling form
    with pytest.raises(TypeError):
        dev.runtime("mark")


def test_disk_cannot_run_programs(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="cannot run programs"):
        Device[f"DISK:{tmp_path / 'x.bin'}"].runtime("f", b"")


def test_small_launches_run_whole_on_the_launching_thread_after_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Handing a tiny chunk to another core thread costs more than running it: after one fast split launch, a
    program runs every core_id on the calling thread; a serial launch that turns out slow is split again."""
    import threading
    import time
    import types

    from tg.hcq.devices import cpu_workers
    from tg.hcq.devices.cpu_workers import CorePool

    # "fast": under half a second, with room for a loaded test machine; "slow": over a second
    monkeypatch.setattr(cpu_workers, "SERIAL_BELOW_S", 0.5)
    monkeypatch.setattr(cpu_workers, "SERIAL_RECHECK", 2)
    pool, program, delay = CorePool(2, "test-serial"), types.SimpleNamespace(), 0.0
    calls: list[tuple[str, int, int]] = []

    def run(start: int, end: int) -> None:
        calls.append((threading.current_thread().name, start, end))
        if delay:
            time.sleep(delay)

    pool.run(run, 2, program)  # split: the calls are handed out one by one to whichever thread is free; both fast
    assert sorted(c[1:] for c in calls) == [(0, 1), (1, 2)]
    assert program.run_serially
    calls.clear()
    delay = 0.5 * 2  # per call: the two calls run serially take two seconds
    pool.run(run, 2, program)
    assert calls == [(threading.current_thread().name, 0, 2)]  # whole, here
    assert not program.run_serially  # it was slow: split next time
    calls.clear()
    pool.run(run, 2, program)
    assert len(calls) == 2


def test_concrete_kernel_arguments_are_packed_at_once_and_symbolic_ones_patched_at_submit() -> None:
    """Every launch lays out its arguments: concrete ones are written in one pack and leave no patch records (the
    queue would skip them anyway); a symbolic value is recorded and written when the queue is submitted."""
    import struct

    from tg.hcq import Variable
    from tg.hcq.memory import HCQBuffer
    from tg.hcq.program import CLikeArgsState

    memory = bytearray(32)
    kernargs = HCQBuffer(0x1000, 32, view=memoryview(memory))
    bufs = (HCQBuffer(0x10, 8), HCQBuffer(0x20, 8))
    concrete_args = CLikeArgsState(kernargs, None, bufs, (7, -2))
    assert concrete_args.bind_data == []
    assert struct.unpack_from("<2Q2i", memory) == (0x10, 0x20, 7, -2)
    n = Variable("n", 1, 100)
    symbolic_args = CLikeArgsState(kernargs, None, bufs, (5, n))
    assert [bound.value for bound in symbolic_args.bind_data] == [n]
    assert struct.unpack_from("<2Q1i", memory) == (0x10, 0x20, 5)
    symbolic_args.bind_data[0].write({"n": 42})
    assert struct.unpack_from("<2Q2i", memory) == (0x10, 0x20, 5, 42)


def test_a_launch_that_neither_waits_nor_profiles_enters_no_profiling_context(kit, monkeypatch) -> None:
    """Every kernel launch pays for what it sets up: the profiling context (timestamp signals) only for wait=True or
    PROFILE=1."""
    import tg.hcq.program as program_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("set up although nothing asked for it")

    dev = Device["CPU"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = Buffer("CPU", 8, kit.float32).allocate()
    out.copyin(memoryview(bytes(8 * 4)))
    real_profile = program_module.hcq_profile
    monkeypatch.setattr(program_module, "hcq_profile", refuse)
    assert prg(out.raw, global_size=(8, 1, 1)) is None
    dev.synchronize()
    assert out.numpy().tolist() == [1.0] * 8
    monkeypatch.setattr(program_module, "hcq_profile", real_profile)
    assert prg(out.raw, global_size=(8, 1, 1), wait=True) >= 0  # timed: the profiling context runs
