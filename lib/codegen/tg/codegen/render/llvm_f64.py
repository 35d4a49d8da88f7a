"""float64 exp2, log2, sin and pow as LLVM IR of plain double operations, for LLVM targets without a math library
(AMDGPU: LLVM lowers `llvm.exp2.f64` and friends to library calls, and without ROCm's device library it aborts).

Only instructions AMDGPU has natively are used: fma, add, mul, division (LLVM's correctly rounded expansion),
`llvm.rint`, `llvm.ldexp`, `llvm.frexp`, compares and selects. The same text compiles for the host CPU, which is
how tests/backends/test_amd_renderer.py measures the error against numpy on many inputs.

exp2(x): n = rint(x), r = x - n (exact, |r| <= 1/2), 2**r by its Taylor series in r (degree 14, every coefficient
    (ln 2)**k / k! rounded to double, Horner with fma), then ldexp(2**r, n) (one rounding, subnormals included).
    n is taken from x clamped to [-1100, 1100] (beyond it the result is 0 or inf anyway); NaN stays NaN.
log2(x): x = m 2**e with m in [sqrt(1/2), sqrt(2)) (frexp); s = (m - 1) / (m + 1), ln m = 2 s (1 + s**2/3 + ...)
    (11 terms: s**2 < 0.0295), log2 x = e + ln m / ln 2 with 1/ln 2 as two doubles. log2(0) = -inf, log2(inf) =
    inf, negative x and NaN give NaN.
sin(x): k = rint(x 2/pi), r = x - k pi/2 with pi/2 in three doubles and fma (Cody and Waite: accurate while
    |x| < 2**30 or so; beyond, the result is some value in [-1, 1]), then the sine or cosine series of r (|r| <=
    pi/4) by k mod 4. inf and NaN give NaN.
pow(x, y): exp2(y log2 |x|), the product's low part kept (y e exactly with fma, y ln m / ln 2 added to the
    remainder), with C's rules for signs (a negative base gives NaN for a fractional power and flips the sign for
    an odd one, x ** 0 and 1 ** y are 1) but the PYTHON device's +inf for a zero to a negative power.
Within a few ulps (measured by the test); not bit-exact with libm.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tg.codegen.dtype import dtypes

Emit = Callable[[str], str]
Intrinsic = Callable[..., str]


def d(value: float) -> str:
    """A double constant as LLVM writes it exactly (hex)."""
    from tg.codegen.render.llvmir import float_literal

    return float_literal(value, dtypes.float64)


EXP2_TAYLOR = tuple(math.log(2) ** k / math.factorial(k) for k in range(15))
LOG_SERIES = tuple(1.0 / (2 * k + 1) for k in range(12))
SIN_SERIES = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(10))  # r, r**3, ... r**19
COS_SERIES = tuple((-1) ** k / math.factorial(2 * k) for k in range(10))  # 1, r**2, ... r**18
INV_LN2_HIGH = 1 / math.log(2)
HALF_PI = (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)  # pi/2 in three parts
TWO_OVER_PI = 2 / math.pi
SQRT_HALF = math.sqrt(0.5)


def _inverse_ln2_low() -> float:
    """1/ln 2 less its nearest double, from 1/ln 2 to 50 digits."""
    from decimal import Context, Decimal

    context = Context(prec=50)
    exact = context.divide(1, context.ln(2))
    return float(context.subtract(exact, Decimal(INV_LN2_HIGH)))


INV_LN2_LOW = _inverse_ln2_low()


class F64Math:
    """Writes the functions with `emit` (text -> new value) and `intrinsic` (name, result type, typed args)."""

    def __init__(self, emit: Emit, intrinsic: Intrinsic) -> None:
        self.emit, self.intrinsic = emit, intrinsic

    def op(self, text: str) -> str:
        return self.emit(text)

    def fma(self, a: str, b: str, c: str) -> str:
        return self.intrinsic("llvm.fma.f64", "double", f"double {a}", f"double {b}", f"double {c}")

    def horner(self, coefficients: tuple[float, ...], x: str) -> str:
        """sum c_k x**k, highest first."""
        total = d(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            total = self.fma(total, x, d(c))
        return total

    def select(self, condition: str, a: str, b: str) -> str:
        return self.op(f"select i1 {condition}, double {a}, double {b}")

    def rint(self, x: str) -> str:
        return self.intrinsic("llvm.rint.f64", "double", f"double {x}")

    def ldexp(self, x: str, n: str) -> str:
        return self.intrinsic("llvm.ldexp.f64.i32", "double", f"double {x}", f"i32 {n}")

    # ------------------------------------------------------------------------------------------ functions
    def clamp(self, x: str, bound: float) -> str:
        x = self.intrinsic("llvm.minnum.f64", "double", f"double {x}", f"double {d(bound)}")
        return self.intrinsic("llvm.maxnum.f64", "double", f"double {x}", f"double {d(-bound)}")

    def exp2(self, x: str, low: str | None = None) -> str:
        """2**(x + low), `low` a small correction to x (pow's low part)."""
        total = x if low is None else self.op(f"fadd double {x}, {low}")
        n = self.rint(self.clamp(total, 1100.0))  # beyond, 2**total is 0 or inf anyway
        r = self.op(f"fsub double {x}, {n}")  # exact: x and n are close (or the result is 0 or inf)
        if low is not None:
            r = self.op(f"fadd double {r}, {low}")
        power = self.horner(EXP2_TAYLOR, self.clamp(r, 1.0))  # |r| <= 1/2 but where total was clamped
        result = self.ldexp(power, self.op(f"fptosi double {n} to i32"))
        return self.select(self.op(f"fcmp uno double {total}, {total}"), total, result)

    def split_log2(self, x: str) -> tuple[str, str]:
        """(e, l) with log2 x = e + l for a finite positive x: e an integer (as a double), |l| <= 1/2."""
        parts = self.intrinsic("llvm.frexp.f64.i32", "{ double, i32 }", f"double {x}")
        mantissa = self.op(f"extractvalue {{ double, i32 }} {parts}, 0")
        exponent = self.op(f"extractvalue {{ double, i32 }} {parts}, 1")
        small = self.op(f"fcmp olt double {mantissa}, {d(SQRT_HALF)}")
        m = self.select(small, self.op(f"fmul double {mantissa}, {d(2.0)}"), mantissa)
        borrow = self.op(f"zext i1 {small} to i32")
        e = self.op(f"sitofp i32 {self.op(f'sub i32 {exponent}, {borrow}')} to double")
        numerator, denominator = self.op(f"fsub double {m}, {d(1.0)}"), self.op(f"fadd double {m}, {d(1.0)}")
        s = self.op(f"fdiv double {numerator}, {denominator}")
        series = self.horner(LOG_SERIES, self.op(f"fmul double {s}, {s}"))
        ln_m = self.op(f"fmul double {self.op(f'fmul double {s}, {d(2.0)}')}, {series}")
        # ln m / ln 2 with 1/ln 2 in two parts: the low part's product is below the rounding of the high one
        high = self.op(f"fmul double {ln_m}, {d(INV_LN2_HIGH)}")
        low = self.fma(ln_m, d(INV_LN2_LOW), self.fma(ln_m, d(INV_LN2_HIGH), self.op(f"fneg double {high}")))
        return e, self.op(f"fadd double {high}, {low}")

    def log2(self, x: str) -> str:
        e, fraction = self.split_log2(x)
        result = self.op(f"fadd double {e}, {fraction}")
        result = self.select(self.op(f"fcmp oeq double {x}, {d(math.inf)}"), d(math.inf), result)
        result = self.select(self.op(f"fcmp oeq double {x}, {d(0.0)}"), d(-math.inf), result)
        invalid = self.op(f"fcmp ult double {x}, {d(0.0)}")  # negative or NaN
        return self.select(invalid, d(math.nan), result)

    def sin(self, x: str) -> str:
        k = self.rint(self.op(f"fmul double {x}, {d(TWO_OVER_PI)}"))
        minus_k = self.op(f"fneg double {k}")
        r = x
        for part in HALF_PI:
            r = self.fma(minus_k, d(part), r)
        r2 = self.op(f"fmul double {r}, {r}")
        sine = self.op(f"fmul double {r}, {self.horner(SIN_SERIES, r2)}")
        cosine = self.horner(COS_SERIES, r2)
        quadrant = self.op(f"and i64 {self.op(f'fptosi double {k} to i64')}, 3")
        odd = self.op(f"icmp ne i64 {self.op(f'and i64 {quadrant}, 1')}, 0")
        negative = self.op(f"icmp ugt i64 {quadrant}, 1")
        value = self.select(odd, cosine, sine)
        value = self.select(negative, self.op(f"fneg double {value}"), value)
        finite = self.op(f"fcmp oeq double {self.op(f'fsub double {x}, {x}')}, {d(0.0)}")
        return self.select(finite, value, d(math.nan))

    def pow(self, base: str, exponent: str) -> str:
        magnitude = self.intrinsic("llvm.fabs.f64", "double", f"double {base}")
        e, fraction = self.split_log2(magnitude)
        high = self.op(f"fmul double {exponent}, {e}")
        low = self.fma(exponent, e, self.op(f"fneg double {high}"))  # y e = high + low exactly
        low = self.fma(exponent, fraction, low)
        result = self.exp2(high, low)
        # |x| = 0 or inf: log2 is -inf or inf, the product +-inf or NaN (for y = 0, handled below)
        zero = self.op(f"fcmp oeq double {magnitude}, {d(0.0)}")
        infinite = self.op(f"fcmp oeq double {magnitude}, {d(math.inf)}")
        positive_y = self.op(f"fcmp ogt double {exponent}, {d(0.0)}")
        edge = self.select(self.op(f"xor i1 {zero}, {positive_y}"), d(math.inf), d(0.0))
        result = self.select(self.op(f"or i1 {zero}, {infinite}"), edge, result)
        whole_part = self.intrinsic("llvm.trunc.f64", "double", f"double {exponent}")
        whole = self.op(f"fcmp oeq double {whole_part}, {exponent}")
        halved = self.op(f"fmul double {exponent}, {d(0.5)}")
        halved_whole = self.intrinsic("llvm.trunc.f64", "double", f"double {halved}")
        odd = self.op(f"and i1 {whole}, {self.op(f'fcmp une double {halved_whole}, {halved}')}")
        sign = self.op(f"icmp slt i64 {self.op(f'bitcast double {base} to i64')}, 0")  # -0 and -inf included
        # a zero to a negative power is +inf whatever its sign, as the PYTHON device has it (math.pow's domain error)
        pole = self.op(f"and i1 {zero}, {self.op(f'fcmp olt double {exponent}, {d(0.0)}')}")
        flip = self.op(f"and i1 {self.op(f'and i1 {sign}, {odd}')}, {self.op(f'xor i1 {pole}, true')}")
        result = self.select(flip, self.op(f"fneg double {result}"), result)
        negative = self.op(f"fcmp olt double {base}, {d(0.0)}")
        fractional = self.op(f"and i1 {negative}, {self.op(f'xor i1 {whole}, true')}")
        finite_base = self.op(f"xor i1 {infinite}, true")
        result = self.select(self.op(f"and i1 {fractional}, {finite_base}"), d(math.nan), result)
        base_nan = self.op(f"fcmp uno double {base}, {base}")
        exponent_nan = self.op(f"fcmp uno double {exponent}, {exponent}")
        result = self.select(self.op(f"or i1 {base_nan}, {exponent_nan}"), d(math.nan), result)
        y_zero = self.op(f"fcmp oeq double {exponent}, {d(0.0)}")
        one = self.op(f"or i1 {y_zero}, {self.op(f'fcmp oeq double {base}, {d(1.0)}')}")
        return self.select(one, d(1.0), result)
