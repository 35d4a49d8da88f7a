"""Interval analysis: a [vmin, vmax] range that contains every value a UOp can take.

Bounds are computed bottom-up over the graph without recursion (deep graphs are common) and stored on each node.
Integer division and remainder truncate toward zero (see ops.py). Fixed-width ints wrap, so an interval that leaves
the dtype's range widens to the whole range; `index` never wraps. Float bounds are only tracked for constants.
"""

from __future__ import annotations

import math
from typing import Any

from tg.codegen.dtype import dtypes
from tg.codegen.uop.alu import trunc_div
from tg.codegen.uop.ops import Ops, UOp

Bounds = tuple[Any, Any]


def compute_bounds(root: UOp) -> None:
    """Store `_bounds` on `root` and every node below it that lacks them."""
    if all(hasattr(s, "_bounds") for s in root.src):  # the common case in a rewrite: sources are done
        object.__setattr__(root, "_bounds", _node_bounds(root))
        return
    for node in root.toposort(lambda u: not hasattr(u, "_bounds")):
        if not hasattr(node, "_bounds"):
            object.__setattr__(node, "_bounds", _node_bounds(node))


def _dtype_bounds(u: UOp) -> Bounds:
    scalar = u.dtype.scalar()
    if scalar.kind in ("bool", "int", "uint", "float"):
        return dtypes.min(scalar), dtypes.max(scalar)
    if scalar.kind == "index":
        return -math.inf, math.inf
    return -math.inf, math.inf


def _node_bounds(u: UOp) -> Bounds:
    kind = u.dtype.scalar().kind
    if u.op is Ops.CONST:
        return u.arg, u.arg
    if kind == "float" or kind not in ("bool", "int", "uint", "index"):
        return _dtype_bounds(u)
    rule = _BOUNDS_RULES.get(u.op)
    if rule is None:
        return _dtype_bounds(u)
    low, high = rule(u, *(s._bounds for s in u.src))
    return _fit_to_dtype(u, low, high)


def _fit_to_dtype(u: UOp, low: Any, high: Any) -> Bounds:
    if isinstance(low, float) and math.isnan(low) or isinstance(high, float) and math.isnan(high):
        return _dtype_bounds(u)
    if u.dtype.scalar().kind == "index":
        return low, high
    dt_low, dt_high = _dtype_bounds(u)
    if low < dt_low or high > dt_high:
        return dt_low, dt_high  # the value wraps, so anything in the dtype's range is possible
    return low, high


# -------------------------------------------------------------------------------------------- one rule per op


def _variable(u: UOp) -> Bounds:
    return u.arg.vmin, u.arg.vmax


def _counter(u: UOp, end: Bounds, *_: Bounds) -> Bounds:
    """RANGE and SPECIAL count 0..end-1."""
    return 0, max(end[1] - 1, 0)


def _same_as_first(u: UOp, first: Bounds, *_: Bounds) -> Bounds:
    return first


def _add(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    return a[0] + b[0], a[1] + b[1]


def _sub(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    return a[0] - b[1], a[1] - b[0]


def _products(a: Bounds, b: Bounds) -> list[Any]:
    out = []
    for x in a:
        for y in b:
            # 0 * inf is 0 here: an unbounded value times exactly zero is zero
            out.append(0 if x == 0 or y == 0 else x * y)
    return out


def _mul(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    products = _products(a, b)
    return min(products), max(products)


def _neg(u: UOp, a: Bounds) -> Bounds:
    if u.dtype.scalar() is dtypes.bool:
        return (not a[1], not a[0])
    return -a[1], -a[0]


def _idiv(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    if b[0] <= 0 <= b[1]:
        # the divisor may be zero (undefined) or +-1: the quotient is never larger in magnitude than the dividend
        largest = max(abs(a[0]), abs(a[1]))
        return -largest, largest
    quotients = [_trunc_div_any(x, y) for x in a for y in b]
    return min(quotients), max(quotients)


def _trunc_div_any(x: Any, y: Any) -> Any:
    """Truncating division extended to infinite bounds."""
    if math.isinf(x) and math.isinf(y):
        return 0 if False else (math.inf if (x > 0) == (y > 0) else -math.inf)
    if math.isinf(y):
        return 0
    if math.isinf(x):
        return math.inf if (x > 0) == (y > 0) else -math.inf
    return trunc_div(int(x), int(y))


def _mod(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    largest_divisor = max(abs(b[0]), abs(b[1]))
    limit = largest_divisor - 1  # |a % b| < |b|
    if b[0] == b[1] and b[0] != 0 and not math.isinf(b[0]) and a[0] >= 0 and a[1] - a[0] < abs(b[0]):
        low, high = a[0] % abs(b[0]), a[1] % abs(b[0])
        if low <= high:  # the whole interval sits in one period
            return low, high
    low = 0 if a[0] >= 0 else max(a[0], -limit)
    high = 0 if a[1] <= 0 else min(a[1], limit)
    return low, high


def _max(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    return max(a[0], b[0]), max(a[1], b[1])


def _cmplt(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    if a[1] < b[0]:
        return True, True
    if a[0] >= b[1]:
        return False, False
    return False, True


def _cmpne(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    if a[1] < b[0] or b[1] < a[0]:
        return True, True
    if a[0] == a[1] == b[0] == b[1]:
        return False, False
    return False, True


def _cmpeq(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    low, high = _cmpne(u, a, b)
    return not high, not low


def _where(u: UOp, cond: Bounds, a: Bounds, b: Bounds) -> Bounds:
    if cond[0] == cond[1]:
        return a if cond[0] else b
    return min(a[0], b[0]), max(a[1], b[1])


def _bool_logic(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    values = [_BOOL_OPS[u.op](x, y) for x in (a[0], a[1]) for y in (b[0], b[1])]
    return min(values), max(values)


_BOOL_OPS = {Ops.AND: lambda x, y: x and y, Ops.OR: lambda x, y: x or y, Ops.XOR: lambda x, y: x != y}


def _bits_below(n: Any) -> Any:
    """The all-ones number with as many bits as n (an upper bound of x|y and x^y for 0 <= x, y <= n)."""
    return math.inf if math.isinf(n) else (1 << int(n).bit_length()) - 1


def _and(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    if u.dtype.scalar() is dtypes.bool:
        return _bool_logic(u, a, b)
    if a[0] >= 0 and b[0] >= 0:
        return 0, min(a[1], b[1])
    if a[0] >= 0:
        return 0, a[1]
    if b[0] >= 0:
        return 0, b[1]
    return _dtype_bounds(u)


def _or_xor(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    if u.dtype.scalar() is dtypes.bool:
        return _bool_logic(u, a, b)
    if a[0] >= 0 and b[0] >= 0:
        low = max(a[0], b[0]) if u.op is Ops.OR else 0
        return low, _bits_below(max(a[1], b[1]))
    return _dtype_bounds(u)


def _shl(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    if b[0] < 0 or math.isinf(b[1]) or b[1] > 64:
        return _dtype_bounds(u)
    return _mul(u, a, (1 << int(b[0]), 1 << int(b[1])))


def _shr(u: UOp, a: Bounds, b: Bounds) -> Bounds:
    if b[0] < 0 or math.isinf(b[1]):
        return _dtype_bounds(u)
    # arithmetic right shift is floor division by 2**b: monotone in a, and shrinks toward 0 or -1 as b grows
    candidates = [_floor_shift(x, int(y)) for x in a for y in (b[0], min(b[1], 4096))]
    return min(candidates), max(candidates)


def _floor_shift(x: Any, y: int) -> Any:
    return x if math.isinf(x) else int(x) >> y


def _cast(u: UOp, a: Bounds) -> Bounds:
    source = u.src[0].dtype.scalar()
    target = u.dtype.scalar()
    if target.kind == "bool":
        if a[0] > 0 or a[1] < 0:
            return True, True
        if a[0] == a[1] == 0:
            return False, False
        return False, True
    if source.kind == "float":
        return _dtype_bounds(u)
    low, high = int(a[0]) if not math.isinf(a[0]) else a[0], int(a[1]) if not math.isinf(a[1]) else a[1]
    return low, high


def _bind(u: UOp, var: Bounds, value: Bounds) -> Bounds:
    return var


_BOUNDS_RULES: dict[Ops, Any] = {
    Ops.DEFINE_VAR: _variable,
    Ops.RANGE: _counter,
    Ops.SPECIAL: _counter,
    Ops.BIND: _bind,
    Ops.ADD: _add,
    Ops.SUB: _sub,
    Ops.MUL: _mul,
    Ops.NEG: _neg,
    Ops.IDIV: _idiv,
    Ops.MOD: _mod,
    Ops.MAX: _max,
    Ops.CMPLT: _cmplt,
    Ops.CMPNE: _cmpne,
    Ops.CMPEQ: _cmpeq,
    Ops.WHERE: _where,
    Ops.AND: _and,
    Ops.OR: _or_xor,
    Ops.XOR: _or_xor,
    Ops.SHL: _shl,
    Ops.SHR: _shr,
    Ops.CAST: _cast,
    Ops.AFTER: _same_as_first,
    Ops.VECTORIZE: lambda u, *srcs: (min(s[0] for s in srcs), max(s[1] for s in srcs)),
}
