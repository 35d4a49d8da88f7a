"""UPat matching, PatternMatcher dispatch and graph_rewrite."""

import pytest

from tg.codegen import Ops, PatternMatcher, RewriteError, UOp, UPat, dtypes, graph_rewrite, graph_rewrite_map


def drop_add_zero(x: UOp, c: UOp) -> UOp | None:
    return x if c.arg == 0 else None


add_zero = PatternMatcher([(UPat.var("x") + UPat.cvar("c"), drop_add_zero)], name="add_zero")


def test_commutative_pattern_matches_both_orders():
    x = UOp.variable("x", 0, 10)
    assert add_zero.rewrite(x + 0) is x
    assert add_zero.rewrite(UOp(Ops.ADD, dtypes.index, (UOp.const(0), x))) is x
    assert add_zero.rewrite(x + 1) is None


def test_names_bind_the_same_node():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
    assert pat.match(x + x, {}) == [{"a": x}]
    assert pat.match(x + y, {}) == []


def test_dtype_arg_and_any_len_filters():
    x = UOp.variable("x", 0, 10)
    assert UPat(Ops.CONST, dtypes.float).match(UOp.const(1), {}) == []
    assert UPat(Ops.CONST, arg=1).match(UOp.const(1), {}) != []
    assert UPat(Ops.CONST, arg=1).match(UOp.const(True, dtypes.bool), {}) == []
    sink = UOp.sink(x, x + 1, x + 2)
    assert UPat(Ops.SINK, src=(UPat.var("a"),)).match(sink, {}) == []
    assert UPat(Ops.SINK, src=(UPat.var("a"),), allow_any_len=True).match(sink, {}) == [{"a": x}]
    assert len(UPat(Ops.SINK, src=UPat(name="s")).match(UOp.sink(x, x), {})) == 1


def test_callbacks_receive_ctx():
    seen = []

    def record(ctx: list, x: UOp) -> None:
        ctx.append(x)

    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), record)])
    x = UOp.variable("x", 0, 1)
    graph_rewrite(x + 1, pm, ctx=seen)
    assert seen == [x]


def test_matchers_compose_with_plus():
    def double_to_shift(x: UOp) -> UOp:
        return x << 1

    times_two = PatternMatcher([(UPat.var("x") * 2, double_to_shift)])
    both = add_zero + times_two
    x = UOp.variable("x", 0, 10)
    assert graph_rewrite(x * 2 + 0, both) is (x << 1)


def test_rewrite_reaches_fixed_point_through_new_nodes():
    x = UOp.variable("x", 0, 10)
    e = ((x + 0) + 0) * 1 + 0
    assert graph_rewrite(e, add_zero) is x * 1


def test_bottom_up_rewrites_parents_first():
    order = []

    def record(n: UOp) -> None:
        order.append(n.arg)

    pm = PatternMatcher([(UPat(Ops.CONST, name="n"), record), (UPat(Ops.NOOP, name="n"), record)])
    tree = UOp(Ops.NOOP, src=(UOp.const(1),), arg="top")
    graph_rewrite(tree, pm, bottom_up=True)
    assert order == ["top", 1]
    order.clear()
    graph_rewrite(tree, pm)
    assert order == [1, "top"]


def test_cycle_stops_with_error_naming_the_matcher():
    def swap(a: UOp, b: UOp) -> UOp:
        return UOp(Ops.ADD, a.dtype, (b, a))

    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), swap)], name="swapper")
    x, y = UOp.variable("x", 0, 1), UOp.variable("y", 0, 1)
    with pytest.raises(RewriteError, match="swapper"):
        graph_rewrite(x + y, pm)
    with pytest.raises(RewriteError, match="swapper"):
        graph_rewrite(x + y, pm, bottom_up=True)


def test_growing_rewrite_stops_with_error():
    def grow(x: UOp) -> UOp:
        return UOp(Ops.NOOP, src=(x,))

    pm = PatternMatcher([(UPat(Ops.NOOP, name="x"), grow)], name="grower")
    with pytest.raises(RewriteError, match="grower"):
        graph_rewrite(UOp(Ops.NOOP, src=(UOp.const(1),)), pm)


def test_deep_graphs_do_not_hit_the_recursion_limit():
    x = UOp.variable("x", 0, 10)
    e = x
    for _ in range(20000):
        e = e + 0
    assert graph_rewrite(e, add_zero) is x


def test_graph_rewrite_map_maps_every_original_node():
    x = UOp.variable("x", 0, 10)
    inner = x + 0
    mapping = graph_rewrite_map(inner * 3, add_zero)
    assert mapping[inner] is x and mapping[inner * 3] is x * 3


def test_rules_are_only_tried_on_nodes_of_their_op():
    calls: list[Ops] = []

    def count(x: UOp) -> None:
        calls.append(x.op)

    pm = PatternMatcher([(UPat(Ops.MUL, name="x"), count), (UPat(Ops.IDIV, name="x"), count)])
    assert sum(len(rules) for rules in pm._by_op.values()) == 2
    x = UOp.variable("x", 0, 10)
    graph_rewrite(((x + 1) * 2 + 3) // 4, pm)
    assert calls == [Ops.MUL, Ops.IDIV]
