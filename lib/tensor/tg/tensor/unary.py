"""Unary math: exp, log, sqrt, trigonometry, abs, sign and rounding, built from the IR's primitive ALU ops.

`exp` and `log` go through EXP2 and LOG2 (exp(x) = exp2(x * log2(e))), `cos` and `tan` through SIN, `floor`, `ceil`
and `round` (half to even, as numpy) through TRUNC. Integer inputs to float functions become the default float first.
float16 and bfloat16 inputs are computed in float32 and rounded once at the end, which is what numpy does for
float16: rounding every intermediate step to 11 bits would lose several ulps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg.codegen import Ops, dtypes
from tg.codegen.uop.rounding import round_half_to_even
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.elementwise import alu, in_float32_when_half

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


class UnaryMathOps(TensorBase):
    """`exp, exp2, log, log2, log10, sqrt, rsqrt, reciprocal, sin, cos, tan, square, abs, sign, trunc, floor, ceil,
    round`."""

    def exp2(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.EXP2, x))

    def exp(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.EXP2, x * (1 / math.log(2))))

    def log2(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.LOG2, x))

    def log(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.LOG2, x) * math.log(2))

    def log10(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.LOG2, x) * math.log10(2))

    def sqrt(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.SQRT, x))

    def rsqrt(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.RECIPROCAL, alu(Ops.SQRT, x)))

    def reciprocal(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self.cast(dtypes.default_float).reciprocal()
        return alu(Ops.RECIPROCAL, self)

    def sin(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.SIN, x))

    def cos(self) -> Tensor:
        """cos(x) = 1 - 2 sin(x/2)^2: x/2 is exact, so the error stays absolute and small for large x too
        (sin(pi/2 - x) would lose the rounding error of pi/2 - x, about one ulp of x)."""

        def compute(x: Tensor) -> Tensor:
            half_angle_sine = alu(Ops.SIN, x * 0.5)
            return 1 - 2 * half_angle_sine * half_angle_sine

        return in_float32_when_half(self, compute)

    def tan(self) -> Tensor:
        return in_float32_when_half(self, lambda x: alu(Ops.FDIV, alu(Ops.SIN, x), x.cos()))

    def square(self) -> Tensor:
        return self * self

    def abs(self) -> Tensor:
        if self.dtype is dtypes.bool or dtypes.is_unsigned(self.dtype):
            return as_tensor(self)
        # zero (and -0.0) becomes x - x: +0.0 in the forward, gradient 0 there (torch's abs'(0) = 0); NaN stays NaN
        return (self < 0).where(-self, (self > 0).where(self, self - self))

    def sign(self) -> Tensor:
        """-1, 0 or 1 (NaN stays NaN, bools are their own sign)."""
        if self.dtype is dtypes.bool:
            return as_tensor(self)
        if dtypes.is_unsigned(self.dtype):
            return (self != 0).cast(self.dtype)
        return (self > 0).where(1, (self < 0).where(-1, self * 0))  # x * 0 keeps NaN (and -0.0), gradient 0

    # -------------------------------------------------------------------------------- rounding

    def trunc(self) -> Tensor:
        return alu(Ops.TRUNC, self) if dtypes.is_float(self.dtype) else as_tensor(self)

    def floor(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return as_tensor(self)
        truncated = self.trunc()
        return (self < truncated).where(truncated - 1, truncated)

    def ceil(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return as_tensor(self)
        truncated = self.trunc()
        return (self > truncated).where(truncated + 1, truncated)

    def round(self) -> Tensor:
        """Round half to even, as numpy."""
        if not dtypes.is_float(self.dtype):
            return as_tensor(self)
        return round_half_to_even(as_tensor(self))
