"""Row reductions fused into their readers (issue 23, item 2): a softmax is one kernel whose max and sum of exp
are computed once per row, before the loop along the row opens (tg.codegen.schedule.realize.fuse_row_reduction,
tg.codegen.lower.linearize.Linearizer.hoist_reductions). Kernel counts, recompute counts and numerics against
numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen.dtype import AddrSpace
from tg.codegen.flags import Context
from tg.codegen.opt import KernelOptimizer, OptOps, hand_coded_optimizations
from tg.codegen.opt.heuristics import WIDE_MAX_LANES
from tg.codegen.pipeline import CodegenFlags, lower_kernel
from tg.codegen.schedule.realize import ROW_FUSION_MAX_ELEMENTS
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.tensor import Tensor

rng = np.random.default_rng(23)


def kernel_asts(*tensors: Tensor) -> list[UOp]:
    schedule = create_schedule(tuple(t.uop for t in tensors))
    return [item.ast for item in schedule.items if isinstance(item, KernelCall)]


def count(ast: UOp, op: Ops) -> int:
    return sum(node.op is op for node in ast.toposort())


def numpy_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def reduce_loops_inside_output_loops(ast: UOp) -> list[tuple[int, int]]:
    """For the lowered program of `ast`: (depth of open output loops, reduce loops opened there) for every reduce
    loop. A row reduction computed once per row opens its loops inside the row-index loops only, never inside
    the loop along the row."""
    linear = lower_kernel(ast, CodegenFlags())
    open_outputs: list[UOp] = []
    found = []
    for node in linear.src:
        if node.op is Ops.RANGE:
            if node.arg.axis_type in (AxisType.LOOP, AxisType.GLOBAL):
                open_outputs.append(node)
            elif node.arg.axis_type is AxisType.REDUCE:
                found.append((len(open_outputs), node.src[0].arg))
        elif node.op is Ops.END and node.src[0] in open_outputs:
            open_outputs.remove(node.src[0])
    return found


def test_softmax_is_one_kernel_with_its_reductions_computed_once_per_row() -> None:
    x = rng.standard_normal((6, 40, 96)).astype(np.float32)
    out = Tensor(x).softmax(-1)
    (kernel,) = kernel_asts(out)
    assert count(kernel, Ops.REDUCE) == 2  # max and sum of exp (the max node is shared by both passes)
    # the max's and the sum's loops open once the two row-index loops (6, 40) are open, not inside the row's loop
    loops = reduce_loops_inside_output_loops(kernel)
    assert loops and all(depth == 2 for depth, _ in loops), loops
    np.testing.assert_allclose(out.numpy(), numpy_softmax(x), rtol=3e-6, atol=1e-9)


def test_a_single_row_computes_its_reductions_before_the_loop_along_it() -> None:
    """One row: the output is one flat loop, and the reductions come before it opens."""
    x = rng.standard_normal((1, 300)).astype(np.float32) * 30
    out = Tensor(x).softmax(-1)
    (kernel,) = kernel_asts(out)
    loops = reduce_loops_inside_output_loops(kernel)
    assert loops and all(depth == 0 for depth, _ in loops), loops
    np.testing.assert_allclose(out.numpy(), numpy_softmax(x), rtol=3e-6, atol=1e-12)


def test_causal_attention_is_four_kernels_with_the_softmax_in_one() -> None:
    heads, tokens, width = 3, 32, 16
    q, k, v = (rng.standard_normal((1, heads, tokens, width)).astype(np.float32) for _ in range(3))
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True)
    asts = kernel_asts(out)
    (softmax,) = [ast for ast in asts if count(ast, Ops.EXP2)]
    assert count(softmax, Ops.REDUCE) == 2  # its max and sum of exp
    assert sum(count(ast, Ops.REDUCE) for ast in asts) == 4  # with the scores and the weighted sum of values
    # per score one comparison for the causal mask (not `<` or `==`) and a multiply by the row sum's reciprocal,
    # not a division (issue 23: the softmax pass is compute bound)
    assert count(softmax, Ops.OR) == 0 and count(softmax, Ops.CMPEQ) == 0
    assert count(softmax, Ops.FDIV) == 0 and count(softmax, Ops.RECIPROCAL) == 1
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(width)
    scores = np.where(np.tril(np.ones((tokens, tokens), bool)), scores, -np.inf)
    np.testing.assert_allclose(out.numpy(), numpy_softmax(scores) @ v, rtol=1e-5, atol=1e-6)


def test_log_softmax_and_layernorm_are_one_kernel_each() -> None:
    x = rng.standard_normal((8, 64)).astype(np.float32) * 5
    log_probabilities = Tensor(x).log_softmax(-1)
    assert len(kernel_asts(log_probabilities)) == 1
    np.testing.assert_allclose(log_probabilities.numpy(), np.log(numpy_softmax(x)), rtol=1e-5, atol=1e-5)
    normalized = Tensor(x).layernorm()
    assert len(kernel_asts(normalized)) == 1
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(normalized.numpy(), (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)


def test_a_contiguous_value_reads_its_row_reductions_in_its_own_kernel() -> None:
    x = rng.standard_normal((16, 64)).astype(np.float32)
    shifted = (Tensor(x) - Tensor(x).max(-1, keepdim=True)).exp().contiguous()
    (kernel,) = kernel_asts(shifted)
    assert count(kernel, Ops.REDUCE) == 1
    np.testing.assert_allclose(shifted.numpy(), np.exp(x - x.max(-1, keepdims=True)), rtol=2e-6)


def test_a_reduction_over_another_axis_keeps_its_own_kernel() -> None:
    """Fused, a max over axis 0 would vary along the inner loop and be computed again for every element."""
    x = rng.standard_normal((50, 30)).astype(np.float32)
    out = Tensor(x).softmax(0)
    asts = kernel_asts(out)
    assert len(asts) == 3  # max, sum of exp, normalization
    assert all(count(ast, Ops.REDUCE) <= 1 for ast in asts)
    np.testing.assert_allclose(out.numpy(), numpy_softmax(x, 0), rtol=3e-6, atol=1e-9)


def test_a_row_longer_than_the_limit_keeps_its_reductions_in_kernels_of_their_own() -> None:
    x = Tensor.rand(2, ROW_FUSION_MAX_ELEMENTS * 2).realize()
    assert len(kernel_asts(x.softmax(-1))) == 3
    assert len(kernel_asts(Tensor.rand(2, ROW_FUSION_MAX_ELEMENTS).realize().softmax(-1))) == 1


def test_a_row_reduction_in_an_elementwise_kernel_gets_no_opts_that_would_repeat_it() -> None:
    """x - max(x) has one reduction and no nesting: the matmul heuristics saw the max's loads as reused along the
    row and swapped the row's loop outward (the max then ran once per element)."""
    x = rng.standard_normal((64, 128)).astype(np.float32)
    out = Tensor(x) - Tensor(x).max(-1, keepdim=True)
    (kernel,) = kernel_asts(out)
    assert KernelOptimizer(kernel).has_row_reductions()
    assert hand_coded_optimizations(KernelOptimizer(kernel)) == []
    np.testing.assert_array_equal(out.numpy(), x - x.max(-1, keepdims=True))


def test_a_reduction_only_an_outer_loop_does_not_change_keeps_its_opts() -> None:
    """ones @ w: every row of the product is the same column sums, so the reduction does not depend on the row
    loop; it is still computed inside it, and keeps the matmul tiling (a training step's 128x3072 kernel of this
    kind ran 12x slower without it)."""
    w = Tensor.rand(64, 48).realize()
    (kernel,) = kernel_asts(Tensor.ones(16, 64) @ w)
    assert not KernelOptimizer(kernel).has_row_reductions()
    assert hand_coded_optimizations(KernelOptimizer(kernel))


def test_debug3_prints_each_fused_row_reduction(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor.rand(4, 128).realize()
    with Context(DEBUG=3):
        kernel_asts(x.softmax(-1))
    printed = [line for line in capsys.readouterr().out.splitlines() if "row" in line]
    assert printed == ["fusion: fused REDUCE_AXIS into its reader: once per row of 128"] * 2  # the max, the sum


def test_a_softmax_read_by_a_matmul_still_gets_its_own_kernel() -> None:
    """The weighted sum of values reads each probability once per output column: the softmax is computed once, in
    its kernel, and not inside the matmul's reduction."""
    probabilities_input = rng.standard_normal((16, 48)).astype(np.float32)
    values = rng.standard_normal((48, 24)).astype(np.float32)
    out = Tensor(probabilities_input).softmax(-1) @ Tensor(values)
    asts = kernel_asts(out)
    assert len(asts) == 2
    assert count(asts[-1], Ops.EXP2) == 0 and count(asts[-1], Ops.REDUCE) == 1  # the matmul reads the softmax
    np.testing.assert_allclose(out.numpy(), numpy_softmax(probabilities_input) @ values, rtol=1e-5, atol=1e-6)


def reduction_opts(tensor: Tensor) -> list[list]:
    """The hand-coded opts of each reduction kernel of `tensor`'s schedule, in order (AVX-512's register budget)."""
    asts = [ast for ast in kernel_asts(tensor) if count(ast, Ops.REDUCE)]
    return [hand_coded_optimizations(KernelOptimizer(ast), WIDE_MAX_LANES) for ast in asts]


def register_tile(opts: list) -> list[tuple[str, int]]:
    """The upcasts and unrolls of an opt list: the register tile, whatever the loop order around it."""
    return sorted((opt.op.name, opt.arg) for opt in opts if opt.op in (OptOps.UPCAST, OptOps.UNROLL))


def test_attention_matmuls_get_the_register_tiles_of_plain_batched_matmuls() -> None:
    """Issue 23, item 2: the scores and the weighted sum of values are tiled as the same matmuls of buffers are
    (the scores kernel keeps its key strips as an axis of its own, so its loop order may differ); the softmax
    between them (nested reductions) gets no opts."""
    q, k, v = (Tensor.rand(1, 12, 128, 64).realize() for _ in range(3))
    probabilities = Tensor.rand(1, 12, 128, 128).realize()
    (scores,), (values,) = reduction_opts(q @ k.transpose(-1, -2)), reduction_opts(probabilities @ v)
    assert register_tile(scores) == register_tile(values) == [("UNROLL", 4), ("UPCAST", 16), ("UPCAST", 16)]
    in_attention = reduction_opts(q.scaled_dot_product_attention(k, v, is_causal=True))
    assert [register_tile(opts) for opts in in_attention] == [register_tile(scores), [], register_tile(values)]


def test_a_softmax_computes_each_exponential_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23: the sum of exp stores the row's exponentials in a register array as long as the row, and the
    normalization reads them back instead of computing each software exp again (the softmax kernel was compute
    bound on its two exps per score)."""
    from tg.codegen.lower.linearize import ROW_VALUE_MIN_OPS, Linearizer

    heads, tokens, width = 2, 64, 16
    q, k, v = (rng.standard_normal((1, heads, tokens, width)).astype(np.float32) for _ in range(3))
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True)
    (softmax,) = [ast for ast in kernel_asts(out) if count(ast, Ops.EXP2)]
    flags = CodegenFlags(software_transcendentals=True)

    def alu_ops(linear: UOp) -> int:
        return sum(node.op in GroupOp.ALU for node in linear.src)

    def row_arrays(linear: UOp) -> int:
        registers = [n.dtype for n in linear.src if n.op is Ops.PARAM and n.dtype.addrspace is AddrSpace.REG]
        return sum(dtype.size == tokens for dtype in registers)

    kept = lower_kernel(softmax, flags)
    assert row_arrays(kept) == 1
    monkeypatch.setattr(Linearizer, "kept_row_value", lambda self, reduce: None)
    recomputed = lower_kernel(softmax, flags)
    assert row_arrays(recomputed) == 0
    assert alu_ops(recomputed) - alu_ops(kept) >= ROW_VALUE_MIN_OPS  # the exp's ops, once fewer
    monkeypatch.undo()
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(width)
    scores = np.where(np.tril(np.ones((tokens, tokens), bool)), scores, -np.inf)
    np.testing.assert_allclose(out.numpy(), numpy_softmax(scores) @ v, rtol=1e-5, atol=1e-6)
