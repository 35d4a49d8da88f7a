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
        """The linear node holding `node`'s value in the current loop, computing it (and its sources) if needed."""
        found = self.lookup(node)
        if found is not None:
            return found
        if node.op is Ops.RANGE:
            raise ValueError(f"range {node.arg} is used outside its loop")
        linear = self.emit_reduce(node) if node.op is Ops.REDUCE else self._emit_plain(node)
        self.scopes[-1][node] = linear
        return linear

    def _emit_plain(self, node: UOp) -> UOp:
        new_src = tuple(self.emit(s) for s in node.src)
        return self.append(
            node if all(a is b for a, b in zip(new_src, node.src, strict=True)) else node.replace(src=new_src)
        )

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


def output_ranges(ast: UOp) -> list[UOp]:
    found = [u for u in ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type is not AxisType.REDUCE]
    return sorted(found, key=lambda r: r.arg.axis_id)


def linearize(ast: UOp) -> UOp:
    """The linear program of kernel `ast` (a SINK of STOREs) as a LINEAR UOp; its arg is the SINK's KernelInfo."""
    linearizer = Linearizer(ast)
    loops = output_ranges(ast)
    for rng in loops:
        linearizer.open_loop(rng)
    for store in ast.src:
        linearizer.emit(store)
    for _ in loops:
        linearizer.close_loop()
    return UOp(Ops.LINEAR, dtypes.void, tuple(linearizer.program), ast.arg)
