"""The dtype rules of spec tensor.md 1.6 on CPU and PYTHON: promotion, int64 truncation on cast, float16
comparisons, and saturating fp8 casts (checked bit for bit against ml_dtypes)."""

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

from tg.codegen import dtypes, least_upper_dtype, to_numpy
from tg.tensor import Tensor

from .devices import DEVICES

FP8 = [dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz]
FP8_MAX = {dtypes.fp8e4m3: 448.0, dtypes.fp8e5m2: 57344.0, dtypes.fp8e4m3fnuz: 240.0, dtypes.fp8e5m2fnuz: 57344.0}
NUMERIC = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint32]
NUMERIC += [dtypes.float16, dtypes.float32, dtypes.float64]


def name(dtype) -> str:
    return dtype.name


# ---------------------------------------------------------------------------------------------------- promotion


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a, b", list(itertools.combinations(NUMERIC, 2)), ids=lambda d: name(d))
def test_binary_ops_produce_the_least_upper_dtype(a, b, device):
    values = [1, 2, 3, 4] if a is not dtypes.bool and b is not dtypes.bool else [True, False, True, True]
    left, right = Tensor(values, dtype=a, device=device), Tensor(values, dtype=b, device=device)
    common = least_upper_dtype(a, b)
    result = left + right
    assert result.dtype is common
    expected = np.asarray(values).astype(to_numpy(common))
    expected = expected | expected if common is dtypes.bool else expected + expected
    np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_comparison_selects_float64_branches(device):
    a = Tensor([1.0, 2.0, 3.0, 4.0], device=device)
    high = Tensor([10.0, 20.0, 30.0, 40.0], dtype=dtypes.float64, device=device)
    low = Tensor([50.0, 60.0, 70.0, 80.0], dtype=dtypes.float64, device=device)
    result = (a < 3.0).where(high, low)
    assert result.dtype is dtypes.float64
    assert result.tolist() == [10.0, 20.0, 70.0, 80.0]


@pytest.mark.parametrize("device", DEVICES)
def test_python_scalars_are_weak(device):
    assert (Tensor([1, 2], dtype=dtypes.int8, device=device) + 1).dtype is dtypes.int8
    assert (Tensor([1, 2], dtype=dtypes.float16, device=device) * 2.5).dtype is dtypes.float16
    assert (Tensor([1, 2], dtype=dtypes.int16, device=device) + 1.5).dtype is dtypes.float32
    assert (Tensor([True], device=device) + 1).dtype is dtypes.int32


# ---------------------------------------------------------------------------------------------------- casts


@pytest.mark.parametrize("device", DEVICES)
def test_int64_to_uint32_truncates_to_the_low_bits(device):
    t = Tensor([0x12345678ABCDEF01], dtype=dtypes.int64, device=device)
    assert t.cast(dtypes.uint32).cast(dtypes.int64).tolist() == [2882400001]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "target", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32]
)
def test_int64_narrowing_casts_wrap_like_numpy(target, device):
    values = np.array([0x12345678ABCDEF01, -1, -(2**63), 2**63 - 1, 300, -129, 65535, 2**31], dtype=np.int64)
    result = Tensor(values, device=device).cast(target)
    np.testing.assert_array_equal(result.numpy(), values.astype(to_numpy(target)))


# ---------------------------------------------------------------------------------------------------- float16


@pytest.mark.parametrize("device", DEVICES)
def test_float16_greater_than_zero_in_where(device):
    t = Tensor([-1.0, 1.0], dtype=dtypes.float16, device=device)
    assert (t > 0).where(1.0, 0.0).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("device", DEVICES)
def test_float16_comparisons_match_numpy_including_nan_and_rounding(device):
    a = np.array([np.nan, 1.0, 2048.0, -0.0, 65504.0, np.inf, 0.1, 3.0], dtype=np.float16)
    b = np.array([1.0, np.nan, 2049.0, 0.0, np.inf, np.inf, 0.1, -3.0], dtype=np.float16)  # 2049 rounds to 2048
    left, right = Tensor(a, device=device), Tensor(b, device=device)
    for ours, theirs in [
        (left < right, a < b),
        (left > right, a > b),
        (left <= right, a <= b),
        (left >= right, a >= b),
        (left == right, a == b),
        (left != right, a != b),
    ]:
        assert ours.dtype is dtypes.bool
        np.testing.assert_array_equal(ours.numpy(), theirs)
    np.testing.assert_array_equal((left == 2049).numpy(), a == np.float16(2049))


@pytest.mark.parametrize("device", DEVICES)
def test_comparisons_with_nan_select_like_ieee(device):
    x = Tensor([math.nan, 1.0, 2.0, -1.0], device=device)
    a = Tensor([10.0, 20.0, 30.0, 40.0], device=device)
    b = Tensor([-1.0, -2.0, -3.0, -4.0], device=device)
    assert (x < 1).where(a, b).tolist() == [-1, -2, -3, 40]
    assert (x > 1).where(a, b).tolist() == [-1, -2, 30, -4]
    assert (x != 1).where(a, b).tolist() == [10, -2, 30, 40]
    assert (x == 1).where(a, b).tolist() == [-1, 20, -3, -4]


# ---------------------------------------------------------------------------------------------------- fp8


def fp8_inputs(dtype) -> np.ndarray:
    """Every fp8 value, every midpoint between neighbours (the ties), values beyond the range, inf, NaN, -0."""
    np_dtype = to_numpy(dtype)
    every = np.arange(256, dtype=np.uint8).view(np_dtype).astype(np.float64)
    finite = np.unique(every[np.isfinite(every)])
    midpoints = (finite[:-1] + finite[1:]) / 2
    rng = np.random.default_rng(1)
    scattered = rng.standard_normal(64) * 10.0 ** rng.integers(-8, 7, 64)
    extra = [1e9, -1e9, 5e5, np.inf, -np.inf, np.nan, -0.0, 1e-30, -1e-30, FP8_MAX[dtype] * 1.06]
    return np.concatenate([finite, midpoints, scattered, extra])


def saturated_oracle(values: np.ndarray, dtype) -> np.ndarray:
    """ml_dtypes' round-to-nearest-even conversion of the values clipped to +-max (NaN kept): satfinite."""
    limit = FP8_MAX[dtype]
    return np.clip(values, -limit, limit).astype(to_numpy(dtype)).view(np.uint8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=name)
@pytest.mark.parametrize("source", [dtypes.float32, dtypes.float64, dtypes.float16], ids=name)
def test_cast_to_fp8_saturates_and_rounds_to_nearest_even(dtype, source, device):
    with np.errstate(over="ignore"):  # 1e9 becomes inf in float16, which saturates like any overflow
        values = fp8_inputs(dtype).astype(to_numpy(source))
    result = Tensor(values, device=device).cast(dtype)
    assert result.dtype is dtype
    bits = result.bitcast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(bits, saturated_oracle(values.astype(np.float64), dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=name)
def test_cast_from_fp8_decodes_every_bit_pattern(dtype, device):
    patterns = np.arange(256, dtype=np.uint8)
    fp8 = Tensor(patterns, device=device).bitcast(dtype)
    expected = patterns.view(to_numpy(dtype)).astype(np.float32)
    np.testing.assert_array_equal(fp8.cast(dtypes.float32).numpy(), expected)
    np.testing.assert_array_equal(fp8.cast(dtypes.float16).numpy(), expected.astype(np.float16))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(fp8.cast(dtypes.int32).numpy()[finite], expected[finite].astype(np.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_int_and_fp8_to_fp8_casts(device):
    ints = np.array([0, 1, -7, 300, 100000, -100000], dtype=np.int32)
    bits = Tensor(ints, device=device).cast(dtypes.fp8e4m3).bitcast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(bits, saturated_oracle(ints.astype(np.float64), dtypes.fp8e4m3))
    wide = Tensor([1e4, 3.0, -0.001], device=device).cast(dtypes.fp8e5m2)
    narrowed = wide.cast(dtypes.fp8e4m3).cast(dtypes.float32).numpy()
    expected = saturated_oracle(
        np.array([1e4, 3.0, -0.001]).astype(ml_dtypes.float8_e5m2).astype(np.float64), dtypes.fp8e4m3
    )
    np.testing.assert_array_equal(narrowed, expected.view(ml_dtypes.float8_e4m3fn).astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.fp8e4m3, dtypes.fp8e5m2], ids=name)
def test_fp8_arithmetic_computes_in_float32_and_rounds_back(dtype, device):
    rng = np.random.default_rng(4)
    a = (rng.standard_normal(32) * 50).astype(to_numpy(dtype))
    b = (rng.standard_normal(32) * 50).astype(to_numpy(dtype))
    left, right = Tensor(a, device=device), Tensor(b, device=device)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    for ours, exact in [(left + right, a32 + b32), (left * right, a32 * b32), (left - 1.5, a32 - np.float32(1.5))]:
        assert ours.dtype is dtype
        np.testing.assert_array_equal(
            ours.bitcast(dtypes.uint8).numpy(), saturated_oracle(exact.astype(np.float64), dtype)
        )
    np.testing.assert_array_equal((left < right).numpy(), a32 < b32)
    assert left.max().cast(dtypes.float32).item() == a32.max()
    assert left.sum().dtype is dtypes.float32


def test_least_upper_dtype_answers_a_repeated_question_from_its_cache() -> None:
    """Every Tensor op asks it (a sum's accumulator, two operands' common dtype): asked again, it must not walk the
    promotion lattice again."""
    from tg.codegen import least_upper_dtype

    least_upper_dtype(dtypes.int8, dtypes.uint8)
    hits = least_upper_dtype.cache_info().hits
    assert least_upper_dtype(dtypes.int8, dtypes.uint8) is dtypes.int16
    assert least_upper_dtype.cache_info().hits == hits + 1
