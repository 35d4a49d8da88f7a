"""Symbolic shapes: a bound Variable as a size gives numpy's results for every value, from one compiled kernel."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen import UOp, dtypes
from tg.codegen.schedule.graph import ShapeError
from tg.hcq.engine import GlobalCounters, get_program, program_cache_stats
from tg.tensor import Tensor, Variable

ROWS = 10
VALUES = (1, 2, 5, 9, 10)
RNG = np.random.default_rng(0)
A = RNG.standard_normal((ROWS, 6)).astype(np.float32)
W = RNG.standard_normal((6, 3)).astype(np.float32)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# (name, tg function of (a, w, bound n), numpy function of (a, w, k))
CASES: list[tuple[str, Callable, Callable]] = [
    ("elementwise", lambda a, w, n: (a[:n] * 2 + 1).exp(), lambda a, w, k: np.exp(a[:k] * 2 + 1)),
    ("sum over n", lambda a, w, n: a[:n].sum(0), lambda a, w, k: a[:k].sum(0)),
    ("max over n", lambda a, w, n: a[:n].max(0), lambda a, w, k: a[:k].max(0)),
    ("sum along n", lambda a, w, n: a[:n].sum(1), lambda a, w, k: a[:k].sum(1)),
    ("matmul, n outer", lambda a, w, n: a[:n] @ w, lambda a, w, k: a[:k] @ w),
    ("matmul, n inner", lambda a, w, n: a[:n].T @ a[:n], lambda a, w, k: a[:k].T @ a[:k]),
    ("softmax over n", lambda a, w, n: a[:n].softmax(0), lambda a, w, k: _softmax(a[:k], 0)),
    ("softmax along n", lambda a, w, n: a[:n].T.softmax(-1), lambda a, w, k: _softmax(a[:k].T, -1)),
    ("pad to the full size", lambda a, w, n: a[:n].pad(((0, ROWS - n), None)),
     lambda a, w, k: np.pad(a[:k], ((0, ROWS - k), (0, 0)))),
    ("expand", lambda a, w, n: w[0:1].expand(n, 3) + 1, lambda a, w, k: np.broadcast_to(w[0:1], (k, 3)) + 1),
    ("reshape -1", lambda a, w, n: a[:n].reshape(-1) * 3, lambda a, w, k: a[:k].reshape(-1) * 3),
    ("zeros of shape (n, 4)", lambda a, w, n: Tensor.zeros(n, 4) + 2, lambda a, w, k: np.full((k, 4), 2.0)),
    ("mean over n", lambda a, w, n: a[:n].mean(0), lambda a, w, k: a[:k].mean(0)),
    ("var and std over n", lambda a, w, n: a[:n].var(0) + a[:n].std(0, correction=0),
     lambda a, w, k: (a[:k].var(0, ddof=1) if k > 1 else np.full(6, np.nan)) + a[:k].std(0)),  # 0/0 at n=1
    ("arange to n", lambda a, w, n: Tensor.arange(n) * 2, lambda a, w, k: np.arange(k) * 2),
    ("arange from n down", lambda a, w, n: Tensor.arange(n, 0, -1), lambda a, w, k: np.arange(k, 0, -1)),
    ("argmax over n", lambda a, w, n: a[:n].argmax(0), lambda a, w, k: a[:k].argmax(0)),
    ("n minus a tensor", lambda a, w, n: n - a[:n], lambda a, w, k: k - a[:k]),
    ("index with n", lambda a, w, n: a[n - 1] + a[:n][0], lambda a, w, k: a[k - 1] + a[0]),
    ("n as a value", lambda a, w, n: a[:n] * n + Tensor(n), lambda a, w, k: a[:k] * k + k),
    ("shrink from a symbolic start", lambda a, w, n: a[n - 1 : n].sum(), lambda a, w, k: a[k - 1 : k].sum()),
]  # fmt: skip


@pytest.mark.parametrize("name, tg_fn, np_fn", CASES, ids=[c[0] for c in CASES])
def test_results_equal_numpy_for_every_bound_value(name: str, tg_fn: Callable, np_fn: Callable) -> None:
    n = Variable("n", 1, ROWS)
    a, w = Tensor(A), Tensor(W)
    for k in VALUES:
        result = tg_fn(a, w, n.bind(k))
        np.testing.assert_allclose(result.numpy(), np_fn(A, W, k), rtol=1e-5, atol=1e-5, err_msg=f"n={k}")


def test_one_compile_serves_every_value() -> None:
    n = Variable("n", 1, ROWS)
    a, w = Tensor(A), Tensor(W)
    (a[: n.bind(3)] @ w).softmax(0).numpy()  # compiles the kernels
    misses, launched = program_cache_stats.misses, GlobalCounters.kernel_count
    per_value = set()
    for k in VALUES:
        before = GlobalCounters.kernel_count
        (a[: n.bind(k)] @ w).softmax(0).numpy()
        per_value.add(GlobalCounters.kernel_count - before)
    assert program_cache_stats.misses == misses, "a new value of n compiled a kernel again"
    assert len(per_value) == 1 and GlobalCounters.kernel_count > launched


def test_the_kernel_takes_the_variable_as_an_argument() -> None:
    from tg.codegen.schedule.schedule import KernelCall, create_schedule

    t = Tensor(A)[: Variable("rows", 1, ROWS).bind(4)] + 1
    schedule = create_schedule((t.uop,))
    assert schedule.var_vals == {"rows": 4}
    (call,) = [item for item in schedule.items if isinstance(item, KernelCall)]
    program = get_program(call.device, call.ast)
    assert [v.arg.name for v in program.source.variables] == ["rows"]
    # C declares `int var_rows`, LLVM `i32 %var_rows`
    assert "var_rows" in program.source.src and "4" not in program.source.name


def test_kv_cache_assign_and_attention_equal_numpy() -> None:
    heads, context, dim = 2, 8, 4
    pos = Variable("pos", 0, context - 1)
    cache = Tensor.zeros(heads, context, dim).contiguous().realize()
    expected_cache = np.zeros((heads, context, dim), np.float32)
    rng = np.random.default_rng(1)
    misses = None
    for p in range(6):
        new, q = rng.standard_normal((2, heads, 1, dim)).astype(np.float32)
        v = pos.bind(p)
        cache[:, v : v + 1].assign(Tensor(new)).realize()
        expected_cache[:, p : p + 1] = new
        keys = cache[:, 0 : v + 1]
        attention = (Tensor(q) @ keys.transpose(1, 2) / 2).softmax(-1) @ keys
        seen = expected_cache[:, : p + 1]
        want = _softmax(q @ seen.transpose(0, 2, 1) / 2, -1) @ seen
        np.testing.assert_array_equal(cache.numpy(), expected_cache)
        np.testing.assert_allclose(attention.numpy(), want, rtol=1e-5, atol=1e-6)
        if p == 1:
            misses = program_cache_stats.misses
    assert program_cache_stats.misses == misses, "a new position compiled a kernel again"


def test_empty_of_symbolic_shape_has_room_for_the_largest_value() -> None:
    n = Variable("n", 1, 50)
    t = Tensor.empty(n.bind(3), 4).assign(Tensor.ones(n.bind(3), 4)).realize()
    assert t.numpy().shape == (3, 4) and (t.numpy() == 1).all()
    with pytest.raises(ShapeError, match="cannot assign"):  # a (3, 4) is not an (n, 4), whatever n is now
        Tensor.empty(n.bind(3), 4).assign(Tensor(np.ones((3, 4), np.float32)))


def test_python_device_gives_the_same_results() -> None:
    n = Variable("n", 1, ROWS)
    a = Tensor(A, device="PYTHON")
    for k in (1, 4, 10):
        if k == 4:
            misses = program_cache_stats.misses
        np.testing.assert_allclose(a[: n.bind(k)].sum(0).numpy(), A[:k].sum(0), rtol=1e-5)
        np.testing.assert_allclose((a[: n.bind(k)] * 2).numpy(), A[:k] * 2)
    assert program_cache_stats.misses == misses  # the kernels of n=1 serve every other value


def test_shapes_print_readably() -> None:
    t = Tensor(A)[: Variable("n", 1, ROWS).bind(3)]
    assert repr(t.shape) == "(Variable('n', 1, 10).bind(3), 6)"
    assert "shape=(n=3, 6)" in repr(t)
    assert repr(t.reshape(-1).shape) == "((n=3*6),)"


def test_variable_api_is_tinygrads() -> None:
    n = Variable("n", 1, 4096)
    bound = n.bind(7)
    assert isinstance(bound, UOp) and bound.unbind() == (n, 7)
    assert Variable("n", 1, 4096) is n  # the same variable, whoever spells it


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: Variable("n", 1, 10).bind(11), ValueError, "outside the bounds"),
        (lambda: Variable("no good", 1, 10), ValueError, "identifier"),
        (lambda: Variable("n", 5, 1), ValueError, "min <= max"),
        (lambda: Tensor.zeros(Variable("n", 1, 10), 2), ShapeError, "no value"),
        (lambda: Tensor(A)[: Variable("n", 1, 20).bind(3)], IndexError, "not within"),
        (lambda: Tensor(A)[: Variable("n", 1, 10).bind(3) : 2], IndexError, "step 1"),
        (lambda: Tensor(A).shrink(((0, Variable("n", 1, 20).bind(3)), None)), ShapeError, "for every value"),
        (lambda: Tensor(A) + Variable("n", 1, 10), ShapeError, "no value"),
        (lambda: Tensor(A)[Variable("n", 1, 10).bind(3)], IndexError, "not within axis 0"),
        (lambda: Tensor(A)[: Variable("n", 1, 10).bind(3)][3], IndexError, "not within axis 0"),
    ],
    ids=[
        "out of range",
        "bad name",
        "bad range",
        "unbound",
        "slice past the end",
        "strided",
        "shrink past the end",
        "unbound as a value",
        "index past the end",
        "int index past a symbolic size",
    ],  # fmt: skip
)
def test_misuse_is_a_clear_error(make: Callable, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        make()


def test_one_variable_with_two_values_in_one_graph_is_an_error() -> None:
    n = Variable("n", 1, ROWS)
    a = Tensor(A)
    with pytest.raises(ValueError, match="bound to both"):
        (a[: n.bind(2)].sum(0) + a[: n.bind(3)].sum(0)).realize()


def test_beam_leaves_symbolic_kernels_to_the_heuristics(monkeypatch: pytest.MonkeyPatch) -> None:
    """BEAM times candidates on scratch buffers with no values for variables (a garbage trip count): a symbolic
    kernel is never searched."""
    import tg.hcq.engine.beam as beam
    from tg.codegen.flags import Context

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a kernel with variables was handed to the BEAM search")

    monkeypatch.setattr(beam, "search_opts", refuse)
    n = Variable("n", 1, ROWS)
    with Context(BEAM=1, IGNORE_BEAM_CACHE=1):
        for k in (3, 7):
            np.testing.assert_allclose((Tensor(A)[: n.bind(k)] @ Tensor(W)).numpy(), A[:k] @ W, rtol=1e-5, atol=1e-5)


def test_two_variables_of_one_name_in_one_graph_are_an_error() -> None:
    a = Tensor(A)
    with pytest.raises(ValueError, match="two variables named n"):
        (a[: Variable("n", 1, ROWS).bind(2)].sum(0) + a[: Variable("n", 2, ROWS).bind(2)].sum(0)).realize()


def test_setitem_into_a_symbolic_slice() -> None:
    pos = Variable("pos", 0, 7)
    cache = Tensor.zeros(2, 8).contiguous().realize()
    expected = np.zeros((2, 8), np.float32)
    for p in range(5):
        v = pos.bind(p)
        cache[:, v : v + 1] = Tensor(np.full((2, 1), p + 1.0, np.float32))
        expected[:, p : p + 1] = p + 1
        np.testing.assert_array_equal(cache.numpy(), expected)


def test_numpy_ints_stay_valid_sizes_and_bounds() -> None:
    t = Tensor(A)
    np.testing.assert_array_equal(t.shrink(((np.int64(1), np.int32(3)), None)).numpy(), A[1:3])
    assert t[: np.int64(2)].expand(np.int64(2), 6).shape == (2, 6)


def test_scaled_dot_product_attention_over_a_symbolic_sequence() -> None:
    n = Variable("n", 1, 16)
    rng = np.random.default_rng(5)
    keys, q = (
        rng.standard_normal((1, 2, 16, 8)).astype(np.float32),
        rng.standard_normal((1, 2, 1, 8)).astype(np.float32),
    )
    for k in (1, 5, 16):
        seen = Tensor(keys)[:, :, : n.bind(k)]
        got = Tensor(q).scaled_dot_product_attention(seen, seen)
        want = _softmax(q @ keys[:, :, :k].transpose(0, 1, 3, 2) / np.sqrt(8), -1) @ keys[:, :, :k]
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_symbolic_graphs_pass_the_strict_spec_checks() -> None:
    from tg.codegen.flags import Context

    n = Variable("n", 1, ROWS)
    with Context(SPEC=2):
        for k in (2, 9):
            got = (Tensor(A)[: n.bind(k)] * n.bind(k)).mean(0) + Tensor.arange(n.bind(k)).sum()
            np.testing.assert_allclose(got.numpy(), (A[:k] * k).mean(0) + np.arange(k).sum(), rtol=1e-5)


# ---------------------------------------------------------------------------------------------------- issue 30 sweep


def test_an_int_slice_of_a_symbolic_axis_within_its_bound_value_works() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    vi = Variable("i", 1, 4).bind(2)
    np.testing.assert_array_equal((Tensor(a)[:, :vi] + 1)[:, :2].numpy(), a[:, :2] + 1)
    np.testing.assert_array_equal(Tensor(a)[:, :vi].shrink((None, (0, 2))).numpy(), a[:, :2])
    np.testing.assert_array_equal(Tensor(a).shrink((None, (0, vi))).numpy(), a[:, :2])


def test_cat_of_sizes_written_in_another_order_works() -> None:
    i, j = Variable("i", 1, 2).bind(1), Variable("j", 1, 2).bind(2)
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    got = Tensor(x)[:, : i + j].cat(Tensor(x)[:, : j + i] * 2, dim=0)
    np.testing.assert_array_equal(got.numpy(), np.concatenate([x[:, :3], x[:, :3] * 2], axis=0))


def test_symbolic_rand_works_and_later_rand_is_unharmed() -> None:
    vi = Variable("i", 1, 4).bind(2)
    drawn = Tensor.rand(vi, 4).numpy()
    assert drawn.shape == (2, 4) and ((drawn >= 0) & (drawn < 1)).all()
    later = Tensor.rand(3).numpy()
    assert later.shape == (3,) and ((later >= 0) & (later < 1)).all()


def test_a_variable_with_a_dtype_is_a_value_of_that_dtype() -> None:
    v = Variable("k", 0, 10, dtype="int64")
    t = Tensor(v.bind(3))
    assert t.dtype is dtypes.int64 and t.item() == 3
    np.testing.assert_array_equal((Tensor([1, 2], dtype="int64") + t).numpy(), [4, 5])
    with pytest.raises(TypeError, match="integer dtype"):
        Variable("k", 0, 10, dtype="float32")
    with pytest.raises(ValueError, match="does not fit"):
        Variable("k", 0, 300, dtype="uint8")


MOVEMENTS = [
    ("reshape", lambda t, n: t.reshape(n, 2, 2), lambda a, n: a.reshape(n, 2, 2)),
    ("expand", lambda t, n: t[:, :1].expand(n, 3), lambda a, n: np.broadcast_to(a[:, :1], (n, 3))),
    ("permute", lambda t, n: t.permute(1, 0), lambda a, n: a.T),
    ("pad", lambda t, n: t.pad(((1, 0), (0, 1))), lambda a, n: np.pad(a, ((1, 0), (0, 1)))),
    ("shrink", lambda t, n: t.shrink(((0, n), (1, 3))), lambda a, n: a[:n, 1:3]),
    ("flip", lambda t, n: t.flip(0), lambda a, n: a[::-1]),
    ("cat", lambda t, n: t.cat(t * 2, dim=0), lambda a, n: np.concatenate([a, a * 2])),
    ("stack", lambda t, n: Tensor.stack(t, t + 1), lambda a, n: np.stack([a, a + 1])),
]


@pytest.mark.parametrize(("name", "op", "reference"), MOVEMENTS, ids=[m[0] for m in MOVEMENTS])
@pytest.mark.parametrize("value", [2, 3])
def test_movement_ops_over_a_symbolic_axis(name: str, op, reference, value: int) -> None:
    base = np.arange(40, dtype=np.float32).reshape(10, 4)
    n = Variable("n", 1, 10).bind(value)
    view = Tensor(base)[:n]
    np.testing.assert_array_equal(op(view, n).numpy(), reference(base[:value], value), err_msg=name)


NEEDS_CONCRETE_SIZES = [
    ("len", lambda t: len(t)),
    ("split", lambda t: t.split(2)),
    ("chunk", lambda t: t.chunk(2)),
    ("roll", lambda t: t.roll(1, 0)),
    ("tril", lambda t: t.tril()),
    ("qr", lambda t: t.qr()),
]


@pytest.mark.parametrize(("name", "op"), NEEDS_CONCRETE_SIZES, ids=[case[0] for case in NEEDS_CONCRETE_SIZES])
def test_ops_that_need_concrete_sizes_refuse_a_symbolic_one(name: str, op) -> None:
    """A symbolic size where an op needs an int is a SymbolicSizeError, naming the op: a ShapeError as tg's shape
    errors are, and a TypeError as Python's own is where a symbolic size reaches range() or len()."""
    from tg.tensor.symbolic import SymbolicSizeError

    symbolic_rows = Tensor(np.ones((10, 4), dtype=np.float32))[: Variable("n", 1, 10).bind(3)]
    with pytest.raises(SymbolicSizeError, match="symbolic") as raised:
        op(symbolic_rows)
    assert isinstance(raised.value, ShapeError) and isinstance(raised.value, TypeError), name
