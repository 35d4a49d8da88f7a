"""Selecting and placing elements by index tensors: gather, scatter, scatter_reduce, masked_fill, masked_select,
one_hot, nonzero.

Reading by index (gather, and `t[i, j]` through tg.tensor.advanced_indexing) is a GATHER node: one load per
element at the position the indices hold, so it costs the index's size, whatever the source's. Its gradient, and
every write by index (scatter, scatter_reduce), is a comparison with positions instead: every index is compared
with 0..n-1 (a one-hot mask over a new axis) and the matching elements are combined. A written value's bit
pattern is taken with a max over the masked bit patterns (all others are zero), so every value comes through
exactly (NaN, infinities and -0.0 included), which a masked sum would not guarantee (inf * 0 is NaN).

masked_select and nonzero have output shapes that depend on the data: they realize their input to learn them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.schedule.graph import ShapeError, device_of, shape_of
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.errors import ArgumentError, IndexDtypeError
from tg.tensor.fp8 import is_fp8
from tg.tensor.movement import normalize_axis
from tg.tensor.positions import positions, positions_along
from tg.tensor.shape_ops import as_bits, from_bits
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def select_where(mask: Tensor, values: Tensor, axes: tuple[int, ...]) -> Tensor:
    """The value at the one position of `axes` where `mask` is true (zero bits where it is nowhere true).

    Floats are selected by a sum, so that the result is differentiable: the one chosen value plus +0.0s is that
    value exactly, except that -0.0 would come out as +0.0; a chosen -0.0 is detected and written back as
    -0.0 - (+0.0), which keeps the gradient path. Other dtypes (and fp8) pick their bit patterns with a max."""
    if dtypes.is_float(values.dtype) and not is_fp8(values.dtype):
        total = mask.where(values, 0.0).sum(axes, dtype=values.dtype)
        chose_negative_zero = (mask & (values == 0) & (values.reciprocal() < 0)).max(axes)
        return chose_negative_zero.where(-0.0 - (total.detach() - total), total)
    bits = as_bits(values)
    return from_bits(mask.where(bits, bits.zeros_like()).max(axes), values.dtype)


def require_integer_index(index: Tensor, operation: str) -> None:
    """Index tensors hold positions: a float one is a mistake, reported when the op is built (not truncated)."""
    if index.dtype is not dtypes.bool and not dtypes.is_int(index.dtype):
        raise IndexDtypeError(
            f"{operation}: the index tensor must have an integer (or bool) dtype, not {index.dtype!r}"
        )


def wrap_negative(index: Tensor, size: int | UOp) -> Tensor:
    """Negative indices count from the end, as in Python."""
    if dtypes.is_unsigned(index.dtype) or index.dtype is dtypes.bool:
        return index.cast(dtypes.int32)
    index = index.cast(dtypes.int32) if index.dtype.itemsize < 4 else index
    return (index < 0).where(index + size, index)


def one_hot_along(index: Tensor, size: int) -> Tensor:
    """index (...) -> bool (..., size): true where the last axis's position equals the index."""
    return index.unsqueeze(-1) == positions(index, size, index.dtype)


def gather_at(source: Tensor, indices: tuple[Tensor, ...], axes: tuple[int, ...]) -> Tensor:
    """Element o of the result is `source` at o with axis `axes[k]` replaced by `indices[k]` at o (indices of one
    shape, of source's rank, equal to source's on the other axes or broadcasting a size-1 one; negative ones already
    wrapped). An index outside its axis reads 0."""
    return source._wrap(UOp(Ops.GATHER, source.dtype, (source.uop, *(index.uop for index in indices)), axes))


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """torch's gather: out[i][j] = x[index[i][j]][j] for dim 0; `index` may be smaller than x on other axes."""
    require_integer_index(index, "gather")
    dim = normalize_axis(dim, x.ndim)
    too_large = any(i > s for a, (i, s) in enumerate(zip(index.shape, x.shape)) if a != dim)  # noqa: B905
    if index.ndim != x.ndim or too_large:
        raise ShapeError(f"gather along {dim} of shape {x.shape}: index {index.shape} needs as many, no larger axes")
    kept = x.shrink(tuple(None if a == dim else (0, i) for a, i in enumerate(index.shape)))
    return gather_at(kept, (wrap_negative(index, x.shape[dim]),), (dim,))


def gather_source_gradient(grad: UOp, node: UOp) -> UOp:
    """d GATHER / d source, weighted by `grad`: each element of grad added to the source position it read. A
    scatter-add, built as a comparison of every index with every position of its axis (a one-hot mask per gathered
    axis), so it costs index size x gathered axes' sizes."""
    from tg.tensor.tensor import Tensor

    source_shape, axes = shape_of(node.src[0]), node.arg
    out_shape = shape_of(node)
    sizes = tuple(source_shape[axis] for axis in axes)
    trailing = (1,) * len(axes)
    mask: Tensor | None = None
    for k, index_node in enumerate(node.src[1:]):
        index = Tensor(index_node, device=device_of(index_node))
        count = concrete_size(sizes[k], "a gather's gradient")
        view = [1] * (len(out_shape) + len(axes))
        view[len(out_shape) + k] = count
        matches = index.reshape(out_shape + trailing) == positions(index, count, index.dtype).reshape(view)
        mask = matches if mask is None else mask & matches
    assert mask is not None  # (a GATHER reads through at least one index)
    weighted = Tensor(grad, device=device_of(grad)).reshape(out_shape + trailing)
    summed = mask.where(weighted, 0.0).sum(axes, dtype=grad.dtype)  # (*other axes, *sizes)
    others = [axis for axis in range(len(source_shape)) if axis not in axes]
    order = [others.index(a) if a in others else len(others) + axes.index(a) for a in range(len(source_shape))]
    placed = summed.permute(order)
    broadcast = tuple(a for a in others if source_shape[a] != out_shape[a])  # size-1 source axes read many times
    return (placed.sum(broadcast, keepdim=True, dtype=grad.dtype) if broadcast else placed).uop


def scatter_mask(target: Tensor, dim: int, index: Tensor) -> Tensor:
    """bool (*index.shape, target.shape[dim]): whether source element [..i..] goes to target position p."""
    require_integer_index(index, "scatter")
    size = target.shape[dim]
    return one_hot_along(wrap_negative(index, size), concrete_size(size, "scatter"))


def _to_target_layout(reduced: Tensor, target: Tensor, dim: int, fill: Any) -> Tensor:
    """(*index.shape without dim, n) with the target axis last -> target's axis order, padded to target's shape."""
    moved = reduced.unsqueeze(dim).transpose(dim, -1).squeeze(-1)
    pads = tuple((0, t - r) for r, t in zip(moved.shape, target.shape, strict=True))
    return moved.pad(pads, value=fill) if any(after for _, after in pads) else moved


def _source_like(src: Any, index: Tensor, target: Tensor) -> Tensor:
    if not hasattr(src, "uop"):
        return index.full_like(src, dtype=target.dtype)
    return src.shrink(tuple((0, i) for i in index.shape)).cast(target.dtype)


def last_hit_only(mask: Tensor, dim: int) -> Tensor:
    """`mask` (*index.shape, n) keeping, for every target position, only the last source along `dim` that hits it:
    duplicates then select one value instead of adding theirs."""
    source_position = positions_along(mask, mask.shape, dim)
    last = mask.where(source_position, -1).max(dim, keepdim=True)
    return mask & (source_position == last)


def scatter(target: Tensor, dim: int, index: Tensor, src: Any) -> Tensor:
    """torch's scatter: out[index[i][j]][j] = src[i][j] (dim 0). Where several sources hit one position, the last
    along `dim` wins (torch leaves which one unspecified)."""
    dim = normalize_axis(dim, target.ndim)
    source = _source_like(src, index, target)
    mask = last_hit_only(scatter_mask(target, dim, index), dim)
    values = source.unsqueeze(-1).expand(mask.shape)
    placed = select_where(mask, values, (dim,))
    hit = mask.any(dim)
    placed = _to_target_layout(placed, target, dim, 0)
    hit = _to_target_layout(hit, target, dim, False)
    return hit.where(placed, target)


_REDUCE_IDENTITY = {"sum": 0, "mean": 0, "prod": 1}


def scatter_reduce(
    target: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True
) -> Tensor:
    """torch's scatter_reduce with reduce 'sum', 'prod', 'mean', 'amax' or 'amin'."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ArgumentError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
    dim = normalize_axis(dim, target.ndim)
    source = _source_like(src, index, target)
    mask = scatter_mask(target, dim, index)
    values = source.unsqueeze(-1).expand(mask.shape)
    hit = _to_target_layout(mask.any(dim), target, dim, False)
    if reduce in ("amax", "amin"):
        lowest = -float("inf") if dtypes.is_float(target.dtype) else dtypes.min(target.dtype)
        highest = float("inf") if dtypes.is_float(target.dtype) else dtypes.max(target.dtype)
        fill = lowest if reduce == "amax" else highest
        chosen = mask.where(values, fill)
        reduced = chosen.max(dim) if reduce == "amax" else chosen.min(dim)
        reduced = _to_target_layout(reduced, target, dim, fill)
        if include_self:
            reduced = reduced.maximum(target) if reduce == "amax" else reduced.minimum(target)
        return hit.where(reduced, target)
    identity = _REDUCE_IDENTITY[reduce]
    chosen = mask.where(values, identity)
    if reduce == "prod":
        reduced = _to_target_layout(chosen.prod(dim, dtype=target.dtype), target, dim, 1)
        return hit.where(reduced * target if include_self else reduced, target)
    total = _to_target_layout(chosen.sum(dim, dtype=target.dtype), target, dim, 0)
    if include_self:
        total = total + target
    if reduce == "sum":
        return hit.where(total, target)
    count = _to_target_layout(mask.sum(dim), target, dim, 0) + (1 if include_self else 0)
    mean = total / count if dtypes.is_float(target.dtype) else total // count.cast(target.dtype)
    return hit.where(mean.cast(target.dtype), target)


def first_selected(values: Tensor, mask: Tensor, size: int, fill_value: Any) -> Tensor:
    """The first `size` elements of 1-d `values` where 1-d `mask` is true, in order, then `fill_value`: a fixed
    shape, so nothing is realized. Element j goes to slot k when it is selected and k selected elements precede it."""
    count = values.shape[0]
    rank = mask.cast(dtypes.int32).cumsum() - 1 if count else mask.cast(dtypes.int32)
    slots = positions(values, size, dtypes.int32).reshape(size, 1)
    lands = mask.reshape(1, count) & (rank.reshape(1, count) == slots)  # (size, count): at most one per row
    picked = select_where(lands, values.reshape(1, count).expand(size, count), (1,))
    return lands.any(1).where(picked, values.full_like(fill_value, dtype=values.dtype)[:1].expand(size))


def masked_select(x: Tensor, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The elements where `mask` (broadcast with x) is true, as a 1-d tensor. Realizes `mask` to learn the count,
    unless `size` fixes the length (then padded with `fill_value` or cut, and nothing is realized)."""
    import numpy as np

    from tg.tensor.promotion import broadcast_shapes

    shape = broadcast_shapes(x.shape, mask.shape)
    if size is not None:
        selected = mask.expand(shape).flatten().cast(dtypes.bool)
        return first_selected(x.expand(shape).flatten(), selected, size, fill_value)
    flat_positions = np.flatnonzero(mask.expand(shape).numpy()).astype(np.int32)
    index = type(x)(flat_positions, device=x.device)
    return gather(x.expand(shape).flatten(), 0, index)


def nonzero(x: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """torch's nonzero: (count, ndim) int32 indices of the non-zero elements. Realizes `x` to learn the count,
    unless `size` fixes it (rows past the last non-zero are `fill_value`; extra non-zeros are cut)."""
    import numpy as np

    if size is not None:
        flat = (x != 0).flatten()
        coordinates = [positions_along(x, x.shape, axis).flatten() for axis in range(x.ndim)]
        columns = [first_selected(coordinate, flat, size, fill_value) for coordinate in coordinates]
        if not columns:
            return x.zeros(size, 0, dtype=dtypes.int32, device=x.device)
        return type(x).stack(*columns, dim=-1)

    found = np.argwhere(x.numpy() != 0).astype(np.int32)
    return type(x)(found.reshape(len(found), x.ndim), device=x.device)


class GatherScatterOps(TensorBase):
    """`gather, scatter, scatter_reduce, masked_fill, masked_select, one_hot, nonzero`."""

    def gather(self, dim: int, index: Tensor) -> Tensor:
        return gather(as_tensor(self), dim, index)

    def scatter(self, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
        """`reduce` None replaces; 'add' and 'multiply' combine with the existing values (torch's scatter)."""
        if reduce is None:
            return scatter(as_tensor(self), dim, index, src)
        if reduce not in ("add", "multiply"):
            raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        if not hasattr(src, "uop"):
            src = index.full_like(src, dtype=self.dtype)
        return scatter_reduce(as_tensor(self), dim, index, src, "sum" if reduce == "add" else "prod", include_self=True)

    def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
        return scatter_reduce(as_tensor(self), dim, index, src, reduce, include_self)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        if mask.dtype is not dtypes.bool:
            raise ArgumentError(f"masked_fill needs a bool mask, got {mask.dtype!r} (as torch)")
        if hasattr(value, "uop"):
            value = value.cast(self.dtype)
        else:
            value = self.full_like(value)
        return mask.where(value, self)

    def masked_select(self, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
        if mask.dtype is not dtypes.bool:
            raise ArgumentError(f"masked_select needs a bool mask, got {mask.dtype!r} (as torch)")
        return masked_select(as_tensor(self), mask, size, fill_value)

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """(...) -> (..., num_classes) of this tensor's int dtype; -1 realizes the input to use max + 1 (and checks
        that no class is negative, as torch; with a given count the values are not read: a class outside 0..count-1
        gives a row of zeros)."""
        if self.dtype is not dtypes.bool and not dtypes.is_int(self.dtype):
            raise ArgumentError(f"one_hot needs an integer index tensor, got {self.dtype!r}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int):
            raise TypeError(f"one_hot needs an int num_classes, got {num_classes!r}")
        if num_classes < -1:
            raise ArgumentError(f"one_hot needs num_classes >= 0 (or -1 to infer it), got {num_classes}")
        if num_classes == -1:
            if self.numel() and int(self.min().item()) < 0:
                raise ArgumentError("one_hot: class values must be non-negative")
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        return one_hot_along(as_tensor(self), num_classes).cast(self.dtype)

    def nonzero(self, size: int | None = None, fill_value: Any = 0) -> Tensor:
        return nonzero(as_tensor(self), size, fill_value)
