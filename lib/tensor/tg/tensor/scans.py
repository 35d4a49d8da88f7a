"""Scans (inclusive prefix reductions) along one axis: cumsum, cumprod, cummax, cummin, logcumsumexp.

Each output position i reduces the inputs j <= i: the axis is moved last, repeated as a square (i, j) and masked
with a lower-triangular mask, then reduced over j. The scan's own axis therefore costs n^2 work (fine for the
hundreds-to-thousands of elements scans see in models; a blocked two-stage scan would be the next step for long
axes). Masked-out positions hold the reduction's identity (0, 1, the dtype's minimum) or, in logcumsumexp, -inf.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen import DType, dtypes
from tg.tensor.derived_reductions import finite_or_zero
from tg.tensor.elementwise import in_float32_when_half
from tg.tensor.movement import normalize_axis

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _prefix_square(x: Tensor, axis: int) -> tuple[Tensor, Tensor]:
    """x with `axis` moved last and repeated as (..., i, j) = x[..., j], and the mask j <= i of that square."""
    moved = x.transpose(axis, -1) if axis != x.ndim - 1 else x
    size = moved.shape[-1]
    square = moved.unsqueeze(-2).expand(*moved.shape[:-1], size, size)
    positions = x.arange(size, dtype=dtypes.int32, device=x.device)
    included = positions.reshape(1, size) <= positions.reshape(size, 1)
    return square, included


def _restore_axis(result: Tensor, axis: int) -> Tensor:
    return result.transpose(axis, -1) if axis != result.ndim - 1 else result


def _scan(x: Tensor, axis: int, identity, reduce) -> Tensor:
    axis = normalize_axis(axis, x.ndim) if x.ndim else 0
    if x.ndim == 0:
        return reduce(x.reshape(1, 1), -1).reshape(())
    square, included = _prefix_square(x, axis)
    return _restore_axis(reduce(included.where(square, identity), -1), axis)


def _lowest(dtype: DType):
    return False if dtype is dtypes.bool else dtypes.min(dtype)


class ScanOps:
    """`cumsum, cumprod, cummax, cummin, logcumsumexp` (tinygrad's forms: one axis, values only)."""

    def cumsum(self, axis: int = 0, dtype: DType | None = None) -> Tensor:
        """Running sums; dtypes accumulate as in `sum` (bools and small ints in int32)."""
        return _scan(self, axis, 0, lambda t, a: t.sum(a, dtype=dtype))

    def cumprod(self, axis: int = 0, dtype: DType | None = None) -> Tensor:
        return _scan(self, axis, 1, lambda t, a: t.prod(a, dtype=dtype))

    def cummax(self, axis: int = 0) -> Tensor:
        """Running maxima; a NaN stays from its position on."""
        return _scan(self, axis, _lowest(self.dtype), lambda t, a: t.max(a))

    def cummin(self, axis: int = 0) -> Tensor:
        if dtypes.is_float(self.dtype):
            return -((-self).cummax(axis))
        if self.dtype is dtypes.bool:
            return self.logical_not().cummax(axis).logical_not()
        return ~((~self).cummax(axis))

    def logcumsumexp(self, axis: int = 0) -> Tensor:
        """log of the running sums of exp(x), shifted by the running maximum where that is finite."""
        return in_float32_when_half(self, lambda x: _logcumsumexp(x, axis))


def _logcumsumexp(x: Tensor, axis: int) -> Tensor:
    if x.ndim == 0:
        return x
    axis = normalize_axis(axis, x.ndim)
    shift = finite_or_zero(x.cummax(axis))
    square, included = _prefix_square(x, axis)
    shift_last = shift.transpose(axis, -1) if axis != x.ndim - 1 else shift
    shifted = included.where(square - shift_last.unsqueeze(-1), -float("inf"))
    sums = shifted.exp().sum(-1)
    return _restore_axis(sums.log() + shift_last, axis)
