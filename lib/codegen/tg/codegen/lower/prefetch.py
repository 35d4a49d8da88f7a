"""Prefetch the next block of a streamed operand: a matmul fetches its next column strip while it works on this one.

A matmul over a packed right operand (tg.codegen.schedule.layout) loops over column strips outermost, and inside a
strip over row tiles, each reading the whole strip (k lines of 64 bytes) in its reduction. The first row tile reads
the strip from memory, the others from L2. The hardware prefetcher does not help the first one much: it stops at
every 4 KiB page, and a strip of a weight too big for L2 has been evicted since the last call. So the first row tile
waits on memory line by line.

This stage adds, inside the reduction loop, one PREFETCH per step for a line of the *next* strip: line
`row_tile * steps + step` of it, while that number is below the strip's lines. The first few row tiles thus ask for
the next strip's lines spread over their reductions, and by the time the loop reaches that strip, it is in L2.

GPT-2's projections over 128 tokens (128x768 @ 768x2304, 768x768, 768x3072, 3072x768; 28 MiB of weights, so each
arrives from memory), gcc 12, 2 AVX-512 cores, in a C harness with its right operand evicted before each call:
128x768x3072 2.75 -> 2.30 ms (hot: 2.14 ms either way); prefetching every other step over all row tiles gave 2.40, all
of the next strip in the first row tile 2.55. The whole jitted GPT-2 block forward over 128 tokens took 9.1 -> 7.75
ms (medians of 100 calls, three runs each way).

The pattern, on the linear program (before the loop is split across cores):
- a LOAD of a global buffer inside a reduction loop R;
- the output loops around R end in (..., O, I): the address moves along O (the strip) but not along I (the row
  tile), so I's iterations reread the same block;
- for a fixed O, R and the register loops inside it sweep one dense block of the buffer (a strip), and O steps
  from block to block by a constant stride;
- the buffer is bigger than a core's L2 (a smaller one stays cached between calls, where a prefetch only costs).
"""

from __future__ import annotations

import math

from tg.codegen.dtype import AddrSpace, PtrDType, dtypes
from tg.codegen.opt.heuristics import stride_along
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite

LINE_BYTES = 64  # a cache line on every CPU the C renderer targets (x86-64; most ARM cores)
OUTPUT_AXES = (AxisType.LOOP, AxisType.GLOBAL)


def prefetch_next_blocks(linear: UOp, l2_bytes: int) -> UOp:
    """`linear` with a PREFETCH of the next block inside each reduction loop that streams one (see the module doc).
    Buffers of at most `l2_bytes` are left alone."""
    program = list(linear.src)
    inserts: dict[UOp, list[UOp]] = {}  # reduction RANGE -> the nodes to place right after it
    open_loops: list[UOp] = []
    for node in program:
        if node.op is Ops.RANGE:
            open_loops.append(node)
        elif node.op is Ops.END and node.src[0].op is Ops.RANGE:
            open_loops.pop()
        elif node.op is Ops.LOAD and node.src[0].op is Ops.INDEX:
            prefetch = next_block_prefetch(node.src[0], open_loops, l2_bytes)
            if prefetch is not None:
                reduction = _innermost_reduction(open_loops)
                assert reduction is not None
                inserts.setdefault(reduction, [])
                if not any(p.src[0].src[0] is prefetch.src[0].src[0] for p in inserts[reduction]):
                    inserts[reduction].append(prefetch)  # one block per buffer (an unrolled load repeats)
    if not inserts:
        return linear
    return linear.replace(src=tuple(_with_inserts(program, inserts)))


def next_block_prefetch(index: UOp, open_loops: list[UOp], l2_bytes: int) -> UOp | None:
    """The PREFETCH for the load at `index` (inside `open_loops`), or None when it does not stream blocks."""
    buffer, address = index.src[0], index.src[1]
    if len(index.src) > 2 or not _big_global_buffer(buffer, l2_bytes):
        return None
    reduction = _innermost_reduction(open_loops)
    if reduction is None or reduction.src[0].op is not Ops.CONST:
        return None
    at = open_loops.index(reduction)
    outputs = [r for r in open_loops[:at] if r.arg.axis_type in OUTPUT_AXES]
    if len(outputs) < 2:
        return None
    block_loop, tile_loop = outputs[-2], outputs[-1]
    ranges = [u for u in address.toposort() if u.op is Ops.RANGE]
    if block_loop not in ranges or tile_loop in ranges or tile_loop.src[0].op is not Ops.CONST:
        return None
    block_stride = stride_along(address, block_loop, ranges)
    inner = [r for r in open_loops[at:] if r in ranges]  # the reduction and the register loops inside it
    if not block_stride or block_stride < 0 or not _sweeps_dense_block(address, inner, ranges, block_stride):
        return None
    itemsize = buffer.ptrdtype.base.itemsize
    lines = math.ceil(block_stride * itemsize / LINE_BYTES)
    steps, tiles = int(reduction.src[0].arg), int(tile_loop.src[0].arg)
    if lines > steps * tiles:  # one line per step would not reach the end of the block
        return None
    zero = UOp.const(0, dtypes.index)
    start = address.substitute({r: zero for r in inner})  # the block's first element
    line = tile_loop * steps + reduction
    position = start.substitute({block_loop: block_loop + 1}) + line * max(1, LINE_BYTES // itemsize)
    gate = (line < lines) & (block_loop + 1 < block_loop.src[0])
    position, gate = (graph_rewrite(x, simplify_indices, name="prefetch address") for x in (position, gate))
    return UOp(Ops.PREFETCH, dtypes.void, (buffer.index(position, gate),))


def _big_global_buffer(buffer: UOp, l2_bytes: int) -> bool:
    dtype = buffer.dtype
    if buffer.op is not Ops.PARAM or not isinstance(dtype, PtrDType) or dtype.addrspace is not AddrSpace.GLOBAL:
        return False
    return dtype.size * dtype.base.itemsize > l2_bytes


def _innermost_reduction(open_loops: list[UOp]) -> UOp | None:
    return next((r for r in reversed(open_loops) if r.arg.axis_type is AxisType.REDUCE), None)


def _sweeps_dense_block(address: UOp, inner: list[UOp], ranges: list[UOp], block: int) -> bool:
    """Whether `inner` (constant trip counts) move `address` over exactly the `block` elements from its start: their
    strides, smallest first, are 1, then each the previous one's stride times its trip count, up to `block`."""
    steps = []
    for rng in inner:
        stride = stride_along(address, rng, ranges)
        if not stride or rng.src[0].op is not Ops.CONST:
            return False
        steps.append((stride, int(rng.src[0].arg)))
    covered = 1
    for stride, trips in sorted(steps):
        if stride != covered:
            return False
        covered *= trips
    return covered == block


def _with_inserts(program: list[UOp], inserts: dict[UOp, list[UOp]]) -> list[UOp]:
    """`program` with each reduction's prefetches placed right after its RANGE, preceded by the nodes they need that
    are not already computed in a loop still open there (a value computed in a closed loop is out of scope)."""
    out: list[UOp] = []
    scopes: list[set[UOp]] = [set()]
    for node in program:
        out.append(node)
        if node.op is Ops.END and node.src[0].op is Ops.RANGE:
            scopes.pop()
            scopes[-1].add(node)
            continue
        scopes[-1].add(node)
        if node.op is not Ops.RANGE:
            continue
        scopes.append({node})
        visible = set().union(*scopes)
        for prefetch in inserts.get(node, ()):
            for needed in prefetch.toposort():
                if needed not in visible:
                    assert needed.op is not Ops.RANGE, "a prefetch reads a loop that is not open"
                    out.append(needed)
                    visible.add(needed)
                    scopes[-1].add(needed)
    return out
