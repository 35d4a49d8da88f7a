"""The CPU device's threads: calls of a launch go to whichever thread is free; a waiting host thread runs queued
work itself."""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tg.codegen import UOp
from tg.codegen.dtype import dtypes
from tg.hcq import Buffer, Device
from tg.hcq.allocator import BufferSpec
from tg.hcq.commands import SignalCommand
from tg.hcq.devices import cpu_workers
from tg.hcq.devices.cpu_calls import MAX_BUFS, MAX_VALS
from tg.hcq.devices.cpu_workers import CorePool

# how long a wait may go without progress before it fails: generous, a loaded machine can leave the engine thread
# unscheduled for seconds
DEADLINE_MS = 120_000
DEADLINE_S = DEADLINE_MS / 1000


def test_a_core_thread_that_is_held_up_does_not_hold_back_the_other_calls() -> None:
    """A thread another process keeps off its core should not delay calls a free thread could make: the call that
    is held up waits until every other call has run, which only a free thread taking them all can do (with one
    fixed chunk of calls per thread, half of them would wait behind it)."""
    pool = CorePool(2, "test-pool")
    total = 8
    others: set[int] = set()
    lock = threading.Lock()
    all_others_ran = threading.Event()

    def run(start: int, end: int) -> None:
        for i in range(start, end):
            if i == 0:
                assert all_others_ran.wait(timeout=DEADLINE_S), (
                    f"only calls {sorted(others)} ran while call 0 was held up"
                )
                continue
            with lock:
                others.add(i)
                if len(others) == total - 1:
                    all_others_ran.set()

    pool.run(run, total)
    assert others == set(range(1, total))


def test_every_call_runs_once_and_errors_reach_the_caller() -> None:
    pool = CorePool(3, "test-pool-errors")
    calls: list[int] = []
    lock = threading.Lock()

    def run(start: int, end: int) -> None:
        with lock:
            calls.extend(range(start, end))

    pool.run(run, 50)
    assert sorted(calls) == list(range(50))

    def fail(start: int, end: int) -> None:
        if start == 7:
            raise ValueError("call 7 failed")

    try:
        pool.run(fail, 20)
    except ValueError as error:
        assert "call 7" in str(error)
    else:
        raise AssertionError("the error of call 7 was lost")


# ---------------------------------------------------------------------------------------- the waiting thread's share


class HeldWakeups(queue.SimpleQueue):
    """An engine thread's wake-up queue that drops wake-ups while `held`: as if the thread were never scheduled."""

    def __init__(self) -> None:
        self.held = True
        self.puts = 0
        self.waited_on = threading.Event()  # the engine thread sleeps on this queue now

    def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
        self.puts += 1
        if not self.held:
            super().put(item)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self.waited_on.set()
        return super().get(block, timeout)


@pytest.fixture
def sleepy_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Device["CPU"]'s compute engine with its thread never woken (it sleeps on HeldWakeups) until the test ends."""
    dev = Device["CPU"]
    engine = dev.compute_engine
    dev.hw_compute_queue_t().signal(dev.new_signal(0), 1).submit(dev)  # (the engine thread starts at a first submit)
    dev.synchronize()
    held = HeldWakeups()
    original = engine._wake
    monkeypatch.setattr(engine, "_wake", held)
    original.put(None)  # the thread looks at _wake again and goes to sleep on the held queue
    assert held.waited_on.wait(timeout=DEADLINE_S)
    yield engine
    held.held = False
    engine._wake = original  # (before the token below: the woken thread reads _wake next)
    held.put(None)


def _calls_through_ctypes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Device["CPU"]'s compute engine makes its kernel calls through ctypes and `kernel_runner` (the path of a machine
    without the C call library), so a test can wrap each call in Python."""
    engine = Device["CPU"].compute_engine
    monkeypatch.setattr(engine, "native", None)
    monkeypatch.setattr(engine, "load_native", None)


def _threads_running_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that make each kernel call from now on (calls through ctypes)."""
    _calls_through_ctypes(monkeypatch)
    names: list[str] = []
    original = cpu_workers.kernel_runner

    def recording_runner(*args: Any) -> Any:
        run = original(*args)

        def recorded(start: int, end: int) -> None:
            names.append(threading.current_thread().name)
            run(start, end)

        return recorded

    monkeypatch.setattr(cpu_workers, "kernel_runner", recording_runner)
    return names


def test_a_kernel_awaited_by_the_host_runs_on_the_host_thread_without_the_engine_thread(
    kit: Any, sleepy_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiting thread runs the queued launch itself: the result is there although the engine thread never woke
    (before, the wait timed out), and the kernel ran on the host thread, not on the engine thread."""
    dev = Device["CPU"]
    prg = kit.load_program(dev, "add_one", kit.ADD_ONE)
    a = Buffer("CPU", 4, kit.float32).allocate().copyin(np.arange(4, dtype=np.float32).data)
    b = Buffer("CPU", 4, kit.float32).allocate()
    threads = _threads_running_calls(monkeypatch)
    prg(b.raw, a.raw, global_size=(1, 1, 1))
    prg(b.raw, b.raw, global_size=(1, 1, 1))  # a second list, in order after the first
    dev.synchronize(timeout=DEADLINE_MS)
    assert b.numpy()[0] == 2.0
    assert threads == [threading.current_thread().name] * 2


def test_lists_submitted_while_the_engine_thread_sleeps_wake_it_once(sleepy_engine: Any) -> None:
    """Three lists submitted before the engine thread woke up post one wake-up, not three (each extra one would only
    wake the thread to find nothing left, the host having run the lists)."""
    dev = Device["CPU"]
    signals = [dev.new_signal(0) for _ in range(3)]
    for signal_ in signals:
        dev.hw_compute_queue_t().signal(signal_, 1).submit(dev)
    assert sleepy_engine._wake.puts == 1
    signals[-1].wait(1, timeout=DEADLINE_MS)
    assert [s.value for s in signals] == [1, 1, 1]


def test_a_waiting_host_thread_does_not_block_inside_a_queued_wait(sleepy_engine: Any) -> None:
    """A host thread waiting for signal X must not get stuck inside a queued wait for A that only the host sets
    later: X is set by another thread meanwhile, the host sets A after X arrived, and the list goes on (this
    deadlocked if the waiting thread blocked in the queued wait)."""
    dev = Device["CPU"]
    a, x, b = dev.new_signal(0), dev.new_signal(0), dev.new_signal(0)
    dev.hw_compute_queue_t().wait(a, 1).signal(b, 1).submit(dev)
    setter = threading.Timer(0.05, lambda: setattr(x, "value", 1))
    setter.start()
    x.wait(1, timeout=DEADLINE_MS)
    a.value = 1
    b.wait(1, timeout=DEADLINE_MS)
    setter.join()
    assert dev.error_state is None  # (a test timeout that ends a stuck wait lands here)


def test_a_free_inside_the_running_list_waits_for_nothing_and_releases_the_memory_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression (busy-machine suite run): a buffer's last reference dropped on the thread that runs a command list
    (an engine thread, or a host thread running queued work; or the garbage collector there) freed a `from_blob`
    block with a wait for the device, which waited for that very list: 30 s without progress, then every later use
    of the device failed. The free now only notes the block; a later allocation releases it once the list finished."""
    dev = Device["CPU:60"]
    spec = BufferSpec(nolru=True)
    block = dev.allocator.alloc(64, spec)
    in_list = dev.new_signal(0)
    freed_inside: list[bool] = []
    original = dev.compute_engine.execute

    def execute(command: Any) -> None:
        if isinstance(command, SignalCommand) and command.value_addr == in_list.value_addr:
            dev.allocator.free(block, 64, spec)  # what a finalizer run here does
            freed_inside.append(block.view is not None)  # (still there: the list has not finished)
        original(command)

    monkeypatch.setattr(dev.compute_engine, "execute", execute)
    dev.hw_compute_queue_t().signal(in_list, 1).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    waiter = threading.Thread(target=dev.synchronize, daemon=True)  # (runs the list, or waits for the engine's run)
    waiter.start()
    waiter.join(DEADLINE_S)
    assert not waiter.is_alive()  # (a hang guard: before the fix the free waited for its own list for ever)
    assert dev.error_state is None and freed_inside == [True]
    dev.allocator.alloc(64, spec)  # the list finished: this allocation releases the block
    assert block.view is None


def test_ctrl_c_while_the_host_runs_queued_work_stops_after_the_command_and_the_engine_finishes(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during a launch run by the waiting host thread is held back until the launch completed (every call
    ran), then raised as KeyboardInterrupt; the rest of the list (its signal) is left to the engine thread."""
    dev = Device["CPU"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = Buffer("CPU", 8, kit.float32).allocate().copyin(memoryview(bytes(8 * 4)))
    dev.synchronize()
    original = cpu_workers.kernel_runner

    def interrupted_runner(*args: Any) -> Any:
        run = original(*args)

        def run_then_press_ctrl_c(start: int, end: int) -> None:
            if threading.current_thread() is threading.main_thread():
                signal.raise_signal(signal.SIGINT)  # Ctrl-C arrives during a call the host makes
            run(start, end)

        return run_then_press_ctrl_c

    _calls_through_ctypes(monkeypatch)
    monkeypatch.setattr(cpu_workers, "kernel_runner", interrupted_runner)
    monkeypatch.setattr(cpu_workers, "SERIAL_BELOW_S", 0.0)  # keep the launch split, whatever its speed
    prg(out.raw, global_size=(8, 1, 1))
    interrupts = 0
    for _ in range(50):  # the engine thread may win the race for the list: then no interrupt happens; try again
        try:
            dev.synchronize(timeout=DEADLINE_MS)
        except KeyboardInterrupt:
            interrupts += 1
            break
        prg(out.raw, global_size=(8, 1, 1))
    dev.synchronize(timeout=DEADLINE_MS)  # the engine thread ran what was left: the timeline signal arrives
    assert out.numpy().tolist() == [1.0] * 8
    assert dev.error_state is None
    assert interrupts == 1


def test_deferred_interrupt_delivers_ctrl_c_after_the_block() -> None:
    with pytest.raises(KeyboardInterrupt):
        with cpu_workers.deferred_interrupt() as interrupted:
            assert not interrupted()
            signal.raise_signal(signal.SIGINT)
            assert interrupted()  # held back: the block goes on
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_deferred_interrupt_skips_the_signal_module_wrappers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every synchronize swaps the SIGINT handler twice: through the C functions, not signal.signal, whose enum
    conversions cost about 10 us a pair. Ctrl-C is still held back and delivered after the block."""

    def wrapper_called(*args: object) -> None:
        raise AssertionError("signal.signal/getsignal called")

    # patched only around the block: pytest's own hooks (pytest-timeout's timer) call signal.signal after a test,
    # and a failure here must not leave them the patched one (that crashed an xdist worker on a loaded machine)
    with monkeypatch.context() as patched:
        patched.setattr(signal, "signal", wrapper_called)
        patched.setattr(signal, "getsignal", wrapper_called)
        with pytest.raises(KeyboardInterrupt):
            with cpu_workers.deferred_interrupt() as interrupted:
                signal.raise_signal(signal.SIGINT)
                assert interrupted()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_launch_does_not_wait_for_a_core_thread_that_never_took_a_call() -> None:
    """A core thread that is not scheduled (here: its wake-up is dropped) takes no call: the launching thread makes
    them all and returns without waiting for that thread to wake up."""
    pool = CorePool(2, "test-pool-late")
    pool.run(lambda start, end: None, 2)  # starts the core thread
    held = HeldWakeups()
    pool._inboxes[0] = held
    calls: list[int] = []
    pool.run(lambda start, end: calls.extend(range(start, end)), 8)
    assert calls == list(range(8))


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is a Linux scheduling policy")
def test_core_and_engine_threads_are_batch_work_so_their_wake_up_does_not_preempt_the_host() -> None:
    dev = Device["CPU"]
    dev.hw_compute_queue_t().signal(dev.new_signal(0), 1).submit(dev)  # starts the engine thread
    pool = CorePool(2, "test-pool-batch")
    pool.run(lambda start, end: None, 2)  # starts the core thread
    dev.synchronize()
    names = {dev.compute_engine.name, "test-pool-batch-core1"}
    threads = [t for t in threading.enumerate() if t.name in names]
    assert len(threads) == 2
    for thread in threads:
        assert thread.native_id is not None
        assert os.sched_getscheduler(thread.native_id) == os.SCHED_BATCH, thread.name


# ---------------------------------------------------------------------------------------- calls made from C

# out[core_id] = the id of the thread that made the call (Linux)
THREAD_ID = """
#include <unistd.h>
#include <sys/syscall.h>
void thread_id(long* restrict out, int core_id) { out[core_id] = syscall(SYS_gettid); }
"""

# Ctrl-C pressed during each call the main thread makes (its thread id is the process id); a call on another thread
# first waits (up to a minute, however loaded the machine) for the main thread to have made one, so the main thread
# always takes part
PRESS_CTRL_C = """
#include <signal.h>
#include <unistd.h>
#include <sys/syscall.h>
void press_ctrl_c(float* restrict out, int* restrict main_called, int core_id) {
  if (syscall(SYS_gettid) == getpid()) {
    __atomic_store_n(main_called, 1, __ATOMIC_RELEASE);
    raise(SIGINT);
  } else {
    for (int i = 0; i < 600000 && !__atomic_load_n(main_called, __ATOMIC_ACQUIRE); i++) usleep(100);
  }
  out[core_id] = 1.0f;
}
"""

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernels ask Linux for thread ids")


def _native_engine() -> Any:
    engine = Device["CPU"].compute_engine
    assert engine._native_calls() is not None, "the C call library did not load (a C compiler is installed here)"
    return engine


def test_consecutive_single_call_launches_run_in_one_c_call(kit: Any) -> None:
    """A list of 20 single-call launches (b += 1 each) is one C run of 20 launches, with the right result."""
    dev, engine = Device["CPU"], _native_engine()
    prg = kit.load_program(dev, "add_one", kit.ADD_ONE)
    b = Buffer("CPU", 1, kit.float32).allocate().copyin(np.zeros(1, np.float32).data)
    dev.synchronize()
    queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
    for _ in range(20):
        queue.exec(prg, prg.fill_kernargs((b.raw, b.raw)), (1, 1, 1), (1, 1, 1))
    runs, launches = engine.native_runs, engine.native_run_launches
    queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize()
    assert (engine.native_runs - runs, engine.native_run_launches - launches) == (1, 20)
    assert b.numpy().tolist() == [20.0]


# out[j] = mean(in[0..63]) + j for the j of this call's chunk (64 / calls elements): every call reads all of `in`,
# the whole output of the launch before, `repeats` times (volatile reads: a call lasts long enough for the core
# threads to take part)
MEAN_PLUS_INDEX = """
void mean_plus_index(float* restrict out, const float* restrict in, int calls, int repeats, int core_id) {
  const volatile float* input = in;
  float sum = 0.0f;
  for (int r = 0; r < repeats; r++) {
    sum = 0.0f;
    for (int i = 0; i < 64; i++) sum += input[i];
  }
  int chunk = 64 / calls;
  for (int j = core_id * chunk; j < (core_id + 1) * chunk; j++) out[j] = sum / 64.0f + (float)j;
}
"""


def test_split_and_single_call_launches_of_a_list_run_together_in_one_c_run_in_order(kit: Any) -> None:
    """16 launches, every other one split into 8 calls, each reading the whole output of the one before: one C run
    (tg_run_together, on every core thread) with every launch after the last call of the one before. A launch that
    started early would sum a half-written input: the values are exact in float32, so any such sum differs."""
    dev, engine = Device["CPU"], _native_engine()
    prg = kit.load_program(dev, "mean_plus_index", MEAN_PLUS_INDEX)
    start = np.arange(64, dtype=np.float32) * 3
    buffers = [Buffer("CPU", 64, kit.float32).allocate().copyin(start.data) for _ in range(2)]
    dev.synchronize()
    queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
    for k in range(16):
        calls = 8 if k % 2 == 0 else 1
        args = prg.fill_kernargs((buffers[(k + 1) % 2].raw, buffers[k % 2].raw), (calls, 2000))
        queue.exec(prg, args, (calls, 1, 1), (1, 1, 1))
    runs, launches, together = engine.native_runs, engine.native_run_launches, engine.together_runs
    queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize()
    assert (engine.native_runs - runs, engine.native_run_launches - launches) == (1, 16)
    assert engine.together_runs - together == 1  # (a list's first run goes on every core, see RunChoice)
    expected = start
    for _ in range(16):
        expected = np.float32(expected.astype(np.float64).mean()) + np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(buffers[0].numpy().view(np.float32), expected)


def test_a_tinyjit_replay_of_tiny_kernels_is_one_c_run_and_sees_new_inputs() -> None:
    from tg.tensor import Tensor, TinyJit

    engine = _native_engine()

    @TinyJit
    def chain(x: Tensor) -> Tensor:
        for _ in range(12):
            x = (x * 2.0 + 1.0).contiguous()
        return x

    data = [np.arange(16, dtype=np.float32) + i for i in range(4)]
    for x in data[:2]:
        chain(Tensor(x)).realize()  # plain call, capture
    for x in data[2:]:
        Device["CPU"].synchronize()  # (the plain call's list, one C run, may still be queued on a busy machine)
        runs, launches = engine.native_runs, engine.native_run_launches
        out = chain(Tensor(x)).numpy()
        assert (engine.native_runs - runs, engine.native_run_launches - launches) == (1, 12)
        expected = x.astype(np.float64)
        for _ in range(12):
            expected = expected * 2 + 1
        np.testing.assert_array_equal(out, expected.astype(np.float32))


COUNT_CALLS = """
void count_calls(float* restrict out, int core_id) { out[core_id] += 1.0f; }
"""


def test_a_resubmitted_run_of_split_launches_runs_a_launch_whose_size_changed_at_its_new_size(kit: Any) -> None:
    """Two launches (8 calls, then n calls) resolved from one recorded queue and submitted as a replay does: the
    engine keeps the run it found with the first launch, and must not reuse it once the second launch's size (a new
    resolved command) changed."""
    dev, engine = Device["CPU"], _native_engine()
    prg = kit.load_program(dev, "count_calls", COUNT_CALLS)
    fixed, sized = (Buffer("CPU", 8, kit.float32).allocate().copyin(np.zeros(8, np.float32).data) for _ in range(2))
    dev.synchronize()
    n = UOp.variable("n", 1, 8)
    launches = dev.hw_compute_queue_t()
    launches.exec(prg, prg.fill_kernargs((fixed.raw,)), (8, 1, 1), (1, 1, 1))
    launches.exec(prg, prg.fill_kernargs((sized.raw,)), (n, 1, 1), (1, 1, 1))
    expected = np.zeros(8, np.float32)
    for value in (2, 2, 6, 3):
        runs = engine.native_runs
        replay = dev.hw_compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
        replay.commands.extend(launches.resolve({"n": value}))
        replay.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
        dev.synchronize()
        expected[:value] += 1
        assert engine.native_runs - runs == 1
        np.testing.assert_array_equal(sized.numpy().view(np.float32), expected)
    np.testing.assert_array_equal(fixed.numpy().view(np.float32), np.full(8, 4, np.float32))


@pytest.mark.parametrize("bufs, vals", [(0, 0), (1, 0), (2, 3), (MAX_BUFS, MAX_VALS), (MAX_BUFS + 1, 1)])
def test_the_c_call_passes_every_buffer_and_value_in_order(kit: Any, bufs: int, vals: int) -> None:
    """out[core_id] = core_id + sum of k * value k + sum of buffer k's first float, for each argument count the
    call switch covers and one past it (a kernel it does not cover is called through ctypes)."""
    params = [f"float* restrict b{i}" for i in range(bufs)] + [f"int v{i}" for i in range(vals)] + ["int core_id"]
    terms = ["(float)core_id"] + [f"{k + 1} * (float)v{k}" for k in range(vals)]
    terms += [f"b{k}[0]" for k in range(1, bufs)]
    body = f"b0[1 + core_id] = {' + '.join(terms)};" if bufs else ""
    source = f"void args_{bufs}_{vals}({', '.join(params)}) {{ {body} }}"
    dev = Device["CPU"]
    prg = kit.load_program(dev, f"args_{bufs}_{vals}", source)
    inputs = [kit.float_buffer("CPU", [float(10 * k + 3)] * 5) for k in range(bufs)]
    values = tuple(range(5, 5 + vals))
    _native_engine()
    prg(*(b.raw for b in inputs), global_size=(4, 1, 1), vals=values, wait=True)
    if bufs:
        expected = [c + sum((k + 1) * v for k, v in enumerate(values)) + sum(10 * k + 3 for k in range(1, bufs))
                    for c in range(4)]  # fmt: skip
        assert inputs[0].numpy().tolist()[1:] == expected


@linux_only
def test_split_launches_in_c_call_every_core_id_once_on_the_pool_threads(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_workers, "SERIAL_BELOW_S", 0.0)  # keep the launches split, whatever their speed
    dev, _ = Device["CPU"], _native_engine()
    prg = kit.load_program(dev, "thread_id", THREAD_ID)
    out = Buffer("CPU", 64, dtypes.int64).allocate()
    for _ in range(20):
        out.copyin(np.zeros(64, np.int64).data)
        prg(out.raw, global_size=(64, 1, 1), wait=True)
        ids = out.numpy()
        pool_threads = {t.native_id for t in threading.enumerate()
                        if t.name.startswith(f"{dev.cores.name}-") or t is threading.main_thread()}  # fmt: skip
        assert set(ids.tolist()) <= pool_threads  # every call made, by the launching thread or a core thread


@linux_only
def test_a_kernel_awaited_by_the_host_is_called_from_c_on_the_host_thread(kit: Any, sleepy_engine: Any) -> None:
    dev = Device["CPU"]
    _native_engine()
    prg = kit.load_program(dev, "thread_id", THREAD_ID)
    out = Buffer("CPU", 2, dtypes.int64).allocate()
    prg(out.raw, global_size=(1, 1, 1))
    dev.synchronize(timeout=DEADLINE_MS)
    assert out.numpy()[0] == threading.get_native_id()


@linux_only
def test_ctrl_c_during_a_c_call_by_the_host_is_held_until_the_launch_completed(
    kit: Any, sleepy_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with calls through ctypes: Ctrl-C pressed during calls made from C by the waiting host thread (the engine
    thread never wakes here, so the host runs the list) is raised once, after every call of the launch ran; the
    rest of the list (its signal) runs at the next wait."""
    monkeypatch.setattr(cpu_workers, "SERIAL_BELOW_S", 0.0)  # keep the launch split, whatever its speed
    dev, _ = Device["CPU"], _native_engine()
    prg = kit.load_program(dev, "press_ctrl_c", PRESS_CTRL_C)
    out = Buffer("CPU", 8, kit.float32).allocate().copyin(memoryview(bytes(8 * 4)))
    main_called = Buffer("CPU", 1, kit.int32).allocate().copyin(memoryview(bytes(4)))
    prg(out.raw, main_called.raw, global_size=(8, 1, 1))
    with pytest.raises(KeyboardInterrupt):
        dev.synchronize(timeout=DEADLINE_MS)
    assert kit.read_floats(out.raw, 8) == [1.0] * 8  # (read without waiting: the launch had completed)
    dev.synchronize(timeout=DEADLINE_MS)
    assert dev.error_state is None


def test_a_core_thread_spins_for_the_next_launch_of_a_list_instead_of_sleeping(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten split launches in one list, each after a memory barrier (consecutive launches would be one C run, see
    the test above): the core thread sleeps on its inbox at most once (for the first it takes) and takes the others
    while spinning; every posted launch is taken from the inbox exactly once. (The spin ends with the list, so the
    long CORE_SPIN_NS below does not keep the thread busy after it.)"""
    from tg.codegen.flags import Context

    monkeypatch.setattr(cpu_workers, "SERIAL_BELOW_S", 0.0)  # keep the launches split, whatever their speed
    monkeypatch.setattr(cpu_workers, "CORE_SPIN_NS", 10**10)  # long enough for a loaded test machine
    with Context(CPU_COUNT=2):
        dev = Device["CPU:62"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = dev.allocator.alloc(4 * 8)
    prg(out, global_size=(8, 1, 1), wait=True)  # loads the call library, starts the core thread
    pool = dev.cores
    deadline = time.monotonic() + DEADLINE_S
    while pool.wakeups + pool.spin_pickups < 1 and time.monotonic() < deadline:
        time.sleep(0.001)  # the core thread took that first launch (or it would count below)
    wakeups, pickups = pool.wakeups, pool.spin_pickups
    queue = dev.hw_compute_queue_t()
    for _ in range(10):
        queue.memory_barrier().exec(prg, prg.fill_kernargs((out,)), (8, 1, 1), (1, 1, 1))
    queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize()
    while pool.wakeups + pool.spin_pickups < wakeups + pickups + 10 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert pool.wakeups + pool.spin_pickups == wakeups + pickups + 10
    assert pool.wakeups - wakeups <= 1


# call `core_id` marks out[1 + core_id] once both calls started; a core thread's call (not the main thread's) then
# sleeps 30 ms, so a launching main thread is left waiting for it
SLOW_ON_A_CORE_THREAD = """
#include <unistd.h>
#include <sys/syscall.h>
void slow_on_a_core_thread(long* restrict out, int core_id) {
  __atomic_add_fetch(&out[0], 1, __ATOMIC_ACQ_REL);
  for (int i = 0; i < 1000000 && __atomic_load_n(&out[0], __ATOMIC_ACQUIRE) < 2; i++) usleep(1);
  if (syscall(SYS_gettid) != getpid()) usleep(30000);
  out[1 + core_id] = 1;
}
"""


@linux_only
def test_a_launching_thread_that_outwaits_its_spin_sleeps_until_the_last_call_returned(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No spin at all, and the pool's event already set by an earlier launch: the launching thread still returns
    only once the core thread's slow call returned."""
    monkeypatch.setattr(cpu_workers, "WAIT_SPIN_NS", 0)
    dev = Device["CPU"]
    native = _native_engine()._native_calls()
    prg = kit.load_program(dev, "slow_on_a_core_thread", SLOW_ON_A_CORE_THREAD)
    out = Buffer("CPU", 3, dtypes.int64).allocate()
    args = prg.fill_kernargs((out.raw,))
    record = native.record(prg.function, args.buf.va_addr, 1, 0)
    pool = CorePool(2, "test-pool-native")
    pool.native = native
    for _ in range(3):
        out.copyin(np.zeros(3, np.int64).data)
        pool.finished.set()  # a late set from an earlier launch
        pool.run_native(native, record, 2)
        assert out.numpy().tolist()[1:] == [1, 1]  # (read at once: both calls had returned)


def test_without_a_c_compiler_the_engine_calls_kernels_through_ctypes(kit: Any) -> None:
    """The call library is optional: a compiler that fails leaves None, and an engine without it runs launches
    (single and split) through ctypes with the same results."""
    from tg.codegen.compiler.base import CompileError
    from tg.codegen.flags import Context
    from tg.hcq.devices.cpu_calls import load_native_calls

    class NoCompiler:
        def compile(self, source: str) -> bytes:
            raise CompileError("cc: not found", source)

    assert load_native_calls(NoCompiler(), lambda lib: None) is None
    with Context(CPU_COUNT=2):
        dev = Device["CPU:63"]
    dev.compute_engine.load_native = lambda: load_native_calls(NoCompiler(), lambda lib: None)
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = Buffer("CPU:63", 8, kit.float32).allocate().copyin(memoryview(bytes(8 * 4)))
    prg(out.raw, global_size=(1, 1, 1), wait=True)
    prg(out.raw, global_size=(8, 1, 1), wait=True)
    assert dev.compute_engine.native is None
    assert out.numpy().tolist() == [1.0] * 8


def test_a_c_launch_whose_call_fails_raises_on_the_launching_thread_without_hanging() -> None:
    import types

    def take_calls(kernel: Any, total: int, counters: Any) -> int:
        raise ValueError("ctypes could not make the call")

    failing = types.SimpleNamespace(take_calls=take_calls)
    pool = CorePool(2, "test-pool-failing")
    with pytest.raises(ValueError, match="could not make the call"):
        pool.run_native(failing, None, 4)  # type: ignore[arg-type]


def test_a_replayed_list_runs_the_way_its_recent_runs_were_faster_and_tries_the_other_now_and_then() -> None:
    """RunChoice: each way (every core, this thread alone) is timed twice at first, then the faster by the median of
    its recent runs is taken, and every TRY_OTHER_EVERY runs the other is timed again; a way that became slower (a
    loaded machine) loses its place once its recent runs show it."""
    from tg.hcq.devices.cpu_workers import TRY_OTHER_EVERY, RunChoice

    seconds = {True: 1.0, False: 2.0}  # every core twice as fast as one
    choice, picks = RunChoice(), []
    for _ in range(4 * TRY_OTHER_EVERY):
        together = choice.together()
        picks.append(together)
        choice.record(together, seconds[together])
    assert sorted(picks[:4]) == [False, False, True, True]
    assert [i + 1 for i, together in enumerate(picks[4:], start=4) if not together] == [
        TRY_OTHER_EVERY * k for k in range(1, 5)
    ]  # the runs counted from one
    seconds[True] = 3.0  # now every core is slower than one
    later = []
    for _ in range(2 * TRY_OTHER_EVERY):
        together = choice.together()
        later.append(together)
        choice.record(together, seconds[together])
    assert later[-TRY_OTHER_EVERY + 1 :].count(True) <= 1
