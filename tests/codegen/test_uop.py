"""UOp: hash-consing, immutability, constructors, graph walks, pickling and bounds."""

import gc
import pickle
import threading

import pytest

from tg.codegen import AxisType, KernelInfo, Ops, UOp, dtypes, sym_infer
from tg.codegen.uop.ops import _cache


def test_equal_structure_is_the_same_object():
    x = UOp.variable("x", 0, 10)
    assert (x * 4 + 1) is (x * 4 + 1)
    assert UOp.const(3) is UOp(Ops.CONST, dtypes.index, (), 3)
    assert UOp.const(3) is not UOp.const(3, dtypes.int32)


def test_float_constants_keep_sign_of_zero_and_nan_is_cached():
    zero, negative_zero = UOp.const(0.0, dtypes.float), UOp.const(-0.0, dtypes.float)
    assert zero is not negative_zero
    assert UOp.const(float("nan"), dtypes.float) is UOp.const(float("nan"), dtypes.float)


def test_int_and_float_constants_with_equal_value_stay_apart():
    assert UOp.const(1, dtypes.int32) is not UOp.const(1.0, dtypes.float)
    assert UOp.const(True, dtypes.bool).arg is True


def test_cache_is_weak():
    before = len(_cache)
    nodes = [UOp.variable(f"tmp{i}", 0, 5) + i for i in range(100)]
    assert len(_cache) >= before + 200
    del nodes
    gc.collect()
    assert len(_cache) <= before + 5


def test_hash_consing_is_safe_across_threads():
    results: list[list[UOp]] = []

    def build() -> None:
        out = []
        for i in range(300):
            out.append(UOp.variable("t", 0, 100) * (i % 7) + i)
        results.append(out)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for other in results[1:]:
        assert all(a is b for a, b in zip(results[0], other, strict=True))


def test_uops_are_immutable():
    x = UOp.const(1)
    with pytest.raises(AttributeError):
        x.arg = 2
    with pytest.raises(AssertionError):
        x.replace(field="a")
    assert x.replace(arg=2) is UOp.const(2)


def test_pickle_round_trips_to_the_same_node():
    x = UOp.variable("x", 0, 10)
    ast = UOp.param(0, dtypes.float, 16).index(x).store(UOp.const(1.0, dtypes.float)).sink(arg=KernelInfo("k"))
    assert pickle.loads(pickle.dumps(ast)) is ast


def test_repr_is_deterministic_and_lists_shared_nodes_once():
    x = UOp.variable("x", 0, 10)
    e = (x * 4) + (x * 4)
    text = repr(e)
    assert text.count("DEFINE_VAR") == 1 and text.count("Ops.MUL") == 1
    assert text == repr((x * 4) + (x * 4))
    assert repr(UOp.const(4)) == "UOp(Ops.CONST, dtypes.index, arg=4)"


def test_key_is_a_content_hash():
    a = UOp.variable("a", 0, 3) + 1
    assert a.key == (UOp.variable("a", 0, 3) + 1).key
    assert a.key != (UOp.variable("a", 0, 4) + 1).key
    assert len(a.key) == 32


def test_kernel_ast_builders():
    buf = UOp.param(0, dtypes.float, 16)
    r = UOp.range(16, 0)
    val = UOp.param(1, dtypes.float, 16).index(r).load() + 1.0
    ast = buf.index(r).store(val).end(r).sink(arg=KernelInfo())
    assert ast.op is Ops.SINK and ast.src[0].op is Ops.END and ast.src[0].src[1] is r
    assert buf.dtype is dtypes.float.ptr(16) and buf.arg.slot == 0
    assert val.dtype is dtypes.float and r.arg.axis_type is AxisType.LOOP
    assert [u.op for u in ast.toposort()][-1] is Ops.SINK
    acc = val.reduce(r, arg=Ops.ADD)
    assert acc.op is Ops.REDUCE and acc.arg is Ops.ADD
    assert UOp.special(4, "lidx0").vmax == 3 and r.vmin == 0 and r.vmax == 15


def test_toposort_puts_sources_first_and_handles_deep_graphs():
    x = UOp.variable("x", 0, 10)
    e = x
    for i in range(20000):  # far beyond the recursion limit
        e = e + (i % 3)
    order = e.toposort()
    position = {u: i for i, u in enumerate(order)}
    assert all(position[s] < position[u] for u in order for s in u.src)
    assert e.vmax == 10 + sum(i % 3 for i in range(20000))
    assert len(e.key) == 32


def test_substitute_replaces_nodes():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    assert (x * 2 + 1).substitute({x: y}) is (y * 2 + 1)


def test_substitute_with_nothing_to_change_returns_the_graph_without_walking_it(monkeypatch):
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    expression = x * 2 + y
    assert expression.substitute({x: y, y: y}) is (y * 2 + y)  # one real replacement still walks the graph

    def no_walk(*args, **kwargs):
        raise AssertionError("an identity substitution walked the graph")

    monkeypatch.setattr(UOp, "toposort", no_walk)  # a Tensor view over an unmoved base asks this on every op
    assert expression.substitute({x: x}) is expression
    assert expression.substitute({}) is expression


def test_bind_and_sym_infer():
    n = UOp.variable("n", 1, 100)
    bound = n.bind(7)
    assert bound.unbind() == (n, 7)
    assert sym_infer(n * 3 + 1, {"n": 5}) == 16
    assert sym_infer(bound * 2, {}) == 14
    with pytest.raises(ValueError):
        n.bind(200)


def test_division_truncates_toward_zero():
    x = UOp.variable("x", -10, 10)
    assert sym_infer(x // 2, {"x": -7}) == -3
    assert sym_infer(x % 2, {"x": -7}) == -1
    assert sym_infer(x // -2, {"x": 7}) == -3


def test_truth_value_needs_decided_bounds():
    x = UOp.variable("x", 0, 10)
    assert bool(x < 11) and not bool(x < 0)
    with pytest.raises(ValueError):
        bool(x < 5)


def test_exec_alu_max_propagates_nan_from_either_operand() -> None:
    # regression: NaN as the second operand was dropped
    import math

    from tg.codegen import Ops, dtypes
    from tg.codegen.uop.alu import exec_alu

    assert math.isnan(exec_alu(Ops.MAX, dtypes.float32, (1.0, math.nan)))
    assert math.isnan(exec_alu(Ops.MAX, dtypes.float32, (math.nan, 1.0)))


def test_exec_alu_trunc_keeps_the_sign_of_zero() -> None:
    # regression: trunc(-0.5) gave +0.0; C gives -0.0
    import math

    from tg.codegen import Ops, dtypes
    from tg.codegen.uop.alu import exec_alu

    assert math.copysign(1.0, exec_alu(Ops.TRUNC, dtypes.float32, (-0.5,))) == -1.0
