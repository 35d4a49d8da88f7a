"""Kernel AST -> linear program: ranges become loops, REDUCEs become accumulators, and every value is placed in
the innermost loop it depends on.

The result is a LINEAR UOp whose sources are the program, in execution order:

    RANGE r            opens a loop over r (0 .. end-1); END(r) closes it
    PARAM (REG)        an accumulator: a one-element register array, read and written through INDEX/LOAD/STORE
    AFTER(x, deps...)  the value x, read after deps (keeps the loads of an accumulator distinct nodes)
    everything else    computes a value from earlier entries (LOAD, STORE, INDEX, ALU, CAST, CONST, ...)

A node may appear more than once when it is needed again outside the loop it was first computed in; a renderer
that names values by the latest place they were computed gets the right one.

A reduction is computed before the first output loop it does not depend on opens (`hoist_reductions`): a row
reduction the scheduler fused into its reader (a softmax's max and sum) runs once per row, and the loop along the
row then reads its result. When that loop computes the reduction's body again (a softmax's exponentials, summed and
then normalized), the reduction stores the body in a register array as long as the row and the loop reads it back
(`Linearizer.kept_row_value`): each exp is computed once, with the same bits.

Long float reductions get PARTIAL_SUMS accumulators (see Linearizer.emit_partial_sums): the loop is split into
steps of PARTIAL_SUMS consecutive elements, lane k adds element k of every step, and the lanes are combined in
lane order at the end. The order is written in the program, so every renderer (C, the PYTHON emulator) computes
the same bits, the C compiler may vectorize the lanes without being allowed to reassociate anything, and the
result does not depend on the core count (cores split output loops only).

A BLOCK_REDUCE range (k-blocking, see tg.codegen.opt) is opened before the output loops. Its reduction's
accumulator starts from the identity in block 0 and from the value the previous block stored otherwise, so every
element is still reduced in one running order and the result has the same bits as the unblocked kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tg.codegen.dtype import AddrSpace, DType, dtypes
from tg.codegen.stage_trace import traced
from tg.codegen.uop.args import AxisType, ParamArg
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite
from tg.codegen.uop.reductions import reduce_identity

PARTIAL_SUMS = 16  # accumulators of a long float reduction: two AVX2 vectors of float32
PARTIAL_SUM_OPS = (Ops.ADD, Ops.MAX)
FUSED_DTYPES = (dtypes.float32, dtypes.float64)  # sums of products of these become fused multiply-adds
# a row reduction's body the output loop computes again is stored when it costs this many ALU ops (a software exp
# is about 30; a square, a shifted value are cheaper than the store and the load)
ROW_VALUE_MIN_OPS = 16
MIN_STEPS = 4  # a reduction gets partial sums when it has at least this many steps of PARTIAL_SUMS elements


def ranges_each_node_needs(ast: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node, the open loops its value depends on (a REDUCE closes its own ranges)."""
    needs: dict[UOp, frozenset[UOp]] = {}
    for node in ast.toposort():
        if node.op is Ops.RANGE:
            needs[node] = frozenset((node,))
            continue
        found = frozenset().union(*(needs[s] for s in node.src)) if node.src else frozenset()
        if node.op is Ops.REDUCE:
            found = found - set(node.src[1:])
        needs[node] = found
    return needs


class Linearizer:
    def __init__(self, ast: UOp) -> None:
        self.needs = ranges_each_node_needs(ast)
        self.program: list[UOp] = []
        self.scopes: list[dict[UOp, UOp]] = [{}]  # one memo per open loop: AST node -> its linear node
        self.open_ranges: list[UOp] = []
        self.accumulators = 0
        # a REDUCE with one accumulator per lane -> (accumulators, the END after its loops, its lanes)
        self.wide: dict[UOp, tuple[UOp, UOp, tuple[UOp, ...]]] = {}
        self.next_axis = 1 + max((u.arg.axis_id for u in ast.toposort() if u.op is Ops.RANGE), default=0)
        # a REDUCE cut into blocks -> the INDEX of the STORE that carries its running result between blocks
        self.carried: dict[UOp, UOp] = {}
        self.ast = ast
        self.next_loop: UOp | None = None  # the output loop that opens after the reductions hoisted now
        # a value of the row that a row reduction stored (`kept_row_value`) -> the register array holding it
        self.kept: dict[UOp, tuple[UOp, UOp]] = {}

    def append(self, node: UOp) -> UOp:
        self.program.append(node)
        return node

    def lookup(self, node: UOp) -> UOp | None:
        for scope in reversed(self.scopes):
            found = scope.get(node)
            if found is not None:
                return found
        return None

    def open_loop(self, rng: UOp) -> None:
        if rng.src[0].op is not Ops.CONST:  # a symbolic trip count (DEFINE_VARs): computed before the loop opens
            self.emit(rng.src[0])
        self.append(rng)
        self.open_ranges.append(rng)
        self.scopes.append({rng: rng})

    def close_loop(self, after: UOp | None = None) -> UOp:
        rng = self.open_ranges.pop()
        self.scopes.pop()
        return self.append(UOp(Ops.END, dtypes.void, (rng,) if after is None else (rng, after)))

    def emit(self, node: UOp) -> UOp:
        """The linear node holding `node`'s value in the current loop, computing it (and its sources) if needed.

        Sources are placed first, walking the graph in order (no recursion, so deep graphs are fine); a REDUCE's
        body is placed by `emit_reduce`, inside its loops."""
        found = self.lookup(node)
        if found is not None:
            return found
        for inner in node.toposort(lambda u: self.lookup(u) is None and u.op is not Ops.REDUCE and u not in self.kept):
            if self.lookup(inner) is not None:
                continue
            if inner.op is Ops.RANGE:
                raise ValueError(f"range {inner.arg} is used outside its loop")
            if inner in self.kept:  # computed once by a row reduction's loop: read back
                array, row = self.kept[inner]
                self.scopes[-1][inner] = self.append(self.append(array.index(row)).load())
            elif inner.op is Ops.REDUCE:
                self.scopes[-1][inner] = self.wide_result(inner) if inner in self.wide else self.emit_reduce(inner)
            else:
                self.scopes[-1][inner] = self._emit_plain(inner)
        return self.scopes[-1][node]

    def _emit_plain(self, node: UOp) -> UOp:
        new_src = tuple(self.lookup(s) for s in node.src)
        unchanged = all(a is b for a, b in zip(new_src, node.src, strict=True))
        return self.append(node if unchanged else node.replace(src=new_src))

    def hoist_invariants(self, body: UOp) -> None:
        """Compute, before a reduce loop opens, every part of its body that does not change inside it."""
        open_now = frozenset(self.open_ranges)
        for node in body.toposort():
            if node.op is not Ops.RANGE and self.needs[node] <= open_now:
                self.emit(node)

    def hoist_out_of_inner_loops(self, ast: UOp) -> None:
        """Compute, before the next output loop opens, every float value of `ast` that the loops still to open do
        not change (a row's log of its sum in log_softmax): once per row instead of once per element. gcc kept such
        a software log2 in the inner loop and unswitched that loop on its special-case selects, which left it
        scalar (8x slower). Reductions stay where they are placed now."""
        open_now = frozenset(self.open_ranges)
        for node in ast.toposort(lambda u: u.op is not Ops.REDUCE):
            if node.op in GroupOp.ALU and dtypes.is_float(node.dtype) and self.needs[node] <= open_now:
                self.emit(node)

    def hoist_reductions(self, ast: UOp) -> None:
        """Compute, before the next output loop opens, every reduction that the loops still to open do not change.
        A row reduction the scheduler fused into its reader (a softmax's max and sum) runs once per row, then the
        loop along the row reads its result (tg.codegen.schedule.realize.fuse_row_reduction); a matvec with its
        RMSNorm's sum of squares (tg.llm.lanes) reads the same x for every row and computes that sum once per call.
        Only plain reduce loops move: a BLOCK_REDUCE's carried result and a GROUP_REDUCE's shares stay where they
        are."""
        open_now = frozenset(self.open_ranges)
        for node in ast.toposort():
            if node.op is not Ops.REDUCE or not self.needs[node] <= open_now:
                continue
            if all(r.arg.axis_type in (AxisType.REDUCE, AxisType.UNROLL) for r in node.src[1:]):
                self.emit(node)

    def emit_reduce(self, reduce: UOp) -> UOp:
        split = self.partial_sum_split(reduce)
        if split is not None:
            return self.emit_partial_sums(reduce, *split)
        body, ranges = reduce.src[0], loop_order(reduce.src[1:])
        op, dtype = reduce.arg, reduce.dtype
        self.hoist_invariants(body)
        acc = self.append(UOp(Ops.PARAM, dtype.ptr(1, AddrSpace.REG), (), ParamArg(self.accumulators, "acc")))
        self.accumulators += 1
        slot = self.append(acc.index(self.emit(UOp.const(0, dtypes.index))))
        initial = self.append(slot.store(self.emit(self.initial_value(reduce))))
        for rng in ranges:
            self.open_loop(rng)
        combined = self.accumulate(
            op,
            body,
            lambda: self.read(acc, (initial, *ranges), slot.src[1]),
        )
        update = self.append(slot.store(combined))
        end = update
        for _ in ranges:
            end = self.close_loop(end)
        return self.append(self.append(self.append(acc.after(end)).index(slot.src[1])).load())

    def initial_value(self, reduce: UOp) -> UOp:
        """What an accumulator of `reduce` starts from: the identity, or, in every block of a BLOCK_REDUCE but the
        first, the running result the previous block stored."""
        identity = _identity(reduce.arg, reduce.dtype)
        index = self.carried.get(reduce)
        if index is None:
            return identity
        block = next(r for r in reduce.src[1:] if r.arg.axis_type is AxisType.BLOCK_REDUCE)
        previous = index.load(identity) if len(index.src) > 2 else index.load()
        return (block < 1).where(identity, previous)

    def read(self, acc: UOp, after: tuple[UOp, ...], position: UOp) -> UOp:
        """Load acc[position] once `after` (the store that set it, the loops that update it) has happened."""
        return self.append(self.append(self.append(acc.after(*after)).index(position)).load())

    def accumulate(self, op: Ops, body: UOp, load_current: Callable[[], UOp]) -> UOp:
        """The accumulator's new value, `current op body`. A float32/float64 sum of products is one fused
        multiply-add, MULACC(a, b, current): a * b + current with a single rounding (what the FMA instruction
        computes, and what tg.codegen.uop.alu and so the PYTHON emulator compute too)."""
        if op is Ops.ADD and body.dtype in FUSED_DTYPES and body.op is Ops.MUL:
            a, b = self.emit(body.src[0]), self.emit(body.src[1])
            return self.append(UOp(Ops.MULACC, body.dtype, (a, b, load_current())))
        value = self.emit(body)
        return self.append(UOp(op, body.dtype, (load_current(), value)))

    def partial_sum_split(self, reduce: UOp) -> tuple[UOp, list[UOp], UOp] | None:
        """For a long float ADD/MAX reduction: its body with the innermost loop r rewritten as
        steps * PARTIAL_SUMS + lane, the loops (the last one over the steps) and the lane range; else None.
        Reductions the optimizer already unrolled keep their shape (their unrolled steps are the parallelism)."""
        ranges = loop_order(reduce.src[1:])
        if reduce.arg not in PARTIAL_SUM_OPS or not dtypes.is_float(reduce.dtype):
            return None
        if any(r.arg.axis_type in (AxisType.UNROLL, AxisType.BLOCK_REDUCE) for r in reduce.src[1:]):
            return None
        inner = ranges[-1]
        if inner.src[0].op is not Ops.CONST:  # a symbolic trip count cannot be cut into steps of PARTIAL_SUMS
            return None
        size = inner.src[0].arg
        if inner.arg.axis_type is not AxisType.REDUCE or size % PARTIAL_SUMS:
            return None
        # the steps count those of the reduce loops around the inner one: a softmax over the filled key tiles of a
        # KV cache reduces (tiles, 16), tiles symbolic (taken as long enough)
        repeats = math.prod(r.src[0].arg if r.src[0].op is Ops.CONST else MIN_STEPS
                            for r in ranges[:-1] if r.arg.axis_type is AxisType.REDUCE)  # fmt: skip
        if size // PARTIAL_SUMS * repeats < MIN_STEPS:
            return None
        steps = UOp.range(size // PARTIAL_SUMS, inner.arg.axis_id, AxisType.REDUCE)
        lane = UOp.range(PARTIAL_SUMS, self.next_axis, AxisType.UPCAST)  # independent lanes, as an UPCAST axis
        self.next_axis += 1
        body = graph_rewrite(reduce.src[0].substitute({inner: steps * PARTIAL_SUMS + lane}), simplify_indices)
        self.needs.update(ranges_each_node_needs(body))
        return body, [*ranges[:-1], steps], lane

    def kept_row_value(self, reduce: UOp) -> tuple[UOp, UOp] | None:
        """The output loop's value that `reduce`'s body computes along the row, if its kernel reads it there: a
        softmax's exponentials, which its sum adds and its normalization divides. Such a body is computed once,
        into a register array as long as the row that the output loop reads back (issue 23: the softmax kernel
        computed each exp twice and was compute bound). Only for a row reduction hoisted just before the output
        loop over the same row, with no register lanes, and a body of ROW_VALUE_MIN_OPS ALU ops or more (a software
        exp: worth a store and a load). Returns that value and the output loop."""
        row, body, ranges = self.next_loop, reduce.src[0], reduce.src[1:]
        if row is None or row.arg.axis_type is not AxisType.LOOP or len(ranges) != 1:
            return None  # (a GPU's thread index is no loop: each thread would compute the whole row)
        inner = ranges[0]
        if row.src[0] is not inner.src[0]:
            return None
        if row.src[0].op is not Ops.CONST or sum(u.op in GroupOp.ALU for u in body.toposort()) < ROW_VALUE_MIN_OPS:
            return None
        if any(u.op is Ops.RANGE and u.arg.axis_type is AxisType.UPCAST for u in self.ast.toposort()):
            return None
        along_row = body.substitute({inner: row})
        return (along_row, row) if along_row in self.ast.toposort() else None

    def emit_partial_sums(self, reduce: UOp, body: UOp, ranges: list[UOp], lane: UOp) -> UOp:
        """One accumulator per lane, the lane loop innermost, then the lanes combined in order:

        for l: acc[l] = identity
        for r...: for s: for l: acc[l] = acc[l] op body(s * PARTIAL_SUMS + l)
        total = identity; for l: total = total op acc[l]"""
        op, dtype = reduce.arg, reduce.dtype
        keep = self.kept_row_value(reduce) if len(ranges) == 1 else None
        self.hoist_invariants(body)
        lanes = self._accumulator(dtype, PARTIAL_SUMS)
        values = None if keep is None else self._accumulator(body.dtype, row_length(keep[1]))
        self.open_loop(lane)
        identity = self.emit(_identity(op, dtype))
        initialized = self.close_loop(self.append(self.append(lanes.index(lane)).store(identity)))
        for rng in (*ranges, lane):
            self.open_loop(rng)
        combined = self.accumulate(
            op,
            body,
            lambda: self.read(lanes, (initialized, *ranges), lane),
        )
        end = self.append(self.append(lanes.index(lane)).store(combined))
        if values is not None:  # the row's values, stored for the output loop (see kept_row_value)
            position = self.emit(ranges[-1] * PARTIAL_SUMS + lane)
            end = self.append(self.append(values.index(position)).store(self.emit(body)))
        for _ in (*ranges, lane):
            end = self.close_loop(end)
        if keep is not None and values is not None:
            self.kept[keep[0]] = (self.append(values.after(end)), keep[1])
        total = self._accumulator(dtype, 1)
        slot = self.append(total.index(self.emit(UOp.const(0, dtypes.index))))
        initial = self.append(slot.store(self.emit(_identity(op, dtype))))
        combine = UOp.range(PARTIAL_SUMS, lane.arg.axis_id, AxisType.UNROLL)  # not independent: one running total
        self.open_loop(combine)
        partial = self.append(self.append(self.append(lanes.after(end)).index(combine)).load())
        running = self.append(self.append(self.append(total.after(initial, combine)).index(slot.src[1])).load())
        finished = self.close_loop(self.append(slot.store(self.append(UOp(op, dtype, (running, partial))))))
        return self.append(self.append(self.append(total.after(finished)).index(slot.src[1])).load())

    def _accumulator(self, dtype: DType, size: int) -> UOp:
        acc = UOp(Ops.PARAM, dtype.ptr(size, AddrSpace.REG), (), ParamArg(self.accumulators, "acc"))
        self.accumulators += 1
        return self.append(acc)

    def emit_wide_reduce(self, reduce: UOp, lanes: list[UOp]) -> None:
        """A REDUCE whose body runs along output ranges `lanes` (UPCAST ranges): one accumulator per lane (a
        register array the C compiler keeps in vector registers), and the lane loops inside the reduce loops, so
        each step of the reduction updates every lane from values loaded once:

            for l: acc[l] = identity
            for r: for l: for u: acc[l] = acc[l] op body(r, u, l)

        The loops inside the reduce loops are the register nest (see register_nest): the contiguous lane loop
        first, the unrolled reduce steps u and the other lanes inside it. For each accumulator the updates still
        come in (r, u) order, so the result is the same as with u outside the lanes.
        Its value is read later, inside the loops over `lanes` (see wide_result)."""
        body, ranges = reduce.src[0], loop_order(reduce.src[1:])
        op, dtype = reduce.arg, reduce.dtype
        self.hoist_invariants(body)
        acc = self.append(
            UOp(Ops.PARAM, dtype.ptr(lane_count(lanes), AddrSpace.REG), (), ParamArg(self.accumulators, "acc"))
        )
        self.accumulators += 1
        for lane in register_nest(lanes):
            self.open_loop(lane)
        slot = self.append(acc.index(self.emit(lane_index(lanes))))
        initialized = self.append(slot.store(self.emit(self.initial_value(reduce))))
        for _ in lanes:
            initialized = self.close_loop(initialized)
        loops = [r for r in ranges if r.arg.axis_type is not AxisType.UNROLL]
        for rng in (*loops, *register_nest(lanes, [r for r in ranges if r not in loops])):
            self.open_loop(rng)
        slot = self.append(acc.index(self.emit(lane_index(lanes))))
        combined = self.accumulate(
            op,
            body,
            lambda: self.read(acc, (initialized, *ranges), slot.src[1]),
        )
        end = self.append(slot.store(combined))
        for _ in (*ranges, *lanes):
            end = self.close_loop(end)
        self.wide[reduce] = (acc, end, tuple(lanes))

    def wide_result(self, reduce: UOp) -> UOp:
        acc, end, lanes = self.wide[reduce]
        position = self.emit(lane_index(list(lanes)))
        return self.append(self.append(self.append(acc.after(end)).index(position)).load())


def row_length(row: UOp) -> int:
    return row.src[0].arg


def _identity(op: Ops, dtype: DType) -> UOp:
    return UOp.const(reduce_identity(op, dtype), dtype)


def loop_order(ranges: tuple[UOp, ...]) -> list[UOp]:
    """The loops a reduction opens: GROUP_REDUCE outermost (on a GPU they are the threads of a work-group, each
    reducing its share), then reduce loops, unrolled ones (UNROLL) innermost; by axis id within each. A
    BLOCK_REDUCE range is not among them: it is open around the whole kernel."""
    return sorted(
        (r for r in ranges if r.arg.axis_type is not AxisType.BLOCK_REDUCE),
        key=lambda r: (r.arg.axis_type is not AxisType.GROUP_REDUCE, r.arg.axis_type is AxisType.UNROLL, r.arg.axis_id),
    )


def register_nest(lanes: list[UOp], unrolled: list[UOp] | None = None) -> list[UOp]:
    """The order to open the loops over register lanes (and a reduction's `unrolled` steps), outermost first:
    the innermost lane of `lanes` (the contiguous one: the heuristics upcast it first) outermost, then the
    unrolled steps, then the other lanes. A C renderer keeps that first loop a loop and writes the ones inside
    it out, so the loop over contiguous lanes has a body big enough that gcc and clang vectorize it along the
    lanes rather than unrolling it first (tg.codegen.render.c)."""
    return [*lanes[-1:], *(unrolled or []), *lanes[:-1]]


def lane_count(lanes: list[UOp]) -> int:
    return math.prod(r.src[0].arg for r in lanes)


def lane_index(lanes: list[UOp]) -> UOp:
    """The position of the current lane in an accumulator array over `lanes` (row-major in the given order)."""
    position = UOp.const(0, dtypes.index)
    for lane in lanes:
        position = position * lane.src[0].arg + lane
    return position.simplify()


OUTPUT_LOOP_TYPES = (AxisType.LOOP, AxisType.GLOBAL, AxisType.LOCAL)


def output_ranges(ast: UOp) -> list[UOp]:
    """The loops around the whole kernel, outermost first; LOCAL ranges (work-group threads) innermost."""
    found = [u for u in ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type in OUTPUT_LOOP_TYPES]
    return sorted(found, key=lambda r: (r.arg.axis_type is AxisType.LOCAL, r.arg.axis_id))


@dataclass(frozen=True)
class LoopPlan:
    """The loops of a kernel, as `plan_loops` orders them: BLOCK_REDUCE blocks outermost, then the output loops, and
    the UPCAST lanes (register lanes), opened innermost around each store."""

    loops: tuple[UOp, ...]
    lanes: tuple[UOp, ...]


def plan_loops(linearizer: Linearizer, ast: UOp) -> LoopPlan:
    """Step 1: which loops open around the whole kernel and in what order; the lanes, last axis first."""
    blocks = sorted((u for u in ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.BLOCK_REDUCE),
                    key=lambda r: r.arg.axis_id)  # fmt: skip
    if blocks:
        linearizer.carried = {s.src[1]: s.src[0] for s in ast.src if s.op is Ops.STORE and s.src[1].op is Ops.REDUCE}
    lanes = sorted(
        (u for u in ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.UPCAST),
        key=lambda r: -r.arg.axis_id,
    )
    return LoopPlan((*blocks, *output_ranges(ast)), tuple(lanes))


def open_loops(linearizer: Linearizer, ast: UOp, plan: LoopPlan) -> None:
    """Step 2: open the planned loops, outermost first; before each, the reductions that do not depend on it (a
    softmax's max and sum run once per row), and inside each, the values no inner loop changes."""
    loops = plan.loops
    for depth, rng in enumerate(loops):
        linearizer.next_loop = rng
        linearizer.hoist_reductions(ast)
        linearizer.open_loop(rng)
        linearizer.next_loop = loops[depth + 1] if depth + 1 < len(loops) else None
        if not plan.lanes and depth + 1 < len(loops):  # the innermost loop has nothing inside to hoist out of
            linearizer.hoist_out_of_inner_loops(ast)
    linearizer.next_loop = None
    linearizer.hoist_reductions(ast)


def emit_stores(linearizer: Linearizer, ast: UOp, plan: LoopPlan) -> None:
    """Step 3: each store, inside its lane loops: reductions whose body runs along the lanes first get one
    accumulator per lane, reductions that do not are computed once outside the lanes."""
    lanes = list(plan.lanes)
    for store in ast.src:
        if not lanes:
            linearizer.emit(store)
            continue
        for node in store.toposort():
            if node.op is not Ops.REDUCE or node in linearizer.wide:
                continue
            needed = [lane for lane in lanes if lane in linearizer.needs[node.src[0]]]
            if needed:
                linearizer.emit_wide_reduce(node, needed)
            elif not any(lane in linearizer.needs[node] for lane in lanes):
                linearizer.emit(node)
        for lane in register_nest(lanes):
            linearizer.open_loop(lane)
        linearizer.emit(store)
        for _ in lanes:
            linearizer.close_loop()


def close_loops(linearizer: Linearizer, ast: UOp, plan: LoopPlan) -> None:
    """Step 4: close the planned loops, innermost first."""
    for _ in plan.loops:
        linearizer.close_loop()


LINEARIZE_STEPS: tuple[tuple[str, str], ...] = (
    ("plan loops", "block loops, then output loops; the register lanes last axis first"),
    ("open loops", "each loop opened after the reductions that do not depend on it; invariants hoisted"),
    ("emit stores", "each store in its lane loops, with per-lane accumulators for reductions along the lanes"),
    ("close loops", "the loops closed, innermost first"),
)


def linearize(ast: UOp) -> UOp:
    """The linear program of kernel `ast` (a SINK of STOREs) as a LINEAR UOp; its arg is the SINK's KernelInfo.

    Four named steps (LINEARIZE_STEPS, each traced at DEBUG=5): plan the loops, open them, emit the stores in their
    lane loops, close the loops."""
    linearizer = Linearizer(ast)
    with traced("kernel", "linearize: plan loops"):
        plan = plan_loops(linearizer, ast)
    with traced("kernel", "linearize: open loops"):
        open_loops(linearizer, ast, plan)
    with traced("kernel", "linearize: emit stores"):
        emit_stores(linearizer, ast, plan)
    with traced("kernel", "linearize: close loops"):
        close_loops(linearizer, ast, plan)
    return UOp(Ops.LINEAR, dtypes.void, tuple(linearizer.program), ast.arg)
