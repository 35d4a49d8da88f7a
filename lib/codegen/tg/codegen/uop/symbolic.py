"""Symbolic algebra as rewrite rules: constant folding, identities, bounds, sums, division and comparisons.

`symbolic` is the matcher `UOp.simplify()` runs. Integer `//` and `%` truncate toward zero (see ops.py), so the
division rules that rely on floor arithmetic only fire when bounds prove the numerator is non-negative, where
truncation and floor agree. Sum rules only touch integer dtypes: reassociating float additions changes results.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from tg.codegen.dtype import DType, dtypes, truncate
from tg.codegen.uop.alu import exec_alu
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.pattern import PatternMatcher, UPat, graph_rewrite

INTS: tuple[DType, ...] = (dtypes.index, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
INTS = INTS + (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
MAX_SUM_TERMS = 32  # longer sums are left as they are: normalizing them at every ADD would be quadratic


def _is_int(u: UOp) -> bool:
    return u.dtype.scalar().kind in ("int", "uint", "index")


def _const(value: Any, dtype: DType) -> UOp:
    return UOp.const(value, dtype)


# ---------------------------------------------------------------------------------------------------- folding


def fold_constants(alu: UOp) -> UOp | None:
    """An ALU op on constants is the constant it computes."""
    try:
        value = exec_alu(alu.op, alu.dtype, tuple(s.arg for s in alu.src))
    except (ZeroDivisionError, NotImplementedError, OverflowError, ValueError):
        return None
    return _const(value, alu.dtype)


def fold_by_bounds(alu: UOp) -> UOp | None:
    """An integer or bool expression whose bounds meet is that constant."""
    low, high = alu.vmin, alu.vmax
    if low == high and not isinstance(low, float):
        return _const(low, alu.dtype)
    return None


def fold_cast_of_const(cast: UOp, c: UOp) -> UOp | None:
    if cast.dtype.count != 1:
        return None
    return _const(truncate(c.arg, cast.dtype), cast.dtype)


def drop_same_dtype_cast(cast: UOp, x: UOp) -> UOp | None:
    return x if x.dtype is cast.dtype else None


# ---------------------------------------------------------------------------------------------------- identities


def add_zero(x: UOp, c: UOp) -> UOp | None:
    return x if c.arg == 0 else None


def mul_identity(x: UOp, c: UOp) -> UOp | None:
    if c.arg == 1:
        return x
    if c.arg == 0 and _is_int(x):
        return c
    return None


def div_by_one(x: UOp, c: UOp) -> UOp | None:
    if c.arg == 1:
        return x
    if c.arg == -1:
        return -x
    return None


def mod_by_one(x: UOp, c: UOp) -> UOp | None:
    return x.const_like(0) if c.arg in (1, -1) else None


def self_div(x: UOp) -> UOp | None:
    """x // x is 1 and x % x is 0 when x cannot be zero."""
    return None if x.vmin <= 0 <= x.vmax else x.const_like(1)


def self_mod(x: UOp) -> UOp | None:
    return None if x.vmin <= 0 <= x.vmax else x.const_like(0)


def idempotent(x: UOp) -> UOp:
    """max(x, x), x & x, x | x are x."""
    return x


def self_xor(x: UOp) -> UOp | None:
    return x.const_like(0) if _is_int(x) else x.const_like(False)


def self_compare_false(x: UOp) -> UOp | None:
    return UOp.const(False, dtypes.bool) if _is_int(x) or x.dtype is dtypes.bool else None


def self_compare_true(x: UOp) -> UOp | None:
    return UOp.const(True, dtypes.bool) if _is_int(x) or x.dtype is dtypes.bool else None


def where_same_branches(a: UOp) -> UOp:
    return a


def where_const_cond(c: UOp, a: UOp, b: UOp) -> UOp:
    return a if c.arg else b


def where_flip_not(c: UOp, a: UOp, b: UOp) -> UOp:
    """(not c) ? a : b is c ? b : a."""
    return c.where(b, a)


def where_to_cond(cond: UOp, t: UOp, f: UOp) -> UOp | None:
    if t.dtype is not dtypes.bool:
        return None
    if t.arg is True and f.arg is False:
        return cond
    if t.arg is False and f.arg is True:
        return cond.logical_not()
    return None


def bool_and_const(x: UOp, c: UOp) -> UOp:
    return x if c.arg else c


def bool_or_const(x: UOp, c: UOp) -> UOp:
    return c if c.arg else x


def bool_ne_const(x: UOp, c: UOp) -> UOp | None:
    """x != False is x; (not x) != True is x."""
    if c.arg is False:
        return x
    if x.op is Ops.CMPNE and x.src[1].op is Ops.CONST and x.src[1].arg is True:
        return x.src[0]
    return None


def not_less_than(x: UOp, c: UOp) -> UOp | None:
    """not (x < c) is (c-1) < x for integers."""
    if not _is_int(x):
        return None
    return c.const_like(c.arg - 1) < x


def move_const_right(c: UOp, x: UOp, node: UOp) -> UOp | None:
    """Constants go on the right of commutative ops, so one pattern order covers both."""
    if x.op is Ops.CONST:
        return None
    return node.replace(src=(x, c))


# ---------------------------------------------------------------------------------------------------- sums


class Sum:
    """An integer sum as terms with coefficients plus a constant, in the order the terms first appeared."""

    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype
        self.terms: dict[UOp, int] = {}
        self.const = 0
        self.changed = False  # set when normalizing would merge, drop or move something

    def add_term(self, u: UOp, coefficient: int) -> None:
        if u in self.terms:
            self.changed = True
        self.terms[u] = self.terms.get(u, 0) + coefficient

    def build(self) -> UOp:
        out: UOp | None = None
        for u, k in self.terms.items():
            k = truncate(k, self.dtype)
            if k == 0:
                continue
            term = u if k == 1 else UOp(Ops.MUL, self.dtype, (u, _const(k, self.dtype)))
            out = term if out is None else UOp(Ops.ADD, self.dtype, (out, term))
        const = truncate(self.const, self.dtype)
        if out is None:
            return _const(const, self.dtype)
        if const != 0:
            out = UOp(Ops.ADD, self.dtype, (out, _const(const, self.dtype)))
        return out


def split_sum(root: UOp) -> Sum | None:
    """`root` as a Sum, or None when it has more than MAX_SUM_TERMS terms."""
    result = Sum(root.dtype)
    last = root.src[-1] if root.op is Ops.ADD else root  # where a normalized sum keeps its constant
    stack = [root]
    n_consts = 0
    while stack:
        u = stack.pop()
        if u.op is Ops.ADD:
            stack.append(u.src[1])
            stack.append(u.src[0])
        elif u.op is Ops.CONST:
            result.const += u.arg
            n_consts += 1
            if u is not last or n_consts > 1:
                result.changed = True
        elif u.op is Ops.MUL and u.src[1].op is Ops.CONST:
            result.add_term(u.src[0], u.src[1].arg)
        else:
            result.add_term(u, 1)
        if len(result.terms) > MAX_SUM_TERMS:
            return None
    if result.const == 0 and n_consts:
        result.changed = True
    _merge_div_mod_pairs(result)
    return result


def _merge_div_mod_pairs(s: Sum) -> None:
    """k*(x%c) + k*c*(x//c) is k*x: the defining identity of truncated division and remainder.

    The quotient may already have been simplified (`(i*6+j)//12` is `i//2` when j < 6), so when a term with the
    right coefficient exists, the quotient is compared in its simplified form too.
    """
    for u in list(s.terms):
        if u.op is not Ops.MOD or u.src[1].op is not Ops.CONST or u not in s.terms:
            continue
        x, c = u.src
        k = s.terms[u]
        wanted = k * c.arg
        if k == 0 or not any(coef == wanted and t is not u for t, coef in s.terms.items()):
            continue
        quotient = UOp(Ops.IDIV, u.dtype, (x, c))
        if s.terms.get(quotient) != wanted:
            quotient = graph_rewrite(quotient, symbolic, name="simplify quotient")
            if s.terms.get(quotient) != wanted:
                continue
        del s.terms[u]
        del s.terms[quotient]
        inner = split_sum(x) if x.op is Ops.ADD else None
        if inner is None:
            s.add_term(x, k)
        else:
            for term, coef in inner.terms.items():
                s.add_term(term, coef * k)
            s.const += inner.const * k
        s.changed = True
    _remainders_of_pairs(s)


def _remainders_of_pairs(s: Sum) -> None:
    """k*c*(x//c) - k*x is -k*(x%c), the same identity read the other way: a length padded up to a multiple of c
    minus the length (`16*(n//16) + 16 - (n+1)`) becomes `15 - n%16`, whose bounds show it is never negative (a
    slice of a padded symbolic length checks that). Only for x a single term (not a sum of several)."""
    for u in list(s.terms):
        if u.op is not Ops.IDIV or u.src[1].op is not Ops.CONST or u.src[1].arg <= 0 or u not in s.terms:
            continue
        x, c = u.src
        if x.op in (Ops.ADD, Ops.CONST) or s.terms[u] % c.arg:
            continue
        k = s.terms[u] // c.arg
        if k == 0 or s.terms.get(x) != -k:
            continue
        del s.terms[u]
        del s.terms[x]
        s.add_term(UOp(Ops.MOD, u.dtype, (x, c)), -k)
        s.changed = True


def _exact(u: UOp) -> bool:
    """Whether u's value is its mathematical value: index never wraps, and a fixed-width int whose bounds are
    narrower than its dtype did not wrap (bounds widen to the whole dtype when wrapping is possible)."""
    scalar = u.dtype.scalar()
    if scalar.kind == "index":
        return True
    return u.vmin > dtypes.min(scalar) or u.vmax < dtypes.max(scalar)


def normalize_sum(add: UOp) -> UOp | None:
    """Combine like terms and constants of an integer sum: x*2 + y + x*3 + 4 + 1 is x*5 + y + 5."""
    s = split_sum(add)
    if s is None or not (s.changed or any(k == 0 for k in s.terms.values())):
        return None
    return s.build()


def fold_add_consts(x: UOp, c1: UOp, c2: UOp) -> UOp:
    """(x + c1) + c2 is x + (c1 + c2) (the long-sum fallback of normalize_sum)."""
    return x + c1.const_like(exec_alu(Ops.ADD, x.dtype, (c1.arg, c2.arg)))


def fold_mul_consts(x: UOp, c1: UOp, c2: UOp) -> UOp:
    """(x * c1) * c2 is x * (c1 * c2)."""
    return x * c1.const_like(exec_alu(Ops.MUL, x.dtype, (c1.arg, c2.arg)))


def pull_const_out_of_product(x: UOp, c: UOp, y: UOp) -> UOp | None:
    """(x*c) * y is (x*y) * c for integers, so constants of a product meet and fold."""
    if y.op is Ops.CONST:
        return None
    return (x * y) * c


def distribute_const(x: UOp, c1: UOp, c2: UOp) -> UOp:
    """(x + c1) * c2 is x*c2 + c1*c2, which keeps constants at the top of index sums."""
    return x * c2 + c1.const_like(exec_alu(Ops.MUL, x.dtype, (c1.arg, c2.arg)))


# ---------------------------------------------------------------------------------------------------- div and mod


def _gcd_of(s: Sum, divisor: int) -> int:
    g = abs(divisor)
    for k in s.terms.values():
        g = math.gcd(g, k)
    return math.gcd(g, s.const)


def _divide_sum(s: Sum, g: int) -> UOp:
    divided = Sum(s.dtype)
    divided.terms = {u: k // g for u, k in s.terms.items()}
    divided.const = s.const // g
    return divided.build()


def fold_div(x: UOp, c: UOp) -> UOp | None:
    """Integer division by a positive constant: nested divisions, exact multiples, common factors and the
    part of a sum that divides evenly (`(x*4 + y) // 4` is `x + y//4`, and `x` when 0 <= y < 4)."""
    d = c.arg
    if d <= 0 or not _is_int(x) or not _exact(x):
        return None
    if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
        product = x.src[1].arg * d
        return x.src[0] // product if _fits(x, product, product) else None
    if x.op is Ops.MUL and x.src[1].op is Ops.CONST:
        k = x.src[1].arg
        if k % d == 0:
            return x.src[0] * (k // d)
        if k > 0 and d % k == 0:
            return x.src[0] // (d // k)
    s = split_sum(x)
    if s is None:
        return None
    g = _gcd_of(s, d)
    if g > 1:
        return _divide_sum(s, g) // (d // g)
    split = _split_divisible_part(x, s, d, Ops.IDIV)
    if split is not None:
        return split
    nested = _nested_division_with_offset(x, s, d)
    return nested if nested is not None else _drop_small_remainder(x, s, d)


def _nested_division_with_offset(x: UOp, s: Sum, d: int) -> UOp | None:
    """(y//a + c) // d is (y + c*a) // (a*d) when y >= 0 and y + c*a >= 0 (floor of a floor)."""
    if len(s.terms) != 1 or s.const == 0:
        return None
    ((u, k),) = s.terms.items()
    if k != 1 or u.op is not Ops.IDIV or u.src[1].op is not Ops.CONST or u.src[1].arg <= 0:
        return None
    y, a = u.src[0], u.src[1].arg
    offset = s.const * a
    if y.vmin < 0 or y.vmin + offset < 0 or not _fits(y, y.vmax + offset, a * d):
        return None
    return (y + offset) // (a * d)


def _common_factor_splits(s: Sum, d: int) -> Iterator[tuple[int, Sum, Sum]]:
    """For each factor g that d shares with a term's coefficient (largest first, not 1 or d): s split as g*big +
    small, the terms whose coefficient g divides (divided by g) in big, the others in small, the constant shared
    by divmod."""
    for g in sorted({math.gcd(k, d) for k in s.terms.values()} - {1, d}, reverse=True):
        big, small = Sum(s.dtype), Sum(s.dtype)
        for u, k in s.terms.items():
            if k % g == 0:
                big.terms[u] = k // g
            else:
                small.terms[u] = k
        big.const, small.const = divmod(s.const, g)
        yield g, big, small


def _drop_small_remainder(x: UOp, s: Sum, d: int) -> UOp | None:
    """(g*Q + R) // d is Q // (d/g) when g divides d and 0 <= R < g, and x >= 0 (floor of a floor).

    `(k + j*4 + i*8) // 16` with 0 <= k < 4 is `(j + i*2) // 4`.
    """
    if x.vmin < 0:
        return None
    for g, big, small in _common_factor_splits(s, d):
        if not small.terms and small.const == 0:
            continue
        rest = small.build()
        if rest.vmin >= 0 and rest.vmax < g:
            return big.build() // (d // g)
    return None


def _split_divisible_part(x: UOp, s: Sum, d: int, op: Ops) -> UOp | None:
    """For x = d*Q + R with R >= 0 and x >= 0 (so truncation is floor): x//d = Q + R//d and x%d = R%d."""
    if x.vmin < 0:
        return None
    quotient, remainder = Sum(s.dtype), Sum(s.dtype)
    for u, k in s.terms.items():
        if op is Ops.MOD and u.op is Ops.MOD and u.src[1].op is Ops.CONST and u.src[1].arg % d == 0:
            u = u.src[0]  # y % (m*d) and y differ by a multiple of d
        if k % d == 0:
            quotient.terms[u] = quotient.terms.get(u, 0) + k // d
        elif op is Ops.MOD and k % d != k:
            remainder.terms[u] = remainder.terms.get(u, 0) + k % d  # k*u and (k mod d)*u differ by a multiple of d
        else:
            remainder.terms[u] = remainder.terms.get(u, 0) + k
    quotient.const, remainder.const = divmod(s.const, d)
    if not quotient.terms and quotient.const == 0 and remainder.terms == s.terms:
        return None
    rest = remainder.build()
    if rest.vmin < 0:
        return None
    if op is Ops.MOD:
        return rest % d if rest is not x else None
    return quotient.build() + rest // d


def fold_mod(x: UOp, c: UOp) -> UOp | None:
    """Remainder by a positive constant: values already in range, nested remainders, multiples, and sums."""
    d = c.arg
    if d <= 0 or not _is_int(x):
        return None
    if 0 <= x.vmin and x.vmax < d:
        return x
    if -d < x.vmin and x.vmax <= 0:
        return x
    if x.vmin >= 0 and x.vmin // d == x.vmax // d:
        return x - (x.vmin // d) * d
    if not _exact(x):
        return None
    if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg % d == 0:
        return x.src[0] % d
    if x.op is Ops.MUL and x.src[1].op is Ops.CONST and x.src[1].arg % d == 0:
        return x.const_like(0)
    s = split_sum(x)
    if s is None:
        return None
    g = _gcd_of(s, d)
    if g > 1:
        return (_divide_sum(s, g) % (d // g)) * g
    split = _split_divisible_part(x, s, d, Ops.MOD)
    return split if split is not None else _keep_small_remainder(x, s, d)


def _keep_small_remainder(x: UOp, s: Sum, d: int) -> UOp | None:
    """(g*Q + R) % d is (Q % (d/g))*g + R when g divides d, 0 <= R < g and x >= 0: `(i*16 + lane) % 64` with a lane
    in 0..15 is `(i%4)*16 + lane`, an address that moves by one per lane (a vector load), where the remainder of
    the whole sum hid that from the C compiler (a 576-wide output of heads x head_dim, upcast 16, ran scalar)."""
    if x.vmin < 0:
        return None
    for g, big, small in _common_factor_splits(s, d):
        if not big.terms or (not small.terms and small.const == 0):
            continue
        quotient, rest = big.build(), small.build()
        if quotient.vmin >= 0 and rest.vmin >= 0 and rest.vmax < g:
            return (quotient % (d // g)) * g + rest
    return None


def mod_smaller_than_divisor(x: UOp, y: UOp) -> UOp | None:
    """x % y is x when 0 <= x < y."""
    if x.vmin >= 0 and y.vmin > x.vmax:
        return x
    return None


# ---------------------------------------------------------------------------------------------------- comparisons


def _fits(u: UOp, low: Any, high: Any) -> bool:
    """Whether [low, high] stays in u's dtype (so moving terms across a comparison cannot wrap)."""
    if u.dtype.scalar() is dtypes.index:
        return True
    return dtypes.min(u.dtype) <= low and high <= dtypes.max(u.dtype)


def compare_sum_with_const(lhs: UOp, c: UOp) -> UOp | None:
    """Move a sum's constant to the right and divide out a common factor: x*4 + y*8 + 3 < 11 is x + y*2 < 2."""
    if not _is_int(lhs) or lhs.op not in (Ops.ADD, Ops.MUL) or not _exact(lhs):
        return None
    s = split_sum(lhs)
    if s is None or not s.terms:
        return None
    bound = c.arg - s.const
    g = 0
    for k in s.terms.values():
        g = math.gcd(g, k)
    if g < 0:
        g = -g
    if s.const == 0 and g == 1:
        return _compare_without_small_terms(s, c.arg)
    if g > 1:
        bound = -((-bound) // g)  # x*g < b  <=>  x < ceil(b/g)
    s.const = 0
    terms = _divide_sum(s, g) if g > 1 else s.build()
    if not _exact(terms) or not _fits(terms, bound, bound):
        return None
    return terms < terms.const_like(bound)


def _compare_without_small_terms(s: Sum, bound: int) -> UOp | None:
    """g*Q + R < c is Q < q when every R in its bounds gives the same q (e.g. `i*4 + j < 8` is `i < 2` for
    0 <= j < 4): for integers, g*Q + R < c  <=>  Q <= (c - 1 - R) // g."""
    for g in sorted({abs(k) for k in s.terms.values()} - {0, 1}, reverse=True):
        big, small = Sum(s.dtype), Sum(s.dtype)
        for u, k in s.terms.items():
            (big.terms if k % g == 0 else small.terms)[u] = k // g if k % g == 0 else k
        if not small.terms or not big.terms:
            continue
        rest = small.build()
        if math.isinf(rest.vmin) or math.isinf(rest.vmax):
            continue
        highest_q = (bound - 1 - rest.vmax) // g
        if highest_q == (bound - 1 - rest.vmin) // g:
            quotient = big.build()
            if _exact(quotient) and _fits(quotient, highest_q + 1, highest_q + 1):
                return quotient < quotient.const_like(highest_q + 1)
    return None


def compare_div_with_const(x: UOp, d: UOp, c: UOp) -> UOp | None:
    """x // d < c is x < c*d when x >= 0 and d > 0 (truncation equals floor there)."""
    if not _is_int(x) or d.arg <= 0 or x.vmin < 0 or not _fits(x, c.arg * d.arg, c.arg * d.arg):
        return None
    return x < x.const_like(c.arg * d.arg)


# ---------------------------------------------------------------------------------------------------- shifts, masks


def shl_to_mul(x: UOp, c: UOp) -> UOp | None:
    if not _is_int(x) or not 0 <= c.arg < 64:
        return None
    return x * (1 << c.arg)


def shr_to_div(x: UOp, c: UOp) -> UOp | None:
    """x >> c is x // 2**c when x >= 0."""
    if not _is_int(x) or not 0 <= c.arg < 64 or x.vmin < 0:
        return None
    return x // (1 << c.arg)


def and_mask_to_mod(x: UOp, c: UOp) -> UOp | None:
    """x & (2**k - 1) is x % 2**k when x >= 0."""
    m = c.arg
    if not _is_int(x) or x.vmin < 0 or m < 0 or (m + 1) & m:
        return None
    return x % (m + 1)


def max_by_bounds(x: UOp, y: UOp) -> UOp | None:
    if x.vmin >= y.vmax:
        return x
    if y.vmin >= x.vmax:
        return y
    return None


def max_of_offsets(x: UOp, y: UOp) -> UOp | None:
    """max(s + c1, s + c2) is s + max(c1, c2) for integer sums that differ only in their constant."""
    if not _is_int(x) or not _exact(x) or not _exact(y):
        return None
    sx, sy = split_sum(x), split_sum(y)
    if sx is None or sy is None or sx.terms != sy.terms:
        return None
    return x if sx.const >= sy.const else y


def where_by_bounds(c: UOp, a: UOp, b: UOp) -> UOp | None:
    if c.vmin == c.vmax:
        return a if c.vmin else b
    return None


# ---------------------------------------------------------------------------------------------------- tables

_int = UPat.var("x", INTS)
_bool = UPat.var("x", dtypes.bool)

constant_folding = PatternMatcher(
    [
        (UPat(GroupOp.ALU, name="alu", src=UPat(Ops.CONST)), fold_constants),
        (UPat(Ops.CAST, name="cast", src=(UPat.cvar("c"),)), fold_cast_of_const),
        (UPat((Ops.CAST, Ops.BITCAST), name="cast", src=(UPat.var("x"),)), drop_same_dtype_cast),
        (UPat(GroupOp.ALU - {Ops.WHERE}, (*INTS, dtypes.bool), name="alu"), fold_by_bounds),
    ],
    name="constant_folding",
)

identities = PatternMatcher(
    [
        (UPat(GroupOp.Commutative, name="node", src=(UPat.cvar("c"), UPat.var("x"))), move_const_right),
        (UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), add_zero),
        (UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c"))), mul_identity),
        (UPat(Ops.IDIV, src=(_int, UPat.cvar("c"))), div_by_one),
        (UPat(Ops.MOD, src=(_int, UPat.cvar("c"))), mod_by_one),
        (UPat(Ops.IDIV, src=(_int, _int)), self_div),
        (UPat(Ops.MOD, src=(_int, _int)), self_mod),
        (UPat((Ops.MAX, Ops.AND, Ops.OR), src=(UPat.var("x"), UPat.var("x"))), idempotent),
        (UPat(Ops.XOR, src=(UPat.var("x"), UPat.var("x"))), self_xor),
        (UPat((Ops.CMPLT, Ops.CMPNE), src=(UPat.var("x"), UPat.var("x"))), self_compare_false),
        (UPat(Ops.CMPEQ, src=(UPat.var("x"), UPat.var("x"))), self_compare_true),
        (UPat(Ops.WHERE, src=(UPat(), UPat.var("a"), UPat.var("a"))), where_same_branches),
        (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), where_const_cond),
        (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat.var("b"))), where_by_bounds),
        (UPat(Ops.WHERE, src=(UPat.var("c").ne(True), UPat.var("a"), UPat.var("b"))), where_flip_not),
        (UPat(Ops.WHERE, src=(UPat.var("cond"), UPat.cvar("t"), UPat.cvar("f"))), where_to_cond),
        (UPat(Ops.AND, src=(_bool, UPat.cvar("c"))), bool_and_const),
        (UPat(Ops.OR, src=(_bool, UPat.cvar("c"))), bool_or_const),
        (UPat(Ops.CMPNE, src=(_bool, UPat.cvar("c", dtypes.bool))), bool_ne_const),
        (
            UPat(Ops.CMPNE, src=(UPat(Ops.CMPLT, src=(_int, UPat.cvar("c"))), UPat.const(dtypes.bool, True))),
            not_less_than,
        ),
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), max_by_bounds),
    ],
    name="identities",
)

integer_algebra = PatternMatcher(
    [
        (UPat(Ops.ADD, INTS, name="add"), normalize_sum),
        (UPat(Ops.ADD, src=(UPat(Ops.ADD, src=(_int, UPat.cvar("c1"))), UPat.cvar("c2"))), fold_add_consts),
        (UPat(Ops.MUL, src=(UPat(Ops.MUL, src=(_int, UPat.cvar("c1"))), UPat.cvar("c2"))), fold_mul_consts),
        (UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(_int, UPat.cvar("c1"))), UPat.cvar("c2"))), distribute_const),
        (UPat(Ops.MUL, src=[UPat(Ops.MUL, src=(_int, UPat.cvar("c"))), UPat.var("y")]), pull_const_out_of_product),
        (UPat(Ops.IDIV, src=(_int, UPat.cvar("c"))), fold_div),
        (UPat(Ops.MOD, src=(_int, UPat.cvar("c"))), fold_mod),
        (UPat(Ops.MOD, src=(_int, UPat.var("y"))), mod_smaller_than_divisor),
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), max_of_offsets),
        (UPat(Ops.CMPLT, src=(UPat.var("lhs", INTS), UPat.cvar("c"))), compare_sum_with_const),
        (UPat(Ops.CMPLT, src=(UPat(Ops.IDIV, src=(_int, UPat.cvar("d"))), UPat.cvar("c"))), compare_div_with_const),
        (UPat(Ops.SHL, src=(_int, UPat.cvar("c"))), shl_to_mul),
        (UPat(Ops.SHR, src=(_int, UPat.cvar("c"))), shr_to_div),
        (UPat(Ops.AND, src=(_int, UPat.cvar("c"))), and_mask_to_mod),
    ],
    name="integer_algebra",
)

symbolic = PatternMatcher(constant_folding.rules + identities.rules + integer_algebra.rules, name="symbolic")
sym = symbolic  # the shorter name passes use
