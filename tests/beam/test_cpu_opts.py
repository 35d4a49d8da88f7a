"""The CPU's part of the BEAM space: BLOCK (k-blocking) and GROUP across cores, against numpy on prime sizes."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tg.codegen.dtype import dtypes, from_numpy
from tg.codegen.opt import KernelOptError, KernelOptimizer, Opt, OptOps
from tg.codegen.pipeline import CodegenFlags, kernel_to_program, with_opts
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.ops import UOp
from tg.hcq import Buffer, Device
from tg.tensor import Tensor


def first_kernel(t: Tensor) -> UOp:
    return next(item.ast for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall))


def run(ast: UOp, opts: tuple[Opt, ...], out_size: int, *inputs: np.ndarray) -> np.ndarray:
    """Kernel `ast` with exactly `opts` on the CPU device; the output starts as NaN so a missed element shows."""
    device = Device["CPU"]
    source = kernel_to_program(with_opts(ast, opts), device.renderer, CodegenFlags())
    program = device.runtime(source.name, device.compiler.compile(source.src))
    out = Buffer("CPU", out_size, from_numpy(np.dtype(np.float32))).ensure_allocated()
    out.copyin(np.full(out_size, np.nan, np.float32).tobytes())
    buffers = [out]
    for array in inputs:
        buf = Buffer("CPU", array.size, from_numpy(array.dtype)).ensure_allocated()
        buf.copyin(np.ascontiguousarray(array).tobytes())
        buffers.append(buf)
    program(*(b.raw for b in buffers), global_size=source.global_size, wait=True)
    return np.frombuffer(out.as_buffer(), np.float32).copy()


def matmul_case(n: int, k: int, m: int) -> tuple[UOp, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n * k * m)
    a, b = rng.standard_normal((n, k), np.float32), rng.standard_normal((k, m), np.float32)
    return first_kernel(Tensor.empty(n, k) @ Tensor.empty(k, m)), a, b


@pytest.mark.parametrize(
    "opts",
    [
        (Opt(OptOps.BLOCK, 0, 53),),
        (Opt(OptOps.BLOCK, 0, 2), Opt(OptOps.PADTO, 1, 8), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UNROLL, 0, 2)),
        (
            Opt(OptOps.PADTO, 2, 8),
            Opt(OptOps.BLOCK, 0, 8),
            Opt(OptOps.PADTO, 0, 4),
            Opt(OptOps.UPCAST, 0, 4),
            Opt(OptOps.UNROLL, 0, 4),
        ),
        (Opt(OptOps.SPLIT, 2, (2, AxisType.BLOCK_REDUCE)),),  # blocks of the low part: another fixed order
    ],
)
def test_block_matmul_on_prime_sizes_matches_numpy_and_the_unblocked_bits(opts: tuple[Opt, ...]) -> None:
    n, k, m = 37, 106, 53  # 106 = 2 * 53 (a block size must divide the reduction) or padded, as in the third case
    ast, a, b = matmul_case(n, k, m)
    x, y = (b, a) if first_param_is_b(ast, n, k) else (a, b)
    got = run(ast, opts, n * m, x, y).reshape(n, m)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    unblocked = tuple(o for o in opts if o.op is not OptOps.BLOCK and not is_block_split(o))
    if not any(is_block_split(o) for o in opts):  # blocks in order keep each element's order of additions
        assert np.array_equal(got, run(ast, unblocked, n * m, x, y).reshape(n, m))


def first_param_is_b(ast: UOp, n: int, k: int) -> bool:
    params = {u.arg.slot: u.dtype.size for u in ast.toposort() if u.op.name == "PARAM"}
    return params[1] != n * k


def is_block_split(opt: Opt) -> bool:
    return opt.op is OptOps.SPLIT and opt.arg[1] is AxisType.BLOCK_REDUCE


def test_block_is_refused_where_the_output_is_not_the_reduction() -> None:
    k = KernelOptimizer(first_kernel(Tensor.empty(12, 16).sum(axis=1) + 1))
    with pytest.raises(KernelOptError, match="BLOCK needs"):
        k.apply_opt(Opt(OptOps.BLOCK, 0, 4))
    k = KernelOptimizer(first_kernel(Tensor.empty(12, 16) @ Tensor.empty(16, 8)))
    k.apply_opt(Opt(OptOps.BLOCK, 0, 4))
    with pytest.raises(KernelOptError, match="at most one BLOCK_REDUCE"):
        k.apply_opt(Opt(OptOps.BLOCK, 0, 2))


def test_block_is_refused_when_the_kernel_reads_its_output_buffer() -> None:
    """out = out @ b in place: a block would read rows that an earlier block already overwrote."""
    out, b = UOp.param(0, dtypes.float32, 16), UOp.param(1, dtypes.float32, 16)
    i, j, r = UOp.range(4, 0), UOp.range(4, 1), UOp.range(4, 2, AxisType.REDUCE)
    value = (out.index(i * 4 + r).load() * b.index(r * 4 + j).load()).reduce(r)
    k = KernelOptimizer(UOp.sink(out.index(i * 4 + j).store(value), arg=KernelInfo("inplace")))
    with pytest.raises(KernelOptError, match="BLOCK needs"):
        k.apply_opt(Opt(OptOps.BLOCK, 0, 2))


def test_group_across_cores_is_legal_only_without_output_loops() -> None:
    k = KernelOptimizer(first_kernel(Tensor.empty(7, 64).sum(axis=1)), core_groups=True)
    with pytest.raises(KernelOptError, match="no output loop"):
        k.apply_opt(Opt(OptOps.GROUPTOP, 0, 4))
    k.apply_opt(Opt(OptOps.UPCAST, 0, 0))
    k.apply_opt(Opt(OptOps.GROUPTOP, 0, 4))
    with pytest.raises(KernelOptError, match="local memory or core groups"):
        KernelOptimizer(first_kernel(Tensor.empty(64).sum())).apply_opt(Opt(OptOps.GROUP, 0, 4))


GROUPED_SUM = """
import hashlib, sys
import numpy as np
sys.path.insert(0, {here!r})
from test_cpu_opts import first_kernel, run
from tg.codegen.opt import Opt, OptOps
from tg.tensor import Tensor
x = np.random.default_rng(5).standard_normal(7919 * 8, np.float32)
ast = first_kernel(Tensor.empty(x.size).sum())
got = run(ast, (Opt(OptOps.GROUPTOP, 0, 8),), 1, x)
print(hashlib.sha256(got.tobytes()).hexdigest(), repr(float(got[0])), repr(float(x.astype(np.float64).sum())))
"""


def test_group_across_cores_gives_the_same_bits_for_any_core_count() -> None:
    """8 shares combined in share order: 1, 2 or 3 core threads run the calls, the sum is the same."""
    script = GROUPED_SUM.format(here=os.path.dirname(__file__))
    answers = set()
    for cores in ("1", "2", "3"):
        env = {**os.environ, "CPU_COUNT": cores}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        digest, got, exact = done.stdout.split()
        assert float(got) == pytest.approx(float(exact), rel=1e-4, abs=1e-2)
        answers.add(digest)
    assert len(answers) == 1


def test_grouped_dot_products_match_numpy() -> None:
    rng = np.random.default_rng(11)
    x, y = rng.standard_normal((3, 1031 * 4), np.float32), rng.standard_normal((3, 1031 * 4), np.float32)
    ast = first_kernel((Tensor.empty(3, x.shape[1]) * Tensor.empty(3, x.shape[1])).sum(axis=1))
    got = run(ast, (Opt(OptOps.UPCAST, 0, 0), Opt(OptOps.GROUPTOP, 0, 4)), 3, x, y)
    np.testing.assert_allclose(got, (x * y).sum(1), rtol=1e-4, atol=1e-3)


def test_block_runs_on_the_python_emulator_too() -> None:
    """BLOCK is legal on every device: the emulator gives numpy's answer (its loops are the same program)."""
    ast, a, b = matmul_case(5, 12, 7)
    x, y = (b, a) if first_param_is_b(ast, 5, 12) else (a, b)
    device = Device["PYTHON"]
    source = kernel_to_program(with_opts(ast, (Opt(OptOps.BLOCK, 0, 4),)), device.renderer, CodegenFlags())
    program = device.runtime(source.name, device.compiler.compile(source.src))
    buffers = [Buffer("PYTHON", 35, dtypes.float32).ensure_allocated()]
    for array in (x, y):
        buf = Buffer("PYTHON", array.size, dtypes.float32).ensure_allocated()
        buf.copyin(np.ascontiguousarray(array).tobytes())
        buffers.append(buf)
    program(*(buf.raw for buf in buffers), global_size=source.global_size, wait=True)
    got = np.frombuffer(buffers[0].as_buffer(), np.float32).reshape(5, 7)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_a_search_rewarding_row_tile_groups_finds_them_and_the_kernel_matches_numpy() -> None:
    """SPLIT into a LOOP (row tiles in groups that share each strip of the right operand, the heuristics'
    share_strips) is in the search space: a search whose cost rewards it returns opts that use it, and the kernel
    with those opts computes numpy's product (on sizes where the groups leave no remainder to hide a miss)."""
    from tg.codegen.opt.search import Candidate, beam_search

    def is_row_group(opt: Opt) -> bool:
        return opt.op is OptOps.SPLIT and opt.arg[1] is AxisType.LOOP

    def upcast_lanes(ast: UOp) -> int:
        k = KernelOptimizer(ast)
        return math.prod(size for size, t in zip(k.full_shape, k.axis_types, strict=True) if t is AxisType.UPCAST)

    def cost(candidates: list[Candidate]) -> list[float]:
        return [(0.0 if any(map(is_row_group, c.opts)) else 1.0) + 1.0 / upcast_lanes(c.ast) for c in candidates]

    n, k, m = 128, 24, 48
    ast, a, b = matmul_case(n, k, m)
    opts, _ = beam_search(ast, width=2, cost=cost, core_groups=True)
    assert any(map(is_row_group, opts)) and any(o.op is OptOps.UPCAST for o in opts)
    x, y = (b, a) if first_param_is_b(ast, n, k) else (a, b)
    np.testing.assert_allclose(run(ast, opts, n * m, x, y).reshape(n, m), a @ b, rtol=1e-4, atol=1e-4)
