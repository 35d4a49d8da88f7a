"""Kernel AST -> linear program: ranges become loops, REDUCEs become accumulators, and every value is placed in
the innermost loop it depends on.

The result is a LINEAR UOp whose sources are the program, in execution order:

    RANGE r            opens a loop over r (0 .. end-1); END(r) closes it
    PARAM (REG)        an accumulator: a one-element register array, read and written through INDEX/LOAD/STORE
    AFTER(x, deps...)  the value x, read after deps (keeps the loads of an accumulator distinct nodes)
    everything else    computes a value from earlier entries (LOAD, STORE, INDEX, ALU, CAST, CONST, ...)

A node may appear more than once when it is needed again outside the loop it was first computed in; a renderer
that names values by the latest place they were computed gets the right one.
"""

from __future__ import annotations

from tg.codegen.dtype import AddrSpace, dtypes
from tg.codegen.schedule.kernel import reduce_identity
from tg.codegen.uop.args import AxisType, ParamArg
from tg.codegen.uop.ops import Ops, UOp


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
        self.wide: dict[UOp, tuple[UOp, UOp]] = {}  # REDUCE with one accumulator per lane -> (accumulators, end)

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
        for inner in node.toposort(lambda u: self.lookup(u) is None and u.op is not Ops.REDUCE):
            if self.lookup(inner) is not None:
                continue
            if inner.op is Ops.RANGE:
                raise ValueError(f"range {inner.arg} is used outside its loop")
            if inner.op is Ops.REDUCE:
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

    def emit_reduce(self, reduce: UOp) -> UOp:
        body, ranges = reduce.src[0], reduce.src[1:]
        op, dtype = reduce.arg, reduce.dtype
        self.hoist_invariants(body)
        acc = self.append(UOp(Ops.PARAM, dtype.ptr(1, AddrSpace.REG), (), ParamArg(self.accumulators, "acc")))
        self.accumulators += 1
        slot = self.append(acc.index(self.emit(UOp.const(0, dtypes.index))))
        initial = self.append(slot.store(self.emit(UOp.const(reduce_identity(op, dtype), dtype))))
        for rng in ranges:
            self.open_loop(rng)
        value = self.emit(body)
        current = self.append(self.append(self.append(acc.after(initial, *ranges)).index(slot.src[1])).load())
        combined = self.append(UOp(op, dtype, (current, value)))
        update = self.append(slot.store(combined))
        end = update
        for _ in ranges:
            end = self.close_loop(end)
        return self.append(self.append(self.append(acc.after(end)).index(slot.src[1])).load())

    def emit_wide_reduce(self, reduce: UOp, lane: UOp) -> None:
        """A REDUCE whose body runs along output range `lane` (an UPCAST range): one accumulator per lane, and the
        lane loop innermost, so each step of the reduction reads `lane`-many consecutive elements:

            for l: acc[l] = identity
            for r: for l: acc[l] = acc[l] op body(r, l)

        Its value is read later, inside another loop over `lane` (see wide_result)."""
        body, ranges = reduce.src[0], reduce.src[1:]
        op, dtype = reduce.arg, reduce.dtype
        self.hoist_invariants(body)
        lanes = lane.src[0].arg
        acc = self.append(UOp(Ops.PARAM, dtype.ptr(lanes, AddrSpace.REG), (), ParamArg(self.accumulators, "acc")))
        self.accumulators += 1
        self.open_loop(lane)
        slot = self.append(acc.index(lane))
        initialized = self.close_loop(self.append(slot.store(self.emit(UOp.const(reduce_identity(op, dtype), dtype)))))
        for rng in ranges:
            self.open_loop(rng)
        self.open_loop(lane)
        value = self.emit(body)
        current = self.append(self.append(self.append(acc.after(initialized, *ranges)).index(lane)).load())
        combined = self.append(UOp(op, dtype, (current, value)))
        end = self.append(self.append(slot).store(combined))
        for _ in (*ranges, lane):
            end = self.close_loop(end)
        self.wide[reduce] = (acc, end)

    def wide_result(self, reduce: UOp) -> UOp:
        acc, end = self.wide[reduce]
        lane = self.lookup(next(r for r in self.open_ranges if r.arg.axis_type is AxisType.UPCAST))
        return self.append(self.append(self.append(acc.after(end)).index(lane)).load())


def output_ranges(ast: UOp) -> list[UOp]:
    found = [u for u in ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.LOOP]
    return sorted(found, key=lambda r: r.arg.axis_id)


def linearize(ast: UOp) -> UOp:
    """The linear program of kernel `ast` (a SINK of STOREs) as a LINEAR UOp; its arg is the SINK's KernelInfo.

    An UPCAST range (at most one, see upcast.py) is opened innermost: its reductions get one accumulator per lane
    first, then the rest of the kernel runs in a loop over the lanes."""
    linearizer = Linearizer(ast)
    loops = output_ranges(ast)
    lanes = [u for u in ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.UPCAST]
    for rng in loops:
        linearizer.open_loop(rng)
    for store in ast.src:
        if not lanes:
            linearizer.emit(store)
            continue
        for node in store.toposort():
            if node.op is Ops.REDUCE and lanes[0] in linearizer.needs[node.src[0]] and node not in linearizer.wide:
                linearizer.emit_wide_reduce(node, lanes[0])
        linearizer.open_loop(lanes[0])
        linearizer.emit(store)
        linearizer.close_loop()
    for _ in loops:
        linearizer.close_loop()
    return UOp(Ops.LINEAR, dtypes.void, tuple(linearizer.program), ast.arg)
