"""sort, argsort and topk by ranking, computed in kernels.

The rank of element i along the sorted axis is how many elements come before it: those that compare smaller
(larger, descending), and equal ones at lower positions, so the sort is stable. The element of rank r is then
selected with a one-hot mask over the ranks. This costs n*n comparisons per row, fine for the short axes sorts
usually see (a bitonic network would be n*log(n)^2). NaN sorts after every number (first when descending), as in
torch and numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from tg.codegen import dtypes
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.errors import ArgumentError
from tg.tensor.gather_scatter import select_where
from tg.tensor.movement import normalize_axis
from tg.tensor.positions import positions_along

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


class Sorted(NamedTuple):
    """(values, indices), a tuple as torch's and tinygrad's sort and topk return: unpack it or use the names."""

    values: Tensor
    indices: Tensor


def _comes_before(a: Tensor, b: Tensor, descending: bool) -> Tensor:
    """Whether value a sorts strictly before value b (NaN is the largest value)."""
    if descending:
        a, b = b, a
    before = a < b
    if dtypes.is_float(a.dtype):
        before = before | (b.isnan() & a.isnan().logical_not())
    return before


def _same(a: Tensor, b: Tensor) -> Tensor:
    same = a == b
    if dtypes.is_float(a.dtype):
        same = same | (a.isnan() & b.isnan())
    return same


def ranks(x: Tensor, dim: int, descending: bool) -> Tensor:
    """int32 rank of every element along the last axis of `x` (`dim` must already be last)."""
    n = x.shape[-1]
    mine = x.unsqueeze(-1).expand(x.shape + (n,))  # [..., i, j] = x_i
    others = x.unsqueeze(-2).expand(x.shape + (n,))  # [..., i, j] = x_j
    shape = x.shape + (n,)
    index_i, index_j = positions_along(x, shape, len(shape) - 2), positions_along(x, shape, len(shape) - 1)
    earlier = _comes_before(others, mine, descending) | (_same(others, mine) & (index_j < index_i))
    return earlier.cast(dtypes.int32).sum(-1)


def sort(x: Tensor, dim: int = -1, descending: bool = False) -> Sorted:
    dim = normalize_axis(dim, x.ndim)
    if x.ndim == 0 or x.shape[dim] == 0:  # one element or none: already in order
        return Sorted(x, x.zeros_like(dtype=dtypes.int32))
    moved = x.transpose(dim, -1)
    n = moved.shape[-1]
    rank = ranks(moved, -1, descending)  # [..., i]
    shape = moved.shape + (n,)
    # [..., r, i]: element i has rank r
    lands_at = rank.unsqueeze(-2).expand(shape) == positions_along(x, shape, len(shape) - 2)
    values = select_where(lands_at, moved.unsqueeze(-2).expand(shape), (len(shape) - 1,))
    indices = select_where(lands_at, positions_along(x, shape, len(shape) - 1), (len(shape) - 1,))
    return Sorted(values.transpose(dim, -1), indices.transpose(dim, -1))


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> Sorted:
    """The k largest (or smallest) elements along `dim`, in sorted order."""
    dim = normalize_axis(dim, x.ndim)
    if not 0 <= k <= x.shape[dim]:
        raise ArgumentError(f"topk: k={k} is out of range for axis {dim} of size {x.shape[dim]}")
    result = sort(x, dim, descending=largest)
    bounds = tuple((0, k) if axis == dim else None for axis in range(x.ndim))
    return Sorted(result.values.shrink(bounds), result.indices.shrink(bounds))


class SortingOps(TensorBase):
    """`sort, argsort, topk`."""

    def sort(self, dim: int = -1, descending: bool = False) -> Sorted:
        """(values, indices) sorted along `dim`; stable (equal values keep their order); int32 indices."""
        return sort(as_tensor(self), dim, descending)

    def argsort(self, dim: int = -1, descending: bool = False) -> Tensor:
        return sort(as_tensor(self), dim, descending).indices

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> Sorted:
        """The k largest (smallest) along `dim`, always in sorted order (`sorted_=False` is accepted)."""
        return topk(as_tensor(self), k, dim, largest, sorted_)
