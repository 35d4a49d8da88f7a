"""Casts to and from the fp8 formats (e4m3, e5m2 and their fnuz variants), built from integer and float ops.

Renderers without fp8 arithmetic (C has none) only need to load and store fp8 bytes: every conversion happens here,
on the bit pattern. Casts to fp8 *saturate* (the "satfinite" conversion of fp8 hardware, which tinygrad's casts
use): finite values beyond the largest finite fp8 number and +-inf become +-max; NaN stays NaN. Rounding is to
nearest, ties to even, subnormals kept; the result equals `tg.codegen.dtype.encode(value, fp8, saturate=True)`.

Encoding a magnitude a <= max: with e = max(floor(log2 a), emin) and q = round_half_even(a / 2^(e - m)), the fp8
magnitude bits are simply (e - emin) * 2^m + q. That one formula covers normals, subnormals (e = emin, q < 2^m)
and a rounding carry into the next binade (q = 2^(m+1)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen import DType, dtypes
from tg.codegen.dtype import FloatFormat, decode_float

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

FP8_DTYPES = (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
FLOAT32_EXPONENT_BIAS = 127
FLOAT32_MANTISSA_BITS = 23


def is_fp8(dtype: DType) -> bool:
    return dtype in FP8_DTYPES


def fp8_cast(x: Tensor, dtype: DType) -> Tensor:
    """`x.cast(dtype)` where the source, the target or both are fp8."""
    if is_fp8(x.dtype):
        x = fp8_to_float32(x)
    if is_fp8(dtype):
        return float_to_fp8(x, dtype)
    return x.cast(dtype)


def power_of_two(exponent: Tensor) -> Tensor:
    """2^exponent as float32, exactly, for int32 exponents in float32's normal range (built from its bits)."""
    return ((exponent + FLOAT32_EXPONENT_BIAS) << FLOAT32_MANTISSA_BITS).bitcast(dtypes.float32)


def _smallest_normal_exponent(fmt: FloatFormat) -> int:
    return 1 - fmt.bias


def _largest_exponent(fmt: FloatFormat) -> int:
    return fmt.max_exponent_field - fmt.bias


def _format_of(dtype: DType) -> FloatFormat:
    fmt = dtype.float_format
    if fmt is None:
        raise TypeError(f"{dtype!r} is not an fp8 dtype")
    return fmt


def float_to_fp8(x: Tensor, dtype: DType) -> Tensor:
    fmt = _format_of(dtype)
    work = x.cast(dtypes.float64 if x.dtype is dtypes.float64 else dtypes.float32)
    largest = decode_float(fmt.max_finite_bits, fmt)
    emin, mantissa_bits = _smallest_normal_exponent(fmt), fmt.mantissa_bits
    negative = work.bitcast(dtypes.int64 if work.dtype is dtypes.float64 else dtypes.int32) < 0  # -0.0 too
    magnitude = negative.where(-work, work).minimum(largest)  # saturate; NaN passes through minimum
    exponent = magnitude.zeros_like(dtype=dtypes.int32) + emin
    for k in range(emin + 1, _largest_exponent(fmt) + 1):
        exponent = exponent + (magnitude >= 2.0**k).cast(dtypes.int32)
    quantum = power_of_two(exponent - mantissa_bits).cast(work.dtype)
    steps = (magnitude / quantum).round().cast(dtypes.int32)
    magnitude_bits = (exponent - emin) * (1 << mantissa_bits) + steps
    sign = 1 << (fmt.total_bits - 1)
    signed_bits = negative.where(magnitude_bits | sign, magnitude_bits)
    if fmt.flavour == "fnuz":
        signed_bits = (magnitude_bits == 0).where(0, signed_bits)  # fnuz has no negative zero
    nan_bits = negative.where(fmt.nan_bits(negative=True), fmt.nan_bits(negative=False))
    bits = work.isnan().where(nan_bits, signed_bits)
    return bits.cast(dtypes.uint8).bitcast(dtype)


def fp8_to_float32(x: Tensor) -> Tensor:
    """Exact: every fp8 value is a float32 (and a float16) value."""
    fmt = _format_of(x.dtype)
    bits = x.bitcast(dtypes.uint8).cast(dtypes.int32)
    mantissa_bits = fmt.mantissa_bits
    all_ones_exponent = (1 << fmt.exponent_bits) - 1
    exponent_field = (bits >> mantissa_bits) & all_ones_exponent
    mantissa = bits & ((1 << mantissa_bits) - 1)
    subnormal = mantissa.cast(dtypes.float32) * 2.0 ** (_smallest_normal_exponent(fmt) - mantissa_bits)
    safe_field = (exponent_field == 0).where(1, exponent_field)
    normal = (mantissa + (1 << mantissa_bits)).cast(dtypes.float32) * power_of_two(
        safe_field - fmt.bias - mantissa_bits
    )
    value = (exponent_field == 0).where(subnormal, normal)
    value = (bits >= 1 << (fmt.total_bits - 1)).where(-value, value)
    return _with_specials(value, bits, exponent_field, mantissa, fmt)


def _with_specials(value: Tensor, bits: Tensor, exponent_field: Tensor, mantissa: Tensor, fmt: FloatFormat) -> Tensor:
    all_ones_exponent = (1 << fmt.exponent_bits) - 1
    if fmt.flavour == "fnuz":
        return (bits == fmt.nan_bits()).where(float("nan"), value)
    if fmt.flavour == "fn":
        is_nan = (exponent_field == all_ones_exponent) & (mantissa == (1 << fmt.mantissa_bits) - 1)
        return is_nan.where(float("nan"), value)
    special = exponent_field == all_ones_exponent
    infinity = (value < 0).where(float("-inf"), float("inf"))
    return special.where((mantissa == 0).where(infinity, float("nan")), value)
