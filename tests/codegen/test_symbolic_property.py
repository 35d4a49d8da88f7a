"""Property tests: simplify keeps the value of random integer expressions, and bounds always hold.

`sym_infer` evaluates with truncating `//` and `%` (C semantics), the semantics of the IR.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tg.codegen import UOp, dtypes, sym_infer

VARIABLES = {"a": (0, 8), "b": (0, 3), "c": (-6, 6), "d": (1, 40), "e": (-20, -2)}
BINARY = ["+", "-", "*", "max", "min"]


def _variable(name: str) -> UOp:
    return UOp.variable(name, *VARIABLES[name])


leaves = st.one_of(st.sampled_from(sorted(VARIABLES)).map(_variable), st.integers(-9, 9).map(UOp.const))


def _combine(children: st.SearchStrategy[UOp]) -> st.SearchStrategy[UOp]:
    binary = st.tuples(st.sampled_from(BINARY), children, children).map(_apply_binary)
    divided = st.tuples(st.sampled_from(["//", "%"]), children, st.sampled_from([-7, -4, -2, 1, 2, 3, 4, 8, 16]))
    by_variable = st.tuples(st.sampled_from(["//", "%"]), children, st.sampled_from(["d", "e"]).map(_variable))
    return st.one_of(binary, divided.map(_apply_binary), by_variable.map(_apply_binary))


def _apply_binary(args: tuple) -> UOp:
    op, x, y = args
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "//":
        return x // y
    if op == "%":
        return x % y
    if op == "max":
        return x.maximum(y)
    return x.minimum(y)


expressions = st.recursive(leaves, _combine, max_leaves=12)
comparisons = st.tuples(st.sampled_from(["<", "!=", "=="]), expressions, expressions)
assignments = st.fixed_dictionaries({name: st.integers(lo, hi) for name, (lo, hi) in VARIABLES.items()})


def _compare(args: tuple) -> UOp:
    op, x, y = args
    return x < y if op == "<" else (x.ne(y) if op == "!=" else x.eq(y))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions, st.lists(assignments, min_size=1, max_size=4))
def test_simplify_keeps_values_and_values_stay_in_bounds(expr: UOp, values: list[dict[str, int]]):
    simplified = expr.simplify()
    for vals in values:
        expected = sym_infer(expr, vals)
        assert sym_infer(simplified, vals) == expected, (expr.render(), simplified.render(), vals)
        assert expr.vmin <= expected <= expr.vmax, (expr.render(), vals)
        assert simplified.vmin <= expected <= simplified.vmax, (simplified.render(), vals)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(comparisons.map(_compare), st.lists(assignments, min_size=1, max_size=4))
def test_simplify_keeps_comparison_results(expr: UOp, values: list[dict[str, int]]):
    simplified = expr.simplify()
    for vals in values:
        expected = sym_infer(expr, vals)
        assert sym_infer(simplified, vals) == expected, (expr.render(), simplified.render(), vals)
        assert expr.vmin <= expected <= expr.vmax


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions, assignments)
def test_every_subexpression_lies_within_its_bounds(expr: UOp, vals: dict[str, int]):
    for node in expr.toposort():
        value = sym_infer(node, vals)
        assert node.vmin <= value <= node.vmax, (node.render(), vals)


INT8_VARIABLES = {"p": (-100, 100), "q": (0, 127), "s": (-128, 127)}


def _int8_variable(name: str) -> UOp:
    return UOp.variable(name, *INT8_VARIABLES[name], dtype=dtypes.int8)


int8_leaves = st.one_of(
    st.sampled_from(sorted(INT8_VARIABLES)).map(_int8_variable),
    st.integers(-128, 127).map(lambda c: UOp.const(c, dtypes.int8)),
)


def _int8_combine(children: st.SearchStrategy[UOp]) -> st.SearchStrategy[UOp]:
    binary = st.tuples(st.sampled_from(BINARY), children, children).map(_apply_binary)
    divisors = st.sampled_from([-3, 1, 2, 4, 5, 16, 64]).map(lambda c: UOp.const(c, dtypes.int8))
    divided = st.tuples(st.sampled_from(["//", "%"]), children, divisors).map(_apply_binary)
    return st.one_of(binary, divided)


int8_expressions = st.recursive(int8_leaves, _int8_combine, max_leaves=10)
int8_assignments = st.fixed_dictionaries({name: st.integers(lo, hi) for name, (lo, hi) in INT8_VARIABLES.items()})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int8_expressions, st.booleans(), st.integers(-128, 127), st.lists(int8_assignments, min_size=1, max_size=4))
def test_wrapping_int8_arithmetic_survives_simplify(expr: UOp, compare: bool, bound: int, values: list):
    if compare:
        expr = expr < UOp.const(bound, dtypes.int8)
    simplified = expr.simplify()
    for vals in values:
        expected = sym_infer(expr, vals)
        assert sym_infer(simplified, vals) == expected, (expr.render(), simplified.render(), vals)
        assert expr.vmin <= expected <= expr.vmax
        assert simplified.vmin <= expected <= simplified.vmax
