"""The kernels of one decode step's attention over a symbolic number of cached rows (issue 16, item 7): keys in tiles
of KEY_TILE rows stored feature-major (see tg.llm.model.KEY_TILE), so that the scores' vector lanes run along cached
rows; the softmax's reductions over the tiles keep vector partial results; the weighted sum of the values loads
contiguous vectors along head_dim."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from tg.codegen.opt import KernelOptimizer, Opt, OptOps, hand_coded_optimizations  # noqa: E402
from tg.codegen.pipeline import CodegenFlags, kernel_to_program  # noqa: E402
from tg.codegen.schedule.schedule import KernelCall, create_schedule  # noqa: E402
from tg.codegen.uop.args import AxisType  # noqa: E402
from tg.codegen.uop.ops import Ops, UOp  # noqa: E402
from tg.hcq import Device  # noqa: E402
from tg.llm.model import KEY_TILE, attend, cache_keys, key_tiles  # noqa: E402
from tg.tensor import Tensor, Variable  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, MAX_CONTEXT = 9, 3, 64, 256  # SmolLM2-135M's attention


def decode_attention_kernels() -> list[UOp]:
    """The reduction kernels of one query row at position 100 attending over a tiled KV cache, as a decode step
    builds them (Transformer._step and _attention): the key tiles that hold rows 0..100, the rows past it masked."""
    position = Variable("start_pos", 0, MAX_CONTEXT - 1).bind(100)
    cache = Tensor.rand(2, KV_HEADS, MAX_CONTEXT, HEAD_DIM).realize()
    positions = Tensor(np.arange(MAX_CONTEXT, dtype=np.int32)).realize()
    tiles = key_tiles(position + 1)
    mask = positions.reshape(-1, KEY_TILE)[:tiles].reshape(1, -1, KEY_TILE) <= positions[position : position + 1]
    q = Tensor.rand(1, HEADS, HEAD_DIM).realize()
    out = attend(q, cache_keys(cache)[:, :tiles], cache[1, :, : position + 1], mask)
    asts = [item.ast for item in create_schedule((out.uop,)).items if isinstance(item, KernelCall)]
    return [ast for ast in asts if any(u.op is Ops.REDUCE for u in ast.toposort())]


def symbolic(rng: UOp) -> bool:
    return rng.src[0].op is not Ops.CONST


def has_symbolic_output(ast: UOp) -> bool:
    return any(u.op is Ops.RANGE and symbolic(u) and u.arg.axis_type is AxisType.LOOP for u in ast.toposort())


def reduces_symbolic_rows(ast: UOp) -> bool:
    return any(u.op is Ops.RANGE and symbolic(u) and u.arg.axis_type is AxisType.REDUCE for u in ast.toposort())


def optimized(ast: UOp) -> tuple[list[Opt], KernelOptimizer]:
    opts = hand_coded_optimizations(KernelOptimizer(ast))
    k = KernelOptimizer(ast)
    for opt in opts:
        k.apply_opt(opt)
    return opts, k


def source(ast: UOp) -> str:
    """The C source of the kernel with the heuristics' opts (what the CPU device compiles)."""
    return kernel_to_program(ast, Device["CPU"].renderer, CodegenFlags()).src


def test_the_scores_kernel_puts_its_lanes_along_the_cached_rows() -> None:
    """q . k per cached row: the KEY_TILE rows of a tile (an output axis along which the key tile is contiguous)
    upcast 16 wide, so each head_dim step is one multiply-add of a query scalar by 16 rows' keys, and head_dim stays
    a plain loop (no 16 partial sums per dot product, added in sequence at its end, as the row-major keys had). The
    tiles, the axis of symbolic size, go outermost: the loop the CPU renderer splits across cores."""
    (scores,) = [ast for ast in decode_attention_kernels() if has_symbolic_output(ast)]
    opts = hand_coded_optimizations(KernelOptimizer(scores))
    k = KernelOptimizer(scores)
    upcast_ids = []
    for opt in opts:
        if opt.op is OptOps.UPCAST and opt.arg == KEY_TILE:
            upcast_ids.append(k.rngs[opt.axis].arg.axis_id)
        k.apply_opt(opt)
    assert upcast_ids == [scores_lane_axis_id(scores)], opts
    outputs = k.axes_of(AxisType.LOOP, AxisType.GLOBAL)
    assert symbolic(k.rngs[outputs[0]]), (opts, k.full_shape)
    assert "acc0[16]" not in source(scores)  # head_dim is not cut into partial sums: the lanes are the rows


def scores_lane_axis_id(ast: UOp) -> int:
    """The axis id of the scores' output axis of size KEY_TILE (the rows within a tile)."""
    (axis,) = [u.arg.axis_id for u in ast.toposort()
               if u.op is Ops.RANGE and u.arg.axis_type is AxisType.LOOP and u.src[0].op is Ops.CONST
               and u.src[0].arg == KEY_TILE]  # fmt: skip
    return axis


def test_the_softmax_reductions_over_the_tiles_keep_vector_partial_results() -> None:
    """The max and the sum of the exponentials reduce (tiles, KEY_TILE): the tile's rows become 16 independent
    partial results (a vector) combined at the end, not one scalar chain over every cached row."""
    kernels = decode_attention_kernels()
    softmax = [ast for ast in kernels if reduces_symbolic_rows(ast) and not has_symbolic_output(ast)]
    reductions = [ast for ast in softmax if len([u for u in ast.toposort() if u.op is Ops.REDUCE]) == 1]
    small = [ast for ast in reductions if all(u.src[0].arg < HEAD_DIM for u in ast.toposort()
                                               if u.op is Ops.RANGE and not symbolic(u))]  # fmt: skip
    assert len(small) == 2  # the max and the denominator
    for ast in small:
        assert "acc0[16]" in source(ast), source(ast)


def test_the_weighted_values_kernel_loads_contiguous_vectors_along_head_dim() -> None:
    """The sum over cached rows of weight * value: its output (heads x head_dim, merged into one axis) upcasts 16
    along head_dim, and each lane's value address is the lane plus a base (no remainder by head_dim around the lane,
    which kept the C compiler from loading a vector: it ran scalar, 3.7x slower)."""
    kernels = [ast for ast in decode_attention_kernels() if reduces_symbolic_rows(ast) and not has_symbolic_output(ast)]
    wide = HEADS * HEAD_DIM  # the merged output axis
    (values,) = [ast for ast in kernels if any(u.op is Ops.RANGE and not symbolic(u) and u.src[0].arg >= wide
                                               for u in ast.toposort())]  # fmt: skip
    opts, _ = optimized(values)
    assert any(opt.op is OptOps.UPCAST and opt.arg == 16 for opt in opts), opts
    assert not re.search(rf"% {HEAD_DIM}ll", source(values)), source(values)
