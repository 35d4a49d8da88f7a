"""Upcast strided reductions: when a reduction walks memory with a large stride and the output's innermost loop
walks it with stride 1 (a sum over axis 0 of a row-major matrix), split that output loop into lanes.

    out[j] = sum_i x[i*M + j]    becomes    for j0: for i: for l in 0..L-1: acc[l] += x[i*M + j0*L + l]   (L up to 256)

The lane loop is innermost (see linearize.py), so each step reads L consecutive elements and vectorizes, instead
of one element per cache line.
"""

from __future__ import annotations

from tg.codegen.dtype import dtypes
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite

LANE_CHOICES = (256, 128, 64, 32, 16, 8, 4)


def _stride(index: UOp, along: UOp, ranges: list[UOp]) -> int | None:
    """How far `index` moves when `along` steps from 0 to 1 (other ranges at 0), or None if not a constant."""
    zero, one = UOp.const(0, dtypes.index), UOp.const(1, dtypes.index)
    at = [
        graph_rewrite(index.substitute({**{r: zero for r in ranges}, along: v}), simplify_indices) for v in (zero, one)
    ]
    if any(a.op is not Ops.CONST for a in at):
        return None
    return at[1].arg - at[0].arg


def _reads_across_reduction(ast: UOp, reduces: list[UOp], output: UOp) -> bool:
    """Whether some load steps by 1 along `output` but not along a range of the reduction around it."""
    ranges = [u for u in ast.toposort() if u.op is Ops.RANGE]
    for reduce in reduces:
        for load in reduce.src[0].toposort():
            if load.op is not Ops.LOAD or load.src[0].op is not Ops.INDEX:
                continue
            index = load.src[0].src[1]
            if _stride(index, output, ranges) != 1:
                continue
            if any(_stride(index, r, ranges) not in (0, 1) for r in reduce.src[1:]):
                return True
    return False


def upcast_strided_reductions(ast: UOp) -> UOp:
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    if not reduces or any(r is not s and s in r.src[0].toposort() for r in reduces for s in reduces):
        return ast  # nothing to do, or nested reductions (kept simple: left as they are)
    loops = sorted(
        (u for u in ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.LOOP),
        key=lambda r: r.arg.axis_id,
    )
    if not loops:
        return ast
    output = loops[-1]
    if output.src[0].op is not Ops.CONST:  # a symbolic size has no known divisor
        return ast
    size = output.src[0].arg
    lanes = next((n for n in LANE_CHOICES if size % n == 0), None)
    if lanes is None or not _reads_across_reduction(ast, reduces, output):
        return ast
    next_axis = max(u.arg.axis_id for u in ast.toposort() if u.op is Ops.RANGE) + 1
    lane = UOp.range(lanes, next_axis, AxisType.UPCAST)
    outer = UOp.range(size // lanes, output.arg.axis_id) if size > lanes else UOp.const(0, dtypes.index)
    return graph_rewrite(ast.substitute({output: outer * lanes + lane}), simplify_indices, name="upcast")
