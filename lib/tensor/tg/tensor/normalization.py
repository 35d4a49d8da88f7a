"""Normalization over trailing axes: layernorm (zero mean, unit variance) and rms_norm (unit root mean square)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg.codegen import dtypes
from tg.tensor.base import TensorBase
from tg.tensor.elementwise import in_float32_when_half
from tg.tensor.reduce import Axis

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

FLOAT_EPSILON = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7, dtypes.float32: 2.0**-23, dtypes.float64: 2.0**-52}


class NormalizationOps(TensorBase):
    """`layernorm, rms_norm, normalize` (without affine weights: multiply and add those outside, as nn layers do)."""

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        """x / max(||x||_p, eps) along `dim`, as torch's F.normalize; ints become the default float. p = 0 counts
        the non-zero elements and p = +-inf takes the largest (smallest) magnitude, as torch's vector norms."""

        def compute(x: Tensor) -> Tensor:
            if p == 0:
                norm = (x != 0).sum(dim, keepdim=True, dtype=x.dtype)
            elif math.isinf(p):
                norm = x.abs().max(dim, keepdim=True) if p > 0 else x.abs().min(dim, keepdim=True)
            else:
                norm = (x.abs() ** p).sum(dim, keepdim=True) ** (1 / p)
            return x / norm.maximum(eps)

        return in_float32_when_half(self, compute)

    def layernorm(self, axis: Axis = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps), with the population variance (correction 0), as torch."""

        def compute(x: Tensor) -> Tensor:
            centered = x - x.mean(axis, keepdim=True)
            variance = (centered * centered).mean(axis, keepdim=True)
            return centered * (variance + eps).rsqrt()

        return in_float32_when_half(self, compute)

    def rms_norm(self, axis: Axis = -1, eps: float | None = None) -> Tensor:
        """x / sqrt(mean(x^2) + eps); eps defaults to the input dtype's machine epsilon, as torch's rms_norm."""
        if eps is None:
            eps = FLOAT_EPSILON.get(self.dtype, FLOAT_EPSILON[dtypes.default_float])

        def compute(x: Tensor) -> Tensor:
            return x * ((x * x).mean(axis, keepdim=True) + eps).rsqrt()

        return in_float32_when_half(self, compute)
