"""Shape ops built from movement ops: cat, stack, repeat, repeat_interleave, split, chunk, unfold, roll, tril,
triu, diag, diagonal, unflatten, meshgrid, and the sliding window view that unfold, convolution and pooling share.

`cat` pads every piece to the full size and merges them with `where` over the padded pieces' footprints: a where
selects, so every value (-0.0, NaN payloads) comes through unchanged, which an addition would not guarantee, and
the gradient of each piece is the matching slice of the output's.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tg.codegen import DType, Ops, UOp, dtypes
from tg.codegen.schedule.graph import ShapeError, remember_shape
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.errors import ArgumentError
from tg.tensor.movement import normalize_axis
from tg.tensor.positions import positions_along
from tg.tensor.promotion import result_dtype
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

_BITS_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def bits_dtype(dtype: DType) -> DType:
    """The unsigned int dtype with `dtype`'s item size: its bit patterns can be or-ed and compared exactly."""
    return _BITS_OF_SIZE[dtype.itemsize]


def as_bits(tensor: Tensor) -> Tensor:
    if tensor.dtype is dtypes.bool:
        return tensor.cast(dtypes.uint8)
    return tensor.bitcast(bits_dtype(tensor.dtype))


def from_bits(bits: Tensor, dtype: DType) -> Tensor:
    if dtype is dtypes.bool:
        return bits.cast(dtypes.bool)
    return bits.bitcast(dtype)


def on_axis(tensor: Tensor, axis: int, pair: tuple[int | UOp, int | UOp], shrink: bool = False) -> Tensor:
    """Pad (or shrink to) `pair` on `axis` only."""
    if shrink:
        return tensor.shrink(tuple(pair if i == axis else None for i in range(tensor.ndim)))
    return tensor.pad(tuple(pair if i == axis else None for i in range(tensor.ndim)))


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    first = tensors[0]
    dim = normalize_axis(dim, first.ndim)
    others_of = [tensor.shape[:dim] + tensor.shape[dim + 1 :] for tensor in tensors]
    if any(tensor.ndim != first.ndim for tensor in tensors) or len(set(others_of)) != 1:
        raise ShapeError(f"cat along axis {dim} needs equal other sizes, got {[t.shape for t in tensors]}")
    dtype = result_dtype(*tensors)
    total = sum(tensor.shape[dim] for tensor in tensors)
    merged: Tensor | None = None
    start: int | UOp = 0
    for tensor in tensors:
        size = tensor.shape[dim]
        pair = (start, total - start - size)
        placed = on_axis(tensor.cast(dtype), dim, pair)
        if merged is None:
            merged = placed
        else:
            inside = on_axis(tensor.ones_like(dtype=dtypes.bool), dim, pair)  # padding a bool fills False
            merged = inside.where(placed, merged)
        start += size
    assert merged is not None  # (tensors[0] exists)
    return merged


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    dim = normalize_axis(dim, tensors[0].ndim + 1)
    return cat([tensor.unsqueeze(dim) for tensor in tensors], dim)


def repeat(tensor: Tensor, repeats: Sequence[int]) -> Tensor:
    """torch's repeat (numpy's tile): the whole tensor `repeats[i]` times along axis i; extra repeats add axes."""
    if len(repeats) < tensor.ndim:
        raise ShapeError(f"repeat of shape {tensor.shape} needs at least {tensor.ndim} counts, got {tuple(repeats)}")
    if any(count < 0 for count in repeats):
        raise ArgumentError(f"repeat counts must be non-negative, got {tuple(repeats)}")
    shape = (1,) * (len(repeats) - tensor.ndim) + tensor.shape
    interleaved = [size for pair in zip((1,) * len(shape), shape, strict=True) for size in pair]
    tiled = [size for pair in zip(repeats, shape, strict=True) for size in pair]
    result = tensor.reshape(interleaved).expand(tiled)
    return result.reshape(tuple(count * size for count, size in zip(repeats, shape, strict=True)))


def repeat_interleave(tensor: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Every element `repeats` times in a row along `dim` (None: of the flattened tensor)."""
    if operator.index(repeats) < 0:
        raise ArgumentError(f"repeat_interleave needs a non-negative count, got {repeats}")
    if dim is None:
        tensor, dim = tensor.flatten(), 0
    dim = normalize_axis(dim, tensor.ndim)
    shape = tensor.shape
    expanded = tensor.reshape(shape[: dim + 1] + (1,) + shape[dim + 1 :])
    expanded = expanded.expand(shape[: dim + 1] + (repeats,) + shape[dim + 1 :])
    return expanded.reshape(shape[:dim] + (shape[dim] * repeats,) + shape[dim + 1 :])


def split(tensor: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of `sizes` elements along `dim` (an int: pieces of that size, the last one may be smaller)."""
    dim = normalize_axis(dim, tensor.ndim)
    length = concrete_size(tensor.shape[dim], "split")
    if isinstance(sizes, int):
        if sizes <= 0:
            raise ArgumentError(f"split size must be positive, got {sizes}")
        sizes = [min(sizes, length - start) for start in range(0, length, sizes)] or [0]
    if sum(sizes) != length:
        raise ShapeError(f"split sizes {tuple(sizes)} do not add up to axis {dim}'s size {length}")
    pieces, start = [], 0
    for size in sizes:
        pieces.append(on_axis(tensor, dim, (start, start + size), shrink=True))
        start += size
    return tuple(pieces)


def chunk(tensor: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """At most `chunks` pieces of ceil(size / chunks) elements, as torch."""
    if operator.index(chunks) <= 0:
        raise ArgumentError(f"chunk needs a positive count, got {chunks}")
    length = concrete_size(tensor.shape[normalize_axis(dim, tensor.ndim)], "chunk")
    return split(tensor, max(1, math.ceil(length / chunks)), dim)


def sliding_window(tensor: Tensor, axis: int, size: int, stride: int = 1, dilation: int = 1) -> Tensor:
    """Windows along `axis`: that axis becomes the window count and a new last axis holds each window's `size`
    elements: result[..., o, ..., j] = tensor[..., o * stride + j * dilation, ...].

    Built from movement ops only: tile the axis (length n) enough times, read the tiles as rows of n + dilation
    elements (row j then starts at element j * dilation of the axis), keep every stride-th column, and move the
    row axis to the end. The ops are chained on the nodes (`_WindowNodes`) and the result wrapped once: a conv
    builds two of these per call, and a Tensor per step cost most of a ResNet block's graph building."""
    axis = normalize_axis(axis, tensor.ndim)
    length = concrete_size(tensor.shape[axis], "sliding windows")
    span = dilation * (size - 1) + 1
    if span > length:
        raise ShapeError(f"a window of {span} elements does not fit in axis {axis} of shape {tensor.shape}")
    count = (length - span) // stride + 1
    ndim = tensor.ndim
    view = _WindowNodes(tensor.uop, tensor.shape)
    if axis != ndim - 1:
        view.permute(_swapped(ndim, axis, ndim - 1))
    outer = view.shape[:-1]
    row = length + dilation
    tiles = math.ceil(size * row / length)
    view.reshape(outer + (1, length))
    view.expand(outer + (tiles, length))
    view.reshape(outer + (tiles * length,))
    view.shrink_axis(len(outer), 0, size * row)
    view.reshape(outer + (size, row))
    needed = count * stride
    if needed > row:
        view.pad_axis(len(outer) + 1, 0, needed - row)
    view.shrink_axis(len(outer) + 1, 0, needed)
    view.reshape(outer + (size, count, stride))
    view.shrink_axis(len(outer) + 2, 0, 1)
    view.reshape(outer + (size, count))
    view.permute(_swapped(ndim + 1, ndim, ndim - 1))  # (..., count, size)
    if axis != ndim - 1:
        # the axis we moved last now sits at -2; put it back where it was (and the axis it swapped with at the end)
        view.permute(_swapped(ndim + 1, axis, ndim - 1))
    return tensor._wrap(view.node) if view.node is not tensor.uop else as_tensor(tensor)


def _swapped(ndim: int, a: int, b: int) -> tuple[int, ...]:
    order = list(range(ndim))
    order[a], order[b] = order[b], order[a]
    return tuple(order)


class _WindowNodes:
    """Movement ops of int sizes chained on a node, each skipped where the Tensor method would make no node (the same
    nodes as the Tensor methods make, without a Tensor, its checks and its view bookkeeping per step)."""

    def __init__(self, node: UOp, shape: tuple) -> None:
        self.node, self.shape = node, tuple(shape)

    def _apply(self, op: Ops, arg: tuple, shape: tuple) -> None:
        self.node, self.shape = UOp(op, self.node.dtype, (self.node,), arg), shape
        remember_shape(self.node, shape)

    def permute(self, order: tuple[int, ...]) -> None:
        if order != tuple(range(len(order))):
            self._apply(Ops.PERMUTE, order, tuple(self.shape[i] for i in order))

    def reshape(self, shape: tuple) -> None:
        if shape != self.shape:
            self._apply(Ops.RESHAPE, shape, shape)

    def expand(self, shape: tuple) -> None:
        if shape != self.shape:
            self._apply(Ops.EXPAND, shape, shape)

    def shrink_axis(self, axis: int, start: int, end: int) -> None:
        if (start, end) != (0, self.shape[axis]):
            bounds = tuple((start, end) if i == axis else (0, n) for i, n in enumerate(self.shape))
            self._apply(Ops.SHRINK, bounds, self.shape[:axis] + (end - start,) + self.shape[axis + 1 :])

    def pad_axis(self, axis: int, before: int, after: int) -> None:
        if before or after:
            pads = tuple((before, after) if i == axis else (0, 0) for i in range(len(self.shape)))
            grown = self.shape[axis] + before + after
            self._apply(Ops.PAD, pads, self.shape[:axis] + (grown,) + self.shape[axis + 1 :])


def unfold(tensor: Tensor, dim: int, size: int, step: int) -> Tensor:
    """torch's Tensor.unfold: every window of `size` elements, `step` apart, along `dim`, in a new last axis."""
    if step < 1:
        raise ArgumentError(f"unfold needs a step of at least 1, got {step}")
    return sliding_window(tensor, dim, size, step)


def roll(tensor: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Shift elements along `dims` by `shifts`, wrapping around (None: roll the flattened tensor)."""
    if dims is None:
        return roll(tensor.flatten(), shifts, 0).reshape(tensor.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ArgumentError(f"roll needs one shift per dim, got shifts {shifts} and dims {dims}")
    for shift, dim in zip(shifts, dims, strict=True):
        dim = normalize_axis(dim, tensor.ndim)
        length = concrete_size(tensor.shape[dim], "roll")
        if length == 0 or shift % length == 0:
            continue
        cut = length - shift % length
        head, tail = split(tensor, [cut, length - cut], dim)
        tensor = cat([tail, head], dim)
    return tensor


def _triangle(tensor: Tensor, diagonal: int, upper: bool) -> Tensor:
    operator.index(diagonal)  # an int (a float diagonal is a TypeError, as torch)
    if tensor.ndim < 2:
        raise ShapeError(f"tril/triu need at least 2 dimensions, got shape {tensor.shape}")
    rows = positions_along(tensor, tensor.shape, tensor.ndim - 2)
    columns = positions_along(tensor, tensor.shape, tensor.ndim - 1)
    keep = (columns - rows >= diagonal) if upper else (columns - rows <= diagonal)
    return keep.where(tensor, tensor.zeros_like())


def tril(tensor: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle (columns - rows <= diagonal) of the last two axes; the rest is zero."""
    return _triangle(tensor, diagonal, upper=False)


def triu(tensor: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle (columns - rows >= diagonal) of the last two axes; the rest is zero."""
    return _triangle(tensor, diagonal, upper=True)


def diagonal(tensor: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The elements [i, i + offset] of axes dim1 and dim2, in a new last axis (those two axes disappear)."""
    dim1, dim2 = normalize_axis(dim1, tensor.ndim), normalize_axis(dim2, tensor.ndim)
    if dim1 == dim2:
        raise ArgumentError(f"diagonal needs two different axes, got {dim1} twice")
    others = [axis for axis in range(tensor.ndim) if axis not in (dim1, dim2)]
    moved = tensor.permute(others + [dim1, dim2])
    outer, (rows, columns) = moved.shape[:-2], moved.shape[-2:]
    start_row, start_column = max(-offset, 0), max(offset, 0)
    length = max(0, min(rows - start_row, columns - start_column))
    if length == 0:
        return moved.reshape(outer + (rows * columns,)).shrink(tuple((0, size) for size in outer) + ((0, 0),))
    square = moved.shrink(
        tuple((0, size) for size in outer) + ((start_row, start_row + length), (start_column, start_column + length))
    )
    # in a flattened square of side L, the diagonal is every (L + 1)-th element
    flat = on_axis(square.reshape(outer + (length * length,)), len(outer), (0, length))
    flat = flat.reshape(outer + (length, length + 1))
    return on_axis(flat, len(outer) + 1, (0, 1), shrink=True).reshape(outer + (length,))


def diag(tensor: Tensor, diagonal_offset: int = 0) -> Tensor:
    """A 1-d tensor becomes a square matrix with it on diagonal `diagonal_offset`; a 2-d tensor gives that
    diagonal."""
    if tensor.ndim == 2:
        return diagonal(tensor, diagonal_offset)
    if tensor.ndim != 1:
        raise ShapeError(f"diag needs a 1-d or 2-d tensor, got shape {tensor.shape}")
    n = tensor.shape[0]
    # each value followed by n zeros, read as rows of n: value i lands at row i, column i
    square = tensor.reshape(n, 1).pad(((0, 0), (0, n))).flatten().shrink(((0, n * n),)).reshape(n, n)
    above, below = max(diagonal_offset, 0), max(-diagonal_offset, 0)
    return square.pad(((below, above), (above, below)))


def meshgrid(tensors: Sequence[Tensor], indexing: str = "ij") -> tuple[Tensor, ...]:
    """Every 1-d tensor broadcast along its own axis of the grid; 'xy' swaps the first two axes (numpy's default)."""
    if indexing not in ("ij", "xy"):
        raise ArgumentError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
    sizes = [tensor.numel() for tensor in tensors]
    order = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        order[0], order[1] = 1, 0
    grid_shape = tuple(sizes[order[axis]] for axis in range(len(tensors)))
    grids = []
    for i, tensor in enumerate(tensors):
        view = [1] * len(tensors)
        view[order.index(i)] = sizes[i]
        grids.append(tensor.reshape(view).expand(grid_shape))
    return tuple(grids)


def _tensor_list(first: Tensor | list[Tensor] | tuple[Tensor, ...], others: tuple[Tensor, ...]) -> list[Tensor]:
    if isinstance(first, (list, tuple)):
        return [*first, *others]
    return [first, *others]


class ShapeOps(TensorBase):
    """`cat, stack, repeat, repeat_interleave, split, chunk, unfold, roll, tril, triu, diag, diagonal, unflatten,
    meshgrid`."""

    def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
        """`a.cat(b, c, dim=)`, `Tensor.cat(a, b)` or `Tensor.cat([a, b])`."""
        return cat(_tensor_list(as_tensor(self), others), dim)

    def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
        """`a.stack(b, dim=)`, `Tensor.stack(a, b)` or `Tensor.stack([a, b])`."""
        return stack(_tensor_list(as_tensor(self), others), dim)

    def repeat(self, *repeats: int) -> Tensor:
        if len(repeats) == 1 and isinstance(repeats[0], (list, tuple)):
            repeats = tuple(repeats[0])
        return repeat(as_tensor(self), repeats)

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
        return repeat_interleave(as_tensor(self), repeats, dim)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        return split(as_tensor(self), sizes, dim)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        return chunk(as_tensor(self), chunks, dim)

    def unfold(self, dim: int, size: int, step: int) -> Tensor:
        return unfold(as_tensor(self), dim, size, step)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        return roll(as_tensor(self), shifts, dims)

    def tril(self, diagonal: int = 0) -> Tensor:
        return tril(as_tensor(self), diagonal)

    def triu(self, diagonal: int = 0) -> Tensor:
        return triu(as_tensor(self), diagonal)

    def diag(self, diagonal: int = 0) -> Tensor:
        return diag(as_tensor(self), diagonal)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        return diagonal(as_tensor(self), offset, dim1, dim2)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split axis `dim` into axes of `sizes` (one may be -1)."""
        dim = normalize_axis(dim, self.ndim)
        return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1 :])

    def meshgrid(self, *others: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """`a.meshgrid(b)`, `Tensor.meshgrid(a, b)` or `Tensor.meshgrid([a, b])`."""
        return meshgrid(_tensor_list(as_tensor(self), others), indexing)
