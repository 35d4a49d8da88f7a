"""The tool API of the engine: compile and time one kernel AST on a device without tg.tensor."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from tg.codegen import KernelInfo, UOp, dtypes
from tg.codegen.opt import Opt, OptOps
from tg.codegen.pipeline import CodegenFlags, with_opts
from tg.hcq import Buffer
from tg.hcq.engine import scratch_buffers, time_kernel


def scaled_add(n: int) -> UOp:
    """out[i] = a[i] * 3 + b[i]"""
    out, a, b = (UOp.param(slot, dtypes.float32, n) for slot in range(3))
    i = UOp.range(n, 0)
    value = a.index(i).load() * 3.0 + b.index(i).load()
    return UOp.sink(out.index(i).store(value), arg=KernelInfo(f"scaled_add_{n}"))


def test_scratch_buffers_follow_the_params() -> None:
    buffers = scratch_buffers(scaled_add(64), "CPU")
    assert [(b.size, b.dtype) for b in buffers] == [(64, dtypes.float32)] * 3


def test_time_kernel_runs_the_program_on_the_given_buffers() -> None:
    a, b = np.arange(256, dtype=np.float32), np.full(256, 0.5, np.float32)
    buffers = [Buffer("CPU", 256, dtypes.float32).ensure_allocated() for _ in range(3)]
    buffers[1].copyin(memoryview(a.tobytes()))
    buffers[2].copyin(memoryview(b.tobytes()))
    ast = with_opts(scaled_add(256), (Opt(OptOps.UPCAST, 0, 4),))
    timing = time_kernel(ast, "CPU", CodegenFlags(), repeats=2, buffers=buffers)
    assert timing.seconds > 0
    assert timing.program.source.applied_opts == (Opt(OptOps.UPCAST, 0, 4),)
    np.testing.assert_array_equal(np.frombuffer(buffers[0].as_buffer(), np.float32), a * 3 + b)


def test_a_tool_times_kernels_without_importing_the_tensor() -> None:
    code = (
        "import sys\n"
        "from tg.codegen import KernelInfo, UOp, dtypes\n"
        "from tg.hcq.engine import time_kernel\n"
        "out, a = UOp.param(0, dtypes.float32, 16), UOp.param(1, dtypes.float32, 16)\n"
        "i = UOp.range(16, 0)\n"
        "ast = UOp.sink(out.index(i).store(a.index(i).load() + 1.0), arg=KernelInfo('inc'))\n"
        "timing = time_kernel(ast, 'CPU')\n"
        "print(timing.program.name, timing.seconds > 0, 'tg.tensor' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["inc", "True", "False"]


RESIDENT_AFTER_SCRATCH = """
import os
from tg.hcq.engine import scratch_buffers
from test_engine_timing import scaled_add

def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

before = resident_bytes()
buffers = scratch_buffers(scaled_add(1 << 22), "CPU")
print(resident_bytes() - before, sum(b.nbytes for b in buffers))
"""


def test_scratch_buffers_are_resident_memory_not_the_zero_page() -> None:
    """Regression: untouched scratch inputs read the kernel's shared zero page (always in cache), so BEAM timed
    memory-bound candidates several times too fast. Written once, their pages are the process's own: its resident
    memory grows by the buffers' size (measured in a fresh process, whose allocator has no freed blocks to reuse)."""
    import os

    script = RESIDENT_AFTER_SCRATCH
    env = {**os.environ, "PYTHONPATH": os.path.dirname(__file__) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    grown, total = map(int, done.stdout.split())
    assert grown >= 0.9 * total, (grown, total)
