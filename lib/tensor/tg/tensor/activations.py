"""Activation functions, written to stay exact at extreme inputs.

Rules every formula here follows (spec tensor.md 1.7):
- piecewise functions are `where`/`clip` on the input, never a difference of two large terms (the old
  `relu(x) - relu(x - 6)` gives 0 instead of 6 at 1e9, because x - 6 rounds back to x);
- `exp` only ever sees the branch's own inputs (`exp(min(x, 0))`), so an unused branch cannot hold inf;
- odd functions are `where(x < 0, -f(-x), f(x))`, not `sign(x) * f(|x|)`, whose gradient vanishes at 0;
- a transcendental stays out of the subnormal range where the result does not need it (x86 computes on subnormals
  in microcode, ~100x slower: gelu of inputs around 30 took 3x as long as around 1, issue 23): tanh clamps |x| at
  TANH_SATURATED, where it is exactly +-1 either way; gelu flushes its sigmoid to 0 below exp(-SUBNORMAL_EXP)
  (1.7e-38), as a flush-to-zero CPU mode would and as torch's tanh-formula gelu does (0 for x < -9).

16-bit floats are computed in float32 and rounded once; ints become the default float (except the clip-based
relu6 and hardtanh, which keep the input's dtype, as clip does).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg.tensor.base import TensorBase
from tg.tensor.elementwise import in_float32_when_half

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
# tanh(x) rounds to exactly 1 in float32 from |x| = 9.02 on (1 - tanh(x) = 2 exp(-2x) < 2^-25); at 20 exp(-40) is
# still a normal float, so clamping |x| there changes no result and keeps every intermediate normal.
TANH_SATURATED = 20.0
# exp(-87) = 1.65e-38 is a normal float32 (the smallest is 2^-126 = 1.18e-38, exp(-87.34)).
SUBNORMAL_EXP = 87.0


def stable_sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) without overflow: exp only of -|x| <= 0."""
    small = (-x.abs()).exp()  # in (0, 1]
    return (x >= 0).where(1 / (1 + small), small / (1 + small))


def sigmoid_flushing_subnormals(x: Tensor) -> Tensor:
    """stable_sigmoid, except 0 where it is below exp(-SUBNORMAL_EXP) (x < -87): exp never leaves the normal
    floats. Every other result is bit-identical (1 / (1 + small) is 1 there either way)."""
    magnitude = x.abs()
    small = (-magnitude.clip(max_=SUBNORMAL_EXP)).exp()  # in [exp(-87), 1]: normal (clip: see tanh)
    negative = (magnitude > SUBNORMAL_EXP).where(0.0, small / (1 + small))
    return (x >= 0).where(1 / (1 + small), negative)


def stable_softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): finite for every finite x, inf at inf, 0 at -inf."""
    return x.maximum(0) + (-x.abs()).exp().log1p()


def negative_part_expm1(x: Tensor, scale: float = 1.0) -> Tensor:
    """expm1(min(x, 0) / scale): the exponential branch of elu/celu/selu, which never overflows."""
    return (x.minimum(0) / scale).expm1()


class ActivationOps(TensorBase):
    """`relu6, leaky_relu, elu, celu, selu, sigmoid, logsigmoid, hardsigmoid, hardswish, hardtanh, tanh, gelu,
    quick_gelu, silu, swish, mish, softplus, softsign`."""

    # -------------------------------------------------------------------------------- piecewise linear

    def relu6(self) -> Tensor:
        """clip(x, 0, 6) (torch's hardtanh(0, 6)): gradient 1 only for 0 < x < 6."""
        return self.hardtanh(0, 6)

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """clip(x, min_val, max_val) with gradient 1 only strictly inside (torch; clip passes it at the bounds)."""
        return (self <= min_val).where(min_val, (self >= max_val).where(max_val, self))

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        """clip(alpha * x + beta, 0, 1); with the defaults computed as torch does, clip(x + 3, 0, 6) / 6 (1 for every
        x >= 3, however large). The gradient is alpha only strictly inside the ramp (torch)."""
        if alpha == 1 / 6 and beta == 0.5:
            return in_float32_when_half(self, lambda x: (x + 3).hardtanh(0, 6) / 6)
        return in_float32_when_half(self, lambda x: (x * alpha + beta).hardtanh(0, 1))

    def hardswish(self) -> Tensor:
        """x * clip(x + 3, 0, 6) / 6."""
        return in_float32_when_half(self, lambda x: x * (x + 3).clip(0, 6) / 6)

    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        return in_float32_when_half(self, lambda x: (x > 0).where(x, x * neg_slope))

    # -------------------------------------------------------------------------------- exponential family

    def elu(self, alpha: float = 1.0) -> Tensor:
        return in_float32_when_half(self, lambda x: (x > 0).where(x, alpha * negative_part_expm1(x)))

    def celu(self, alpha: float = 1.0) -> Tensor:
        return in_float32_when_half(self, lambda x: (x > 0).where(x, alpha * negative_part_expm1(x, alpha)))

    def selu(self, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Tensor:
        """gamma * (x if x > 0 else alpha * (exp(x) - 1)); the defaults are the self-normalizing constants."""

        def compute(x: Tensor) -> Tensor:
            return gamma * (x > 0).where(x, alpha * negative_part_expm1(x))

        return in_float32_when_half(self, compute)

    def sigmoid(self) -> Tensor:
        return in_float32_when_half(self, stable_sigmoid)

    def logsigmoid(self) -> Tensor:
        """log(sigmoid(x)) = -softplus(-x): 0 at inf, -inf at -inf, no log(0) on the way."""
        return in_float32_when_half(self, lambda x: -stable_softplus(-x))

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta x)) / beta; linear where beta x > threshold, as torch."""

        def compute(x: Tensor) -> Tensor:
            scaled = x * beta
            return (scaled > threshold).where(x, stable_softplus(scaled) / beta)

        return in_float32_when_half(self, compute)

    def tanh(self) -> Tensor:
        """tanh(t) = -expm1(-2t) / (2 + expm1(-2t)) for t = |x|, odd-extended: accurate near 0, +-1 far out."""

        def compute(x: Tensor) -> Tensor:
            # +-1 beyond it either way; exp stays normal. clip, not minimum: minimum's tie rule (half the gradient
            # each way at |x| == 20) is a select gcc 12 threads jumps through, and the loop then stays scalar (5x)
            magnitude = x.abs().clip(max_=TANH_SATURATED)
            e = (magnitude * -2).expm1()  # in (-1, 0]
            positive = -e / (2 + e)
            return (x < 0).where(-positive, positive)

        return in_float32_when_half(self, compute)

    def softsign(self) -> Tensor:
        return in_float32_when_half(self, lambda x: x / (1 + x.abs()))

    # -------------------------------------------------------------------------------- gated (x times a gate)

    def gelu(self, approximate: str = "tanh") -> Tensor:
        """x * Phi(x). `approximate="tanh"` (tinygrad's default) uses the tanh formula, `"none"` the exact erf."""
        if approximate not in ("tanh", "none"):
            raise ValueError(f"gelu approximate must be 'tanh' or 'none', not {approximate!r}")

        def compute(x: Tensor) -> Tensor:
            if approximate == "none":
                return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
            inner = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
            # (1 + tanh(z)) / 2 = sigmoid(2z), without 1 - 1 cancelling
            return x * sigmoid_flushing_subnormals(2 * inner)

        return in_float32_when_half(self, compute)

    def quick_gelu(self) -> Tensor:
        return in_float32_when_half(self, lambda x: x * stable_sigmoid(x * 1.702))

    def silu(self) -> Tensor:
        return in_float32_when_half(self, lambda x: x * stable_sigmoid(x))

    swish = silu

    def mish(self) -> Tensor:
        return in_float32_when_half(self, lambda x: x * stable_softplus(x).tanh())
