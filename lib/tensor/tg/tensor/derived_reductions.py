"""Reductions built from sum and max: softmax, log_softmax, logsumexp, var/std (and their means), argmax, argmin.

`logsumexp` subtracts the maximum before exponentiating (no overflow), but only where that maximum is finite:
an all -inf row would otherwise compute -inf - (-inf) = NaN instead of -inf.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg.codegen import DType, UOp, dtypes
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.elementwise import in_float32_when_half
from tg.tensor.errors import ArgumentError
from tg.tensor.promotion import dtype_argument
from tg.tensor.reduce import Axis, check_extreme_has_elements, reduce_axes

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def finite_or_zero(x: Tensor) -> Tensor:
    """x where finite, else 0: a shift that is safe to subtract from values that may be infinite."""
    return x.isfinite().where(x, 0)


def has_empty_axis(x: Tensor, axis: Axis) -> bool:
    return any(x.shape[a] == 0 for a in reduce_axes(axis, x.ndim))


def stable_logsumexp(x: Tensor, axis: Axis, keepdim: bool) -> Tensor:
    """logsumexp with the finite max as the shift; over nothing, the sum of no exponentials is 0 and its log -inf."""
    if has_empty_axis(x, axis):
        shift = x.sum(axis, keepdim=True, dtype=x.dtype)  # zeros of the reduced shape
    else:
        shift = finite_or_zero(x.max(axis, keepdim=True))
    total = (x - shift).exp().sum(axis, keepdim=True)
    result = total.log() + shift
    if keepdim:
        return result
    axes = reduce_axes(axis, x.ndim)
    return result.reshape(tuple(size for i, size in enumerate(x.shape) if i not in axes))


def _count(shape: tuple, axis: Axis) -> int | UOp:
    """Elements reduced over `axis` (a UOp when a reduced size is symbolic)."""
    return math.prod(shape[a] for a in reduce_axes(axis, len(shape)))


def _float_dtype_argument(dtype: DType | str | None, operation: str) -> DType | None:
    """A normalization's `dtype=`: a float dtype to compute in (an int one would truncate every probability to 0
    or 1: torch refuses it, and so does tg)."""
    dtype = dtype_argument(dtype)
    if dtype is not None and not dtypes.is_float(dtype):
        raise ArgumentError(f"{operation} computes in a float dtype, not {dtype!r}")
    return dtype


class DerivedReductionOps(TensorBase):
    """`softmax, softmin, log_softmax, logsumexp, var, std, var_mean, std_mean, argmax, argmin`."""

    def softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """exp(x - max) / sum(exp(x - max)); `dtype` casts the input first (tinygrad's signature)."""

        dtype = _float_dtype_argument(dtype, "softmax")

        def compute(x: Tensor) -> Tensor:
            if has_empty_axis(x, axis):  # nothing to normalize: the result is as empty as the input
                return x
            exponentials = (x - x.max(axis, keepdim=True)).exp()
            return exponentials * exponentials.sum(axis, keepdim=True).reciprocal()

        return in_float32_when_half(self if dtype is None else self.cast(dtype), compute)

    def softmin(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """softmax of -x: the smallest values get the largest weights (torch.nn.functional.softmin)."""
        dtype = _float_dtype_argument(dtype, "softmin")
        return (-(self if dtype is None else self.cast(dtype))).softmax(axis)

    def log_softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """(x - m) - log(sum(exp(x - m))) with m the finite max: x - m is exact near the max, where subtracting
        a whole logsumexp (m + a small log) would cancel to a few ulps of m."""

        dtype = _float_dtype_argument(dtype, "log_softmax")

        def compute(x: Tensor) -> Tensor:
            if has_empty_axis(x, axis):
                return x
            shifted = x - finite_or_zero(x.max(axis, keepdim=True))
            return shifted - shifted.exp().sum(axis, keepdim=True).log()

        return in_float32_when_half(self if dtype is None else self.cast(dtype), compute)

    def logsumexp(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) over `axis`: -inf for all -inf inputs, inf if any is inf, no overflow in between."""
        return in_float32_when_half(self, lambda x: stable_logsumexp(x, axis, keepdim))

    # -------------------------------------------------------------------------------- moments

    def var(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """Mean squared deviation with `correction` (1: Bessel's, the unbiased estimate; 0: the population's)."""

        def compute(x: Tensor) -> Tensor:
            deviations = x - x.mean(axis, keepdim=True)
            squares_sum = (deviations * deviations).sum(axis, keepdim)
            count = _count(x.shape, axis)
            # a symbolic count (a reduction over a Variable's axis) takes the max in the kernel
            degrees = (count - correction).maximum(0) if isinstance(count, UOp) else max(0, count - correction)
            return squares_sum / degrees  # 0 degrees: 0/0 = NaN (or inf), as torch

        return in_float32_when_half(self, compute)

    def std(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    # -------------------------------------------------------------------------------- positions

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index (int32) of the first largest value along `axis` (None: of the flattened tensor); a NaN counts
        as the largest, as in numpy and torch."""
        check_extreme_has_elements(self.shape, axis, "argmax/argmin")
        if axis is None:
            flat = self.flatten().argmax(0)
            return flat.reshape((1,) * self.ndim) if keepdim else flat
        x = self.cast(dtypes.int32) if self.dtype is dtypes.bool else as_tensor(self)
        if x.ndim == 0:  # torch: axis 0 or -1 of a 0-d tensor, whose only element is at index 0
            reduce_axes(axis, 0)
            return x.zeros_like(dtype=dtypes.int32)
        axis = reduce_axes(axis, x.ndim)[0]
        size = x.shape[axis]
        largest = x.max(axis, keepdim=True)
        is_largest = x == largest
        if dtypes.is_float(x.dtype):
            is_largest = is_largest | (x.isnan() & largest.isnan())
        # count down from `size` so that the max picks the first position that holds the largest value
        countdown = x.arange(size, 0, -1, dtype=dtypes.int32, device=x.device)
        countdown = countdown.reshape(tuple(size if i == axis else 1 for i in range(x.ndim)))
        return is_largest.where(countdown, 0).max(axis, keepdim).sub(size, reverse=True)  # size - max

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index of the first smallest value (a NaN counts as the smallest)."""
        if self.dtype is dtypes.bool:
            return self.logical_not().argmax(axis, keepdim)
        if dtypes.is_float(self.dtype):
            return (-self).argmax(axis, keepdim)
        return (~self).argmax(axis, keepdim)  # ~x = -x - 1 reverses the order of ints without overflow
