"""Special functions: log1p/expm1, erf, hyperbolic and inverse trigonometric functions, logaddexp, lerp, copysign.

All are compositions of the IR's primitives (EXP2, LOG2, SQRT, RECIPROCAL, ...), chosen to keep the relative error
small near 0 (where naive `log(1 + x)` or `exp(x) - 1` cancel) and the right limit at +-inf. Odd functions are
built as `where(x < 0, -f(-x), f(x))`: `sign(x) * f(|x|)` would have a zero gradient at 0 (spec 1.7).

16-bit floats are computed in float32 and rounded once; ints become the default float.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tg.codegen import dtypes
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.elementwise import broadcast, in_float32_when_half

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

LN2 = math.log(2)
TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
TAN_PI_OVER_8 = math.sqrt(2) - 1
HUGE_ARGUMENT = 2.0**28  # beyond this, sqrt(x*x + 1) == x in float64 too, and x*x may overflow float32

# erf on |x| >= 0.5: Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7)
ERF_P = 0.3275911
ERF_COEFFICIENTS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
ERF_TAYLOR_TERMS = 12  # erf's Maclaurin series on |x| < 0.5: the 12th term is below 1e-17 of the sum
ERF64_SPLIT = 2.0  # float64 erf: Maclaurin series below (34 terms: below 1e-17), continued fraction above
ERF64_TAYLOR_TERMS = 34
ERF64_FRACTION_DEPTH = 60  # erfc's continued fraction at 2 converges to 2e-16 relative with 60 levels
ATAN_TAYLOR_TERMS = 12  # atan's series on |u| <= tan(pi/16) ~ 0.199: the 12th term is below 1e-17


def odd_extension(x: Tensor, positive_half) -> Tensor:
    """f(x) for an odd f given on x >= 0: where(x < 0, -f(-x), f(x)), NaN passing through."""
    negative = x < 0
    value = positive_half(negative.where(-x, x))
    return negative.where(-value, value)


def _horner(x: Tensor, coefficients: list[float]) -> Tensor:
    """c0 + c1 x + c2 x^2 + ... evaluated from the highest power."""
    result = x.full_like(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = result * x + coefficient
    return result


def _erf_nonnegative(t: Tensor) -> Tensor:
    """erf(t) for t >= 0: the series near 0 (exact slope 2/sqrt(pi) at 0), A&S 7.1.26 beyond (float32's
    precision); float64 gets the series up to 2 and erfc's continued fraction beyond, both to about 1e-16."""
    if t.dtype is dtypes.float64:
        return _erf_nonnegative_float64(t)
    small = t.minimum(0.5)
    series = [TWO_OVER_SQRT_PI * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(ERF_TAYLOR_TERMS)]
    near_zero = small * _horner(small * small, series)
    k = 1 / (1 + ERF_P * t)
    tail = 1 - k * _horner(k, list(ERF_COEFFICIENTS)) * (-t * t).exp()
    return (t < 0.5).where(near_zero, tail)


def _erf_nonnegative_float64(t: Tensor) -> Tensor:
    small = t.minimum(ERF64_SPLIT)
    series = [TWO_OVER_SQRT_PI * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(ERF64_TAYLOR_TERMS)]
    near_zero = small * _horner(small * small, series)
    large = t.maximum(ERF64_SPLIT)
    # erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + (2/2) / (x + (3/2) / ...))), evaluated from the bottom
    denominator = large
    for k in range(ERF64_FRACTION_DEPTH, 0, -1):
        denominator = large + (k / 2) / denominator
    complement = (-large * large).exp() / (math.sqrt(math.pi) * denominator)
    return (t < ERF64_SPLIT).where(near_zero, 1 - complement)


def _atan_nonnegative(t: Tensor) -> Tensor:
    """atan(t) for t >= 0 by three exact-angle reductions, then the odd Taylor series on |u| <= 0.2."""
    inverted = t > 1
    r = inverted.where(1 / inverted.where(t, 1), t)  # atan(t) = pi/2 - atan(1/t); 1/inf = 0; no 1/0 unused
    shifted = r > TAN_PI_OVER_8
    u = shifted.where((r - 1) / (r + 1), r)  # atan(r) = pi/4 + atan((r-1)/(r+1)), |u| <= tan(pi/8)
    halved = u / (1 + (1 + u * u).sqrt())  # atan(u) = 2 atan(u / (1 + sqrt(1 + u^2))), |halved| <= tan(pi/16)
    series = [(-1) ** n / (2 * n + 1) for n in range(ATAN_TAYLOR_TERMS)]
    angle = 2 * halved * _horner(halved * halved, series)
    angle = shifted.where(angle + math.pi / 4, angle)
    return inverted.where(math.pi / 2 - angle, angle)


def _float_pair(a: Tensor, b: Any) -> tuple[Tensor, Tensor]:
    """Both operands broadcast in one float dtype (ints promote to the default float)."""
    x, y = broadcast(a, b)
    if not dtypes.is_float(x.dtype):
        x, y = x.cast(dtypes.default_float), y.cast(dtypes.default_float)
    return x, y


def _in_float32(x: Tensor, y: Tensor, compute) -> Tensor:
    """compute(x, y) for a float pair, in float32 when they are 16-bit floats (rounded once at the end)."""
    if x.dtype in (dtypes.float16, dtypes.bfloat16):
        return compute(x.cast(dtypes.float32), y.cast(dtypes.float32)).cast(x.dtype)
    return compute(x, y)


_SAME_SIZE_INT = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def sign_bit_set(x: Tensor) -> Tensor:
    """Whether the sign bit of float `x` is set: true for -0.0 and for NaNs with the sign bit."""
    return x.bitcast(_SAME_SIZE_INT[x.dtype.itemsize]) < 0


class SpecialFunctionOps(TensorBase):
    """`log1p, expm1, erf, sinh, cosh, asinh, acosh, atanh, asin, acos, atan, logaddexp, lerp, copysign, isclose,
    allclose`."""

    def log1p(self) -> Tensor:
        """log(1 + x), accurate for tiny x: log(u) * x / (u - 1) with u = 1 + x cancels u's rounding error."""

        def compute(x: Tensor) -> Tensor:
            u = 1 + x
            special = (u == 1) | (u == math.inf)
            safe_x = special.where(1.0, x)  # the unused branch sees 1: no 0/0, so no 0 * inf in the gradient
            safe_u = 1 + safe_x
            corrected = safe_u.log() * safe_x / (safe_u - 1)
            return (u == 1).where(x, (u == math.inf).where(u, corrected))

        return in_float32_when_half(self, compute)

    def expm1(self) -> Tensor:
        """exp(x) - 1, accurate for tiny x: (u - 1) * x / log(u) with u = exp(x) (Kahan's trick)."""

        def compute(x: Tensor) -> Tensor:
            u = x.exp()
            special = (u == 1) | (u == math.inf) | (u - 1 == -1)
            safe_x = special.where(1.0, x)  # the unused branch sees 1: no 0/0, so no 0 * inf in the gradient
            safe_u = safe_x.exp()
            corrected = (safe_u - 1) * safe_x / safe_u.log()
            corrected = (u == math.inf).where(u, corrected)
            return (u == 1).where(x, (u - 1 == -1).where(-1, corrected))

        return in_float32_when_half(self, compute)

    def erf(self) -> Tensor:
        return in_float32_when_half(self, lambda x: odd_extension(x, _erf_nonnegative))

    # -------------------------------------------------------------------------------- hyperbolic

    def sinh(self) -> Tensor:
        """Through expm1 below 1 (no cancellation near 0), as h*h/2 - 1/(2h*h) with h = exp(t/2) above."""

        def positive_half(t: Tensor) -> Tensor:
            e = t.minimum(1).expm1()
            small = 0.5 * (e + e / (e + 1))
            h = (t * 0.5).exp()  # h * h overflows only where sinh itself does
            large = h * (h * 0.5) - 0.5 / (h * h)
            return (t < 1).where(small, large)

        return in_float32_when_half(self, lambda x: odd_extension(x, positive_half))

    def cosh(self) -> Tensor:
        def compute(x: Tensor) -> Tensor:
            h = (x.abs() * 0.5).exp()
            return h * (h * 0.5) + 0.5 / (h * h)

        return in_float32_when_half(self, compute)

    def asinh(self) -> Tensor:
        """log1p(t + t^2 / (1 + sqrt(1 + t^2))) for t = |x|; log(t) + ln 2 for huge t."""

        def positive_half(t: Tensor) -> Tensor:
            moderate = t.minimum(HUGE_ARGUMENT)
            square = moderate * moderate
            # t (1 + t / (1 + sqrt(1 + t^2))) = t + t^2 / (...), written as a product to keep asinh(-0) = -0
            near = (moderate * (1 + moderate / (1 + (1 + square).sqrt()))).log1p()
            return (t > HUGE_ARGUMENT).where(t.log() + LN2, near)

        return in_float32_when_half(self, lambda x: odd_extension(x, positive_half))

    def acosh(self) -> Tensor:
        """log1p(u + sqrt(u (u + 2))) with u = x - 1 (exact near 1); NaN below 1."""

        def compute(x: Tensor) -> Tensor:
            u = x.minimum(HUGE_ARGUMENT) - 1
            near = (u + (u * (u + 2)).sqrt()).log1p()
            value = (x > HUGE_ARGUMENT).where(x.log() + LN2, near)
            return (x < 1).where(math.nan, value)

        return in_float32_when_half(self, compute)

    def atanh(self) -> Tensor:
        """log1p(2t / (1 - t)) / 2 for t = |x|: inf at 1, NaN beyond."""
        return in_float32_when_half(self, lambda x: odd_extension(x, lambda t: 0.5 * (2 * t / (1 - t)).log1p()))

    # -------------------------------------------------------------------------------- inverse trigonometric

    def atan(self) -> Tensor:
        return in_float32_when_half(self, lambda x: odd_extension(x, _atan_nonnegative))

    def asin(self) -> Tensor:
        """atan(x / sqrt((1 - x)(1 + x))): +-pi/2 at +-1, NaN beyond."""
        return in_float32_when_half(self, lambda x: (x / ((1 - x) * (1 + x)).sqrt()).atan())

    def acos(self) -> Tensor:
        """2 atan(sqrt((1 - x) / (1 + x))): small values near 1 keep their relative precision; pi at -1."""
        return in_float32_when_half(self, lambda x: 2 * ((1 - x) / (1 + x)).sqrt().atan())

    # -------------------------------------------------------------------------------- binary

    def logaddexp(self, other: Any) -> Tensor:
        """log(exp(a) + exp(b)) = max + log1p(exp(-|a - b|)); the max itself where it is infinite (no inf - inf)."""

        def compute(a: Tensor, b: Tensor) -> Tensor:
            larger = a.maximum(b)
            finite_case = larger + (-(a - b).abs()).exp().log1p()
            return larger.isfinite().where(finite_case, larger)

        return _in_float32(*_float_pair(as_tensor(self), other), compute)

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """self + weight * (end - self), from the nearer end as torch does (exact at weight 0 and 1)."""
        start, end_t, weight_t = broadcast(self, end, weight)
        if not dtypes.is_float(start.dtype):
            raise TypeError("lerp needs float tensors")
        difference = end_t - start
        return (weight_t < 0.5).where(start + weight_t * difference, end_t - difference * (1 - weight_t))

    def copysign(self, other: Any) -> Tensor:
        """|self| with the sign bit of `other` (so -0.0 and negative NaNs count as negative); a float result."""
        magnitude, sign_source = _float_pair(as_tensor(self), other)
        magnitude = sign_bit_set(magnitude).where(-magnitude, magnitude)
        return sign_bit_set(sign_source).where(-magnitude, magnitude)

    def isclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
        """|self - other| <= atol + rtol |other| elementwise (numpy's and torch's test); equal infinities are close,
        NaNs only with `equal_nan`."""
        a, b = broadcast(self, other)
        if not dtypes.is_float(a.dtype):
            return a == b
        within_tolerance = a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs())
        close = (a == b) | within_tolerance  # infinities are close only to themselves
        return (close | (a.isnan() & b.isnan())) if equal_nan else close

    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())
