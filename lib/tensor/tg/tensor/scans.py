"""Scans (inclusive prefix reductions) along one axis: cumsum, cumprod, cummax, cummin, logcumsumexp.

A short axis (up to SQUARE_LIMIT elements) is scanned as a masked square: the axis is moved last, repeated as
(i, j) and masked to j <= i, then reduced over j (n^2 work, one fused kernel). A longer axis is split into blocks
of about sqrt(n): each block is scanned as a square, the blocks' totals are scanned the same way, and each block
is combined with the total of the blocks before it. That is about 2 n^1.5 work instead of n^2 (and recursion keeps
every square small). Each scan is a monoid: an associative combine with its identity, which also pads the last
block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from tg.codegen import DType, UOp, dtypes
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.derived_reductions import finite_or_zero
from tg.tensor.elementwise import in_float32_when_half
from tg.tensor.movement import normalize_axis
from tg.tensor.promotion import dtype_argument
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

SQUARE_LIMIT = 512  # longest axis scanned as one masked square


@dataclass(frozen=True)
class Monoid:
    """What a scan needs: the identity, the combine of two partial results, and the square scan of a short axis."""

    identity: Any
    combine: Callable[[Tensor, Tensor], Tensor]
    square_scan: Callable[[Tensor], Tensor]  # scans the last axis


def prefix_square(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (scan axis last) repeated as (..., i, j) = x[..., j], and the mask j <= i of that square."""
    size = x.shape[-1]
    square = x.unsqueeze(-2).expand(*x.shape[:-1], size, size)
    positions = x.arange(size, dtype=dtypes.int32, device=x.device)
    included = positions.reshape(1, size) <= positions.reshape(size, 1)
    return square, included


def masked_square_scan(identity: Any, reduce: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    def scan(x: Tensor) -> Tensor:
        square, included = prefix_square(x)
        return reduce(included.where(square, identity))

    return scan


def scan_last_axis(x: Tensor, monoid: Monoid) -> Tensor:
    size = x.shape[-1]
    if size <= SQUARE_LIMIT:
        return monoid.square_scan(x)
    size = concrete_size(size, "a scan longer than SQUARE_LIMIT")
    block = math.isqrt(size - 1) + 1  # ceil(sqrt(size))
    blocks = -(-size // block)
    leading = x.shape[:-1]
    no_padding = ((0, 0),) * len(leading)
    padded = x.pad((*no_padding, (0, blocks * block - size)), value=monoid.identity)
    inner = scan_last_axis(padded.reshape(*leading, blocks, block), monoid)
    totals = inner.shrink((*((None,) * len(leading)), None, (block - 1, block))).reshape(*leading, blocks)
    running = scan_last_axis(totals, monoid)
    before = running.pad((*no_padding, (1, 0)), value=monoid.identity).shrink((*((None,) * len(leading)), (0, blocks)))
    combined = monoid.combine(inner, before.unsqueeze(-1))
    return combined.reshape(*leading, blocks * block).shrink((*((None,) * len(leading)), (0, size)))


def scan(x: Tensor, axis: int, monoid: Monoid) -> Tensor:
    if x.ndim == 0:
        return scan_last_axis(x.reshape(1), monoid).reshape(())
    axis = normalize_axis(axis, x.ndim)
    moved = x.transpose(axis, -1) if axis != x.ndim - 1 else x
    result = scan_last_axis(moved, monoid)
    return result.transpose(axis, -1) if axis != x.ndim - 1 else result


def _lowest(dtype: DType):
    return False if dtype is dtypes.bool else dtypes.min(dtype)


def _sum_monoid(dtype: DType | None) -> Monoid:
    return Monoid(0, lambda a, b: a + b, masked_square_scan(0, lambda t: t.sum(-1, dtype=dtype)))


def _prod_monoid(dtype: DType | None) -> Monoid:
    return Monoid(1, lambda a, b: a * b, masked_square_scan(1, lambda t: t.prod(-1, dtype=dtype)))


def _max_of_last_axis(square: Tensor) -> Tensor:
    """The max over the last axis of a prefix square; the square of an empty axis is (..., 0, 0), whose result
    (..., 0) is as empty (max itself has no identity to reduce nothing with)."""
    if square.shape[-1] == 0:
        return square.reshape(square.shape[:-1])
    return square.max(-1)


def _max_monoid(dtype: DType) -> Monoid:
    lowest = _lowest(dtype)
    return Monoid(lowest, lambda a, b: a.maximum(b), masked_square_scan(lowest, _max_of_last_axis))


def _logcumsumexp_square(x: Tensor) -> Tensor:
    """log sum_{j <= i} exp(x_j - s_i) + s_i, with s_i the running max where finite (no inf - inf, no overflow)."""
    shift = finite_or_zero(scan_last_axis(x, _max_monoid(x.dtype))).contiguous()  # own kernel, not redone per j
    square, included = prefix_square(x)
    shifted = included.where(square - shift.unsqueeze(-1), -math.inf)
    return shifted.exp().sum(-1).log() + shift


LOGADDEXP_MONOID = Monoid(-math.inf, lambda a, b: a.logaddexp(b), _logcumsumexp_square)


class ValuesIndices(NamedTuple):
    """What cummax and cummin return, as torch: unpacks as (values, indices), or read `.values`, `.indices`."""

    values: Tensor
    indices: Tensor


def _positions_of_running_extreme(x: Tensor, running: Tensor, axis: int) -> Tensor:
    """int32 index of the latest position j <= i where x[j] reached running[i].

    x[j] == running[j] marks where the running extreme was (re)reached; since it does not change between those
    marks, the latest mark up to i is a running max of `j where marked` (NaNs always mark, as in torch)."""
    reached = x == running
    if dtypes.is_float(x.dtype):
        reached = reached | x.isnan()
    if x.ndim == 0:
        return x.zeros_like(dtype=dtypes.int32)
    axis = normalize_axis(axis, x.ndim)
    view: list[int | UOp] = [1] * x.ndim
    view[axis] = x.shape[axis]
    places = x.arange(x.shape[axis], dtype=dtypes.int32, device=x.device).reshape(view).expand(x.shape)
    return scan(reached.where(places, -1), axis, _max_monoid(dtypes.int32))


class ScanOps(TensorBase):
    """`cumsum, cumprod, cummax, cummin, logcumsumexp` (one axis; cummax and cummin also give indices, as torch)."""

    def cumsum(self, axis: int = 0, dtype: DType | str | None = None) -> Tensor:
        """Running sums; dtypes accumulate as in `sum` (bools and small ints in int32)."""
        dtype = dtype_argument(dtype)
        return scan(as_tensor(self), axis, _sum_monoid(dtype))

    def cumprod(self, axis: int = 0, dtype: DType | str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return scan(as_tensor(self), axis, _prod_monoid(dtype))

    def cummax(self, axis: int = 0) -> ValuesIndices:
        """Running maxima and where each was found (torch's cummax): a tie or a NaN moves the index to the latest
        position, and a NaN stays the value from its position on."""
        values = scan(as_tensor(self), axis, _max_monoid(self.dtype))
        return ValuesIndices(values, _positions_of_running_extreme(as_tensor(self), values, axis))

    def cummin(self, axis: int = 0) -> ValuesIndices:
        """Running minima and where each was found, as `cummax` (ties and NaNs take the latest position)."""
        if dtypes.is_float(self.dtype):
            values = -scan(-self, axis, _max_monoid(self.dtype))
        elif self.dtype is dtypes.bool:
            values = scan(self.logical_not(), axis, _max_monoid(self.dtype)).logical_not()
        else:
            values = ~scan(~self, axis, _max_monoid(self.dtype))
        return ValuesIndices(values, _positions_of_running_extreme(as_tensor(self), values, axis))

    def logcumsumexp(self, axis: int = 0) -> Tensor:
        """log of the running sums of exp(x), shifted by the running maximum where that is finite."""
        return in_float32_when_half(self, lambda x: scan(x, axis, LOGADDEXP_MONOID))
