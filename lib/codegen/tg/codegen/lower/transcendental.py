"""exp2 and log2 of float32 built from plain float32 and int32 ops, so that a CPU kernel computes them in SIMD lanes
and every backend that runs the same ops (C, CPU:LLVM, the PYTHON emulator) gets the same bits.

Why: the C renderer used to call libm in double (`(float)exp2((double)x)`), one scalar call per element, to match
the PYTHON emulator bit for bit. That call keeps the compilers from vectorizing the loop, and softmax's kernels ran
at 3-30% of memory bandwidth (issue 23). Here each function is a fixed sequence of IEEE float32 operations (add,
sub, mul, fused multiply-add, compare/select) and int32 bit operations; each of them is exactly rounded on every
backend (the C flags forbid contraction and reassociation, the emulator rounds every op to float32), so the result
is the same everywhere, and within 1 ulp of the exact value over the whole float32 range
(tests/codegen/test_transcendental.py).

exp2(x), x clamped to [-151, 129] (beyond it the result is 0 or inf anyway; NaN passes through):
    n = round(x) by adding and subtracting 1.5 * 2**23 (round to nearest even); r = x - n is exact, |r| <= 1/2
    2**r = 1 + r * q(r): q a degree-5 polynomial, minimax for the relative error of 2**r on [-1/2, 1/2]
    2**n is two factors 2**(n//2) and 2**(n - n//2), each a normal float made from its exponent bits: n + 151
    is read from the bits of x + 1.5 * 2**23, so no float -> int conversion is needed. The first product is
    exact, the second rounds once, which also gives the right subnormal results and inf above 2**128. Below
    -151 the first factor is 0 instead: the same +0 without an underflowing product (slow on x86).
log2(x):
    a subnormal x is scaled by 2**23 first. x = 2**k * m with m in [sqrt(1/2), sqrt(2)): adding
    0x800000 - 0x3504F3 to the bits carries into the exponent exactly when the mantissa is at least that of
    sqrt(2), and the low 23 bits plus the bits of sqrt(1/2) are then m's bits.
    f = m - 1 is exact. log2(1 + f) = C0 f - C0/2 f**2 + f**2 W(f) with C0 = 1/ln 2, W a degree-8 polynomial
    (minimax for the relative error of log2(1 + f) on the interval). The two leading terms carry most of the
    value and are added in the last fused multiply-adds with C0 as two floats and f**2 as two floats, so their
    rounding errors stay below the final rounding; then k + that. Special values: log2(0) = -inf, log2(inf) = inf,
    negative numbers and NaN give NaN.
The coefficients come from Lawson's iteration (reweighted least squares) in float64, rounded to float32.

float16 and bfloat16 compute in float32 and round once; float64 keeps the renderer's own (libm) functions.
A renderer opts in with `software_transcendentals = True` (the CPU's C and LLVM renderers, PYTHON); GPU renderers
keep their native instructions. TRANSCENDENTAL=0 turns this off, TRANSCENDENTAL=2 forces it on every renderer.
"""

from __future__ import annotations

import math

from tg.codegen.dtype import dtypes
from tg.codegen.uop.ops import Ops, UOp
from tg.codegen.uop.pattern import PatternMatcher, UPat, graph_rewrite

F32, I32 = dtypes.float32, dtypes.int32

# 2**r = 1 + r * q(r) on [-1/2, 1/2]; q's coefficients, constant term first
EXP2_Q = tuple(
    float.fromhex(h)
    for h in ("0x1.62e430p-1", "0x1.ebfbdcp-3", "0x1.c6aee8p-5", "0x1.3b2d4cp-7", "0x1.5f3e54p-10", "0x1.41fbbcp-13")
)
ROUNDING_SHIFT = 1.5 * 2.0**23  # x + it, |x| < 2**22, is x rounded to an integer (nearest even) in the low bits
EXP2_LOW, EXP2_HIGH = -151.0, 129.0  # 2**-151 rounds to 0 and 2**128 is inf: the clamp changes no result
ROUNDING_SHIFT_BITS = 0x4B400000  # the bits of ROUNDING_SHIFT: it plus a small integer n has the bits of it plus n
EXPONENT_BIAS_BITS = ROUNDING_SHIFT_BITS - 151  # less the 151 that makes n + 151 >= 0

# log2(1 + f) = C0 f - C0/2 f**2 + f**2 W(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]; W's coefficients
LOG2_W = tuple(
    float.fromhex(h)
    for h in (
        "0x1.54d128p-23", "0x1.ec7096p-2", "-0x1.715a74p-2", "0x1.277e40p-2", "-0x1.eabcf6p-3", "0x1.a3051ep-3",
        "-0x1.874890p-3", "0x1.7d4a44p-3", "-0x1.c269dap-4",
    )
)  # fmt: skip
C0_HIGH = float.fromhex("0x1.715476p+0")  # 1/ln 2 = C0_HIGH + C0_LOW within 2**-49
C0_LOW = float.fromhex("0x1.4ae0c0p-26")
SMALLEST_NORMAL = 2.0**-126
SQRT_HALF_BITS = 0x3F3504F3  # bits of sqrt(1/2) (rounded down)
MANTISSA_CARRY = 0x800000 - (0x3F3504F3 & 0x7FFFFF)  # carries into the exponent when the mantissa >= sqrt(2)'s


def _f(value: float) -> UOp:
    return UOp.const(value, F32)


def _i(value: int) -> UOp:
    return UOp.const(value, I32)


def _fma(a: UOp, b: UOp, c: UOp) -> UOp:
    """a * b + c rounded once (MULACC: the FMA instruction, fmaf, the emulator's exact rounding)."""
    return UOp(Ops.MULACC, a.dtype, (a, b, c))


def _sub(a: UOp, b: UOp) -> UOp:
    """a - b as one op (UOp's `-` is an add of a negation, two ops)."""
    return UOp(Ops.SUB, a.dtype, (a, b))


def _horner(x: UOp, coefficients: tuple[float, ...]) -> UOp:
    """The polynomial with these coefficients (constant first) at x, by fused multiply-adds."""
    value = _f(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        value = _fma(value, x, _f(c))
    return value


def _power_of_two(biased_exponent: UOp) -> UOp:
    """The float 2**(e - 127) for an int32 e in [1, 254], from its bits."""
    return (biased_exponent << _i(23)).bitcast(F32)


def exp2_float32(x: UOp) -> UOp:
    """2**x for a float32 x, within 1 ulp (see the module docstring)."""
    underflows = x < _f(EXP2_LOW)
    x = underflows.where(_f(EXP2_LOW), (_f(EXP2_HIGH) < x).where(_f(EXP2_HIGH), x))  # NaN stays NaN
    shifted = x + _f(ROUNDING_SHIFT)
    r = _sub(x, _sub(shifted, _f(ROUNDING_SHIFT)))  # exact: x minus its nearest integer
    mantissa = _fma(_horner(r, EXP2_Q), r, _f(1.0))  # 2**r in [0.7, 1.42]
    n_plus_151 = _sub(shifted.bitcast(I32), _i(EXPONENT_BIAS_BITS))  # in [0, 280]
    half = n_plus_151 >> _i(1)
    # 2**n = 2**(half - 76) * 2**(rest - 75), both normal for every n in [-151, 129]
    first, second = _power_of_two(half + _i(51)), _power_of_two(_sub(n_plus_151, half) + _i(52))
    # below the clamp the result is 0 from a zero factor: the product that rounds to 0 would underflow, and x86
    # takes a microcode assist of ~100 cycles on each (half of a causal softmax's inputs are -inf)
    return (mantissa * underflows.where(_f(0.0), first)) * second


def log2_float32(x: UOp) -> UOp:
    """log2(x) for a float32 x, within 1 ulp (see the module docstring)."""
    subnormal = x < _f(SMALLEST_NORMAL)
    scaled = subnormal.where(x * _f(2.0**23), x)
    carried = scaled.bitcast(I32) + _i(MANTISSA_CARRY)
    # k as a float without an int -> float conversion (gcc 12 does not vectorize one whose result meets a select):
    # the bits of 1.5 * 2**23 + k, less 1.5 * 2**23
    exponent_bias = subnormal.where(_i(ROUNDING_SHIFT_BITS - 127 - 23), _i(ROUNDING_SHIFT_BITS - 127))
    k = _sub(((carried >> _i(23)) + exponent_bias).bitcast(F32), _f(ROUNDING_SHIFT))
    f = _sub(((carried & _i(0x7FFFFF)) + _i(SQRT_HALF_BITS)).bitcast(F32), _f(1.0))  # m - 1, exact
    f_squared = f * f
    f_squared_low = _fma(f, f, UOp(Ops.NEG, F32, (f_squared,)))  # f**2 = f_squared + f_squared_low exactly
    tail = _fma(f_squared, _horner(f, LOG2_W), f * _f(C0_LOW))  # C0_LOW f + f**2 W(f)
    tail = _fma(f_squared_low, _f(-C0_HIGH / 2), tail)
    y = _fma(f, _f(C0_HIGH), _fma(f_squared, _f(-C0_HIGH / 2), tail))  # log2(m)
    result = k + y
    result = x.eq(_f(math.inf)).where(_f(math.inf), result)
    result = x.eq(_f(0.0)).where(_f(-math.inf), result)
    result = (x < _f(0.0)).where(_f(math.nan), result)
    return x.ne(x).where(x, result)


SOFTWARE = {Ops.EXP2: exp2_float32, Ops.LOG2: log2_float32}


def _decompose(node: UOp) -> UOp | None:
    function = SOFTWARE[node.op]
    dtype = node.dtype
    if dtype is F32:
        return function(node.src[0])
    if dtype in (dtypes.float16, dtypes.bfloat16):  # in float32, rounded once
        return function(node.src[0].cast(F32)).cast(dtype)
    return None  # float64: the renderer's own function


software_transcendentals = PatternMatcher(
    [(UPat((Ops.EXP2, Ops.LOG2), name="node"), _decompose)], name="software transcendentals"
)


def decompose_transcendentals(ast: UOp) -> UOp:
    """`ast` with every float32 (and 16-bit float) EXP2 and LOG2 replaced by its float32 ops."""
    return graph_rewrite(ast, software_transcendentals, name="software transcendentals")
