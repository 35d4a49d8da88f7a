"""Elementwise ops against numpy on CPU and PYTHON, over float32, float16, float64, int32, int8, uint8 and bool.

Both operands have the same dtype here, so numpy's result dtype is tg's too (except true division and float
functions of ints, which give the default float in tg). float16 arithmetic must match numpy's float16 exactly.
"""

import math

import numpy as np
import pytest

from tg.codegen import dtypes, to_numpy
from tg.tensor import Tensor

from .devices import DEVICES

FLOATS = [dtypes.float32, dtypes.float16, dtypes.float64]
INTS = [dtypes.int32, dtypes.int8, dtypes.uint8]
ALL = FLOATS + INTS + [dtypes.bool]
SHAPE = (3, 5)


def ids(dtype) -> str:
    return np.dtype(to_numpy(dtype)).name


def tolerance(dtype, loose: bool = False) -> dict:
    """Exact for arithmetic and for float16 (computed in float32 and rounded once, as numpy does); a few ulps for
    float32 and float64 functions built from EXP2/LOG2/SIN (loose)."""
    if not loose:
        return {}
    return {
        dtypes.float16: {"rtol": 0, "atol": 0},
        dtypes.float32: {"rtol": 2e-6, "atol": 2e-6},
        dtypes.float64: {"rtol": 1e-12, "atol": 1e-12},
    }[dtype]


def pair(np_check, dtype, device, low=-3.0, high=3.0):
    a = np_check.random(SHAPE, dtype, seed=1, low=low, high=high)
    b = np_check.random(SHAPE, dtype, seed=2, low=low, high=high)
    return a, b, Tensor(a, device=device), Tensor(b, device=device)


# ---------------------------------------------------------------------------------------------------- binary

ARITHMETIC = {
    "add": (lambda x, y: x + y, np.add),
    "sub": (lambda x, y: x - y, np.subtract),
    "mul": (lambda x, y: x * y, np.multiply),
    "maximum": (lambda x, y: x.maximum(y), np.maximum),
    "minimum": (lambda x, y: x.minimum(y), np.minimum),
}
COMPARISONS = {
    "lt": (lambda x, y: x < y, np.less),
    "le": (lambda x, y: x <= y, np.less_equal),
    "gt": (lambda x, y: x > y, np.greater),
    "ge": (lambda x, y: x >= y, np.greater_equal),
    "eq": (lambda x, y: x == y, np.equal),
    "ne": (lambda x, y: x != y, np.not_equal),
}
BITWISE = {
    "and": (lambda x, y: x & y, np.bitwise_and),
    "or": (lambda x, y: x | y, np.bitwise_or),
    "xor": (lambda x, y: x ^ y, np.bitwise_xor),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize("name", list(ARITHMETIC))
def test_arithmetic_matches_numpy(np_check, device, dtype, name):
    if name == "sub" and dtype is dtypes.bool:
        pytest.raises(TypeError, lambda: Tensor([True], device=device) - Tensor([False], device=device))
        return
    tg_op, np_op = ARITHMETIC[name]
    a, b, ta, tb = pair(np_check, dtype, device)
    np_check.matches(tg_op(ta, tb), np_op(a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize("name", list(COMPARISONS))
def test_comparison_matches_numpy(np_check, device, dtype, name):
    tg_op, np_op = COMPARISONS[name]
    a, b, ta, tb = pair(np_check, dtype, device)
    b[0] = a[0]  # some equal elements
    tb = Tensor(b, device=device)
    np_check.matches(tg_op(ta, tb), np_op(a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTS + [dtypes.bool], ids=ids)
@pytest.mark.parametrize("name", list(BITWISE))
def test_bitwise_matches_numpy(np_check, device, dtype, name):
    tg_op, np_op = BITWISE[name]
    a, b, ta, tb = pair(np_check, dtype, device)
    np_check.matches(tg_op(ta, tb), np_op(a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTS, ids=ids)
def test_shifts_match_numpy(np_check, device, dtype):
    a = np_check.random(SHAPE, dtype, seed=1)
    bits = dtype.bitsize
    amounts = np.random.default_rng(3).integers(0, bits, SHAPE).astype(to_numpy(dtype))
    ta, tn = Tensor(a, device=device), Tensor(amounts, device=device)
    np_check.matches(ta << tn, np.left_shift(a, amounts))
    np_check.matches(ta >> tn, np.right_shift(a, amounts))
    np_check.matches(ta >> 1, np.right_shift(a, to_numpy(dtype).type(1)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_true_division_matches_numpy(np_check, device, dtype):
    a, b, ta, tb = pair(np_check, dtype, device, low=0.5, high=3.0)
    if not dtypes.is_float(dtype):
        b = np.where(b == 0, 1, b).astype(b.dtype)
        tb = Tensor(b, device=device)
    expected_dtype = dtype if dtypes.is_float(dtype) else dtypes.float32
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.true_divide(a.astype(to_numpy(expected_dtype)), b.astype(to_numpy(expected_dtype)))
    np_check.matches(ta / tb, expected, dtype=expected_dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=ids)
def test_floor_division_and_modulo_match_numpy(np_check, device, dtype):
    a, b, ta, tb = pair(np_check, dtype, device)
    if dtypes.is_float(dtype):
        b = np.where(np.abs(b) < 0.25, 1.5, b).astype(b.dtype)
    else:
        b[0, :3] = 0  # integer division by zero gives 0, as numpy
        if not dtypes.is_unsigned(dtype):
            b[1, :3] = -1
    tb = Tensor(b, device=device)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        np_check.matches(ta // tb, np.floor_divide(a, b), **tolerance(dtype, loose=dtypes.is_float(dtype)))
        np_check.matches(ta % tb, np.mod(a, b), **tolerance(dtype, loose=dtypes.is_float(dtype)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8], ids=ids)
def test_signed_min_divided_by_minus_one_wraps_like_numpy(device, dtype):
    smallest = int(dtypes.min(dtype))
    a = np.array([smallest, smallest, 7, -7], dtype=to_numpy(dtype))
    b = np.array([-1, 2, -1, 0], dtype=to_numpy(dtype))
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    with np.errstate(divide="ignore", over="ignore"):
        np.testing.assert_array_equal((ta // tb).numpy(), np.floor_divide(a, b))
        np.testing.assert_array_equal((ta % tb).numpy(), np.mod(a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=ids)
def test_pow_matches_numpy(np_check, device, dtype):
    if dtypes.is_float(dtype):
        a, b, ta, tb = pair(np_check, dtype, device, low=0.1, high=3.0)
        b = (b - 1.5).astype(b.dtype)
        tb = Tensor(b, device=device)
        np_check.matches(ta**tb, np.power(a, b), **tolerance(dtype, loose=True))
        np_check.matches(ta**2, np.power(a, to_numpy(dtype).type(2)), **tolerance(dtype, loose=True))
        return
    a = np_check.random(SHAPE, dtype, seed=1)
    b = np.random.default_rng(4).integers(0, 6, SHAPE).astype(to_numpy(dtype))
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    with np.errstate(over="ignore"):
        np_check.matches(ta**tb, np.power(a, b))
        np_check.matches(ta**3, np.power(a, to_numpy(dtype).type(3)))


def test_integer_to_negative_python_power_is_an_error():
    with pytest.raises(ValueError, match="negative"):
        Tensor([1, 2]) ** -1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_where_matches_numpy(np_check, device, dtype):
    a, b, ta, tb = pair(np_check, dtype, device)
    condition = np_check.random(SHAPE, dtypes.bool, seed=5)
    tc = Tensor(condition, device=device)
    np_check.matches(tc.where(ta, tb), np.where(condition, a, b))
    np_check.matches(tc.where(ta, tb[0]), np.where(condition, a, b[0]))  # broadcast one row


# ---------------------------------------------------------------------------------------------------- unary

FLOAT_FUNCTIONS = {
    # name: (tg op, numpy op, (low, high) of inputs)
    "exp": (Tensor.exp, np.exp, (-4.0, 4.0)),
    "exp2": (Tensor.exp2, np.exp2, (-4.0, 4.0)),
    "log": (Tensor.log, np.log, (0.05, 20.0)),
    "log2": (Tensor.log2, np.log2, (0.05, 20.0)),
    "sqrt": (Tensor.sqrt, np.sqrt, (0.0, 20.0)),
    "rsqrt": (Tensor.rsqrt, lambda x: (1 / np.sqrt(x.astype(np.float64))).astype(x.dtype), (0.05, 20.0)),
    "sin": (Tensor.sin, np.sin, (-4.0, 4.0)),
    "cos": (Tensor.cos, np.cos, (-4.0, 4.0)),
    "tan": (Tensor.tan, np.tan, (-1.2, 1.2)),
    "reciprocal": (Tensor.reciprocal, np.reciprocal, (0.1, 4.0)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + [dtypes.int32, dtypes.uint8], ids=ids)  # all ints take the same path
@pytest.mark.parametrize("name", list(FLOAT_FUNCTIONS))
def test_float_function_matches_numpy(np_check, device, dtype, name):
    tg_op, np_op, (low, high) = FLOAT_FUNCTIONS[name]
    if dtypes.is_float(dtype):
        a = np_check.random(SHAPE, dtype, seed=6, low=low, high=high)
        expected_dtype = dtype
    else:  # integer inputs are cast to the default float first
        smallest = max(low, 1) if name in ("log", "log2", "rsqrt", "reciprocal") else low
        a = np.clip(np_check.random(SHAPE, dtype, seed=6), smallest, high)
        a = a.astype(to_numpy(dtype))
        expected_dtype = dtypes.float32
    expected = np_op(a.astype(to_numpy(expected_dtype)))
    np_check.matches(tg_op(Tensor(a, device=device)), expected, dtype=expected_dtype, **tolerance(expected_dtype, True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_float_functions_at_special_values_match_numpy(device, dtype):
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], dtype=to_numpy(dtype))
    t = Tensor(values, device=device)
    with np.errstate(all="ignore"):
        for tg_op, np_op in [(Tensor.exp, np.exp), (Tensor.log, np.log), (Tensor.sqrt, np.sqrt), (Tensor.abs, np.abs)]:
            np.testing.assert_allclose(tg_op(t).numpy(), np_op(values), **tolerance(dtype, loose=True))


SIGNED_FUNCTIONS = {
    "neg": (lambda x: -x, np.negative),
    "abs": (Tensor.abs, np.abs),
    "sign": (Tensor.sign, np.sign),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=ids)
@pytest.mark.parametrize("name", list(SIGNED_FUNCTIONS))
def test_sign_functions_match_numpy(np_check, device, dtype, name):
    tg_op, np_op = SIGNED_FUNCTIONS[name]
    a = np_check.random(SHAPE, dtype, seed=7)
    a[0, 0] = 0
    if not dtypes.is_unsigned(dtype):
        a[0, 1] = dtypes.min(dtype) if not dtypes.is_float(dtype) else -0.0
    np_check.matches(tg_op(Tensor(a, device=device)), np_op(a))


ROUNDING = {"floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("name", list(ROUNDING))
def test_rounding_matches_numpy(np_check, device, dtype, name):
    a = np_check.random(SHAPE, dtype, seed=8, low=-5, high=5)
    halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.0, -3.0, 3e4, -0.0], dtype=to_numpy(dtype))
    a = np.concatenate([a.ravel(), halves])
    np_check.matches(getattr(Tensor(a, device=device), name)(), ROUNDING[name](a))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTS + [dtypes.bool], ids=ids)
def test_invert_matches_numpy(np_check, device, dtype):
    a = np_check.random(SHAPE, dtype, seed=9)
    np_check.matches(~Tensor(a, device=device), np.invert(a))


@pytest.mark.parametrize("device", DEVICES)
def test_neg_of_bool_is_logical_not(device):
    a = np.array([True, False, True])
    np.testing.assert_array_equal((-Tensor(a, device=device)).numpy(), np.logical_not(a))


# ---------------------------------------------------------------------------------------------------- mixed dtypes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("dtype_a", "dtype_b"),
    [
        (dtypes.int8, dtypes.uint8),
        (dtypes.int32, dtypes.float16),
        (dtypes.float16, dtypes.float32),
        (dtypes.bool, dtypes.int32),
        (dtypes.uint8, dtypes.float64),
    ],
    ids=lambda d: ids(d),
)
def test_mixed_dtypes_compute_in_the_promoted_dtype(np_check, device, dtype_a, dtype_b):
    a = np_check.random(SHAPE, dtype_a, seed=10)
    b = np_check.random(SHAPE, dtype_b, seed=11)
    result = Tensor(a, device=device) * Tensor(b, device=device) + Tensor(b, device=device)
    common = to_numpy(result.dtype)
    expected = a.astype(common) * b.astype(common) + b.astype(common)
    np_check.matches(result, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_weak_python_scalars_keep_the_tensor_dtype(np_check, device):
    a = np_check.random(SHAPE, dtypes.int8, seed=12)
    t = Tensor(a, device=device)
    with np.errstate(over="ignore"):
        np_check.matches(t * 3 + 1, a * np.int8(3) + np.int8(1))
    np_check.matches(t + 1.5, a.astype(np.float32) + np.float32(1.5))
    np_check.matches(2 - t, np.int8(2) - a)
    h = np_check.random(SHAPE, dtypes.float16, seed=13)
    np_check.matches(Tensor(h, device=device) * 0.1, h * np.float16(0.1))


# ---------------------------------------------------------------------------------------------------- casts


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ALL, ids=ids)
@pytest.mark.parametrize("target", ALL, ids=ids)
def test_cast_matches_numpy(np_check, device, source, target):
    a = np_check.random(SHAPE, source, seed=14, low=-100, high=100)
    if dtypes.is_unsigned(target) and dtypes.is_float(source):
        a = np.abs(a)  # float -> unsigned of a negative value is undefined in C
    if target is dtypes.float16 and source is dtypes.float64:
        a[0, 0] = 1.0 + 2.0**-11 + 2.0**-30  # rounds up only when converted in one step
    with np.errstate(invalid="ignore"):
        np_check.matches(Tensor(a, device=device).cast(target), a.astype(to_numpy(target)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("source", "target"),
    [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32), (dtypes.float16, dtypes.int16),
     (dtypes.int8, dtypes.uint8), (dtypes.float64, dtypes.int64), (dtypes.uint8, dtypes.bool)],
    ids=lambda d: ids(d),
)  # fmt: skip
def test_bitcast_matches_numpy_view(np_check, device, source, target):
    a = np_check.random(SHAPE, source, seed=15)
    if target is dtypes.bool:
        a = (a % 2).astype(a.dtype)  # only 0 and 1 are bools
    np_check.matches(Tensor(a, device=device).bitcast(target), a.view(to_numpy(target)))


# ---------------------------------------------------------------------------------------------------- broadcasting


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [
        ((3, 1), (1, 4)),
        ((2, 3, 4), (4,)),
        ((1,), (5,)),
        ((), (2, 3)),
        ((2, 1, 3), (4, 1)),
        ((0, 3), (1, 3)),
        ((0,), ()),
    ],
)
def test_broadcasting_matches_numpy(np_check, device, shape_a, shape_b):
    a = np_check.random(shape_a, dtypes.float32, seed=16)
    b = np_check.random(shape_b, dtypes.float32, seed=17)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np_check.matches(ta * tb - ta, a * b - a)
    np_check.matches((ta < tb).where(ta, tb), np.where(a < b, a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_on_empty_tensors(device):
    a = np.zeros((0, 4), dtype=np.float32)
    t = Tensor(a, device=device)
    assert (t + 1).exp().numpy().shape == (0, 4)
    assert (t * Tensor.ones(1, 4, device=device)).tolist() == []


@pytest.mark.parametrize("device", DEVICES)
def test_nan_handling_matches_numpy(device):
    x = np.array([np.nan, 1.0, 2.0, -1.0], dtype=np.float32)
    y = np.array([1.0, np.nan, 1.0, 3.0], dtype=np.float32)
    tx, ty = Tensor(x, device=device), Tensor(y, device=device)
    for tg_op, np_op in [(Tensor.maximum, np.maximum), (Tensor.minimum, np.minimum)]:
        np.testing.assert_array_equal(tg_op(tx, ty).numpy(), np_op(x, y))
    for tg_cmp, np_cmp in [(tx < 1, x < 1), (tx <= 1, x <= 1), (tx >= 1, x >= 1), (tx == 1, x == 1), (tx != 1, x != 1)]:
        np.testing.assert_array_equal(tg_cmp.numpy(), np_cmp)


@pytest.mark.parametrize("device", DEVICES)
def test_exp_and_log_are_accurate_over_a_wide_range(device):
    x = np.linspace(-80, 80, 41, dtype=np.float32)
    np.testing.assert_allclose(Tensor(x, device=device).exp().numpy(), np.exp(x), rtol=1e-5)
    y = np.geomspace(1e-30, 1e30, 41).astype(np.float32)
    np.testing.assert_allclose(Tensor(y, device=device).log().numpy(), np.log(y), rtol=1e-6, atol=1e-6)
    assert math.isclose(Tensor(1.0, device=device).exp().item(), math.e, rel_tol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_spec_examples_of_dtype_behaviour(device):
    wide = Tensor([0x12345678ABCDEF01], dtype=dtypes.int64, device=device)
    assert wide.cast(dtypes.uint32).cast(dtypes.int64).tolist() == [0x12345678ABCDEF01 & 0xFFFFFFFF]
    small = Tensor([1.0, 2.0, 5.0, 6.0], device=device)
    chosen = (small < 3.0).where(Tensor([10.0, 20, 30, 40], dtype=dtypes.float64, device=device), 70.0)
    assert chosen.dtype is dtypes.float64 and chosen.tolist() == [10.0, 20.0, 70.0, 70.0]
    half = Tensor([-1.0, 1.0], dtype=dtypes.float16, device=device)
    assert (half > 0).where(1.0, 0.0).tolist() == [0.0, 1.0]


def test_numpy_array_on_the_left_defers_to_the_tensor():
    result = np.array([1.0, 2.0], dtype=np.float32) + Tensor([1.0, 1.0])
    assert isinstance(result, Tensor) and result.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("device", DEVICES)
def test_sin_and_cos_stay_accurate_for_large_arguments(device):
    x = np.linspace(-1000, 1000, 57, dtype=np.float32)
    t = Tensor(x, device=device)
    np.testing.assert_allclose(t.sin().numpy(), np.sin(x), atol=1e-6)
    np.testing.assert_allclose(t.cos().numpy(), np.cos(x), atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)  # on PYTHON, also a regression test of folded kernel inputs
def test_comparing_with_an_int_beyond_the_dtype_compares_values(device):
    x = np.array([-128, 0, 127], dtype=np.int8)
    t = Tensor(x, device=device)
    np.testing.assert_array_equal((t < 1000).numpy(), x < 1000)
    np.testing.assert_array_equal((t == -129).numpy(), x.astype(np.int64) == -129)
    np.testing.assert_array_equal((Tensor([1, 2], dtype=dtypes.uint8, device=device) > -1).numpy(), [True, True])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_float_division_special_values_match_numpy(device, dtype):
    inf, nan = np.inf, np.nan
    a = np.array([3, -3, 0, 5, -5, inf, -inf, nan, 3, 5.5, -5.5, 1, 0, -1], dtype=to_numpy(dtype))
    b = np.array([inf, inf, inf, -inf, -inf, 3, 3, 3, nan, -2, 2, 0, 0, 0], dtype=to_numpy(dtype))
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((ta % tb).numpy(), np.mod(a, b))
        np.testing.assert_array_equal((ta // tb).numpy(), np.floor_divide(a, b))
    np.testing.assert_array_equal(ta.isinf().numpy(), np.isinf(a))
    np.testing.assert_array_equal(ta.isfinite().numpy(), np.isfinite(a))
    np.testing.assert_array_equal(ta.isnan().numpy(), np.isnan(a))


def test_operands_of_one_kind_skip_promotion_and_broadcasting(monkeypatch: pytest.MonkeyPatch) -> None:
    """`a * b` on tensors of one dtype and device is the common case of a model's step: broadcast returns them as
    they are, or expanded to one shape, without working out a common dtype (Python per call); operands of different
    dtypes still promote."""
    import tg.tensor.elementwise as elementwise

    calls: list[tuple] = []
    real = elementwise.result_dtype
    monkeypatch.setattr(elementwise, "result_dtype", lambda *operands: calls.append(operands) or real(*operands))
    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = Tensor(np.full((2, 3), 2, dtype=np.float32))
    np.testing.assert_array_equal(((a * b) + a).numpy(), np.arange(6).reshape(2, 3) * 3.0)
    assert calls == []
    mixed = a * b.half()  # float32 with float16: promotes to float32
    assert mixed.dtype is dtypes.float32 and len(calls) == 1
    row = a * b[0]  # one dtype, shapes differ: broadcast, still without promotion
    assert row.shape == (2, 3) and len(calls) == 1
    np.testing.assert_array_equal(row.numpy(), np.arange(6).reshape(2, 3) * 2.0)
