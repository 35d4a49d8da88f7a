"""Prefetch the next block of a streamed operand: a matmul fetches its next column strip while it works on this one.

A matmul over a packed right operand (tg.codegen.schedule.layout) loops over column strips outermost, and inside a
strip over row tiles, each reading the whole strip (k lines of 64 bytes) in its reduction. The first row tile reads
the strip from memory, the others from L2. The hardware prefetcher does not help the first one much: it stops at
every 4 KiB page, and a strip of a weight too big for L2 has been evicted since the last call. So the first row tile
waits on memory line by line.

This stage adds PREFETCHes of the *next* block inside the reduction loop, in one of two ways:
- the block loop outside a tile loop (strips outermost: GPT-2's projections over 128 tokens): one PREFETCH per step,
  for line `tile * steps + step` of the next block while that number is below its lines. The first few tiles spread
  the next block's lines over their reductions, and by the time the loop reaches that block it is in L2.
- the block loop innermost, its blocks reread by a loop outside it (row tiles outermost: the projections over 1,024
  tokens, where each row tile sweeps every strip, so a strip has left L2 since the last tile read it): the next block
  is read right after this reduction, so each step asks for `lines / steps` of its lines (up to MAX_LINES_PER_STEP).

Measured, gcc 12, 2 AVX-512 cores:
- In a C harness, with the right operand evicted before each call, 128x768x3072 took 2.75 -> 2.30 ms (hot: 2.14 ms
  either way). Prefetching every other step over all row tiles gave 2.40, all of the next strip in the first row tile
  2.55.
- The jitted GPT-2 block forward (its 28 MiB of weights arrive from memory), medians of loops of calls, three runs each
  way, the first way alone, then both: over 128 tokens 9.1 -> 7.75 -> 7.2 ms; over 1,024 tokens 72 -> 69 ms.
- Square matmuls, kernel time alone (medians of 25 calls, two runs each way): 2048^3 62-63 -> 54-56 ms (both operands
  get prefetches: the next row tile of the left one, the group's next strip); 1024^3 6.7-6.9 -> 6.5-6.8 ms; 4096^3
  517-522 -> 531-533 ms (a loss of 2%: its row tiles are prefetched 4 lines a step on top of the strips' line);
  1024x768x3072 a wash. Leaving out the innermost-block prefetch where the blocks between two reads fit in L2 (2048^3's
  groups of strips) was noise or a loss (51.1-53.5 ms against 50.4-51.9).
- The attention products over 1,024 tokens (12 heads, each a 256 KiB slice of packed keys, of 3 MiB in all): one core,
  C harness, the block of 512 rows' scores 5.61-5.66 ms with the prefetches the whole buffer's size asked for, 5.29-5.35
  without (the slices stay in L2); on both cores, in turns in one process, the four products within noise (8.67-8.80
  against 8.71-8.75 ms in all). So a batch whose slice fits in L2 gets none.

The pattern, on the linear program (before the loop is split across cores):
- a LOAD of a global buffer inside a reduction loop R;
- among the output loops around R, the innermost one the address moves along is the block loop O, at most one output
  loop I lies inside it, and some output loop (I, or one outside O) does not move the address: it rereads the blocks;
- for a fixed O, R and the register loops inside it sweep one dense block of the buffer (a strip, a row tile), and O
  steps from block to block by a constant stride;
- the buffer is bigger than a core's L2 (a smaller one stays cached between calls, where a prefetch only costs), and
  so is its slice for one batch, where the output loops run batches one after another (`batch_count`: an attention
  product's heads, each over its own slice of every operand).
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
# a block longer than this many lines per reduction step is left to the hardware: more prefetches than loads per step
MAX_LINES_PER_STEP = 4


def prefetch_next_blocks(linear: UOp, l2_bytes: int) -> UOp:
    """`linear` with PREFETCHes of the next block inside each reduction loop that streams one (see the module doc).
    Buffers whose slice for one batch (see `batch_count`) fits in `l2_bytes` are left alone."""
    program = list(linear.src)
    inserts: dict[UOp, list[UOp]] = {}  # reduction RANGE -> the PREFETCHes to place right after it
    for reduction, loads in _global_loads_by_reduction(program).items():
        batches = batch_count(reduction, loads)
        prefetched: set[UOp] = set()  # buffers: an unrolled load repeats, its block is one
        for index, open_loops in loads:
            if index.src[0] in prefetched:
                continue
            found = next_block_prefetches(index, open_loops, reduction, l2_bytes, batches)
            if found:
                prefetched.add(index.src[0])
                inserts.setdefault(reduction, []).extend(found)
    if not inserts:
        return linear
    return linear.replace(src=tuple(_with_inserts(program, inserts)))


def _global_loads_by_reduction(program: list[UOp]) -> dict[UOp, list[tuple[UOp, list[UOp]]]]:
    """For each innermost reduction loop, the INDEX of every load of a global buffer inside it, with the loops open
    there (outermost first), in program order."""
    found: dict[UOp, list[tuple[UOp, list[UOp]]]] = {}
    open_loops: list[UOp] = []
    for node in program:
        if node.op is Ops.RANGE:
            open_loops.append(node)
        elif node.op is Ops.END and node.src[0].op is Ops.RANGE:
            open_loops.pop()
        elif node.op is Ops.LOAD and node.src[0].op is Ops.INDEX and _global_buffer(node.src[0].src[0]):
            reduction = _innermost_reduction(open_loops)
            if reduction is not None:
                found.setdefault(reduction, []).append((node.src[0], list(open_loops)))
    return found


def batch_count(reduction: UOp, loads: list[tuple[UOp, list[UOp]]]) -> int:
    """How many independent problems the output loops around `reduction` run one after another: the product of the
    trip counts of the batch loops, the output loops that every one of its (two or more) loads moves along (a batched
    matmul's heads). Each batch reads its own slice of every buffer, so a slice that fits in L2 stays there while its
    batch rereads it, however big the whole buffer is."""
    if len(loads) < 2:
        return 1
    common: set[UOp] | None = None
    for index, open_loops in loads:
        ranges = {u for u in index.src[1].toposort() if u.op is Ops.RANGE}
        outputs = open_loops[: open_loops.index(reduction)]
        moving = {r for r in outputs if r.arg.axis_type in OUTPUT_AXES and r in ranges}
        common = moving if common is None else common & moving
    return math.prod(int(r.src[0].arg) for r in common or () if r.src[0].op is Ops.CONST)


def next_block_prefetches(index: UOp, open_loops: list[UOp], reduction: UOp, l2_bytes: int, batches: int) -> list[UOp]:
    """The PREFETCHes for the load at `index` inside `open_loops` (`reduction` the innermost reduction among them),
    none when it does not stream blocks that some loop rereads, or when the buffer's slice for one of `batches`
    batches fits in `l2_bytes`."""
    buffer, address = index.src[0], index.src[1]
    if len(index.src) > 2 or reduction.src[0].op is not Ops.CONST:
        return []
    if buffer.ptrdtype.size * buffer.ptrdtype.base.itemsize <= l2_bytes * batches:
        return []
    at = open_loops.index(reduction)
    outputs = [r for r in open_loops[:at] if r.arg.axis_type in OUTPUT_AXES]
    ranges = [u for u in address.toposort() if u.op is Ops.RANGE]
    moving = [r for r in outputs if r in ranges]
    rereading = [r for r in outputs if r not in ranges and r.src[0].op is Ops.CONST and r.src[0].arg > 1]
    if not moving or not rereading:
        return []
    block_loop = moving[-1]
    inside = outputs[outputs.index(block_loop) + 1 :]  # output loops inside the block loop (the address stays put)
    if len(inside) > 1:
        return []
    block_stride = stride_along(address, block_loop, ranges)
    inner = [r for r in open_loops[at:] if r in ranges]  # the reduction and the register loops inside it
    if not block_stride or block_stride < 0 or not _sweeps_dense_block(address, inner, ranges, block_stride):
        return []
    itemsize = buffer.ptrdtype.base.itemsize
    lines = math.ceil(block_stride * itemsize / LINE_BYTES)
    steps = int(reduction.src[0].arg)
    if inside:  # the tile loop inside: one line per step, spread over its first iterations
        tiles = inside[0].src[0]
        if tiles.op is not Ops.CONST or lines > steps * tiles.arg:
            return []
        numbers = [inside[0] * steps + reduction]
    else:  # the next block comes right after this one: all of its lines within this reduction
        per_step = math.ceil(lines / steps)
        if per_step > MAX_LINES_PER_STEP:
            return []
        numbers = [reduction * per_step + k for k in range(per_step)]
    start = address.substitute({r: UOp.const(0, dtypes.index) for r in inner})  # the block's first element
    next_start = start.substitute({block_loop: block_loop + 1})
    has_next = block_loop + 1 < block_loop.src[0]
    return [
        _prefetch(buffer, next_start + line * max(1, LINE_BYTES // itemsize), (line < lines) & has_next)
        for line in numbers
    ]


def _prefetch(buffer: UOp, position: UOp, gate: UOp) -> UOp:
    position, gate = (graph_rewrite(x, simplify_indices, name="prefetch address") for x in (position, gate))
    return UOp(Ops.PREFETCH, dtypes.void, (buffer.index(position, gate),))


def _global_buffer(buffer: UOp) -> bool:
    dtype = buffer.dtype
    return buffer.op is Ops.PARAM and isinstance(dtype, PtrDType) and dtype.addrspace is AddrSpace.GLOBAL


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
    scopes: list[set[UOp]] = [set()]  # the nodes computed in each open loop, outermost first
    for node in program:
        out.append(node)
        if node.op is Ops.END and node.src[0].op is Ops.RANGE:
            scopes.pop()
        elif node.op is not Ops.RANGE:
            scopes[-1].add(node)
        else:
            scopes.append({node})
            visible = set().union(*scopes)
            for needed in (u for prefetch in inserts.get(node, ()) for u in prefetch.toposort()):
                if needed not in visible:
                    assert needed.op is not Ops.RANGE, "a prefetch reads a loop that is not open"
                    out.append(needed)
                    visible.add(needed)
                    scopes[-1].add(needed)
    return out
