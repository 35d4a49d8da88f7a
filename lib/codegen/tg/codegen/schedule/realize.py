"""Which tensor-graph nodes get a buffer ("realize points"); everything else fuses into the kernel that reads it.

A node gets a buffer when
- it is asked for (a root of `realize`), unless it already reads memory (movement ops over a BUFFER),
- it is a CONTIGUOUS, COPY or ASSIGN (a COPY's source is made CONTIGUOUS unless it is a whole buffer),
- it is a REDUCE_AXIS whose result is broadcast (read through a growing EXPAND) or reduced again: fusing it there
  would recompute the whole reduction for every element that reads it. Unless it is a row reduction
  (`fuse_row_reduction`): one over the last axis, read in the same row by its kernel, which then computes it once
  per row before the loop along the row opens (a softmax's max and sum, a layernorm's mean and variance),
- it is an elementwise value that a reduction reads through a growing EXPAND and `fuse_into_reduction` says that
  recomputing it costs more than a round trip through memory (`gelu(x @ W1) @ W2` keeps the gelu in its own kernel),
- it is a computed value under a padded copy (a realize point that reads it through a PAD) whose consumer is a
  reduction: a ResNet block's conv1+relu gets its own kernel instead of being computed over conv2's padded grid
  with a padding gate in its inner loop (`keep_out_of_padded_copy`). A gather made of movement ops is a growing
  EXPAND; what it repeats is covered by the rules above (a reduction under a broadcast, a costly producer), and a
  GATHER that reads more elements than its source has counts as one too,
- it is a REDUCE_AXIS read through a PAD (`cat` pads each part to the whole; a conv's output padded for the next
  layer): fused, the reduction runs gated over the padded grid without its own tiling (a cat of two 512x1024x256
  matmuls took 84 ms as one kernel, 3.1 ms as three),
- it is a REDUCE_AXIS that two or more kernels would fuse, when computing it again in each costs more than a round
  trip through memory (`share_reduction`): the forward's relu and a training step's relu mask both read a conv
  result, which is then stored once instead of being computed again inside a backward kernel.
Softmax over the last axis is then one kernel: per row, a pass for the max, one for sum(exp(x - max)), one for
exp(x - max) / sum, while the row is in L1 (over another axis: three kernels). The rules that give elementwise
values buffers run before the reductions are decided for good: a softmax that a matmul reads starts a kernel of its
own, and its reductions are then read in its rows.

Before that, `split_big_reductions` turns a full reduction of many elements into two: partial results per chunk
(a kernel whose outer loop the CPU splits across cores) and a small kernel that combines them.
"""

from __future__ import annotations

import math

from tg.codegen.flags import DEBUG, Context
from tg.codegen.schedule.graph import ReduceArg, is_symbolic_shape, max_numel, shape_of
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.pattern import PatternMatcher, UPat

SPLIT_REDUCTION_MIN_ELEMENTS = 1 << 18
SPLIT_REDUCTION_CHUNKS = (64, 32, 16, 8, 4, 2)
# The fusion cost model, in ALU-op units. Writing a float and reading it back moves 8 bytes: at the ~10-20 GB/s a
# CPU core streams and its ~50-100 GFLOP/s that is the time of about 48 ops. A transcendental is several ops.
ROUND_TRIP_OPS = 48
TRANSCENDENTAL_OPS = 8
TRANSCENDENTALS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL})


def split_big_reduction(node: UOp) -> UOp | None:
    """A full reduction of N elements becomes a reduction of `chunks` partial reductions of N/chunks each."""
    source = node.src[0]
    if is_symbolic_shape(shape_of(source)):  # chunks must divide the size: not known for a symbolic one
        return None
    total = math.prod(shape_of(source))
    if math.prod(shape_of(node)) != 1 or total < SPLIT_REDUCTION_MIN_ELEMENTS:
        return None
    chunks = next((c for c in SPLIT_REDUCTION_CHUNKS if total % c == 0), None)
    if chunks is None:
        return None
    op = node.arg.op
    rows = UOp(Ops.RESHAPE, source.dtype, (source,), (chunks, total // chunks))
    partial = UOp(Ops.REDUCE_AXIS, node.dtype, (rows,), ReduceArg(op, (1,)))
    partial = UOp(Ops.CONTIGUOUS, node.dtype, (partial,))
    combined = UOp(Ops.REDUCE_AXIS, node.dtype, (partial,), ReduceArg(op, (0,)))
    return UOp(Ops.RESHAPE, node.dtype, (combined,), shape_of(node))


def copy_whole_buffers(copy: UOp) -> UOp | None:
    """A COPY moves a whole buffer: anything else (a view, a computed value, an ASSIGN into part of a buffer)
    is made contiguous first."""
    source = copy.src[0]
    if whole_buffer(source) is not None or source.op is Ops.CONTIGUOUS:
        return None
    return copy.replace(src=(UOp(Ops.CONTIGUOUS, source.dtype, (source,)), *copy.src[1:]))


def contiguous_buffer(node: UOp) -> UOp | None:
    """A CONTIGUOUS of a whole buffer in its own layout (the buffer, or a reshape of it) is that buffer: copying it
    would give the same bytes in a new buffer, one kernel for nothing (Tensor.contiguous says the scheduler may
    reuse a buffer that already is; Tensor.clone is the copy in fresh storage)."""
    return node.src[0] if node.arg is None and whole_buffer(node.src[0]) is not None else None


split_big_reductions = PatternMatcher(
    [(UPat(Ops.REDUCE_AXIS, name="node"), split_big_reduction)], name="split_big_reductions"
)
contiguous_buffers = PatternMatcher([(UPat(Ops.CONTIGUOUS, name="node"), contiguous_buffer)], name="contiguous_buffers")
contiguous_copies = PatternMatcher([(UPat(Ops.COPY, name="copy"), copy_whole_buffers)], name="contiguous_copies")


def reads_memory(node: UOp) -> bool:
    """Movement ops over a BUFFER (or over a node that always gets one) read memory without computing."""
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op in (Ops.BUFFER, Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN)


def whole_buffer(node: UOp) -> UOp | None:
    """The BUFFER that holds `node` as it is, C-contiguous and complete (a BUFFER or RESHAPEs of one)."""
    while node.op is Ops.RESHAPE:
        node = node.src[0]
    return node if node.op is Ops.BUFFER else None


def symbolic_prefix_buffer(node: UOp) -> UOp | None:
    """The BUFFER whose first elements hold `node` C-contiguously, for a value of symbolic shape: a RESHAPE of a
    SHRINK (0, numel) of a buffer of its largest size (how the scheduler and Tensor.empty lay such values out)."""
    if node.op is Ops.RESHAPE and node.src[0].op is Ops.SHRINK and node.src[0].src[0].op is Ops.BUFFER:
        ((start, _),) = node.src[0].arg
        return node.src[0].src[0] if isinstance(start, int) and start == 0 else None
    return None


def buffer_holding(node: UOp) -> UOp | None:
    """The BUFFER that holds `node` C-contiguously from its start: `whole_buffer`, or a symbolic prefix of one."""
    whole = whole_buffer(node)
    return whole if whole is not None else symbolic_prefix_buffer(node)


def grows(expand: UOp) -> bool:
    return shape_of(expand) != shape_of(expand.src[0])


def find_realize_points(roots: tuple[UOp, ...], forced: tuple[UOp, ...] = ()) -> list[UOp]:
    """The nodes that get buffers, sources before users (`forced`: nodes that get one whatever they are)."""
    order = UOp.sink(*roots).toposort()[:-1]
    points = {root for root in roots if not reads_memory(root)} | set(forced)
    for node in order:
        if node.op in (Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN):
            points.add(node)
    with Context(DEBUG=0):  # a first pass, for the values the later rules give buffers (printed in the second)
        first = set(points)
        unfused = _add_reductions_that_cannot_fuse(order, first)
        _add_later_rules(order, first)
    # those values start kernels of their own (a softmax that a matmul reads): the rows their reductions are read
    # in change, so the reductions are decided again with them in place (and keep their buffers unless now fused)
    values = {node for node in first - points if node.op is not Ops.REDUCE_AXIS}
    _add_reductions_that_cannot_fuse(order, points, unfused, values)
    _add_later_rules(order, points)
    points |= values  # (the later rules decide them again, printing why; rows were read with them in place)
    return [node for node in order if node in points]


def _add_later_rules(order: list[UOp], points: set[UOp]) -> None:
    _add_values_under_padded_copies(order, points)
    _add_producers_too_costly_to_recompute(order, points)
    _add_reductions_read_by_several_kernels(order, points)


def _add_reductions_that_cannot_fuse(
    order: list[UOp], points: set[UOp], kept: set[UOp] | None = None, starts: set[UOp] | None = None
) -> set[UOp]:
    """Walk users before sources, tracking whether a node is read through a growing EXPAND or by a REDUCE_AXIS
    inside the kernel that reads it, and the row its kernel reads it in (`row_of`); reductions read that way get
    their own buffer unless `fuse_row_reduction` says their kernel computes them once per row. A reduction read
    through a PAD (a `cat` of matmuls) gets one too (see `under_pad`). `kept`: reductions
    that keep their buffer unless fused so; `starts`: nodes that will start kernels too. DEBUG=3 prints each row
    reduction fused. Returns the reductions it gave buffers."""
    broadcast: dict[UOp, bool] = {}
    reduced: dict[UOp, bool] = {}
    padded: dict[UOp, bool] = {}
    rows: dict[UOp, Row] = {}
    kept, starts = kept or set(), starts or set()
    unfused: set[UOp] = set()
    for node in reversed(order):
        starts_kernel = node in points or node in starts
        row = row_of(node) if starts_kernel else rows.get(node, NOT_A_ROW)
        if starts_kernel:
            under_broadcast, under_reduce, under_pad = False, False, False
        else:
            under_broadcast, under_reduce = broadcast.get(node, False), reduced.get(node, False)
            under_pad = padded.get(node, False)
            if node.op is Ops.REDUCE_AXIS and (under_broadcast or under_reduce or under_pad or node in kept):
                if (under_broadcast or under_reduce) and not under_pad and fuse_row_reduction(node, row):
                    if DEBUG >= 3:
                        print(f"fusion: fused REDUCE_AXIS into its reader: once per row of {shape_of(node.src[0])[-1]}")
                else:
                    points.add(node)
                    # (`under_pad` alone is not kept: the second pass decides it anew, where a padded value may
                    # start a kernel above it instead)
                    if under_broadcast or under_reduce or node in kept:
                        unfused.add(node)
                    under_broadcast, under_reduce, under_pad, row = False, False, False, row_of(node)
        if node.op is Ops.REDUCE_AXIS:
            under_reduce = True
        if node.op is Ops.EXPAND and grows(node):
            under_broadcast = True
        if node.op is Ops.PAD:
            under_pad = True
        for source in node.src:
            gathered = source is node.src[0] and _gathers_more_than_it_reads(node)
            broadcast[source] = broadcast.get(source, False) or under_broadcast or gathered
            reduced[source] = reduced.get(source, False) or under_reduce
            padded[source] = padded.get(source, False) or under_pad
            _read_in_row(rows, node, source, row)
    return unfused


def _gathers_more_than_it_reads(node: UOp) -> bool:
    """A GATHER that reads more elements than its source has: some are read several times, so a reduction there is
    read as through a growing EXPAND (fused, it would be computed again per read). Reading fewer, computing just the
    elements read costs less than computing them all into a buffer."""
    return node.op is Ops.GATHER and max_numel(shape_of(node)) > max_numel(shape_of(node.src[0]))


def _read_in_row(rows: dict[UOp, Row], node: UOp, source: UOp, row: Row) -> None:
    """Record the row `source` is read in by `node` (read in `row`): NOT_A_ROW unless every reader agrees."""
    through = row_through(node, source, row)
    rows[source] = through if rows.get(source, through) == through else NOT_A_ROW


# The rows of a kernel: the sizes of its output axes but the last (size-1 axes left out). A row reduction fused
# into that kernel depends on those loops only, so the linearizer computes it once per row, before the loop along
# the row opens (tg.codegen.lower.linearize). NOT_A_ROW: a node some kernel reads in another layout.
Row = tuple[int, ...] | None
NOT_A_ROW: Row = None
# Rows up to this many elements are fused: a row of float32 (16 KiB) stays in L1 between the passes over it (max,
# sum of exp, normalization), and a GPU thread that computes its row's reductions itself stays short.
ROW_FUSION_MAX_ELEMENTS = 4096
ROW_MOVEMENT = (Ops.EXPAND, Ops.REDUCE_AXIS, Ops.RESHAPE)


def row_of(node: UOp) -> Row:
    """The row index of `node`'s elements: its shape but the last axis, size-1 axes left out (static shapes)."""
    shape = shape_of(node)
    if not shape or is_symbolic_shape(shape):
        return NOT_A_ROW
    return tuple(size for size in shape[:-1] if isinstance(size, int) and size != 1)


def row_through(node: UOp, source: UOp, row: Row) -> Row:
    """The row `source` is read in when `node` is read in `row`: the same row when `node` keeps the row index
    (elementwise ops, CONTIGUOUS, an EXPAND or a REDUCE_AXIS of the last axis only, a RESHAPE that only adds or
    drops size-1 axes before the last), else NOT_A_ROW."""
    keeps_shape = node.op in GroupOp.ALU or node.op in (Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS, Ops.DETACH)
    if row is NOT_A_ROW or not (keeps_shape or node.op in ROW_MOVEMENT) or row_of(source) != row:
        return NOT_A_ROW
    shape, source_shape = shape_of(node), shape_of(source)
    if node.op is Ops.RESHAPE:
        return row if shape[-1:] == source_shape[-1:] else NOT_A_ROW
    if node.op is Ops.REDUCE_AXIS and node.arg.axes != (len(source_shape) - 1,):
        return NOT_A_ROW
    return row if keeps_shape or shape[:-1] == source_shape[:-1] else NOT_A_ROW


def fuse_row_reduction(node: UOp, row: Row) -> bool:
    """The fusion policy for a reduction read through a broadcast or by another reduction: fuse it when it is a
    row reduction (the last axis, at most ROW_FUSION_MAX_ELEMENTS) read in the same row by its kernel, which then
    computes it once per row: a softmax is one kernel (max, sum of exp and normalization passes over a row in L1).
    Otherwise it gets its own buffer: fused, it would be computed again for every element that reads it."""
    source_shape = shape_of(node.src[0])
    if row is NOT_A_ROW or node.arg.axes != (len(source_shape) - 1,) or row_of(node.src[0]) != row:
        return False
    return max_numel(source_shape[-1:]) <= ROW_FUSION_MAX_ELEMENTS


def reduction_evaluations(order: list[UOp], points: set[UOp]) -> dict[UOp, int]:
    """How many times each node is evaluated under a reduction, in the kernel that reads it: a reduction evaluates
    its source once per element of its domain (the source's shape); elementwise and movement ops hand that count
    to their sources. A realize point starts its own kernel, so its sources count only if it is a reduction."""
    evaluations: dict[UOp, int] = {}
    for node in reversed(order):
        count = 0 if node in points else evaluations.get(node, 0)
        if node.op is Ops.REDUCE_AXIS:
            count = max_numel(shape_of(node.src[0]))  # a symbolic size counts at its largest
        for source in node.src:
            evaluations[source] = max(evaluations.get(source, 0), count)
    return evaluations


def reads_per_element(node: UOp, evaluations: dict[UOp, int]) -> int:
    """Evaluations per element of `node` under a reduction (rounded up)."""
    return -(-evaluations.get(node, 0) // max(max_numel(shape_of(node)), 1))


def keep_out_of_padded_copy(value: UOp, points: set[UOp]) -> bool:
    """The second rule of the fusion policy: a computed value (one that reads memory or reduces, not a pattern of
    constants) is never fused into a padded copy whose consumer is a reduction. The copy runs over the padded grid
    with a gate on every load: a reduction fused there loses its vectorized inner loop (a ResNet block's conv1 ran
    at 5 GFLOP/s inside conv2's padded input, 150 as its own kernel)."""
    return any(
        n.op in (Ops.REDUCE_AXIS, Ops.BUFFER) or (n is not value and n in points) for n in fused_nodes(value, points)
    )


def fused_nodes(node: UOp, points: set[UOp]) -> list[UOp]:
    """The nodes computed in the kernel that fuses `node`: its sources up to (and including) realize points."""
    seen: set[UOp] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current is node or current not in points:
            stack.extend(current.src)
    return list(seen)


def describe(node: UOp, points: set[UOp]) -> str:
    """A short name for what a kernel computes: its last op, and "+REDUCE_AXIS" when it also reduces
    (a conv and its relu: "WHERE+REDUCE_AXIS")."""
    if node.op is Ops.REDUCE_AXIS:
        return "REDUCE_AXIS"
    reduces = any(n.op is Ops.REDUCE_AXIS and n not in points for n in fused_nodes(node, points))
    return node.op.name + ("+REDUCE_AXIS" if reduces else "")


def values_under_pads(copy: UOp, points: set[UOp]) -> list[UOp]:
    """The computed nodes that the kernel of realize point `copy` reads through a PAD (its padded grid)."""
    found: list[UOp] = []
    seen: set[tuple[UOp, bool]] = set()
    stack = [(source, False) for source in copy.src]
    while stack:
        node, padded = stack.pop()
        if (node, padded) in seen or node in points or node.op is Ops.BUFFER:
            continue
        seen.add((node, padded))
        if node.op in GroupOp.Movement:
            stack.extend((source, padded or node.op is Ops.PAD) for source in node.src)
        elif padded and (node.op in GroupOp.ALU or node.op in (Ops.REDUCE_AXIS, Ops.CAST)):
            found.append(node)
        else:
            stack.extend((source, padded) for source in node.src)
    return found


def is_copy(node: UOp, points: set[UOp]) -> bool:
    """A realize point whose kernel reduces nothing above its PADs (it copies a padded grid, maybe computing
    elementwise on the way; a reduction under a PAD is what the padded-copy rule takes out)."""
    seen: set[UOp] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current in seen or current.op is Ops.PAD or (current is not node and current in points):
            continue
        if current.op is Ops.REDUCE_AXIS:
            return False
        seen.add(current)
        stack.extend(current.src)
    return True


def _add_values_under_padded_copies(order: list[UOp], points: set[UOp]) -> None:
    """Realize points read by a reduction (conv2's padded input) compute no value under their PAD: such a
    value gets its own kernel (`keep_out_of_padded_copy`). DEBUG=3 prints each decision."""
    evaluations = reduction_evaluations(order, points)
    for copy in [node for node in order if node in points and evaluations.get(node, 0) and is_copy(node, points)]:
        for value in values_under_pads(copy, points):
            if value in points or not keep_out_of_padded_copy(value, points):
                continue
            if DEBUG >= 3:
                reads = reads_per_element(copy, evaluations)
                print(
                    f"fusion: kept {describe(value, points)} as its own kernel: "
                    f"in a padded copy that a reduction reads {reads}x per element"
                )
            points.add(value)


def fuse_into_reduction(recompute: int, op_cost: int) -> bool:
    """The fusion policy: fuse an elementwise producer into a reduction's input when recomputing it there, `recompute`
    times per element at `op_cost` ALU ops each time, costs less than one round trip through memory (a write in
    its own kernel and a read in the reduction's). Otherwise the producer keeps its own kernel and buffer."""
    return recompute * op_cost < ROUND_TRIP_OPS


def elementwise_cost(node: UOp, points: set[UOp]) -> int:
    """ALU ops (transcendentals weighted) to compute one element of `node` in the kernel that fuses it: its
    sources up to buffers, realize points and reductions."""
    seen: set[UOp] = set()
    stack, cost = [node], 0
    while stack:
        current = stack.pop()
        if current in seen or (current is not node and current in points) or current.op is Ops.REDUCE_AXIS:
            continue
        seen.add(current)
        if current.op in GroupOp.ALU:
            cost += TRANSCENDENTAL_OPS if current.op in TRANSCENDENTALS else 1
        stack.extend(current.src)
    return cost


def _add_producers_too_costly_to_recompute(order: list[UOp], points: set[UOp]) -> None:
    """Walk users before sources, tracking how many times a reduction reads each element (the growth of the
    EXPANDs between them: a matmul reads its left operand N times); an elementwise node read that way gets its
    own buffer when `fuse_into_reduction` says no. DEBUG=3 prints each decision."""
    recompute: dict[UOp, int] = {}  # 0: not read by a reduction in the kernel that fuses it
    rows: dict[UOp, Row] = {}
    for node in reversed(order):
        factor = 0 if node in points else recompute.get(node, 0)
        row = row_of(node) if node in points else rows.get(node, NOT_A_ROW)
        if factor > 1 and node.op in GroupOp.ALU:
            cost = elementwise_cost(node, points)
            fused = fuse_into_reduction(factor, cost)
            if DEBUG >= 3:
                verdict = "fused" if fused else "kept as its own kernel"
                print(f"fusion: {verdict} {node.op.name} ({cost} ops/element) in a reduction: recompute {factor}x")
            if not fused:
                points.add(node)
                factor, row = 0, row_of(node)
        if node.op is Ops.REDUCE_AXIS:
            factor = 1
        elif node.op is Ops.EXPAND and factor and grows(node) and row_through(node, node.src[0], row) is NOT_A_ROW:
            # (a row's value broadcast along the row is computed once per row, before the loop along it)
            factor *= max_numel(shape_of(node)) // max(max_numel(shape_of(node.src[0])), 1)  # symbolic: at the largest
        for source in node.src:
            recompute[source] = max(recompute.get(source, 0), factor)
            _read_in_row(rows, node, source, row)


def share_reduction(kernels: int, reduced_per_element: int) -> bool:
    """Give a reduction that `kernels` kernels would fuse its own buffer when computing it again in all but one of
    them (`reduced_per_element` ALU ops per element each time) costs at least a round trip through memory."""
    return (kernels - 1) * reduced_per_element >= ROUND_TRIP_OPS


def _add_reductions_read_by_several_kernels(order: list[UOp], points: set[UOp]) -> None:
    """Walk users before sources, tracking which kernels (realize points) fuse each node; a reduction fused into
    several gets its own buffer when `share_reduction` says so. Two readers are enough to decide, so at most two
    are tracked. DEBUG=3 prints each decision."""
    readers: dict[UOp, frozenset[UOp]] = {}
    for node in reversed(order):
        kernels = frozenset((node,)) if node in points else readers.get(node, frozenset())
        if node.op is Ops.REDUCE_AXIS and len(kernels) > 1:
            per_element = max_numel(shape_of(node.src[0])) // max(max_numel(shape_of(node)), 1)
            if share_reduction(len(kernels), per_element):
                if DEBUG >= 3:
                    reason = "read by several kernels"
                    print(f"fusion: kept REDUCE_AXIS ({per_element} per element) as its own kernel: {reason}")
                points.add(node)
                kernels = frozenset((node,))
        for source in node.src:
            merged = readers.get(source, frozenset()) | kernels
            readers[source] = merged if len(merged) <= 2 else frozenset(list(merged)[:2])
