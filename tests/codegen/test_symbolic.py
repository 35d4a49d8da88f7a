"""Symbolic rules: each case lists an input and its expected short form. Every case is also checked against
exhaustive evaluation (sym_infer over all variable values), the oracle that the rewrite kept the function."""

import itertools

import pytest

from tg.codegen import Ops, UOp, dtypes, sym_infer


def v(name: str, lo: int, hi: int) -> UOp:
    return UOp.variable(name, lo, hi)


i, j, k, l = v("i", 0, 3), v("j", 0, 5), v("k", 0, 1), v("l", 0, 7)  # noqa: E741 - index names
x, y, z = v("x", 0, 10), v("y", 0, 3), v("z", -5, 5)


def _check_same_function(before: UOp, after: UOp) -> None:
    variables = sorted({u for u in before.toposort() if u.op is Ops.DEFINE_VAR}, key=lambda u: u.arg.name)
    ranges = [range(u.arg.vmin, u.arg.vmax + 1) for u in variables]
    for values in itertools.product(*ranges):
        vals = {u.arg.name: value for u, value in zip(variables, values, strict=True)}
        assert sym_infer(after, vals) == sym_infer(before, vals), vals


CASES = [
    # identities and constants
    ("x+0", x + 0, "x"),
    ("x*1", x * 1, "x"),
    ("x*0", x * 0, "0"),
    ("x//1", x // 1, "x"),
    ("x%1", x % 1, "0"),
    ("x-x", x - x, "0"),
    ("(x+3)-3", (x + 3) - 3, "x"),
    ("constant folding", UOp.const(3) * 4 + 2, "14"),
    ("like terms", x * 2 + y + x * 3 + 4 + 1, "(((x*5)+y)+5)"),
    ("max decided by bounds", x.maximum(-1), "x"),
    ("min of offsets", x.minimum(x + 1), "x"),
    ("nested constant products", (x * 2) * 3, "(x*6)"),
    ("const distributes", (x + 2) * 3, "((x*3)+6)"),
    # division and modulo with bounds
    ("(x*4+y)//4", (x * 4 + y) // 4, "x"),
    ("(x*4+y)%4", (x * 4 + y) % 4, "y"),
    ("(x*4+y+4)//4", (x * 4 + y + 4) // 4, "(x+1)"),
    ("(x*4+y)//2", (x * 4 + y) // 2, "((x*2)+(y//2))"),
    ("common factor", (x * 2 + 2) // 4, "((x+1)//2)"),
    ("factor in every term", (x * 12 + y * 4) // 4, "((x*3)+y)"),
    ("nested division", (x // 2) // 3, "(x//6)"),
    ("nested modulo", (x % 8) % 4, "(x%4)"),
    ("multiple modulo", (x * 8) % 4, "0"),
    ("exact division", (x * 6) // 3, "(x*2)"),
    ("mod below divisor", y % 4, "y"),
    ("mod by variable larger", y % (x + 4), "y"),
    ("division below divisor", y // 4, "0"),
    ("div-mod recombine", (x // 4) * 4 + x % 4, "x"),
    ("div-mod recombine scaled", (x // 4) * 12 + (x % 4) * 3, "(x*3)"),
    ("padded length minus length", (x // 4) * 4 + 4 - (x + 1), "(((x%4)*-1)+3)"),  # never negative (vmin)
    ("div minus numerator scaled", (x // 4) * 8 - x * 2, "((x%4)*-2)"),
    ("lane under a wider modulo", (x * 4 + y) % 8, "(((x%2)*4)+y)"),  # consecutive in y
    ("negative numerator kept", z // 3, "(z//3)"),
    ("negative numerator exact", (z * 3) // 3, "z"),
    # comparisons
    ("x*4<9", x * 4 < 9, "(x<3)"),
    ("(x+3)<5", (x + 3) < 5, "(x<2)"),
    ("small remainder under compare", i * 4 + y < 8, "(i<2)"),
    ("compare decided", y < 4, "True"),
    ("ne decided", y.ne(7), "True"),
    ("division compare", (x // 4) < 2, "(x<8)"),
    ("not less than", (x < 4).logical_not(), "(3<x)"),
    # shifts and masks on non-negative values
    ("shl", x << 2, "(x*4)"),
    ("shr", x >> 1, "(x//2)"),
    ("and mask", x & 7, "(x%8)"),
]


@pytest.mark.parametrize("before,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_simplifies_to_expected_form(before: UOp, expected: str):
    after = before.simplify()
    assert after.render() == expected
    _check_same_function(before, after)


# reshape / permute / flatten chains: the index of one view expressed in the ranges of another
RESHAPE_CASES = [
    # flatten (4,6) -> (24,) -> (4,6) gives back each range
    ("unflatten row", (i * 6 + j) // 6, "i"),
    ("unflatten column", (i * 6 + j) % 6, "j"),
    # flatten (4,6,2) and take the middle axis back out
    ("middle axis", ((i * 12 + j * 2 + k) // 2) % 6, "j"),
    # reshape (4,6) -> (2,12) -> (4,6): flatten, split, and flatten again
    ("reshape round trip", ((i * 6 + j) // 12) * 12 + (i * 6 + j) % 12, "(j+(i*6))"),
    # (4,6) -> (24,) -> (8,3): the row of the new view
    ("split of merged axes", (i * 6 + j) // 3, "((i*2)+(j//3))"),
    # (4,8) -> (32,) -> (2,16) then taking the row: only i matters
    ("coarser row", (i * 8 + l) // 16, "(i//2)"),
    # (2,4,8) flattened then divided by the two inner sizes
    ("outermost of three", (k * 32 + i * 8 + l) // 32, "k"),
    ("innermost of three", (k * 32 + i * 8 + l) % 8, "l"),
    # expand with a stride-0 axis and a permute of (4,6) -> (6,4) flattened
    ("permute then flatten", (j * 4 + i) // 4, "j"),
    ("permute then flatten column", (j * 4 + i) % 4, "i"),
    # flatten with an offset (a shrink/pad view)
    ("shifted view", (i * 6 + j + 6) // 6, "(i+1)"),
    ("bounds of valid", (i * 6 + j) < 12, "(i<2)"),
]


@pytest.mark.parametrize("before,expected", [c[1:] for c in RESHAPE_CASES], ids=[c[0] for c in RESHAPE_CASES])
def test_view_indices_simplify_to_canonical_forms(before: UOp, expected: str):
    after = before.simplify()
    assert after.render() == expected
    _check_same_function(before, after)


def test_float_sums_are_not_reassociated():
    a = UOp.variable("a", 0, 1).cast(dtypes.float)
    e = (a + 1.0) + 2.0
    assert e.simplify() is e


def test_int32_comparison_that_could_wrap_is_left_alone():
    w = UOp.variable("w", -(2**31), 2**31 - 1, dtypes.int32)
    e = (w + 5) < 10
    assert e.simplify() is e


def test_a_padded_symbolic_length_is_known_not_below_the_length():
    """(A slice of the first n + 1 of ceil((n + 1) / 16) * 16 elements passes the tensor layer's bounds check.)"""
    n = v("n", 0, 4095)
    assert ((n // 16) * 16 + 16 - (n + 1)).simplify().vmin == 0


def test_simplify_is_idempotent_on_results():
    e = ((x * 4 + y) // 2) % 3 + (x * 4 + y) // 4
    once = e.simplify()
    assert once.simplify() is once


def test_more_cases_from_random_expressions():
    a, d, f = v("a", 0, 7), v("d", 0, 31), v("f", 0, 100)
    cases = [
        ((((a.maximum(f) + a) + 1) // 4 + 1) // 2, "(((max(a, f)+a)+5)//8)"),
        (((d * -1) * (f * -1)) * a, "((f*d)*a)"),
        (((a + d * 8) % 16 + f % 8) % 2, "((a+f)%2)"),
    ]
    for before, expected in cases:
        after = before.simplify()
        assert after.render() == expected
        for vals in [{"a": av, "d": dv, "f": fv} for av in (0, 3, 7) for dv in (0, 5, 31) for fv in (0, 9, 100)]:
            assert sym_infer(after, vals) == sym_infer(before, vals)


def test_where_with_equal_branches_folds_to_the_branch() -> None:
    # regression: the rule bound the condition to a name its callback did not accept (TypeError)
    from tg.codegen import UOp

    x = UOp.variable("x", 0, 10)
    cond = x < 5
    assert cond.where(x, x).simplify() is x
