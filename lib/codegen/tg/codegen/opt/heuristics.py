"""Hand-coded heuristics: a good opt list for common kernel shapes, without search.

The one idea: a register holds a value for every lane of an upcast axis, so upcast the output axes that some
input does not move along (that input's value is loaded once and reused by every lane) and, when the output or an
input is contiguous along an axis, upcast that one widest (its lanes are one SIMD vector). Then unroll the reduction a
little, so each loaded value feeds several multiply-adds. This covers matmul and batched matmul (the two output
axes each reuse one operand), convolutions (output channels reuse the input, output pixels reuse the weights)
and broadcasting reductions. Plain reductions and elementwise kernels get no opts: the lowering already
vectorizes their innermost loop (and upcasts strided reductions, see tg.codegen.lower.upcast). Loads that only
decide a mask (a causal softmax's index comparisons) do not count as reuse, so a masked reduction gets the opts of
the unmasked one (`value_loads`).
A kernel whose outputs lie mostly along an axis of symbolic size (attention scores over the filled rows of a
row-major KV cache) only gets that axis moved outermost, where the CPU renderer splits it across cores
(`grows_along_symbolic_outputs`); a tiled kernel with such an axis gets it moved outermost too (tg-llm's scores over
key tiles: 3 KV heads in front split 2:1 over two cores).

No k-blocking (BLOCK): the heuristics never cut a reduction into blocks. Timed on top of their own matmul tile
(bench/bench_kblock.py: a 2-core AVX-512 Xeon, 2 MiB L2, load 1.3-2.7), blocks of 128 or 256 made matmul 1024 and
2048 0.38-0.67x as fast under gcc 12 and clang 19 (every block reads and writes the whole output again) and 512 a
toss-up; on the GPT-2 projections (128x768x2304, 128x768x3072, 128x3072x768) the sign follows the compiler: gcc
0.56-0.95x, clang 0.7-1.75x, where clang's unblocked tile runs at about half gcc's speed and a block wins back part
of that, never up to gcc's; on k = 65536 it was a toss-up (0.72-1.05x). k-blocking paid (2-4x, measured on branch
beamspace) while big matmuls swept a row-major right operand; tg.tensor.linalg now packs such an operand into
column strips, and a packed strip (k rows of 64 bytes) stays in L2 up to k = 32768, which is what a block would
buy. BEAM still tries BLOCK (tg.codegen.opt.search). What pays is the other half of cache blocking, the loop order:
from k = 512 on, while a group of 4 or more strips fits half of L2, strips in groups outermost and each row tile swept
over a group's strips (`block_strips`, a SWAP and a SPLIT into a LOOP); with longer reductions (k = 8192 with a 2 MiB
L2), row tiles in groups that share each strip (`share_strips`); with few row tiles (a projection over 128 tokens), the
strips outermost (`strips_outermost`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tg.codegen.dtype import dtypes
from tg.codegen.opt.optimizer import MAX_UNROLLED_BODY, KernelOptimizer, range_size
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite

CONTIGUOUS_UPCASTS = (16, 8, 4)  # two AVX2 vectors of float32 first
REUSE_UPCASTS = (16, 8, 4, 3, 2)
# next to a vector axis each lane is a register of accumulators: the largest divisor that fits (56 pixels: 14). Without
# one, odd lane counts were slower (12x77x77 attention scores: 11 lanes of 77 took 2x the time of none)
REGISTER_UPCASTS = tuple(range(16, 1, -1))
# accumulators per kernel: 16 ymm registers hold 128 floats. Filling them (a 8x16 matmul tile, so clang spills a
# few operands) measured about 1.5x faster than 4x16 on this Zen 3, at 1024 and 2048, timed alternately.
MAX_LANES = 128
# independent accumulators the register axes should give each vector lane: an FMA's result is ready 4 cycles later
# and 2 issue per cycle, so fewer than 8 chains leave the FMA units idle. A conv's weight gradient (its output
# channels the vector, the 3 columns of the window the registers) had 3 and ran at 72 GFLOP/s; a third upcast (4 of
# its input channels: 12 chains) took it from 17.9 to 9.6 ms (median of 3, 8x64x56x56, gcc 12, 2 AVX-512 cores).
MIN_REGISTER_LANES = 8
# with AVX-512 (32 zmm registers of 16 floats, and the compiler told to use them): a 16x16 matmul tile in 16 of
# them measured 1.5x (1024) and 1.7x (2048) faster than 8x16 in ymm on a Xeon, per core, under gcc 12 and clang 19.
WIDE_MAX_LANES = 256
UNROLLS = (4, 3, 2)
ROW_RUN_UPCASTS = (4, 2)  # runs of a source row a copy reads per step (upcast_row_runs): 4 beat 8 and 16
# a reduction whose body already has this many ALU ops is not unrolled: its loop overhead is noise next to the body,
# and copies of a big body only make the kernel slower to compile (a quantized matvec that decodes a whole 256-element
# K-quant block per step, tg.llm.lanes)
LARGE_BODY_OPS = 512
# ALU ops of a reduction body times the lanes the upcasts copy it into: a quantized matvec's body decodes a block
# (~200 ops for Q4_1's 32 elements); upcast 16 (its lanes) x 16 (row groups) gcc spilled and ran a 3072x576
# matvec 7x slower than with 16 x 4 (which 16384 allows). Matmuls and convolutions have bodies of a few ops.
MAX_UPCAST_BODY_OPS = 16384
# a kernel whose outputs are mostly along a symbolic axis (a decode step's attention scores: 9 query heads times the
# filled rows of the KV cache) gets no register tiling: each output's reduction (the head_dim of a dot product) keeps
# the lowering's 16 partial sums. SmolLM2-135M at position 1000, one core (CPU_COUNT=1), load 2.5-3: the scores
# kernels of the 30 blocks took 18.3 ms with the matmul tile (the 3 query heads that share a key upcast, unrolled by
# 4), 13.2 ms so; all 9 heads upcast (9 independent fma chains) 13.4 ms. Its symbolic axis goes outermost (split
# across cores). Prefill's scores (hundreds of query rows) keep the matmul tiling.
FEW_FIXED_OUTPUTS = 64
# A matmul's output loops run over row tiles, and inside each over the right operand's strips; each tile streams every
# strip (k lines of 64 bytes) from L3 or memory again. From k = 4096 on, where the strips cannot be blocked (below: not
# even 4 fit half of L2), the row tiles are cut into groups of ROW_TILES_PER_STRIP looped inside the strips
# (`share_strips`), so a strip read once serves the group. Kernel time,
# both operands packed, gcc 12, 2 AVX-512 cores, median of 5-21, load 4.5-5: 4096^3 3.84 -> 2.05 s (groups of 8:
# 2.19 s, 32: 1.98 s, with BLOCK 1024 too 1.92 s); but 2048^3 0.97x and 1024^3 0.84x (their strips are re-read from
# a cache the split gains nothing over), hence SHARED_STRIP_MIN_STEPS.
ROW_TILES_PER_STRIP = 16
SHARED_STRIP_MIN_STEPS = 4096
# Below that, the other loop order pays once the strips of a group fit the L2 cache (`block_strips`): strips in groups
# of GROUP_STRIPS (the largest that fits half of L2), the groups outermost (split across the cores), every row tile
# inside, and the group's strips innermost, so a row tile is read once per group and the group stays in L2 for every
# tile. BEAM=4 found it on a quiet machine for 1024^3 (hand-coded 11.70 -> 9.05 ms, bench/bench_beam.py). Kernel time,
# gcc 12, 2 AVX-512 cores, 2 MiB L2, load 0.4-1.1, median of 9-15 calls in each of 3-4 processes (one shape's time moved
# by up to 2x between processes, with where its pages landed): 1024^3 13.5-15.1 -> 9.3-15.4 ms (median 14.2 -> 11.6 ms),
# 512^3 1.7-3.1 -> 1.5-2.2 ms. Left alone, where it lost or did not pay: k = 3072 (1024x3072x768, a 3 MiB group: 30-33
# -> 34-45 ms), fewer than BLOCKED_MIN_ROW_TILES row tiles (a GPT-2 projection over 128 tokens), a group count the cores
# do not divide (2304 columns: 9 groups, one core idles for a ninth), more than BLOCKED_MAX_GROUPS_PER_CORE groups per
# core (each group reads the whole left operand again). 2048^3 gets groups of 8 strips (1 MiB; 16 made a 2 MiB group,
# 106-119 -> 115-117 ms): interleaved in one process with torch 2.13, gcc 12, load 0.5-1, medians of 7 turns in 4 runs,
# 163-199 -> 105-132 ms (tg / torch 1.73-1.88 -> 1.08-1.23; groups of 4: 118-125 ms). The 8 groups per core that takes,
# against 2 before: 1024x768x3072 in groups of 16 (6 per core) 1.04-1.06 -> 0.97-0.98 of torch's time (33.7 -> 29.6 ms).
# Groups of 4 strips, for the reductions where 8 no longer fit (k = 3072 and 4096 with a 2 MiB L2), and up to 32
# groups per core (4096^3 makes 64 groups of 4), measured once the next blocks were prefetched
# (tg.codegen.lower.prefetch): kernel alone, gcc 12, 2 AVX-512 cores, load 0.3-0.6, medians of 5-15 calls, turns
# alternated: 4096^3 444-457 -> 354-401 ms against the row tiles shared by 16 (groups of 8: 456-460 ms, row tiles
# shared by 32: 426-447 ms); 1024x3072x768 (GPT-2's down projection over 1,024 tokens) 15.9-16.9 -> 15.0-15.7 ms in
# 4 turns of 4. 1024x768x8192 in groups of 16 (16 per core) against its row tiles outermost: 36.1-37.2 against
# 36.3-37.6 ms, a wash.
GROUP_STRIPS = (16, 8, 4)
STRIP_LINE_BYTES = 64  # one step of a strip: STRIP float32 (tg.codegen.schedule.layout)
BLOCKED_MIN_STEPS = 512
BLOCKED_MIN_ROW_TILES = 32
BLOCKED_MAX_GROUPS_PER_CORE = 32


@dataclass(frozen=True)
class AxisReuse:
    """How the kernel's memory accesses move along one output axis."""

    axis: int
    size: int
    reused: frozenset[UOp]  # the INDEXes of loads that do not change along the axis (reused by every lane)
    contiguous: bool  # the stored address moves by exactly one element per step
    loaded_contiguously: bool  # some value load's address moves by exactly one element per step
    gate_moves: bool  # some load's gate (padding) changes along the axis: its lanes would not be one vector

    @property
    def loads_not_moving(self) -> int:
        return len(self.reused)


def stride_along(address: UOp, rng: UOp, ranges: list[UOp]) -> int | None:
    """How far `address` moves when `rng` steps 0 -> 1 with every other range at 0 (None: not a constant)."""
    zero, one = UOp.const(0, dtypes.index), UOp.const(1, dtypes.index)
    at = []
    for value in (zero, one):
        mapping = {r: zero for r in ranges}
        mapping[rng] = value
        at.append(graph_rewrite(address.substitute(mapping), simplify_indices))
    if any(a.op is not Ops.CONST for a in at):
        return None
    return at[1].arg - at[0].arg


def value_loads(reduces: list[UOp]) -> set[UOp]:
    """The INDEXes of loads whose values the reductions combine (a matmul's operands, the scores of a softmax), not
    those that only decide a mask (a causal softmax compares two index vectors; WHERE's condition, a comparison).
    Reusing a mask's load in registers saves nothing worth upcasting for, so the heuristics look past it: a
    reduction of an expression gets the opts of the same reduction of a plain buffer (issue 23)."""
    found: set[UOp] = set()
    seen: set[UOp] = set()
    stack = [reduce.src[0] for reduce in reduces]
    while stack:
        node = stack.pop()
        if node in seen or node.op in GroupOp.Comparison:
            continue
        seen.add(node)
        if node.op is Ops.LOAD and node.src[0].op is Ops.INDEX:
            found.add(node.src[0])
            continue
        stack.extend(node.src[1:] if node.op is Ops.WHERE else node.src)
    return found


def axis_reuse(k: KernelOptimizer) -> list[AxisReuse]:
    ranges = [u for u in k.ast.toposort() if u.op is Ops.RANGE]
    all_indexes = [u.src[0] for u in k.ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    gates = [index.src[2] for index in all_indexes if len(index.src) > 2]
    reduced = {u.src[0] for r in k.reduceops for u in r.src[0].toposort() if u.op is Ops.LOAD}
    values = value_loads(k.reduceops)
    indexes = [index for index in all_indexes if index in values or index not in reduced]  # masks' loads left out
    stores = [u.src[0].src[1] for u in k.ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
    found = []
    for axis in k.axes_of(AxisType.LOOP, AxisType.GLOBAL):
        rng = k.rngs[axis]
        reused = frozenset(index for index in indexes if stride_along(index.src[1], rng, ranges) == 0)
        contiguous = bool(stores) and all(stride_along(address, rng, ranges) == 1 for address in stores)
        loaded = any(stride_along(index.src[1], rng, ranges) == 1 for index in indexes if index in values)
        gate_moves = any(rng in gate.toposort() for gate in gates)
        found.append(AxisReuse(axis, range_size(rng), reused, contiguous, loaded, gate_moves))
    return found


def first_divisor(size: int, choices: tuple[int, ...]) -> int | None:
    return next((c for c in choices if size % c == 0 and c <= size), None)


def try_opt(k: KernelOptimizer, opt: Opt) -> bool:
    """Apply `opt` if it is legal; a heuristic proposes, the KernelOptimizer's checks decide."""
    try:
        k.apply_opt(opt)
    except KernelOptError:
        return False
    return True


def loop_over_strips(k: KernelOptimizer) -> None:
    """Matmul-like kernels: when the contiguous output axis (j) and the axis before it (i) each reuse a different
    operand, loop over j outside i. A strip of columns of the operand that moves along j (B[:, j0:j0+16]) is then
    read again and again while it is still in cache, instead of sweeping all of B for every few rows of A."""
    axes = axis_reuse(k)
    for before, after in zip(axes, axes[1:], strict=False):
        if after.contiguous and before.reused and after.reused and not before.reused & after.reused:
            try_opt(k, Opt(OptOps.SWAP, before.axis, after.axis))
            return


def unrolled_window(k: KernelOptimizer) -> int:
    """The iterations `unroll_reduction` copies into the body whole: the innermost reduce axis when it is small (a
    row of a 3x3 convolution window: 3), else 1 (a larger axis is unrolled by only a little)."""
    reduces = k.axes_of(AxisType.REDUCE)
    size = k.full_shape[reduces[-1]] if reduces else 1
    return size if size <= max(UNROLLS) else 1


def vector_lanes(axis: AxisReuse) -> int:
    """The lanes an upcast of `axis` would get as vectors: the widest of CONTIGUOUS_UPCASTS dividing it when the
    store or some value load is contiguous along it (0: its lanes are scattered in memory)."""
    if not (axis.contiguous or axis.loaded_contiguously):
        return 0
    return first_divisor(axis.size, CONTIGUOUS_UPCASTS) or 0


def upcast_reused_axes(k: KernelOptimizer, max_lanes: int) -> None:
    """Upcast up to two different output axes along which some load is reused. First the vector axis: the one whose
    lanes are contiguous in memory (the store's, else a load's) and make the widest vectors, the store's on a tie.
    A conv whose weights hold the output channels contiguously (tg.tensor.conv) gets them as 16 lanes, where its
    56-pixel output rows would only make 8. Then the axis that reuses a load the first does not, with as many
    lanes (each a register of accumulators) as the registers and the unrolled body (lanes times the unrolled window
    row) allow: next to a vector axis the largest divisor of its size, so 56 output pixels get 14 lanes. When that
    leaves fewer than MIN_REGISTER_LANES accumulators per vector lane (a conv's weight gradient: the 3 columns of the
    window), a third axis is upcast too."""
    lanes, register_lanes, done, vector_taken = 1, 1, set(), False
    covered: frozenset[UOp] = frozenset()  # loads the upcasts so far reuse
    window, body = unrolled_window(k), max(1, body_ops(k))
    for upcasts in range(3):
        if upcasts == 2 and register_lanes >= MIN_REGISTER_LANES:
            return
        candidates = [
            a for a in axis_reuse(k) if a.reused and not a.gate_moves and k.rngs[a.axis].arg.axis_id not in done
        ]
        # the vector axis first, then one that reuses a load the upcasts so far do not
        candidates.sort(key=lambda a: (0 if vector_taken else -vector_lanes(a), not a.contiguous,
                                       a.reused <= covered, -a.loads_not_moving, not a.loaded_contiguously,
                                       -a.size, a.axis))  # fmt: skip
        for candidate in candidates:
            # the store's contiguous axis takes vector widths only, as long as no vector axis is chosen (its lanes
            # would otherwise be a few scalar stores next to each other)
            vector = not vector_taken and (vector_lanes(candidate) > 0 or candidate.contiguous)
            choices = CONTIGUOUS_UPCASTS if vector else REGISTER_UPCASTS if vector_taken else REUSE_UPCASTS
            fitting = tuple(
                c
                for c in choices
                if lanes * c <= max_lanes
                and lanes * c * window <= MAX_UNROLLED_BODY
                and lanes * c * body <= MAX_UPCAST_BODY_OPS
            )
            amount = first_divisor(candidate.size, fitting)
            if amount is None:
                continue
            axis_id = k.rngs[candidate.axis].arg.axis_id
            if try_opt(k, Opt(OptOps.UPCAST, candidate.axis, amount)):
                lanes *= amount
                register_lanes *= 1 if vector else amount
                done.add(axis_id)
                vector_taken = vector_taken or vector
                covered = covered | candidate.reused
                break
        else:
            return


def body_ops(k: KernelOptimizer) -> int:
    """ALU ops in the bodies of the kernel's reductions (before any upcast or unroll copies them)."""
    return sum(1 for r in k.reduceops for u in r.src[0].toposort() if u.op in GroupOp.ALU)


def unroll_reduction(k: KernelOptimizer) -> None:
    """Unroll the innermost reduce axis: a small one (a row of a 3x3 window) whole, else a larger one by a little
    (loop overhead and the loads' address arithmetic shrink, each loaded value feeds more multiply-adds).
    One small axis only: the C renderer writes unrolled steps out inside the loop over lanes, and the whole 3x3
    window there (72 multiply-adds per lane of an 8x8 conv tile) measured 1.2x slower under gcc than one row.
    Nothing is unrolled when the body has LARGE_BODY_OPS ALU ops or more."""
    if body_ops(k) >= LARGE_BODY_OPS:
        return
    for axis in reversed(k.axes_of(AxisType.REDUCE)):
        size = k.full_shape[axis]
        unrollable = k.axes_of(AxisType.REDUCE, AxisType.GROUP_REDUCE).index(axis)
        if size <= max(UNROLLS):
            try_opt(k, Opt(OptOps.UNROLL, unrollable, 0))
            return
        amount = first_divisor(size, UNROLLS)
        if amount is not None:
            try_opt(k, Opt(OptOps.UNROLL, unrollable, amount))
        return


@dataclass(frozen=True)
class TiledProduct:
    """A matmul-shaped kernel: two output loops that reuse different operands, and its reduction's length."""

    rows: AxisReuse  # the row tiles (outer), each reusing a tile of the left operand
    strips: AxisReuse  # the right operand's strips, each reused by every row tile
    steps: int  # reduction steps (unrolled ones included)


def row_tiles_and_strips(k: KernelOptimizer) -> TiledProduct | None:
    """The kernel's two output loops over row tiles and strips, or None when it has not exactly two output loops
    that each reuse an operand the other does not (`share_strips` and `block_strips` reorder those loops)."""
    axes = axis_reuse(k)
    if len(axes) != 2:
        return None
    rows, strips = axes
    if not rows.reused or not strips.reused or rows.reused & strips.reused:
        return None
    steps = math.prod(k.full_shape[axis] for axis in k.axes_of(AxisType.REDUCE, AxisType.UNROLL))
    return TiledProduct(rows, strips, steps)


def share_strips(k: KernelOptimizer) -> None:
    """Cut the outer of two output loops that reuse different operands (a matmul's row tiles outside its strips)
    into groups of ROW_TILES_PER_STRIP looped innermost, when the reduction has SHARED_STRIP_MIN_STEPS steps or more:
    each strip is then read once per group of row tiles instead of once per tile."""
    tiled = row_tiles_and_strips(k)
    if tiled is None or tiled.steps < SHARED_STRIP_MIN_STEPS:
        return
    rows = tiled.rows
    group = first_divisor(rows.size, (ROW_TILES_PER_STRIP,))
    if group is not None and rows.size > group:
        try_opt(k, Opt(OptOps.SPLIT, rows.axis, (group, AxisType.LOOP)))


def block_strips(k: KernelOptimizer, l2_bytes: int, cores: int) -> bool:
    """Loop over groups of strips outermost and over the group's strips innermost, when a group of GROUP_STRIPS
    strips (reduction steps x STRIP_LINE_BYTES each; the largest that does) fits half of `l2_bytes` and there are
    enough row tiles and groups for every core (see GROUP_STRIPS); whether it did."""
    tiled = row_tiles_and_strips(k)
    if not l2_bytes or tiled is None or tiled.steps < BLOCKED_MIN_STEPS:
        return False
    rows, strips = tiled.rows, tiled.strips
    strip_bytes = tiled.steps * STRIP_LINE_BYTES
    group = next((size for size in GROUP_STRIPS if size * strip_bytes <= l2_bytes // 2), None)
    if group is None or rows.size < BLOCKED_MIN_ROW_TILES:
        return False
    groups, leftover = divmod(strips.size, group)
    if leftover or groups % cores or groups > BLOCKED_MAX_GROUPS_PER_CORE * cores:
        return False
    # the strips' axis takes the rows' place, then its inner part becomes the innermost output loop
    opts = (Opt(OptOps.SWAP, rows.axis, strips.axis), Opt(OptOps.SPLIT, rows.axis, (group, AxisType.LOOP)))
    trial = k.copy()
    if not all(try_opt(trial, opt) for opt in opts):
        return False
    for opt in opts:
        k.apply_opt(opt)
    return True


def strips_outermost(k: KernelOptimizer) -> None:
    """A product of few row tiles (fewer than BLOCKED_MIN_ROW_TILES) and more strips than row tiles (a GPT-2
    projection over 128 tokens: 8 row tiles, 48 to 192 strips) loops over the strips outside the row tiles: each
    strip is then read from memory once and serves every row tile from L1, where the tiles outermost read the whole
    right operand again for each tile, and the cores split the many strips instead of the few tiles. Interleaved in
    one process against the tiles outermost and torch 2.13 (2 threads), gcc 12, 2 AVX-512 cores, load 0.5-1,
    medians of 15-21 turns (tg / torch): 128x768x3072 1.31 -> 1.14, 128x768x2304 1.28 -> 1.21-1.25, 128x3072x768
    1.36-1.43 -> 1.33-1.35, 32x768x3072 1.16 -> 1.07, GPT-2's block forward over 128 tokens in 5 runs 1.46-1.65 ->
    1.33-1.49; its training step a wash (1.10-1.17 -> 1.08-1.18)."""
    tiled = row_tiles_and_strips(k)
    if tiled is None or tiled.rows.size >= BLOCKED_MIN_ROW_TILES or tiled.strips.size <= tiled.rows.size:
        return
    try_opt(k, Opt(OptOps.SWAP, tiled.rows.axis, tiled.strips.axis))


def grows_along_symbolic_outputs(k: KernelOptimizer) -> bool:
    """An output axis of symbolic size, and at most FEW_FIXED_OUTPUTS outputs along the fixed ones: a decode step's
    attention scores (one query row per head, every filled row of the KV cache)."""
    sizes = [range_size(k.rngs[axis]) for axis in k.axes_of(AxisType.LOOP, AxisType.GLOBAL)]
    return any(size < 0 for size in sizes) and math.prod(size for size in sizes if size > 0) <= FEW_FIXED_OUTPUTS


def symbolic_axis_outermost(k: KernelOptimizer) -> None:
    """Move an output axis of symbolic size (attention over the filled rows of a KV cache) outermost. The CPU
    renderer splits the outermost output loop across cores, and a fixed axis in front may be tiny (3 KV heads:
    one core idles for a third of the kernel), while the symbolic one is what grows."""
    outputs = k.axes_of(AxisType.LOOP, AxisType.GLOBAL)
    symbolic = next((axis for axis in outputs if range_size(k.rngs[axis]) < 0), None)
    if symbolic is not None and symbolic != outputs[0]:
        try_opt(k, Opt(OptOps.SWAP, outputs[0], symbolic))


def copied_load(k: KernelOptimizer) -> UOp | None:
    """The INDEX a copy kernel reads (its one store stores one plain load, maybe cast: a float16 matmul operand
    packed as float32), None for any other kernel."""
    stores = [u for u in k.ast.toposort() if u.op is Ops.STORE]
    if len(stores) != 1:
        return None
    value = stores[0].src[1]
    value = value.src[0] if value.op is Ops.CAST else value
    return value.src[0] if value.op is Ops.LOAD and value.src[0].op is Ops.INDEX else None


def upcast_row_runs(k: KernelOptimizer) -> None:
    """A copy into a new layout whose innermost axis reads a short run of a source row and whose next axis steps to
    another row (a matmul's weight packed into strips, (strips, k, 16) from (k, m)) reads one cache line per row step,
    rows far apart, which the prefetcher does not follow. An outer axis that continues the run (the next strip) is
    upcast by 4, so each row step reads 4 adjacent lines: GPT-2's 768x3072 and 3072x768 weights 1150-1200 -> 700 us
    (best of 3, load 7). A copy that reads a row along its innermost axis already (a transposed pack) is left alone:
    the same upcast made it 2x slower."""
    index = copied_load(k)
    axes = k.axes_of(AxisType.LOOP, AxisType.GLOBAL)
    if index is None or len(axes) < 3:
        return
    ranges = [u for u in k.ast.toposort() if u.op is Ops.RANGE]
    strides = [stride_along(index.src[1], k.rngs[axis], ranges) for axis in axes]
    run = k.full_shape[axes[-1]]
    if strides[-1] != 1 or strides[-2] is None or strides[-2] <= CONTIGUOUS_UPCASTS[0] * run:
        return
    outer = next((axis for axis, stride in zip(axes[:-2], strides, strict=False) if stride == run), None)
    amount = None if outer is None else first_divisor(k.full_shape[outer], ROW_RUN_UPCASTS)
    if outer is not None and amount is not None:
        try_opt(k, Opt(OptOps.UPCAST, outer, amount))


def hand_coded_optimizations(
    s: KernelOptimizer, max_lanes: int = MAX_LANES, local_threads: int = 0, l2_bytes: int = 0, cores: int = 1
) -> list[Opt]:
    """The opts the heuristics choose for kernel `s` (applied to a copy; `s` is unchanged). `max_lanes`: how many
    accumulators the device's vector registers hold (MAX_LANES, or WIDE_MAX_LANES with AVX-512). `local_threads`:
    the threads per workgroup a GPU wants (Target.local_threads; 0 for none), see spread_over_threads. `l2_bytes`
    and `cores`: a CPU core's L2 cache (0: not a CPU) and the calls a kernel is cut into, see block_strips."""
    k = s.copy()
    choose_opts(k, max_lanes, l2_bytes, cores)
    if local_threads:
        spread_over_threads(k, local_threads)
    return k.applied_opts[len(s.applied_opts) :]


def choose_opts(k: KernelOptimizer, max_lanes: int, l2_bytes: int = 0, cores: int = 1) -> None:
    """Apply the heuristics' opts to `k`."""
    if not k.reduceops:
        upcast_row_runs(k)
        return
    if k.has_nested_reductions() or k.has_row_reductions():
        return  # (a row reduction is computed once per row: a SWAP or an upcast would compute it per lane)
    if grows_along_symbolic_outputs(k):
        symbolic_axis_outermost(k)
        return
    loop_over_strips(k)
    upcast_reused_axes(k, max_lanes)
    if k.axes_of(AxisType.UPCAST):
        unroll_reduction(k)
        if not block_strips(k, l2_bytes, cores):
            share_strips(k)
        strips_outermost(k)
    symbolic_axis_outermost(k)


def spread_over_threads(k: KernelOptimizer, threads: int) -> None:
    """On a GPU whose Target asks for it, give each workgroup up to `threads` threads: a LOCAL opt on the innermost
    output axis with a power-of-two divisor (the largest), so that neighbouring threads touch neighbouring
    elements. Without it every heuristic kernel is one thread per workgroup: one active lane of 32."""
    for axis in reversed(k.axes_of(AxisType.LOOP, AxisType.GLOBAL)):
        size = k.full_shape[axis]
        if not isinstance(size, int):
            continue
        choices = tuple(1 << p for p in range(threads.bit_length() - 1, 0, -1))
        amount = first_divisor(size, choices)
        if amount is not None and try_opt(k, Opt(OptOps.LOCAL, axis, amount)):
            return
