"""dtypes: names, vectors, pointers, promotion, and bit-exact conversion checked against numpy and ml_dtypes."""

import math
import pickle

import ml_dtypes
import numpy as np
import pytest

from tg.codegen import AddrSpace, dtypes, from_numpy, least_upper_dtype, to_numpy
from tg.codegen.dtype import decode, encode, truncate

FP8 = [dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz]


def _same_float(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@pytest.mark.parametrize("dt", FP8, ids=lambda d: d.name)
def test_fp8_decode_matches_ml_dtypes_for_all_256_patterns(dt):
    reference = np.arange(256, dtype=np.uint8).view(to_numpy(dt)).astype(np.float64)
    for bits in range(256):
        assert _same_float(decode(bits, dt), float(reference[bits])), hex(bits)


@pytest.mark.parametrize("dt", FP8, ids=lambda d: d.name)
def test_fp8_encode_matches_ml_dtypes(dt):
    rng = np.random.default_rng(0)
    values = rng.standard_normal(4000) * np.float64(2.0) ** rng.integers(-30, 20, 4000)
    # every representable value, every midpoint between neighbours (ties), and the special values
    representable = np.arange(256, dtype=np.uint8).view(to_numpy(dt)).astype(np.float64)
    finite = np.unique(representable[np.isfinite(representable)])
    midpoints = (finite[1:] + finite[:-1]) / 2
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30])
    values = np.concatenate([values, finite, midpoints, specials])
    expected = values.astype(to_numpy(dt)).view(np.uint8)
    for value, bits in zip(values, expected, strict=True):
        got = encode(float(value), dt)
        if math.isnan(value):  # NaN payloads differ between libraries; the class must match
            assert math.isnan(decode(got, dt))
        else:
            assert got == bits, (value, hex(bits), hex(got))


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_16bit_floats_round_trip_every_pattern(dt):
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    with np.errstate(invalid="ignore"):
        reference = patterns.view(to_numpy(dt)).astype(np.float64)
    for bits in range(0, 1 << 16, 7):  # a sweep with every exponent, subnormals included
        value = decode(bits, dt)
        assert _same_float(value, float(reference[bits]))
        if not math.isnan(value):
            assert encode(value, dt) == bits


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float32], ids=lambda d: d.name)
def test_float_rounding_matches_numpy(dt):
    rng = np.random.default_rng(1)
    # float32 inputs: ml_dtypes rounds float64 to bfloat16 through float32 (double rounding); from float32 it is exact
    with np.errstate(over="ignore"):
        values = (rng.standard_normal(20000) * np.float64(2.0) ** rng.integers(-150, 130, 20000)).astype(np.float32)
    values = np.concatenate([values, np.float32([65504, 65519.996, 65520, 6e-8, 3e-8, -0.0, np.inf, -np.inf])])
    uint = {2: np.uint16, 4: np.uint32}[dt.itemsize]
    with np.errstate(over="ignore"):
        expected = values.astype(to_numpy(dt)).view(uint)
    for value, bits in zip(values, expected, strict=True):
        assert encode(float(value), dt) == bits, (value, hex(bits))


def test_saturating_fp8_conversion_clamps_to_largest_finite():
    assert decode(encode(1e6, dtypes.fp8e4m3, saturate=True), dtypes.fp8e4m3) == 448.0
    assert decode(encode(-math.inf, dtypes.fp8e5m2, saturate=True), dtypes.fp8e5m2) == -57344.0
    assert math.isnan(decode(encode(1e6, dtypes.fp8e4m3), dtypes.fp8e4m3))


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint32, dtypes.int64])
def test_int_truncation_wraps_like_numpy(dt):
    for value in [0, 1, -1, 127, 128, 255, 256, -129, 2**31, 2**63 - 1, -(2**63), 123456789]:
        expected = np.array([value], dtype=np.object_).astype(np.int64 if value < 2**63 else np.uint64)
        assert truncate(value, dt) == int(expected.astype(to_numpy(dt))[0])


def test_scalar_properties():
    assert dtypes.float32.itemsize == 4 and dtypes.float32.fmt == "f"
    assert dtypes.float16.fmt == "e" and dtypes.bfloat16.fmt is None and dtypes.fp8e4m3.fmt is None
    assert dtypes.half is dtypes.float16 and dtypes.double is dtypes.float64 and dtypes.float is dtypes.float32
    assert dtypes.is_float(dtypes.bfloat16) and dtypes.is_int(dtypes.uint8) and dtypes.is_unsigned(dtypes.uint8)
    assert not dtypes.is_int(dtypes.bool) and dtypes.is_bool(dtypes.bool)
    assert dtypes.min(dtypes.int8) == -128 and dtypes.max(dtypes.uint16) == 65535
    assert dtypes.finite_max(dtypes.fp8e4m3) == 448.0 and dtypes.finite_max(dtypes.fp8e4m3fnuz) == 240.0


def test_vectors_and_pointers_are_interned():
    v = dtypes.float.vec(4)
    assert v is dtypes.float.vec(4) and v.count == 4 and v.itemsize == 16 and v.scalar() is dtypes.float
    p = dtypes.half.ptr(16, AddrSpace.LOCAL)
    assert p is dtypes.half.ptr(16, AddrSpace.LOCAL) and p.base is dtypes.half and p.size == 16
    assert p.addrspace is AddrSpace.LOCAL and dtypes.float.ptr().size == -1
    assert repr(p) == "dtypes.half.ptr(16, addrspace=AddrSpace.LOCAL)" and repr(v) == "dtypes.float.vec(4)"
    with pytest.raises(AttributeError):
        dtypes.float.count = 2


def test_pickle_returns_the_interned_dtype():
    for dt in [dtypes.float, dtypes.int8.vec(3), dtypes.bfloat16.ptr(8), dtypes.index, dtypes.void]:
        assert pickle.loads(pickle.dumps(dt)) is dt


@pytest.mark.parametrize(
    "a,b",
    [(a, b) for a in ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "float16", "float32",
                      "float64"] for b in ["bool", "int8", "uint8", "int32", "uint32", "int64", "float32"]],
)  # fmt: skip
def test_promotion_matches_numpy_without_int_float_mixing(a, b):
    dt_a, dt_b = dtypes.by_name(a), dtypes.by_name(b)
    ours = least_upper_dtype(dt_a, dt_b)
    np_result = np.promote_types(to_numpy(dt_a), to_numpy(dt_b))
    if dtypes.is_float(dt_a) != dtypes.is_float(dt_b):
        # like torch: an int with a float gives the float (numpy would widen it)
        assert ours is (dt_a if dtypes.is_float(dt_a) else dt_b)
    else:
        assert ours is from_numpy(np_result)


def test_promotion_of_small_floats():
    assert least_upper_dtype(dtypes.float16, dtypes.bfloat16) is dtypes.float32
    assert least_upper_dtype(dtypes.fp8e4m3, dtypes.fp8e5m2) is dtypes.float16
    assert least_upper_dtype(dtypes.index, dtypes.int32) is dtypes.index


def test_numpy_conversion_round_trips():
    for dt in dtypes.all():
        assert from_numpy(to_numpy(dt)) is dt
    assert to_numpy(dtypes.bfloat16) == np.dtype(ml_dtypes.bfloat16)
