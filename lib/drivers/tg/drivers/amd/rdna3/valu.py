"""Vector ALU semantics: each operation maps its source lanes (numpy arrays of raw bits, uint32 or uint64 for
64-bit operands) to its result lanes. Callers silence numpy's floating-point warnings (inf and NaN results are the
hardware's answers, not errors): the emulator runs each dispatch under np.errstate(all="ignore").

Floats are reinterpreted with .view, computed in numpy's IEEE types (round to nearest even, denormals kept), and
reinterpreted back, so f32 arithmetic rounds as the hardware's does.

An FMA is rounded once, as the hardware's fused operation is. f32/f16: the product is exact in float64, the sum is
rounded to odd there, and that rounds to f32/f16 as the exact value would (see rounded_once). f64: exact in Python
integers (exact_fma64). Transcendentals (v_exp_f32, v_log_f32, v_sin_f32, v_rcp_f32, ...) are computed in float64
and rounded to f32: within the hardware's documented 1 ulp."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np

U32, U64, I32, I64 = np.uint32, np.uint64, np.int32, np.int64
F32, F64, F16 = np.float32, np.float64, np.float16
Lanes = np.ndarray
Op = Callable[..., Lanes]


def f32(x: Lanes) -> Lanes:
    return x.astype(U32, copy=False).view(F32)


def f64(x: Lanes) -> Lanes:
    return x.astype(U64, copy=False).view(F64)


def f16(x: Lanes) -> Lanes:
    return (x.astype(U32, copy=False) & 0xFFFF).astype(np.uint16).view(F16)


def b32(x: Lanes) -> Lanes:
    """float32/int lanes -> raw uint32 bits"""
    if x.dtype == F32:
        return x.view(U32)
    if x.dtype == F16:
        return x.view(np.uint16).astype(U32)
    return x.astype(U32)


def b64(x: Lanes) -> Lanes:
    return x.view(U64) if x.dtype == F64 else x.astype(U64)


def i32(x: Lanes) -> Lanes:
    return x.astype(U32, copy=False).view(I32)


def to_f32(x: Lanes) -> Lanes:
    return b32(np.asarray(x, dtype=F64).astype(F32))


def rounded_once(product: Lanes, addend: Lanes, dtype: type[np.floating]) -> Lanes:
    """`product + addend` (float64 lanes, each exact) rounded once to `dtype` (float32 or float16).

    Rounding the float64 sum to nearest and then to f32 would round twice: a sum just above an f32 midpoint can
    land on the midpoint in float64 and then round to even, the wrong way. So the float64 sum is rounded to odd
    instead (an inexact sum keeps an odd last bit, which records that something was lost); a value rounded to odd
    with at least 2p+2 bits rounds to p bits exactly as the exact value does (53 >= 2*24+2)."""
    total = product + addend
    # TwoSum: the exact rounding error of `total` (valid whenever it is finite)
    addend_part = total - product
    product_part = total - addend_part
    error = (product - product_part) + (addend - addend_part)
    even = (total.view(U64) & U64(1)) == 0
    to_odd = (error != 0) & even & np.isfinite(total)
    total = np.where(to_odd, np.nextafter(total, np.where(error > 0, np.inf, -np.inf)), total)
    return total.astype(dtype)


def _fma32(a: Lanes, b: Lanes, c: Lanes) -> Lanes:
    return b32(rounded_once(f32(a).astype(F64) * f32(b).astype(F64), f32(c).astype(F64), F32))


def _fma16(a: Lanes, b: Lanes, c: Lanes) -> Lanes:
    return rounded_once(a.astype(F64) * b.astype(F64), c.astype(F64), F16)


def _fma64(a: Lanes, b: Lanes, c: Lanes) -> Lanes:
    """A float64 FMA rounded once: numpy has no fused operation and no wider type holds the 106-bit product, so each
    finite lane is computed exactly in Python integers (see exact_fma64); inf and NaN lanes follow IEEE arithmetic."""
    x, y, z = f64(a), f64(b), f64(c)
    with np.errstate(all="ignore"):
        result = x * y + z  # right wherever an operand is inf or NaN
    finite = np.isfinite(x) & np.isfinite(y) & np.isfinite(z)
    for lane in np.flatnonzero(finite):
        result[lane] = exact_fma64(float(x[lane]), float(y[lane]), float(z[lane]))
    return b64(result)


def exact_fma64(x: float, y: float, z: float) -> float:
    """x * y + z for finite doubles, rounded once to nearest even: each operand is an integer times a power of two,
    so the sum is exact as one integer times 2**low, and Python rounds int / int (and int to float) correctly."""
    (xn, xd), (yn, yd), (zn, zd) = x.as_integer_ratio(), y.as_integer_ratio(), z.as_integer_ratio()
    # the denominators are powers of two: n / 2**k
    product_shift, z_shift = (xd * yd).bit_length() - 1, zd.bit_length() - 1
    shift = max(product_shift, z_shift)
    numerator = (xn * yn << (shift - product_shift)) + (zn << (shift - z_shift))
    if numerator == 0:  # an exact zero is +0, unless both the product and z are -0 (IEEE 754 6.3)
        product_negative = math.copysign(1.0, x) * math.copysign(1.0, y) < 0
        return -0.0 if product_negative and math.copysign(1.0, z) < 0 else 0.0
    try:
        return numerator / (1 << shift)
    except OverflowError:
        return math.inf if numerator > 0 else -math.inf


def _min_num(x: Lanes, y: Lanes) -> Lanes:
    return np.fmin(x, y)  # IEEE minNum: a NaN operand yields the other


def _max_num(x: Lanes, y: Lanes) -> Lanes:
    return np.fmax(x, y)


def _f32_binary(fn: Callable[[Lanes, Lanes], Lanes]) -> Op:
    # no errstate here: the emulator runs a dispatch under np.errstate(all="ignore") (hot path)
    def op(a: Lanes, b: Lanes) -> Lanes:
        return b32(fn(f32(a), f32(b)).astype(F32))

    return op


def _f64_binary(fn: Callable[[Lanes, Lanes], Lanes]) -> Op:
    def op(a: Lanes, b: Lanes) -> Lanes:
        with np.errstate(all="ignore"):
            return b64(fn(f64(a), f64(b)).astype(F64))

    return op


def _f16_binary(fn: Callable[[Lanes, Lanes], Lanes]) -> Op:
    def op(a: Lanes, b: Lanes) -> Lanes:
        with np.errstate(all="ignore"):
            return b32(fn(f16(a), f16(b)).astype(F16))

    return op


def _f32_unary(fn: Callable[[Lanes], Lanes]) -> Op:
    def op(a: Lanes) -> Lanes:
        with np.errstate(all="ignore"):
            return to_f32(fn(f32(a).astype(F64)))

    return op


def _f64_unary(fn: Callable[[Lanes], Lanes]) -> Op:
    def op(a: Lanes) -> Lanes:
        with np.errstate(all="ignore"):
            return b64(fn(f64(a)).astype(F64))

    return op


def _f16_unary(fn: Callable[[Lanes], Lanes]) -> Op:
    def op(a: Lanes) -> Lanes:
        with np.errstate(all="ignore"):
            return b32(fn(f16(a).astype(F64)).astype(F16))

    return op


def _cvt_to_int(a: Lanes, lo: int, hi: int, dtype: type) -> Lanes:
    """Float -> int as the hardware converts: truncate, saturate, NaN -> 0."""
    with np.errstate(all="ignore"):
        t = np.trunc(a.astype(F64))
        t = np.where(np.isnan(t), 0, np.clip(t, lo, hi))
        return t.astype(np.int64).astype(dtype)


def _bfe(a: Lanes, b: Lanes, c: Lanes, signed: bool) -> Lanes:
    offset, width = b.astype(U64) & 31, c.astype(U64) & 31
    field = (a.astype(U64) >> offset) & ((U64(1) << width) - U64(1))
    if signed:
        sign = (field >> np.maximum(width, U64(1)) - U64(1)) & U64(1)
        field = np.where((sign == 1) & (width > 0), field - (U64(1) << width), field)
        field = np.where(width == 0, U64(0), field)
    return field.astype(np.int64).astype(U32) if signed else field.astype(U32)


def _shift_amount(b: Lanes, bits: int) -> Lanes:
    return b.astype(U64) & (bits - 1)


def _mul_hi_u32(a: Lanes, b: Lanes) -> Lanes:
    return ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32)


def _mul_hi_i32(a: Lanes, b: Lanes) -> Lanes:
    return ((i32(a).astype(I64) * i32(b).astype(I64)) >> 32).astype(U32)


def _sext24(a: Lanes) -> Lanes:
    v = a.astype(I64) & 0xFFFFFF
    return np.where(v & 0x800000, v - 0x1000000, v)


def _clz(a: Lanes) -> Lanes:
    out = np.full(a.shape, 0xFFFFFFFF, dtype=U32)
    nz = a != 0
    out[nz] = (31 - np.floor(np.log2(a[nz].astype(F64)))).astype(U32)
    return out


def _cls(a: Lanes) -> Lanes:
    """Leading bits equal to the sign bit (sign included); -1 for 0 and -1."""
    flipped = np.where(a >> U32(31) == 1, ~a, a)
    out = _clz(flipped)
    return np.where((a == 0) | (a == U32(0xFFFFFFFF)), U32(0xFFFFFFFF), out).astype(U32)


def _ctz(a: Lanes) -> Lanes:
    out = np.full(a.shape, 0xFFFFFFFF, dtype=U32)
    nz = a != 0
    low = a[nz] & (~a[nz] + U32(1))
    out[nz] = np.log2(low.astype(F64)).astype(U32)
    return out


def _bfrev(a: Lanes) -> Lanes:
    out = np.zeros(a.shape, dtype=U32)
    for bit in range(32):
        out |= ((a >> U32(bit)) & U32(1)) << U32(31 - bit)
    return out


def _popcount(a: Lanes) -> Lanes:
    return np.unpackbits(a.astype("<u4").view(np.uint8).reshape(-1, 4), axis=1).sum(axis=1).astype(U32)


def _frexp_mant32(a: Lanes) -> Lanes:
    x = f32(a)
    mant, _ = np.frexp(x)
    return b32(np.where(np.isfinite(x), mant, x).astype(F32))


def _frexp_exp32(a: Lanes) -> Lanes:
    x = f32(a)
    _, exp = np.frexp(x)
    return np.where(np.isfinite(x), exp, 0).astype(np.int64).astype(U32)


def _ldexp32(a: Lanes, b: Lanes) -> Lanes:
    with np.errstate(all="ignore"):
        return to_f32(np.ldexp(f32(a).astype(F64), np.clip(i32(b), -2000, 2000)))


def _ldexp64(a: Lanes, b: Lanes) -> Lanes:
    with np.errstate(all="ignore"):
        return b64(np.ldexp(f64(a), np.clip(i32(b), -5000, 5000)))


def _fract(x: Lanes) -> Lanes:
    with np.errstate(all="ignore"):
        return np.where(np.isinf(x), np.nan, np.minimum(x - np.floor(x), np.nextafter(1.0, 0.0)))


def _rint(x: Lanes) -> Lanes:
    return np.rint(x)  # round half to even, as V_RNDNE


def _cvt_from_ubyte(n: int) -> Op:
    return lambda a: to_f32(((a >> U32(8 * n)) & U32(0xFF)).astype(F64))


def _med3(a: Lanes, b: Lanes, c: Lanes) -> Lanes:
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _typed3(view: Callable[[Lanes], Lanes], back: Callable[[Lanes], Lanes], fn: Callable[..., Lanes]) -> Op:
    def op(a: Lanes, b: Lanes, c: Lanes) -> Lanes:
        with np.errstate(all="ignore"):
            return back(fn(view(a), view(b), view(c)))

    return op


def _u32(x: Lanes) -> Lanes:
    return x.astype(U32)


def _div_fixup(q: Lanes, d: Lanes, n: Lanes) -> Lanes:
    """V_DIV_FIXUP (S0 = quotient, S1 = denominator, S2 = numerator), on float64 lanes: the IEEE special cases of
    n / d (a NaN, a zero or an infinite operand; a zero numerator gives a signed zero) are computed exactly; otherwise
    the quotient's magnitude with the sign of n xor the sign of d, as the ISA's pseudocode gives it (the refinement
    before it may lose the sign of a zero quotient)."""
    with np.errstate(all="ignore"):
        special = np.isnan(d) | np.isnan(n) | (d == 0) | (n == 0) | np.isinf(d) | np.isinf(n)
        negative = np.signbit(n) ^ np.signbit(d)
        return np.where(special, n / d, np.where(negative, -np.abs(q), np.abs(q)))


def _div_fixup32(q: Lanes, d: Lanes, n: Lanes) -> Lanes:
    """V_DIV_FIXUP_F32: see _div_fixup (exact in float64, then rounded once)."""
    return to_f32(_div_fixup(f32(q).astype(F64), f32(d).astype(F64), f32(n).astype(F64)))


def _div_fixup16(q: Lanes, d: Lanes, n: Lanes) -> Lanes:
    return b32(_div_fixup(f16(q).astype(F64), f16(d).astype(F64), f16(n).astype(F64)).astype(F16))


def _div_fixup64(q: Lanes, d: Lanes, n: Lanes) -> Lanes:
    return b64(_div_fixup(f64(q), f64(d), f64(n)))


def _cvt_pk_rtz(a: Lanes, b: Lanes) -> Lanes:
    lo = _f32_to_f16_rtz(f32(a))
    hi = _f32_to_f16_rtz(f32(b))
    return lo | (hi << U32(16))


def _f32_to_f16_rtz(x: Lanes) -> Lanes:
    with np.errstate(all="ignore"):
        h = x.astype(F16)
        back = h.astype(F32)
        # round toward zero: step back one f16 ulp where rounding went away from zero
        away = np.isfinite(x) & (np.abs(back) > np.abs(x))
        h = np.where(away, np.nextafter(h, F16(0)), h)
        h = np.where(np.isinf(h) & np.isfinite(x), np.copysign(F16(65504.0), x).astype(F16), h)
    return h.view(np.uint16).astype(U32)


def _f32_unary_to_f16(a: Lanes) -> Lanes:
    with np.errstate(all="ignore"):  # out of range becomes inf, as the hardware's conversion does
        return b32(f32(a).astype(F16))


# name -> (operation, number of sources, result is 64-bit, source widths in registers)
VOP_OPS: dict[str, tuple[Op, tuple[int, ...], int]] = {}


def _op(name: str, fn: Op, srcs: tuple[int, ...], dst: int = 1) -> None:
    VOP_OPS[name] = (fn, srcs, dst)


# -- VOP2 / VOP3 binary --
_op("v_add_f32", _f32_binary(np.add), (1, 1))
_op("v_sub_f32", _f32_binary(np.subtract), (1, 1))
_op("v_subrev_f32", _f32_binary(lambda a, b: b - a), (1, 1))
_op("v_mul_f32", _f32_binary(np.multiply), (1, 1))
_op("v_mul_dx9_zero_f32", _f32_binary(lambda a, b: np.where((a == 0) | (b == 0), F32(0), a * b)), (1, 1))
_op("v_min_f32", _f32_binary(_min_num), (1, 1))
_op("v_max_f32", _f32_binary(_max_num), (1, 1))
_op("v_add_f16", _f16_binary(np.add), (1, 1))
_op("v_sub_f16", _f16_binary(np.subtract), (1, 1))
_op("v_subrev_f16", _f16_binary(lambda a, b: b - a), (1, 1))
_op("v_mul_f16", _f16_binary(np.multiply), (1, 1))
_op("v_min_f16", _f16_binary(_min_num), (1, 1))
_op("v_max_f16", _f16_binary(_max_num), (1, 1))
_op("v_add_f64", _f64_binary(np.add), (2, 2), 2)
_op("v_mul_f64", _f64_binary(np.multiply), (2, 2), 2)
_op("v_min_f64", _f64_binary(_min_num), (2, 2), 2)
_op("v_max_f64", _f64_binary(_max_num), (2, 2), 2)
_op("v_ldexp_f32", _ldexp32, (1, 1))
_op("v_ldexp_f64", _ldexp64, (2, 1), 2)
_op("v_mul_i32_i24", lambda a, b: (_sext24(a) * _sext24(b)).astype(U32), (1, 1))
_op("v_mul_hi_i32_i24", lambda a, b: ((_sext24(a) * _sext24(b)) >> 32).astype(U32), (1, 1))
_op("v_mul_u32_u24", lambda a, b: ((a & U32(0xFFFFFF)).astype(U64) * (b & U32(0xFFFFFF))).astype(U32), (1, 1))
_op(
    "v_mul_hi_u32_u24",
    lambda a, b: (((a & U32(0xFFFFFF)).astype(U64) * (b & U32(0xFFFFFF))) >> U64(32)).astype(U32),
    (1, 1),
)
_op("v_min_i32", lambda a, b: np.minimum(i32(a), i32(b)).view(U32), (1, 1))
_op("v_max_i32", lambda a, b: np.maximum(i32(a), i32(b)).view(U32), (1, 1))
_op("v_min_u32", np.minimum, (1, 1))
_op("v_max_u32", np.maximum, (1, 1))
_op("v_lshlrev_b32", lambda a, b: (b.astype(U64) << _shift_amount(a, 32)).astype(U32), (1, 1))
_op("v_lshrrev_b32", lambda a, b: (b.astype(U64) >> _shift_amount(a, 32)).astype(U32), (1, 1))
_op("v_ashrrev_i32", lambda a, b: (i32(b).astype(I64) >> _shift_amount(a, 32).astype(I64)).astype(U32), (1, 1))
_op("v_lshlrev_b64", lambda a, b: b << _shift_amount(a, 64), (1, 2), 2)
_op("v_lshrrev_b64", lambda a, b: b >> _shift_amount(a, 64), (1, 2), 2)
_op("v_ashrrev_i64", lambda a, b: (b.view(I64) >> _shift_amount(a, 64).astype(I64)).view(U64), (1, 2), 2)
_op("v_and_b32", np.bitwise_and, (1, 1))
_op("v_or_b32", np.bitwise_or, (1, 1))
_op("v_xor_b32", np.bitwise_xor, (1, 1))
_op("v_xnor_b32", lambda a, b: ~(a ^ b), (1, 1))
_op("v_add_nc_u32", lambda a, b: a + b, (1, 1))
_op("v_sub_nc_u32", lambda a, b: a - b, (1, 1))
_op("v_subrev_nc_u32", lambda a, b: b - a, (1, 1))
_op("v_add_nc_i32", lambda a, b: a + b, (1, 1))
_op("v_sub_nc_i32", lambda a, b: a - b, (1, 1))
_op("v_mul_lo_u32", lambda a, b: (a.astype(U64) * b.astype(U64)).astype(U32), (1, 1))
_op("v_mul_hi_u32", _mul_hi_u32, (1, 1))
_op("v_mul_hi_i32", _mul_hi_i32, (1, 1))
_op("v_bfm_b32", lambda a, b: (((U64(1) << (a.astype(U64) & 31)) - U64(1)) << (b.astype(U64) & 31)).astype(U32), (1, 1))
_op("v_bcnt_u32_b32", lambda a, b: _popcount(a) + b, (1, 1))
_op("v_cvt_pk_rtz_f16_f32", _cvt_pk_rtz, (1, 1))
_op("v_pack_b32_f16", lambda a, b: (a & U32(0xFFFF)) | ((b & U32(0xFFFF)) << U32(16)), (1, 1))
_op("v_add_nc_u16", lambda a, b: (a + b) & U32(0xFFFF), (1, 1))
_op("v_sub_nc_u16", lambda a, b: (a - b) & U32(0xFFFF), (1, 1))
_op("v_mul_lo_u16", lambda a, b: (a * b) & U32(0xFFFF), (1, 1))
_op("v_lshlrev_b16", lambda a, b: ((b & U32(0xFFFF)) << (a & U32(15))) & U32(0xFFFF), (1, 1))
_op("v_lshrrev_b16", lambda a, b: (b & U32(0xFFFF)) >> (a & U32(15)), (1, 1))
_op("v_and_b16", lambda a, b: a & b & U32(0xFFFF), (1, 1))
_op("v_or_b16", lambda a, b: (a | b) & U32(0xFFFF), (1, 1))
_op("v_xor_b16", lambda a, b: (a ^ b) & U32(0xFFFF), (1, 1))

# -- VOP3 ternary --
_op("v_fma_f32", _fma32, (1, 1, 1))
_op("v_fmac_f32", lambda a, b, d: _fma32(a, b, d), (1, 1, 1))  # D = S0 * S1 + D
_op("v_fmamk_f32", lambda a, k, b: _fma32(a, k, b), (1, 1, 1))
_op("v_fmaak_f32", lambda a, b, k: _fma32(a, b, k), (1, 1, 1))
_op("v_fma_dx9_zero_f32", _fma32, (1, 1, 1))
_op("v_fma_f64", _fma64, (2, 2, 2), 2)
_op("v_fma_f16", _typed3(f16, b32, _fma16), (1, 1, 1))
_op("v_fmamk_f16", _typed3(f16, b32, _fma16), (1, 1, 1))
_op("v_fmaak_f16", _typed3(f16, b32, _fma16), (1, 1, 1))
_op("v_fmac_f16", _typed3(f16, b32, _fma16), (1, 1, 1))
_op("v_bfe_u32", lambda a, b, c: _bfe(a, b, c, False), (1, 1, 1))
_op("v_bfe_i32", lambda a, b, c: _bfe(a, b, c, True), (1, 1, 1))
_op("v_bfi_b32", lambda a, b, c: (a & b) | (~a & c), (1, 1, 1))
_op("v_alignbit_b32", lambda a, b, c: (((a.astype(U64) << U64(32)) | b) >> (c.astype(U64) & 31)).astype(U32), (1, 1, 1))
_op(
    "v_alignbyte_b32",
    lambda a, b, c: (((a.astype(U64) << U64(32)) | b) >> (8 * (c.astype(U64) & 3))).astype(U32),
    (1, 1, 1),
)
_op("v_min3_f32", _typed3(f32, b32, lambda a, b, c: np.fmin(np.fmin(a, b), c)), (1, 1, 1))
_op("v_max3_f32", _typed3(f32, b32, lambda a, b, c: np.fmax(np.fmax(a, b), c)), (1, 1, 1))
_op("v_med3_f32", _typed3(f32, b32, _med3), (1, 1, 1))
_op("v_min3_i32", _typed3(i32, _u32, lambda a, b, c: np.minimum(np.minimum(a, b), c)), (1, 1, 1))
_op("v_max3_i32", _typed3(i32, _u32, lambda a, b, c: np.maximum(np.maximum(a, b), c)), (1, 1, 1))
_op("v_med3_i32", _typed3(i32, _u32, _med3), (1, 1, 1))
_op("v_min3_u32", lambda a, b, c: np.minimum(np.minimum(a, b), c), (1, 1, 1))
_op("v_max3_u32", lambda a, b, c: np.maximum(np.maximum(a, b), c), (1, 1, 1))
_op("v_med3_u32", _med3, (1, 1, 1))
_op("v_maxmin_f32", _typed3(f32, b32, lambda a, b, c: np.fmin(np.fmax(a, b), c)), (1, 1, 1))
_op("v_minmax_f32", _typed3(f32, b32, lambda a, b, c: np.fmax(np.fmin(a, b), c)), (1, 1, 1))
_op("v_maxmin_i32", _typed3(i32, _u32, lambda a, b, c: np.minimum(np.maximum(a, b), c)), (1, 1, 1))
_op("v_minmax_i32", _typed3(i32, _u32, lambda a, b, c: np.maximum(np.minimum(a, b), c)), (1, 1, 1))
_op("v_maxmin_u32", lambda a, b, c: np.minimum(np.maximum(a, b), c), (1, 1, 1))
_op("v_minmax_u32", lambda a, b, c: np.maximum(np.minimum(a, b), c), (1, 1, 1))
_op("v_xor3_b32", lambda a, b, c: a ^ b ^ c, (1, 1, 1))
_op("v_or3_b32", lambda a, b, c: a | b | c, (1, 1, 1))
_op("v_and_or_b32", lambda a, b, c: (a & b) | c, (1, 1, 1))
_op("v_lshl_or_b32", lambda a, b, c: ((a.astype(U64) << (b.astype(U64) & 31)).astype(U32)) | c, (1, 1, 1))
_op("v_lshl_add_u32", lambda a, b, c: (a.astype(U64) << (b.astype(U64) & 31)).astype(U32) + c, (1, 1, 1))
_op("v_add_lshl_u32", lambda a, b, c: ((a + b).astype(U64) << (c.astype(U64) & 31)).astype(U32), (1, 1, 1))
_op("v_add3_u32", lambda a, b, c: a + b + c, (1, 1, 1))
_op("v_xad_u32", lambda a, b, c: (a ^ b) + c, (1, 1, 1))
_op("v_mad_u32_u24", lambda a, b, c: ((a & U32(0xFFFFFF)).astype(U64) * (b & U32(0xFFFFFF)) + c).astype(U32), (1, 1, 1))
_op("v_mad_i32_i24", lambda a, b, c: (_sext24(a) * _sext24(b) + i32(c)).astype(U32), (1, 1, 1))
_op("v_mad_u32_u16", lambda a, b, c: (a & U32(0xFFFF)) * (b & U32(0xFFFF)) + c, (1, 1, 1))
_op("v_div_fixup_f32", _div_fixup32, (1, 1, 1))
_op("v_div_fixup_f64", _div_fixup64, (2, 2, 2), 2)
_op("v_div_fixup_f16", lambda q, d, n: _div_fixup16(q, d, n), (1, 1, 1))
_op("v_div_fmas_f32", _fma32, (1, 1, 1))  # VCC (the scale flag) is never set by our V_DIV_SCALE
_op("v_div_fmas_f64", _fma64, (2, 2, 2), 2)


def _perm(a: Lanes, b: Lanes, sel: Lanes) -> Lanes:
    data = (a.astype(U64) << U64(32)) | b.astype(U64)
    out = np.zeros(a.shape, dtype=U32)
    for byte in range(4):
        s = ((sel >> U32(8 * byte)) & U32(0xFF)).astype(U64)
        picked = ((data >> (8 * np.minimum(s, 7))) & U64(0xFF)).astype(U32)
        sign_src = {8: 15, 9: 31, 10: 47, 11: 63}
        for code, bit in sign_src.items():
            picked = np.where(s == code, ((data >> U64(bit)) & U64(1)).astype(U32) * U32(0xFF), picked)
        picked = np.where(s == 12, U32(0), picked)
        picked = np.where(s >= 13, U32(0xFF), picked)
        out |= picked << U32(8 * byte)
    return out


_op("v_perm_b32", _perm, (1, 1, 1))


def _i16(x: Lanes) -> Lanes:
    return (x & U32(0xFFFF)).astype(np.uint16).view(np.int16).astype(I64)


def _u16(x: Lanes) -> Lanes:
    return (x & U32(0xFFFF)).astype(I64)


def _to16(x: Lanes) -> Lanes:
    return x.astype(I64).astype(U32) & U32(0xFFFF)


for _kind, _view in (("i16", _i16), ("u16", _u16)):
    _op(f"v_min3_{_kind}", _typed3(_view, _to16, lambda a, b, c: np.minimum(np.minimum(a, b), c)), (1, 1, 1))
    _op(f"v_max3_{_kind}", _typed3(_view, _to16, lambda a, b, c: np.maximum(np.maximum(a, b), c)), (1, 1, 1))
    _op(f"v_med3_{_kind}", _typed3(_view, _to16, _med3), (1, 1, 1))
    _op(f"v_min_{_kind}", lambda a, b, v=_view: _to16(np.minimum(v(a), v(b))), (1, 1))
    _op(f"v_max_{_kind}", lambda a, b, v=_view: _to16(np.maximum(v(a), v(b))), (1, 1))
    _op(f"v_mad_{_kind}", _typed3(_view, _to16, lambda a, b, c: a * b + c), (1, 1, 1))
_op("v_min3_f16", _typed3(f16, b32, lambda a, b, c: np.fmin(np.fmin(a, b), c)), (1, 1, 1))
_op("v_max3_f16", _typed3(f16, b32, lambda a, b, c: np.fmax(np.fmax(a, b), c)), (1, 1, 1))
_op("v_med3_f16", _typed3(f16, b32, _med3), (1, 1, 1))
_op("v_add_nc_i16", lambda a, b: _to16(_i16(a) + _i16(b)), (1, 1))
_op("v_sub_nc_i16", lambda a, b: _to16(_i16(a) - _i16(b)), (1, 1))
_op("v_ashrrev_i16", lambda a, b: _to16(_i16(b) >> (a & U32(15)).astype(I64)), (1, 1))

# -- VOP1 --
_op("v_mov_b32", lambda a: a, (1,))
_op("v_mov_b16", lambda a: a & U32(0xFFFF), (1,))
_op("v_not_b16", lambda a: ~a & U32(0xFFFF), (1,))
_op("v_cls_i32", _cls, (1,))
_op("v_not_b32", lambda a: ~a, (1,))
_op("v_bfrev_b32", _bfrev, (1,))
_op("v_clz_i32_u32", _clz, (1,))
_op("v_ctz_i32_b32", _ctz, (1,))
_op("v_cvt_f32_i32", lambda a: to_f32(i32(a).astype(F64)), (1,))
_op("v_cvt_f32_u32", lambda a: to_f32(a.astype(F64)), (1,))
_op("v_cvt_i32_f32", lambda a: _cvt_to_int(f32(a), -(2**31), 2**31 - 1, I32).view(U32), (1,))
_op("v_cvt_u32_f32", lambda a: _cvt_to_int(f32(a), 0, 2**32 - 1, U32), (1,))
_op("v_cvt_i32_f64", lambda a: _cvt_to_int(f64(a), -(2**31), 2**31 - 1, I32).view(U32), (2,))
_op("v_cvt_u32_f64", lambda a: _cvt_to_int(f64(a), 0, 2**32 - 1, U32), (2,))
_op("v_cvt_f64_i32", lambda a: b64(i32(a).astype(F64)), (1,), 2)
_op("v_cvt_f64_u32", lambda a: b64(a.astype(F64)), (1,), 2)
_op("v_cvt_f32_f64", lambda a: to_f32(f64(a)), (2,))
_op("v_cvt_f64_f32", lambda a: b64(f32(a).astype(F64)), (1,), 2)
_op("v_cvt_f16_f32", _f32_unary_to_f16, (1,))
_op("v_cvt_f32_f16", lambda a: b32(f16(a).astype(F32)), (1,))
_op("v_cvt_i32_i16", lambda a: (a & U32(0xFFFF)).astype(np.uint16).view(np.int16).astype(I32).view(U32), (1,))
_op("v_cvt_u32_u16", lambda a: a & U32(0xFFFF), (1,))
_op("v_cvt_floor_i32_f32", lambda a: _cvt_to_int(np.floor(f32(a)), -(2**31), 2**31 - 1, I32).view(U32), (1,))
_op(
    "v_cvt_nearest_i32_f32",
    lambda a: _cvt_to_int(np.floor(f32(a) + F32(0.5)), -(2**31), 2**31 - 1, I32).view(U32),
    (1,),
)
for _n in range(4):
    _op(f"v_cvt_f32_ubyte{_n}", _cvt_from_ubyte(_n), (1,))
_op("v_trunc_f32", _f32_unary(np.trunc), (1,))
_op("v_ceil_f32", _f32_unary(np.ceil), (1,))
_op("v_floor_f32", _f32_unary(np.floor), (1,))
_op("v_rndne_f32", _f32_unary(_rint), (1,))
_op("v_fract_f32", lambda a: b32(_fract(f32(a))), (1,))
_op("v_exp_f32", _f32_unary(np.exp2), (1,))
_op("v_log_f32", _f32_unary(np.log2), (1,))
_op("v_rcp_f32", _f32_unary(lambda x: 1.0 / x), (1,))
_op("v_rcp_iflag_f32", _f32_unary(lambda x: 1.0 / x), (1,))
_op("v_rsq_f32", _f32_unary(lambda x: 1.0 / np.sqrt(x)), (1,))
_op("v_sqrt_f32", _f32_unary(np.sqrt), (1,))
_op("v_sin_f32", _f32_unary(lambda x: np.sin(x * 2 * np.pi)), (1,))  # input in revolutions
_op("v_cos_f32", _f32_unary(lambda x: np.cos(x * 2 * np.pi)), (1,))
_op("v_frexp_mant_f32", _frexp_mant32, (1,))
_op("v_frexp_exp_i32_f32", _frexp_exp32, (1,))
_op("v_trunc_f64", _f64_unary(np.trunc), (2,), 2)
_op("v_ceil_f64", _f64_unary(np.ceil), (2,), 2)
_op("v_floor_f64", _f64_unary(np.floor), (2,), 2)
_op("v_rndne_f64", _f64_unary(_rint), (2,), 2)
_op("v_fract_f64", _f64_unary(_fract), (2,), 2)
_op("v_sqrt_f64", _f64_unary(np.sqrt), (2,), 2)
_op("v_rcp_f64", _f64_unary(lambda x: 1.0 / x), (2,), 2)
_op("v_rsq_f64", _f64_unary(lambda x: 1.0 / np.sqrt(x)), (2,), 2)
_op("v_frexp_mant_f64", _f64_unary(lambda x: np.where(np.isfinite(x), np.frexp(x)[0], x)), (2,), 2)
_op(
    "v_frexp_exp_i32_f64", lambda a: np.where(np.isfinite(f64(a)), np.frexp(f64(a))[1], 0).astype(I64).astype(U32), (2,)
)
_op("v_exp_f16", _f16_unary(np.exp2), (1,))
_op("v_log_f16", _f16_unary(np.log2), (1,))
_op("v_rcp_f16", _f16_unary(lambda x: 1.0 / x), (1,))
_op("v_sqrt_f16", _f16_unary(np.sqrt), (1,))
_op("v_rsq_f16", _f16_unary(lambda x: 1.0 / np.sqrt(x)), (1,))
_op("v_trunc_f16", _f16_unary(np.trunc), (1,))
_op("v_floor_f16", _f16_unary(np.floor), (1,))
_op("v_ceil_f16", _f16_unary(np.ceil), (1,))
_op("v_rndne_f16", _f16_unary(_rint), (1,))
_op("v_sin_f16", _f16_unary(lambda x: np.sin(x * 2 * np.pi)), (1,))
_op("v_cos_f16", _f16_unary(lambda x: np.cos(x * 2 * np.pi)), (1,))
_op("v_cvt_f16_u16", lambda a: b32((a & U32(0xFFFF)).astype(F16)), (1,))
_op("v_cvt_f16_i16", lambda a: b32((a & U32(0xFFFF)).astype(np.uint16).view(np.int16).astype(F16)), (1,))
_op("v_cvt_u16_f16", lambda a: _cvt_to_int(f16(a), 0, 0xFFFF, U32), (1,))
_op("v_cvt_i16_f16", lambda a: _cvt_to_int(f16(a), -0x8000, 0x7FFF, I32).view(U32) & U32(0xFFFF), (1,))


# -- comparisons --
_CMP: dict[str, Callable[[Lanes, Lanes], Lanes]] = {
    "f": lambda a, b: np.zeros(a.shape, dtype=bool),
    "t": lambda a, b: np.ones(a.shape, dtype=bool),
    "lt": np.less,
    "eq": np.equal,
    "le": np.less_equal,
    "gt": np.greater,
    "lg": lambda a, b: np.less(a, b) | np.greater(a, b),
    "ne": np.not_equal,
    "ge": np.greater_equal,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~np.greater_equal(a, b),
    "nlg": lambda a, b: ~(np.less(a, b) | np.greater(a, b)),
    "ngt": lambda a, b: ~np.greater(a, b),
    "nle": lambda a, b: ~np.less_equal(a, b),
    "neq": np.not_equal,
    "nlt": lambda a, b: ~np.less(a, b),
}
_CMP_VIEWS: dict[str, Callable[[Lanes], Lanes]] = {
    "f32": f32,
    "f64": f64,
    "f16": f16,
    "i32": i32,
    "u32": lambda x: x.astype(U32),
    "i64": lambda x: x.astype(U64).view(I64),
    "u64": lambda x: x.astype(U64),
    "i16": lambda x: (x & U32(0xFFFF)).astype(np.uint16).view(np.int16),
    "u16": lambda x: x & U32(0xFFFF),
}
_CMP_NAME = re.compile(r"v_cmpx?_([a-z]+)_([fiu](?:16|32|64))$")


def _class(x: Lanes, mask: Lanes) -> Lanes:
    """V_CMP_CLASS: bit i of the mask selects class i (sNaN, qNaN, -inf, -normal, -denorm, -0, +0, +denorm,
    +normal, +inf)."""
    x = x.astype(F64) if x.dtype != F64 else x
    tiny = {np.dtype(F32): np.finfo(F32).tiny, np.dtype(F64): np.finfo(F64).tiny}
    smallest = tiny.get(np.dtype(F32))
    nan = np.isnan(x)
    neg = np.signbit(x)
    classes = [
        nan & False,  # signalling NaN: numpy cannot tell; never matched
        nan,
        np.isneginf(x),
        neg & np.isfinite(x) & (np.abs(x) >= smallest) & ~nan,
        neg & (x != 0) & (np.abs(x) < smallest),
        neg & (x == 0),
        ~neg & (x == 0),
        ~neg & (x != 0) & (np.abs(x) < smallest) & ~nan,
        ~neg & np.isfinite(x) & (np.abs(x) >= smallest),
        np.isposinf(x),
    ]
    out = np.zeros(x.shape, dtype=bool)
    for bit, cls in enumerate(classes):
        out |= cls & ((mask >> bit) & 1).astype(bool)
    return out


def compare(name: str) -> tuple[Callable[[Lanes, Lanes], Lanes], tuple[int, int]] | None:
    """A VOPC comparison: (lanes, lanes) -> bool lanes, and the source widths."""
    if name.startswith(("v_cmp_class_", "v_cmpx_class_")):
        kind = name.rsplit("_", 1)[1]
        view = _CMP_VIEWS[kind]
        width = 2 if kind == "f64" else 1
        if kind == "f32":
            return (lambda a, b: _class(f32(a), b)), (1, 1)
        return (lambda a, b: _class(view(a).astype(F64), b)), (width, 1)
    match = _CMP_NAME.match(name)
    if not match or match.group(1) not in _CMP or match.group(2) not in _CMP_VIEWS:
        return None
    fn, view = _CMP[match.group(1)], _CMP_VIEWS[match.group(2)]
    width = 2 if match.group(2).endswith("64") else 1

    def cmp(a: Lanes, b: Lanes) -> Lanes:
        with np.errstate(all="ignore"):
            return np.asarray(fn(view(a), view(b)), dtype=bool)

    return cmp, (width, width)


def float_source_bits(name: str, width: int) -> int:
    """The sign bit the VOP3 abs/neg modifiers flip for a source of this operation (0: no float source)."""
    if width == 2:
        return 63
    if "f16" in name and "f32" not in name:
        return 15
    return 31
