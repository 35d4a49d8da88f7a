"""A schedule's consecutive kernels on one HCQ device are one command list (tg.hcq.engine.run.LaunchBatch)."""

from __future__ import annotations

import contextlib
import io

import numpy as np

from tg.codegen.flags import Context
from tg.hcq import Device
from tg.tensor import Tensor


def chain(x: Tensor, steps: int) -> Tensor:
    """`steps` kernels, each reading the whole output of the one before (x * 2 + 1, stored)."""
    for _ in range(steps):
        x = (x * 2.0 + 1.0).contiguous()
    return x


def expected_chain(x: np.ndarray, steps: int) -> np.ndarray:
    result = x.astype(np.float64)
    for _ in range(steps):
        result = result * 2 + 1
    return result.astype(np.float32)


def test_the_kernels_of_one_realize_are_one_command_list_the_engine_runs_in_one_c_call() -> None:
    engine = Device["CPU"].compute_engine
    if engine._native_calls() is None:
        raise AssertionError("the C call library did not load (a C compiler is installed here)")
    data = np.arange(4096, dtype=np.float32)  # (whole numbers: every step is exact in float32)
    chain(Tensor(data), 6).realize()  # compiled and scheduled once first
    Device["CPU"].synchronize()  # (and run: a list is counted when the engine runs it)
    runs, launches = engine.native_runs, engine.native_run_launches
    result = chain(Tensor(data), 6).numpy()
    # one list of six launches: a list per kernel would hold one launch each, which the engine runs one by one
    assert (engine.native_runs - runs, engine.native_run_launches - launches) == (1, 6)
    np.testing.assert_array_equal(result, expected_chain(data, 6))


def test_debug_2_still_launches_waits_for_and_times_each_kernel_on_its_own() -> None:
    engine = Device["CPU"].compute_engine
    data = np.arange(256, dtype=np.float32)
    chain(Tensor(data), 4).realize()
    Device["CPU"].synchronize()
    runs = engine.native_runs
    printed = io.StringIO()
    with Context(DEBUG=2), contextlib.redirect_stdout(printed):
        result = chain(Tensor(data), 4).numpy()
    assert len([line for line in printed.getvalue().splitlines() if line.startswith("*** CPU")]) == 4
    assert engine.native_runs == runs
    np.testing.assert_array_equal(result, expected_chain(data, 4))


def test_a_copy_to_another_device_reads_what_the_kernels_before_it_wrote() -> None:
    data = np.arange(1024, dtype=np.float32)
    moved = chain(chain(Tensor(data), 3).to("CPU:1"), 2)
    np.testing.assert_array_equal(moved.numpy(), expected_chain(data, 5))
