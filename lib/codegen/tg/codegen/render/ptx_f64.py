"""float64 exp2, log2, sin and pow for the PTX renderer, in software: PTX's transcendental instructions are f32-only
(`ex2.approx.f32` ...), so these are built from exact f64 arithmetic (`fma.rn.f64`, `add.rn.f64`, bit operations),
the way GPU math libraries do it.

- exp2 x: x = n + r with n the nearest integer (r exact, |r| <= 1/2), 2**r by its Taylor series in r ln 2 (degree
  14 leaves under 2**-57), times 2**n built in the exponent bits in two halves (so a subnormal result is rounded once).
- log2 x: x = m 2**e with m in [sqrt(1/2), sqrt(2)); log2 m = (2 / ln 2) atanh(s), s = (m - 1) / (m + 1), an odd
  series in s (|s| < 0.172). s, the leading product and the sum with e are carried in two doubles (hi + lo) so the
  result is rounded about once; pow uses the pair.
- sin x: x = n pi/2 + r, r in two doubles, then the sine or cosine series of r by the quadrant n mod 4. Below
  2**30 (REDUCED_UP_TO) the reduction is Cody and Waite's (pi/2 in three doubles, each product subtracted exactly);
  above, where those hold too few bits, Payne and Hanek's (the bits of 2/pi that matter at x's exponent, taken from
  a 1344-bit table, times x's 53-bit mantissa in 64-bit integer arithmetic).
- pow x y: exp2(y log2 |x|) with the product in two doubles, and C's rules (tg.codegen.uop.alu._pow) for signs,
  zeros, infinities and NaN.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal, getcontext, localcontext
from fractions import Fraction
from typing import TYPE_CHECKING

from tg.codegen.dtype import dtypes

if TYPE_CHECKING:
    from tg.codegen.render.ptx import _PTXFunction

F64 = dtypes.float64
# ln 2 to 70 digits (more than three doubles hold); the series coefficients are derived from it and pi
_LN2 = Decimal("0.6931471805599453094172321214581765680755001343602552541206800094933936")


def _atan_inverse(n: int) -> Decimal:
    """atan(1 / n) by its series, to the Decimal context's precision."""
    power, total, k = Decimal(1) / n, Decimal(0), 0
    while power > Decimal(10) ** -(getcontext().prec + 2):
        total += power / (2 * k + 1) * (-1 if k % 2 else 1)
        power /= n * n
        k += 1
    return total


def _split(value: Decimal, parts: int) -> list[float]:
    """`value` as the sum of `parts` doubles, each the nearest double to what the previous ones leave."""
    result = []
    for _ in range(parts):
        result.append(float(value))
        value -= Decimal(result[-1])
    return result


with localcontext() as _context:  # the process's own Decimal context is left alone
    _context.prec = 420  # pi to 1300+ bits: 2 / pi's bits for the Payne-Hanek reduction
    _PI = 16 * _atan_inverse(5) - 4 * _atan_inverse(239)  # Machin's formula
    # 2 / pi as 21 64-bit words after 64 zero bits: bit p of the table (from its top) is bit p - 63 after the point
    TWO_OVER_PI_WORDS = [(int(2 / _PI * 2**1280) >> (64 * (20 - t))) & (2**64 - 1) for t in range(21)]
    _context.prec = 80
    LOG2_E_TWICE = _split(2 / _LN2, 2)  # 2 / ln 2: log2 m = (2 / ln 2) atanh(s)
    HALF_PI = _split(_PI / 2, 3)
    TWO_OVER_PI = float(2 / _PI)
    # 2**r = sum (r ln 2)**k / k!, k = 1..14
    EXP2_SERIES = [float(Fraction(_LN2**k) / math.factorial(k)) for k in range(1, 15)]
    # atanh(s) / s - 1 = s**2 / 3 + s**4 / 5 + ..., each times 2 / ln 2: up to s**22 (0.172**24 / 25 < 2**-66)
    LOG2_SERIES = [float(2 / _LN2 / (2 * k + 1)) for k in range(1, 12)]
    LOG2_THIRD = _split(2 / _LN2 / 3, 2)  # the first of them in two doubles
# sin r / r - 1 and cos r - 1 + r**2 / 2 by powers of r**2, |r| <= pi / 4 (+ a little for a rounded n)
SIN_SERIES = [(-1) ** k / math.factorial(2 * k + 1) for k in range(1, 10)]
COS_SERIES = [(-1) ** k / math.factorial(2 * k) for k in range(2, 11)]
REDUCED_UP_TO = 2.0**30


def imm(value: float) -> str:
    """A PTX f64 immediate: the exact bits."""
    return f"0d{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


MANTISSA_BITS = str((1 << 52) - 1)
EXPONENT_ONE = str(1023 << 52)  # the bits of 1.0


class F64Math:
    """Emits the float64 functions into one kernel through `fn`'s registers and instructions."""

    def __init__(self, fn: _PTXFunction) -> None:
        self.fn = fn

    # ------------------------------------------------------------------------------------------ building blocks
    def f(self, instruction: str, *operands: str) -> str:
        return self.fn.op(instruction, F64, *operands)

    def add(self, a: str, b: str) -> str:
        return self.f("add.rn.f64", a, b)

    def sub(self, a: str, b: str) -> str:
        return self.f("sub.rn.f64", a, b)

    def mul(self, a: str, b: str) -> str:
        return self.f("mul.rn.f64", a, b)

    def fma(self, a: str, b: str, c: str) -> str:
        return self.f("fma.rn.f64", a, b, c)

    def neg(self, a: str) -> str:
        return self.f("neg.f64", a)

    def pick(self, a: str, b: str, gate: str) -> str:
        """`a` where `gate`, else `b`."""
        return self.f("selp.f64", a, b, gate)

    def i64(self, instruction: str, *operands: str) -> str:
        """A 64-bit integer result."""
        return self.fn.op(instruction, dtypes.uint64, *operands)

    def test(self, instruction: str, *operands: str) -> str:
        return self.fn.op(instruction, dtypes.bool, *operands)

    def horner(self, x: str, coefficients: list[float]) -> str:
        """coefficients[0] + x (coefficients[1] + x (...)), one fma a step."""
        acc = self.f("mov.f64", imm(coefficients[-1]))
        for c in reversed(coefficients[:-1]):
            acc = self.fma(acc, x, imm(c))
        return acc

    def power_of_two(self, n: str) -> str:
        """2**n for an int32 n in the normal range, from its exponent bits."""
        biased = self.fn.op("add.s32", dtypes.int32, n, "1023")
        wide = self.i64("cvt.s64.s32", biased)
        return self.f("mov.b64", self.i64("shl.b64", wide, "52"))

    # ------------------------------------------------------------------------------------------ exp2
    def exp2(self, x: str, tail: str | None = None) -> str:
        """2**(x + tail) (tail: a second double below x's last bit, or none)."""
        nan = self.test("testp.notanumber.f64", x)
        # beyond 1025 the result is inf and below -1100 it is 0 in any case: clamping keeps n in int32
        clamped = self.pick(imm(1025.0), x, self.test("setp.gt.f64", x, imm(1025.0)))
        clamped = self.pick(imm(-1100.0), clamped, self.test("setp.lt.f64", clamped, imm(-1100.0)))
        n = self.fn.op("cvt.rni.s32.f64", dtypes.int32, clamped)
        r = self.sub(clamped, self.f("cvt.rn.f64.s32", n))  # exact, |r| <= 1/2
        if tail is not None:
            r = self.add(r, tail)
        p = self.horner(r, [1.0, *EXP2_SERIES])
        # 2**n in two halves, each a normal double: p 2**half is exact, the second product rounds once (also to
        # a subnormal or to 0 or inf)
        half = self.fn.op("shr.s32", dtypes.int32, n, "1")
        rest = self.fn.op("sub.s32", dtypes.int32, n, half)
        result = self.mul(self.mul(p, self.power_of_two(half)), self.power_of_two(rest))
        return self.pick(x, result, nan)

    # ------------------------------------------------------------------------------------------ log2
    def log2_pair(self, x: str) -> tuple[str, str]:
        """log2 x as hi + lo for a positive finite x (other inputs give some finite pair: see `log2`)."""
        tiny = self.test("setp.lt.f64", x, imm(2.0**-1022))  # a subnormal: scaled into the normal range
        scaled = self.pick(self.mul(x, imm(2.0**54)), x, tiny)
        bits = self.i64("mov.b64", scaled)
        biased = self.i64("shr.u64", bits, "52")
        e = self.sub(self.f("cvt.rn.f64.u64", biased), imm(1023.0))
        e = self.pick(self.sub(e, imm(54.0)), e, tiny)
        fraction = self.i64("and.b64", bits, MANTISSA_BITS)
        m = self.f("mov.b64", self.i64("or.b64", fraction, EXPONENT_ONE))  # in [1, 2)
        above = self.test("setp.gt.f64", m, imm(math.sqrt(2.0)))
        m = self.pick(self.mul(m, imm(0.5)), m, above)  # now in [sqrt(1/2), sqrt(2)]
        e = self.pick(self.add(e, imm(1.0)), e, above)
        # s = (m - 1) / (m + 1) as s0 + ds: m - 1 is exact, m + 1 = v + ve, and the division's remainder by fma
        u = self.sub(m, imm(1.0))
        v = self.add(m, imm(1.0))
        ve = self.sub(m, self.sub(v, imm(1.0)))
        s0 = self.f("div.rn.f64", u, v)
        remainder = self.fma(self.neg(s0), v, u)
        ds = self.f("div.rn.f64", self.fma(self.neg(s0), ve, remainder), v)
        # log2 m = C s (1 + s**2 / 3 + ...), C = 2 / ln 2 = c_hi + c_lo; C s0 in two doubles
        c_hi, c_lo = (imm(c) for c in LOG2_E_TWICE)
        hi = self.mul(s0, c_hi)
        hi_lost = self.fma(s0, c_hi, self.neg(hi))  # C s0 = hi + hi_lost + s0 c_lo
        series, series_lost = self.log2_series(s0)
        head = self.add(hi, series)  # |series| < |hi| / 100: what the sum drops is exact
        head_lost = self.sub(series, self.sub(head, hi))
        # ds moves log2 m by about ds C (1 + s**2): the s**2 part matters to pow, which scales the error by y
        slope = self.fma(self.mul(s0, s0), c_hi, c_hi)
        lo = self.add(self.add(head_lost, hi_lost), self.add(series_lost, self.fma(s0, c_lo, self.mul(ds, slope))))
        # e + head + lo: e is an integer and |head| < 1/2, so e + head loses exactly head - (sum - e)
        total = self.add(e, head)
        tail = self.add(self.sub(head, self.sub(total, e)), lo)
        result = self.add(total, tail)
        return result, self.sub(tail, self.sub(result, total))

    def log2_series(self, s: str) -> tuple[str, str]:
        """C s**3 (1/3 + s**2 / 5 + ...) as a pair: s**3 and the leading C / 3 carried in two doubles, the rest
        (under 2 % of it) in one."""
        s2 = self.mul(s, s)
        s2_lost = self.fma(s, s, self.neg(s2))
        s3 = self.mul(s, s2)
        s3_lost = self.fma(s, s2_lost, self.fma(s, s2, self.neg(s3)))  # s**3 = s3 + s3_lost
        third_hi, third_lo = (imm(c) for c in LOG2_THIRD)
        rest = self.mul(s2, self.horner(s2, LOG2_SERIES[1:]))
        q = self.add(third_hi, rest)  # C / 3 + rest = q + q_lost (|rest| < C / 3)
        q_lost = self.add(self.sub(rest, self.sub(q, third_hi)), third_lo)
        series = self.mul(s3, q)
        lost = self.fma(s3, q, self.neg(series))
        return series, self.add(lost, self.fma(s3_lost, q, self.mul(s3, q_lost)))

    def log2(self, x: str) -> str:
        """log2 x: inf and NaN give themselves, a negative x (-inf included) NaN, +-0 -inf."""
        result = self.pick(x, self.log2_pair(x)[0], self.test("not.pred", self.test("testp.finite.f64", x)))
        result = self.pick(imm(math.nan), result, self.test("setp.lt.f64", x, imm(0.0)))
        return self.pick(imm(-math.inf), result, self.test("setp.eq.f64", x, imm(0.0)))

    # ------------------------------------------------------------------------------------------ sin
    def sin(self, x: str) -> str:
        """sin x: x = n pi/2 + r (r in two doubles), then sin r or cos r by the quadrant n mod 4."""
        quadrant, r, r_lo = self.reduce_near(x)
        far_quadrant, far_r, far_r_lo = self.reduce_far(x)
        far = self.test("setp.ge.f64", self.f("abs.f64", x), imm(REDUCED_UP_TO))
        quadrant = self.i64("selp.b64", far_quadrant, quadrant, far)
        r, r_lo = self.pick(far_r, r, far), self.pick(far_r_lo, r_lo, far)
        sine, cosine = self.sin_series(r, r_lo), self.cos_series(r, r_lo)
        odd = self.test("setp.ne.b64", self.i64("and.b64", quadrant, "1"), "0")
        lower_half = self.test("setp.ne.b64", self.i64("and.b64", quadrant, "2"), "0")
        result = self.pick(cosine, sine, odd)
        result = self.pick(self.neg(result), result, lower_half)
        # sin x rounds to x below 2**-26 (and keeps -0's sign); inf and NaN give NaN
        magnitude = self.f("abs.f64", x)
        result = self.pick(x, result, self.test("setp.lt.f64", magnitude, imm(2.0**-26)))
        return self.pick(imm(math.nan), result, self.test("not.pred", self.test("testp.finite.f64", x)))

    def reduce_near(self, x: str) -> tuple[str, str, str]:
        """x = n pi/2 + r + r_lo for |x| < REDUCED_UP_TO (Cody and Waite); n (an int64), r, r_lo."""
        n = self.f("cvt.rni.f64.f64", self.mul(x, imm(TWO_OVER_PI)))
        minus_n = self.neg(n)
        p1, p2, p3 = (imm(p) for p in HALF_PI)
        r1 = self.fma(minus_n, p1, x)  # exact: x and n p1 are within a unit of each other's last bits
        w = self.mul(minus_n, p2)
        w_lost = self.fma(minus_n, p2, self.neg(w))  # -n p2 = w + w_lost exactly
        high = self.add(r1, w)  # r1 + w = high + low exactly (Knuth's two-sum)
        r1_part = self.sub(high, w)
        low = self.add(self.sub(r1, r1_part), self.sub(w, self.sub(high, r1_part)))
        rest = self.fma(minus_n, p3, self.add(low, w_lost))
        r = self.add(high, rest)
        return self.i64("cvt.rzi.s64.f64", n), r, self.sub(rest, self.sub(r, high))

    def reduce_far(self, x: str) -> tuple[str, str, str]:
        """x = n pi/2 + r + r_lo for |x| >= REDUCED_UP_TO (Payne and Hanek): |x| = M 2**k with M a 53-bit integer,
        and of x 2/pi only the bits from 2**-190 to 2**1 count mod 4: M times the 192 bits of 2/pi at that place
        (in 64-bit integer words), whose top two bits are n mod 4 and the rest r / (pi/2)."""
        bits = self.i64("mov.b64", self.f("abs.f64", x))
        biased = self.fn.op("cvt.u32.u64", dtypes.uint32, self.i64("shr.u64", bits, "52"))
        mantissa = self.i64("or.b64", self.i64("and.b64", bits, MANTISSA_BITS), str(1 << 52))
        start = self.fn.op("sub.u32", dtypes.uint32, biased, "1013")  # the window's first bit in the table
        shift = self.fn.op("and.b32", dtypes.uint32, start, "63")
        back = self.fn.op("sub.u32", dtypes.uint32, "64", shift)  # a shift by 64 gives 0 (PTX clamps it)
        words = self.table_words(self.fn.op("shr.u32", dtypes.uint32, start, "6"))
        window = [
            self.i64("or.b64", self.i64("shl.b64", words[j], shift), self.i64("shr.u64", words[j + 1], back))
            for j in range(3)
        ]
        # M (w0 2**128 + w1 2**64 + w2), its bits 0 to 191 (what is above is a multiple of 4 turns)
        p0 = self.i64("mul.lo.u64", mantissa, window[2])
        b0 = self.i64("mul.lo.u64", mantissa, window[1])
        p1 = self.i64("add.u64", self.i64("mul.hi.u64", mantissa, window[2]), b0)
        carry = self.i64("selp.u64", "1", "0", self.test("setp.lt.u64", p1, b0))
        p2 = self.i64(
            "add.u64",
            self.i64("mul.hi.u64", mantissa, window[1]),
            self.i64("add.u64", self.i64("mul.lo.u64", mantissa, window[0]), carry),
        )
        # the fraction of a quarter turn in 128 bits, read as signed (in [-1/2, 1/2): above 1/2 is the next quadrant)
        top = self.i64("or.b64", self.i64("shl.b64", p2, "2"), self.i64("shr.u64", p1, "62"))
        below = self.i64("or.b64", self.i64("shl.b64", p1, "2"), self.i64("shr.u64", p0, "62"))
        quadrant = self.i64("add.u64", self.i64("shr.u64", p2, "62"), self.i64("shr.u64", top, "63"))
        top_f = self.f("cvt.rn.f64.s64", top)
        top_lost = self.i64("sub.s64", top, self.i64("cvt.rzi.s64.f64", top_f))
        rest = self.fma(self.f("cvt.rn.f64.u64", below), imm(2.0**-64), self.f("cvt.rn.f64.s64", top_lost))
        high, low = self.mul(top_f, imm(2.0**-64)), self.mul(rest, imm(2.0**-64))  # the fraction is high + low
        # times pi/2 in two doubles
        half_pi_hi, half_pi_lo = imm(HALF_PI[0]), imm(HALF_PI[1])
        r_high = self.mul(high, half_pi_hi)
        r_low = self.add(
            self.fma(high, half_pi_hi, self.neg(r_high)), self.fma(high, half_pi_lo, self.mul(low, half_pi_hi))
        )
        r = self.add(r_high, r_low)
        r_lo = self.sub(r_low, self.sub(r, r_high))
        negative = self.test("setp.lt.f64", x, imm(0.0))  # sin(-x) = -sin x: the reduction of |x| negated
        quadrant = self.i64("selp.b64", self.i64("neg.s64", quadrant), quadrant, negative)
        return quadrant, self.pick(self.neg(r), r, negative), self.pick(self.neg(r_lo), r_lo, negative)

    def table_words(self, index: str) -> list[str]:
        """Words index .. index + 3 of TWO_OVER_PI_WORDS (index <= 16), chosen by selp."""
        chosen = [self.i64("mov.b64", hex(TWO_OVER_PI_WORDS[j])) for j in range(4)]
        for t in range(1, 17):
            here = self.test("setp.eq.u32", index, str(t))
            for j in range(4):
                chosen[j] = self.i64("selp.b64", hex(TWO_OVER_PI_WORDS[t + j]), chosen[j], here)
        return chosen

    def sin_series(self, r: str, r_lo: str) -> str:
        """sin(r + r_lo) = r + r**3 (-1/6 + ...) + r_lo cos r."""
        s = self.mul(r, r)
        cubic = self.mul(self.mul(r, s), self.horner(s, SIN_SERIES))
        return self.add(r, self.fma(r_lo, self.fma(s, imm(-0.5), imm(1.0)), cubic))

    def cos_series(self, r: str, r_lo: str) -> str:
        """cos(r + r_lo) = (1 - r**2 / 2) + r**4 (1/24 - ...) - r_lo r, the first part in two doubles."""
        s = self.mul(r, r)
        s_lost = self.fma(r, r, self.neg(s))  # r**2 = s + s_lost exactly
        half = self.mul(s, imm(0.5))
        head = self.sub(imm(1.0), half)
        head_lost = self.sub(self.sub(imm(1.0), head), half)  # exact: 1 - half = head + head_lost
        quartic = self.mul(self.mul(s, s), self.horner(s, COS_SERIES))
        tail = self.fma(s_lost, imm(-0.5), self.fma(self.neg(r), r_lo, quartic))
        return self.add(head, self.add(head_lost, tail))

    # ------------------------------------------------------------------------------------------ pow
    def pow(self, base: str, exponent: str) -> str:
        """base ** exponent = 2**(exponent log2 |base|) with the product in two doubles, and the sign, zero,
        infinity and NaN rules of the emulator's pow (C's, except that 0 to a negative power is +inf)."""
        magnitude = self.f("abs.f64", base)
        log_hi, log_lo = self.log2_pair(magnitude)
        log_hi = self._log2_specials(magnitude, log_hi)
        product = self.mul(exponent, log_hi)
        product_lo = self.fma(exponent, log_lo, self.fma(exponent, log_hi, self.neg(product)))
        finite = self.test("testp.finite.f64", product)
        result = self.exp2(product, self.pick(product_lo, imm(0.0), finite))
        return self.pow_rules(base, exponent, result)

    def _log2_specials(self, magnitude: str, log_hi: str) -> str:
        """log2 of a non-negative value from its log2_pair: inf and NaN give themselves, 0 -inf."""
        result = self.pick(magnitude, log_hi, self.test("not.pred", self.test("testp.finite.f64", magnitude)))
        return self.pick(imm(-math.inf), result, self.test("setp.eq.f64", magnitude, imm(0.0)))

    def pow_rules(self, base: str, exponent: str, result: str) -> str:
        whole = self.test("setp.eq.f64", self.f("cvt.rzi.f64.f64", exponent), exponent)
        half = self.mul(exponent, imm(0.5))
        odd = self.test("and.pred", whole, self.test("setp.neu.f64", self.f("cvt.rzi.f64.f64", half), half))
        sign_bit = self.test("setp.lt.s64", self.i64("mov.b64", base), "0")  # -0.0 included
        zero = self.test("setp.eq.f64", base, imm(0.0))
        zero_to_negative = self.test("and.pred", zero, self.test("setp.lt.f64", exponent, imm(0.0)))
        flip = self.test("and.pred", self.test("and.pred", sign_bit, odd), self.test("not.pred", zero_to_negative))
        result = self.pick(self.neg(result), result, flip)
        # a negative finite base to a fractional power is NaN ((-inf) ** 0.5 is inf, (-0) ** 0.5 is 0)
        finite_negative = self.test(
            "and.pred", self.test("setp.lt.f64", base, imm(0.0)), self.test("testp.finite.f64", base)
        )
        fractional = self.test("and.pred", finite_negative, self.test("not.pred", whole))
        result = self.pick(imm(math.nan), result, fractional)
        # x ** 0 and 1 ** y are 1, and so is (-1) ** +-inf
        unit = self.test("setp.eq.f64", self.f("abs.f64", base), imm(1.0))
        infinite = self.test("setp.eq.f64", self.f("abs.f64", exponent), imm(math.inf))
        one = self.test(
            "or.pred", self.test("setp.eq.f64", exponent, imm(0.0)), self.test("setp.eq.f64", base, imm(1.0))
        )
        one = self.test("or.pred", one, self.test("and.pred", unit, infinite))
        return self.pick(imm(1.0), result, one)
