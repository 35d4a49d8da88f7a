"""Basic indexing: `t[1, ::-2, None, ..., 3:]` with ints, slices (any step), None and Ellipsis.

Every index becomes movement ops: an int is a one-element shrink whose axis is then dropped, a slice is a flip (for
negative steps), a shrink, and for steps above one a pad-reshape-shrink that keeps every step-th element.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


@dataclass(frozen=True)
class AxisSelection:
    """What one index does to one axis of the source: keep `count` elements from `start` by `step`."""

    start: int
    step: int
    count: int
    keep_axis: bool  # False for an int index: the axis disappears


def _int_selection(index: int, size: int, axis: int) -> AxisSelection:
    if not -size <= index < size:
        raise IndexError(f"index {index} is out of range for axis {axis} with size {size}")
    return AxisSelection(index % size, 1, 1, keep_axis=False)


def _slice_selection(index: slice, size: int) -> AxisSelection:
    start, stop, step = index.indices(size)
    return AxisSelection(start, step, len(range(start, stop, step)), keep_axis=True)


def _expand_ellipsis(indices: tuple[Any, ...], ndim: int) -> tuple[Any, ...]:
    """The index with `...` replaced by enough full slices; too many indices is an error."""
    ellipses = sum(index is Ellipsis for index in indices)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(index is not None and index is not Ellipsis for index in indices)
    if consumed > ndim:
        raise IndexError(f"too many indices: {consumed} indices for a tensor with {ndim} dimensions")
    if ellipses == 0:
        return indices + (slice(None),) * (ndim - consumed)
    at = indices.index(Ellipsis)
    return indices[:at] + (slice(None),) * (ndim - consumed) + indices[at + 1 :]


def _select_axis(tensor: Tensor, axis: int, selection: AxisSelection) -> Tensor:
    """Apply one AxisSelection to `axis` (the axis is kept; dropping int-indexed axes happens at the end)."""
    size = tensor.shape[axis]
    if selection.count == 0:
        bounds = [None] * tensor.ndim
        bounds[axis] = (0, 0)
        return tensor.shrink(bounds)
    start, step = selection.start, selection.step
    if step < 0:  # read the flipped axis forward: element i of the flip is element size-1-i of the source
        tensor, start, step = tensor.flip(axis), size - 1 - start, -step
    bounds = [None] * tensor.ndim
    bounds[axis] = (start, start + (selection.count - 1) * step + 1)
    tensor = tensor.shrink(bounds)
    if step == 1:
        return tensor
    # pad the axis to count*step, split it into (count, step) and keep column 0 of each step
    padding = [(0, 0)] * tensor.ndim
    padding[axis] = (0, selection.count * step - tensor.shape[axis])
    tensor = tensor.pad(padding)
    split = tensor.shape[:axis] + (selection.count, step) + tensor.shape[axis + 1 :]
    tensor = tensor.reshape(split)
    bounds = [None] * tensor.ndim
    bounds[axis + 1] = (0, 1)
    return tensor.shrink(bounds).reshape(split[: axis + 1] + split[axis + 2 :])


def _plain_index(index: Any) -> Any:
    """An int, slice, None or Ellipsis; integer-like objects (numpy ints) become ints."""
    if index is None or index is Ellipsis or isinstance(index, slice):
        return index
    if isinstance(index, bool) or not hasattr(index, "__index__") or hasattr(index, "uop"):
        raise TypeError(f"unsupported index {index!r}: use ints, slices, None or ...")
    return operator.index(index)


class IndexingOps:
    """`__getitem__` with ints, slices (negative steps included), None and Ellipsis."""

    def __getitem__(self, indices: Any) -> Tensor:
        if not isinstance(indices, tuple):
            indices = (indices,)
        indices = tuple(_plain_index(index) for index in indices)
        indices = _expand_ellipsis(indices, self.ndim)
        result: Tensor = self  # type: ignore[assignment]
        output_shape: list[int] = []
        axis = 0
        for index in indices:
            if index is None:
                output_shape.append(1)
                continue
            size = result.shape[axis]
            if isinstance(index, int):
                selection = _int_selection(index, size, axis)
            else:
                selection = _slice_selection(index, size)
            result = _select_axis(result, axis, selection)
            if selection.keep_axis:
                output_shape.append(selection.count)
            axis += 1
        return result.reshape(tuple(output_shape))
