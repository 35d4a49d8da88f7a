"""The rewrite engine: UPat patterns, PatternMatcher rule tables, and graph_rewrite to a fixed point.

A rule is `(pattern, callback)`. The callback gets the nodes the pattern bound by `name=` as keyword arguments
(plus `ctx` if it asks for it) and returns a replacement UOp, or None for "no change". A PatternMatcher indexes its
rules by the op at the pattern's root, so a node is only tried against rules that can match it.

graph_rewrite walks the graph without recursion, rewrites every node until no rule applies, and rebuilds the
users of changed nodes. A rule set that never settles (a cycle, or one that keeps growing the graph) stops with a
`RewriteError` naming the matcher.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tg.codegen import stage_trace
from tg.codegen.dtype import DType, dtypes
from tg.codegen.flags import REWRITE_STACK_LIMIT, SPEC
from tg.codegen.uop.ops import GroupOp, Ops, UOp


class RewriteError(RuntimeError):
    """A rewrite did not reach a fixed point."""


class UPat:
    """A pattern over UOps.

    op: an Ops or a set of Ops (None: any). dtype: a DType or several (a vector matches its scalar too).
    src: None (any sources), a tuple (in order), a list (in any order), or one UPat that every source must match.
    arg: exact arg (None: any). name: bind the matched node under this name. allow_any_len: the tuple/list only
    has to match the first sources.
    """

    __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "_src_options", "_each_src", "required_src_ops")

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: UPat | Sequence[UPat] | None = None,
        arg: Any = None,
        name: str | None = None,
        allow_any_len: bool = False,
    ) -> None:
        self.op = None if op is None else (frozenset((op,)) if isinstance(op, Ops) else frozenset(op))
        self.dtype = None if dtype is None else ((dtype,) if isinstance(dtype, DType) else tuple(dtype))
        self.arg = arg
        self.name = name
        self.allow_any_len = allow_any_len
        self.src = src
        self._each_src: UPat | None = src if isinstance(src, UPat) else None
        self._src_options: list[tuple[UPat, ...]] | None = None
        if isinstance(src, list):
            self._src_options = _unique_orders(src)
        elif isinstance(src, tuple):
            self._src_options = [src]
        # ops that must appear among a node's direct sources for this pattern to match (a cheap early reject)
        src_patterns = [src] if isinstance(src, UPat) else list(src) if isinstance(src, (list, tuple)) else []
        self.required_src_ops: frozenset[Ops] = frozenset(
            next(iter(p.op)) for p in src_patterns if p.op is not None and len(p.op) == 1
        )

    # -------------------------------------------------------------------------------- constructors

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any node, bound to `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any constant, bound to `name`."""
        return UPat(Ops.CONST, dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat:
        """The constant `value`."""
        return UPat(Ops.CONST, dtype, arg=value)

    # -------------------------------------------------------------------------------- operator sugar

    def _fix(self, x: Any) -> UPat:
        return x if isinstance(x, UPat) else UPat(Ops.CONST, arg=x)

    def alu(self, op: Ops, *srcs: Any) -> UPat:
        operands = [self, *(self._fix(s) for s in srcs)]
        dtype = dtypes.bool if op in GroupOp.Comparison else None
        return UPat(op, dtype, operands if op in GroupOp.Commutative else tuple(operands))

    def __add__(self, x: Any) -> UPat:
        return self.alu(Ops.ADD, x)

    def __radd__(self, x: Any) -> UPat:
        return self._fix(x).alu(Ops.ADD, self)

    def __mul__(self, x: Any) -> UPat:
        return self.alu(Ops.MUL, x)

    def __rmul__(self, x: Any) -> UPat:
        return self._fix(x).alu(Ops.MUL, self)

    def __floordiv__(self, x: Any) -> UPat:
        return self.alu(Ops.IDIV, x)

    def __mod__(self, x: Any) -> UPat:
        return self.alu(Ops.MOD, x)

    def __lt__(self, x: Any) -> UPat:
        return self.alu(Ops.CMPLT, x)

    def __and__(self, x: Any) -> UPat:
        return self.alu(Ops.AND, x)

    def __or__(self, x: Any) -> UPat:
        return self.alu(Ops.OR, x)

    def __xor__(self, x: Any) -> UPat:
        return self.alu(Ops.XOR, x)

    def __lshift__(self, x: Any) -> UPat:
        return self.alu(Ops.SHL, x)

    def __rshift__(self, x: Any) -> UPat:
        return self.alu(Ops.SHR, x)

    def ne(self, x: Any) -> UPat:
        return self.alu(Ops.CMPNE, x)

    def eq(self, x: Any) -> UPat:
        return self.alu(Ops.CMPEQ, x)

    def maximum(self, x: Any) -> UPat:
        return self.alu(Ops.MAX, x)

    def where(self, x: Any, y: Any) -> UPat:
        return self.alu(Ops.WHERE, x, y)

    def cast(self, dtype: DType | None = None, name: str | None = None) -> UPat:
        return UPat(Ops.CAST, dtype, (self,), name=name)

    def index(self, *idx: UPat, name: str | None = None) -> UPat:
        return UPat(Ops.INDEX, None, (self, *idx), name=name)

    def load(self, name: str | None = None) -> UPat:
        return UPat(Ops.LOAD, None, (self,), name=name, allow_any_len=True)

    def store(self, value: UPat, name: str | None = None) -> UPat:
        return UPat(Ops.STORE, None, (self, value), name=name, allow_any_len=True)

    def __repr__(self) -> str:
        ops = None if self.op is None else sorted(o.name for o in self.op)
        return f"UPat(op={ops}, dtype={self.dtype}, name={self.name!r}, arg={self.arg!r}, src={self.src!r})"

    # -------------------------------------------------------------------------------- matching

    def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        """Every way this pattern matches `uop`, each as the bindings added to `store` (a new dict)."""
        if self.op is not None and uop.op not in self.op:
            return []
        if self.name is not None:
            bound = store.get(self.name)
            if bound is None:
                store = {**store, self.name: uop}
            elif bound is not uop:
                return []
        if self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar() not in self.dtype:
            return []
        if self.arg is not None and (self.arg != uop.arg or type(self.arg) is not type(uop.arg)):
            return []
        if self._each_src is not None:
            return _match_sequence([self._each_src] * len(uop.src), uop.src, store)
        if self._src_options is None:
            return [store]
        results: list[dict[str, UOp]] = []
        n_src = len(uop.src)
        for option in self._src_options:
            if n_src != len(option) and not (self.allow_any_len and n_src >= len(option)):
                continue
            results.extend(_match_sequence(option, uop.src, store))
        return results


def _unique_orders(src: list[UPat]) -> list[tuple[UPat, ...]]:
    orders: list[tuple[UPat, ...]] = []
    for order in itertools.permutations(src):
        if not any(all(a is b for a, b in zip(order, seen, strict=True)) for seen in orders):
            orders.append(order)
    return orders


def _match_sequence(patterns: Sequence[UPat], srcs: tuple[UOp, ...], store: dict[str, UOp]) -> list[dict[str, UOp]]:
    stores = [store]
    for pattern, s in zip(patterns, srcs, strict=False):
        next_stores: list[dict[str, UOp]] = []
        for st in stores:
            next_stores.extend(pattern.match(s, st))
        if not next_stores:
            return []
        stores = next_stores
    return stores


Callback = Callable[..., UOp | None]


class _Rule:
    __slots__ = ("pattern", "callback", "wants_ctx")

    def __init__(self, pattern: UPat, callback: Callback) -> None:
        self.pattern = pattern
        self.callback = callback
        self.wants_ctx = "ctx" in inspect.signature(callback).parameters


class PatternMatcher:
    """An ordered list of (UPat, callback) rules; the first rule whose callback returns a UOp wins."""

    def __init__(self, rules: Sequence[tuple[UPat, Callback]], name: str | None = None) -> None:
        self.rules = list(rules)
        self.name = name or "PatternMatcher"
        self._by_op: dict[Ops, list[_Rule]] = {op: [] for op in Ops}
        for pattern, callback in self.rules:
            rule = _Rule(pattern, callback)
            for op in pattern.op if pattern.op is not None else Ops:
                self._by_op[op].append(rule)

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules, name=f"{self.name}+{other.name}")

    def __repr__(self) -> str:
        return f"<PatternMatcher {self.name} with {len(self.rules)} rules>"

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """The first replacement any rule offers for `uop` (not its sources), or None."""
        rules = self._by_op[uop.op]
        if not rules:
            return None
        src_ops: frozenset[Ops] | None = None
        for rule in rules:
            required = rule.pattern.required_src_ops
            if required:
                if src_ops is None:
                    src_ops = frozenset(s.op for s in uop.src)
                if not required <= src_ops:
                    continue
            for bindings in rule.pattern.match(uop, {}):
                result = rule.callback(ctx=ctx, **bindings) if rule.wants_ctx else rule.callback(**bindings)
                if result is not None and result is not uop:
                    stage_trace.rule_fired(self.name, rule.callback)
                    return result
        return None


# ---------------------------------------------------------------------------------------------------- graph_rewrite

_VISIT, _REBUILD, _ADOPT = 0, 1, 2


class _Rewriter:
    """One graph_rewrite run: `done` maps every finished node to its fixed point."""

    def __init__(self, pm: PatternMatcher, ctx: Any, bottom_up: bool, name: str | None) -> None:
        self.pm = pm
        self.ctx = ctx
        self.bottom_up = bottom_up
        self.name = name or pm.name
        self.done: dict[UOp, UOp] = {}
        self.limit = int(REWRITE_STACK_LIMIT)

    def _error(self, why: str, node: UOp) -> RewriteError:
        return RewriteError(
            f"graph_rewrite {self.name!r} ({self.pm!r}) did not reach a fixed point: {why} at {node.op!r}"
        )

    def _rewrite_before_sources(self, node: UOp) -> UOp:
        """bottom_up mode: apply the rules to a node until none applies, before looking at its sources."""
        seen = {node}
        while (new := self.pm.rewrite(node, self.ctx)) is not None:
            if new in seen:
                raise self._error("a rule cycle", new)
            if len(seen) > self.limit:
                raise self._error("too many rewrites of one node", new)
            seen.add(new)
            node = new
        return node

    def _finish(self, node: UOp, result: UOp) -> None:
        self.done[node] = result
        self.done[result] = result  # a fixed point rewrites to itself; no need to look at it again

    def rewrite(self, root: UOp) -> UOp:
        done = self.done
        in_progress: set[UOp] = set()
        # each entry: (node, what to do next, the node whose result decides node's result)
        stack: list[tuple[UOp, int, UOp]] = [(root, _VISIT, root)]
        while stack:
            if len(stack) > self.limit:
                raise self._error(f"more than {self.limit} pending steps (REWRITE_STACK_LIMIT)", stack[-1][0])
            node, step, current = stack.pop()
            if node in done:
                continue
            if step == _VISIT:
                if node in in_progress:
                    raise self._error("a rewrite produced a node that contains itself", node)
                in_progress.add(node)
                if self.bottom_up:
                    current = self._rewrite_before_sources(node)
                stack.append((node, _REBUILD, current))
                for s in reversed(current.src):
                    if s not in done:
                        stack.append((s, _VISIT, s))
            elif step == _REBUILD:
                new_src = tuple([done[s] for s in current.src])
                if new_src != current.src:  # UOp equality is identity, so this compares node by node
                    rebuilt = current.replace(src=new_src)
                    stack.append((node, _ADOPT, rebuilt))
                    stack.append((rebuilt, _VISIT, rebuilt))
                    continue
                replacement = None if self.bottom_up else self.pm.rewrite(current, self.ctx)
                if replacement is None:
                    in_progress.discard(node)
                    self._finish(node, current)
                else:
                    stack.append((node, _ADOPT, replacement))
                    stack.append((replacement, _VISIT, replacement))
            else:  # _ADOPT: node's result is the finished result of `current`
                in_progress.discard(node)
                self._finish(node, done[current])
        return done[root]


def graph_rewrite(
    sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None
) -> UOp:
    """Rewrite every node of `sink` with `pm` until no rule applies anywhere; returns the new root.

    By default a node's sources are rewritten before the node; `bottom_up=True` rewrites a node before its sources.
    """
    result = _Rewriter(pm, ctx, bottom_up, name).rewrite(sink)
    if SPEC:
        from tg.codegen.uop.spec import type_verify

        type_verify(result)
    return result


def graph_rewrite_map(
    sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None
) -> dict[UOp, UOp]:
    """Like graph_rewrite, but return what every node of the original graph became."""
    rewriter = _Rewriter(pm, ctx, bottom_up, name)
    rewriter.rewrite(sink)
    if SPEC:
        from tg.codegen.uop.spec import type_verify

        type_verify(rewriter.done[sink])
    # in bottom_up mode nodes below a rewritten node may never be visited; they have no entry
    return {node: rewriter.done[node] for node in sink.toposort() if node in rewriter.done}
