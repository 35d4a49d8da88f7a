"""The kernels of one decode step's attention over a symbolic number of cached rows (issue 16, item 7): the
heuristics' opts decide whether they run as vectors split across cores or as scalar loops over the KV heads."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from tg.codegen.opt import KernelOptimizer, Opt, OptOps, hand_coded_optimizations  # noqa: E402
from tg.codegen.schedule.schedule import KernelCall, create_schedule  # noqa: E402
from tg.codegen.uop.args import AxisType  # noqa: E402
from tg.codegen.uop.ops import Ops, UOp  # noqa: E402
from tg.llm.model import attend  # noqa: E402
from tg.tensor import Tensor, Variable  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, MAX_CONTEXT = 9, 3, 64, 256  # SmolLM2-135M's attention


def decode_attention_kernels() -> list[UOp]:
    """The reduction kernels of one query row attending over the first `position + 1` rows of a KV cache."""
    position = Variable("start_pos", 0, MAX_CONTEXT - 1).bind(100)
    cache = Tensor.rand(MAX_CONTEXT, 2, KV_HEADS, HEAD_DIM).realize()
    q = Tensor.rand(1, HEADS, HEAD_DIM).realize()
    out = attend(q, cache[: position + 1], None, KV_HEADS)
    asts = [item.ast for item in create_schedule((out.uop,)).items if isinstance(item, KernelCall)]
    return [ast for ast in asts if any(u.op is Ops.REDUCE for u in ast.toposort())]


def symbolic(rng: UOp) -> bool:
    return rng.src[0].op is not Ops.CONST


def has_symbolic_output(ast: UOp) -> bool:
    return any(u.op is Ops.RANGE and symbolic(u) and u.arg.axis_type is AxisType.LOOP for u in ast.toposort())


def reduces_symbolic_rows(ast: UOp) -> bool:
    return any(u.op is Ops.RANGE and symbolic(u) and u.arg.axis_type is AxisType.REDUCE for u in ast.toposort())


def outputs(ast: UOp) -> int:
    """How many values the kernel stores (the product of its fixed output axes)."""
    return math.prod(u.src[0].arg for u in ast.toposort()
                     if u.op is Ops.RANGE and not symbolic(u) and u.arg.axis_type is AxisType.LOOP)  # fmt: skip


def optimized(ast: UOp) -> tuple[list[Opt], KernelOptimizer]:
    opts = hand_coded_optimizations(KernelOptimizer(ast))
    k = KernelOptimizer(ast)
    for opt in opts:
        k.apply_opt(opt)
    return opts, k


def test_the_scores_kernel_splits_the_cached_rows_across_cores_and_keeps_partial_sums() -> None:
    """q . k for every cached row: the rows (the symbolic output axis) go outermost, the loop the CPU renderer cuts
    across cores (3 KV heads in front left one of two cores idle a third of the time), and nothing upcasts or
    unrolls, so the head_dim reduction keeps the lowering's 16 partial sums (a vector) instead of one dependent
    chain of fmas per head."""
    scores = [ast for ast in decode_attention_kernels() if has_symbolic_output(ast)]
    assert scores, "no kernel with a symbolic output axis"  # the softmax's max and sum reduce over the rows instead
    for ast in scores:
        opts, k = optimized(ast)
        assert not any(opt.op in (OptOps.UPCAST, OptOps.UNROLL) for opt in opts), opts
        outputs = k.axes_of(AxisType.LOOP, AxisType.GLOBAL)
        assert symbolic(k.rngs[outputs[0]]), (opts, k.full_shape)


def test_the_weighted_values_kernel_upcasts_head_dim_by_a_vector() -> None:
    """The sum over cached rows of weight * value: its output (heads x head_dim) is contiguous along head_dim, which
    upcasts 16 wide (one AVX-512 or two AVX2 vectors); a 65-wide output (values with a column of ones for the softmax
    denominator) had no such divisor and ran scalar."""
    kernels = decode_attention_kernels()
    values = [ast for ast in kernels if reduces_symbolic_rows(ast) and outputs(ast) >= HEADS * HEAD_DIM]
    assert len(values) == 1
    opts, _ = optimized(values[0])
    assert any(opt.op is OptOps.UPCAST and opt.arg == 16 for opt in opts), opts
