"""Basic indexing: `t[1, ::-2, None, ..., 3:]` with ints, slices (any step), None and Ellipsis, read and written.

Every index becomes movement ops on one axis: an int is a one-element shrink whose axis is then dropped; a slice
is a flip (negative steps), a shrink, and for steps above one a reshape into (count, step) rows that keeps one
column. Writing (`t[i] = v`) runs the same plan backwards on the value (pads instead of shrinks) and selects it
with a mask of the written positions, so `t[i] = v` is a lazy `assign` of the whole tensor.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tg.codegen import UOp, dtypes
from tg.codegen.schedule.graph import Shape, canonical_size
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.promotion import DTypeMismatchError, dtype_name, is_symbolic_int
from tg.tensor.symbolic import check_size, concrete_size, fits_in, known_le

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


@dataclass(frozen=True)
class AxisSelection:
    """What one index does to one source axis: keep `count` elements from `start` by `step` (step may be < 0)."""

    start: int | UOp  # (symbolic only with step 1)
    step: int
    count: int | UOp
    keep_axis: bool  # False for an int index: the axis disappears from the result


@dataclass(frozen=True)
class IndexPlan:
    """The selection of every source axis, and the result's shape (None adds size-1 axes, ints remove axes)."""

    selections: tuple[AxisSelection, ...]
    output_shape: Shape


def _plain_index(index: Any) -> Any:
    """An int, slice, None or Ellipsis; integer-like objects (numpy ints) become ints."""
    if index is None or index is Ellipsis or isinstance(index, slice) or is_symbolic_int(index):
        return index
    if isinstance(index, bool) or not hasattr(index, "__index__") or hasattr(index, "uop"):
        raise IndexError(f"unsupported index {index!r}: use ints, slices, None or ...")
    return operator.index(index)


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


def plan_index(shape: Shape, indices: Any) -> IndexPlan:
    """Check `indices` against `shape` and say what each axis keeps."""
    if not isinstance(indices, tuple):
        indices = (indices,)
    indices = _expand_ellipsis(tuple(_plain_index(index) for index in indices), len(shape))
    selections: list[AxisSelection] = []
    output_shape: list[int | UOp] = []
    for index in indices:
        if index is None:
            output_shape.append(1)
            continue
        axis, size = len(selections), shape[len(selections)]
        if isinstance(index, UOp) or (isinstance(index, int) and isinstance(size, UOp)):
            selections.append(_symbolic_int_selection(index, size, axis))
            continue
        if isinstance(index, int):
            if not -size <= index < size:
                raise IndexError(f"index {index} is out of range for axis {axis} with size {size}")
            selections.append(AxisSelection(index % size, 1, 1, keep_axis=False))
            continue
        if _symbolic_slice(index) or isinstance(size, UOp):
            selections.append(_symbolic_selection(index, size, axis))
            output_shape.append(selections[-1].count)
            continue
        start, stop, step = index.indices(size)
        selections.append(AxisSelection(start, step, len(range(start, stop, step)), keep_axis=True))
        output_shape.append(selections[-1].count)
    return IndexPlan(tuple(selections), tuple(output_shape))


def _text(size: Any) -> str:
    return size.render() if isinstance(size, UOp) else str(size)


def _symbolic_int_selection(index: Any, size: Any, axis: int) -> AxisSelection:
    """An index that is a bound Variable (`freqs[pos]`), or an int into an axis of symbolic size: it must lie
    inside the axis for every value of the variables (no counting from the end)."""
    index = check_size(index, f"axis {axis} index")
    if not (known_le(0, index) and fits_in(index + 1, size)):
        raise IndexError(f"index {_text(index)} is not within axis {axis} of size {_text(size)} for every value of "
                         "its variables")  # fmt: skip
    return AxisSelection(index, 1, 1, keep_axis=False)


def _symbolic_slice(index: slice) -> bool:
    return isinstance(index.start, UOp) or isinstance(index.stop, UOp)


def _symbolic_selection(index: slice, size: Any, axis: int) -> AxisSelection:
    """A slice where a bound or the axis size is symbolic (`cache[:, 0 : pos + 1]`): step 1, bounds within the axis
    for every value of the variables (a negative int bound counts from the end only when the size is an int)."""
    if index.step not in (None, 1):
        raise IndexError(f"axis {axis}: a slice with a symbolic bound or size needs step 1, got {index.step}")
    bounds = []
    for bound, default in ((index.start, 0), (index.stop, size)):
        bound = default if bound is None else bound
        if isinstance(bound, int) and bound < 0 and isinstance(size, int):
            bound += size
        bounds.append(check_size(bound, f"axis {axis} slice"))
    start, stop = bounds
    if not (known_le(0, start) and known_le(start, stop) and fits_in(stop, size)):
        raise IndexError(
            f"axis {axis}: slice {_text(start)}:{_text(stop)} is not within 0..{_text(size)} for every "
            "value of its variables"
        )
    return AxisSelection(start, 1, canonical_size(stop - start), keep_axis=True)


@dataclass(frozen=True)
class StridedWindow:
    """How a selection with a positive step reads its axis: the elements lie in a window of `count` rows of
    `step` elements, at column `column` of each row. The window starts at `window_start`; when it would run past
    the end of the axis, `pad_after` zeros complete the last row (they are never selected)."""

    window_start: int
    column: int
    pad_after: int


def _window(start: int, step: int, count: int, size: int) -> StridedWindow:
    span = count * step
    if span <= size:  # slide the window left so that it fits: no padding needed
        window_start = min(start, size - span)
        return StridedWindow(window_start, start - window_start, 0)
    return StridedWindow(start, 0, span - (size - start))


def _on_axis(
    tensor: Tensor, axis: int, bounds: tuple[int | UOp, int | UOp] | None = None, padding: Any = None
) -> Tensor:
    """Shrink or pad only `axis`."""
    if bounds is not None:
        return tensor.shrink(tuple(bounds if i == axis else None for i in range(tensor.ndim)))
    return tensor.pad(tuple(padding if i == axis else None for i in range(tensor.ndim)))


def _forward(selection: AxisSelection, size: int | UOp) -> tuple[bool, int | UOp, int]:
    """(flip first, start, step) of the selection read on a forward axis."""
    if selection.step < 0:  # element i of the flipped axis is element size-1-i of the source
        return True, size - 1 - selection.start, -selection.step
    return False, selection.start, selection.step


def run_bounds(selection: AxisSelection) -> tuple[int | UOp, int | UOp] | None:
    """The (start, end) a selection of consecutive elements in order keeps (none at all included); None for one that
    flips or steps over elements, which `select_axis` cuts."""
    if selection.count == 0:
        return (0, 0)
    return (selection.start, selection.start + selection.count) if selection.step == 1 else None


def select_axis(tensor: Tensor, axis: int, selection: AxisSelection) -> Tensor:
    """Keep the selected elements of `axis`, a selection that flips or steps over elements (`run_bounds` gives the
    others): its size becomes `selection.count`, the axis itself stays."""
    size, count = tensor.shape[axis], selection.count
    flip, start, step = _forward(selection, size)
    if flip:
        tensor = tensor.flip(axis)
    if step == 1:
        return _on_axis(tensor, axis, bounds=(start, start + count))
    # (a step other than 1 comes from a slice of an axis of concrete size: no symbolic size below)
    start, count, size = (concrete_size(n, "a strided slice") for n in (start, count, size))
    window = _window(start, step, count, size)
    tensor = _on_axis(tensor, axis, bounds=(window.window_start, min(size, window.window_start + count * step)))
    if window.pad_after:
        tensor = _on_axis(tensor, axis, padding=(0, window.pad_after))
    rows = tensor.shape[:axis] + (count, step) + tensor.shape[axis + 1 :]
    tensor = _on_axis(tensor.reshape(rows), axis + 1, bounds=(window.column, window.column + 1))
    return tensor.reshape(rows[: axis + 1] + rows[axis + 2 :])


def place_axis(tensor: Tensor, axis: int, selection: AxisSelection, size: int | UOp) -> Tensor:
    """The inverse of `select_axis`: put the `count` elements of `axis` back at their places in an axis of
    `size`, with zeros everywhere else."""
    count = selection.count
    if count == 0:
        return _on_axis(tensor, axis, padding=(0, size))
    flip, start, step = _forward(selection, size)
    if step == 1:
        tensor = _on_axis(tensor, axis, padding=(start, size - start - count))
    else:  # (a step other than 1: concrete sizes, as in select_axis)
        start, count, size = (concrete_size(n, "a strided slice") for n in (start, count, size))
        window = _window(start, step, count, size)
        rows = tensor.shape[:axis] + (count, 1) + tensor.shape[axis + 1 :]
        tensor = _on_axis(tensor.reshape(rows), axis + 1, padding=(window.column, step - 1 - window.column))
        tensor = tensor.reshape(rows[:axis] + (count * step,) + rows[axis + 2 :])
        if window.pad_after:
            tensor = _on_axis(tensor, axis, bounds=(0, count * step - window.pad_after))
        covered = tensor.shape[axis]
        tensor = _on_axis(tensor, axis, padding=(window.window_start, size - window.window_start - covered))
    return tensor.flip(axis) if flip else tensor


class IndexingOps(TensorBase):
    """`t[indices]` and `t[indices] = value` with ints, slices (negative steps included), None and Ellipsis."""

    def __getitem__(self, indices: Any) -> Tensor:
        plan = plan_index(self.shape, indices)
        result = as_tensor(self)
        # the axes that keep a run of elements in order take one shrink together: a shrink checks every axis, so one
        # per axis made slicing a 4-D tensor cost as much Python as building a matmul
        runs = [run_bounds(selection) for selection in plan.selections]
        if any(bounds is not None for bounds in runs):
            result = result.shrink(runs)  # (plan_index selects every axis: runs has one entry per axis)
        for axis, selection in enumerate(plan.selections):
            if runs[axis] is None:
                result = select_axis(result, axis, selection)
        return result.reshape(plan.output_shape)

    def __setitem__(self, indices: Any, value: Any) -> None:
        """Write `value` (broadcast to `self[indices]`'s shape) at those positions: a lazy assign of the whole
        tensor, selecting the new values with a mask of the written positions."""
        plan = plan_index(self.shape, indices)
        if not hasattr(value, "uop"):
            value = type(as_tensor(self))(value, device=self.device, dtype=self.dtype)
        if value.dtype is not self.dtype:
            names = f"tensor is {dtype_name(self.dtype)}, value is {dtype_name(value.dtype)}"
            raise DTypeMismatchError(f"setitem dtype mismatch: {names}")
        selected_count = math.prod(plan.output_shape)
        if selected_count == 0:
            return  # nothing to write
        extra_axes = value.ndim - len(plan.output_shape)
        if extra_axes > 0 and all(size == 1 for size in value.shape[:extra_axes]):
            value = value.reshape(value.shape[extra_axes:])  # numpy drops leading size-1 axes of the value
        selected_shape = tuple(selection.count for selection in plan.selections)
        value = value.expand(plan.output_shape).reshape(selected_shape)
        written = value.ones_like(dtype=dtypes.bool)
        for axis, (selection, size) in enumerate(zip(plan.selections, self.shape, strict=True)):
            value = place_axis(value, axis, selection, size)
            written = place_axis(written, axis, selection, size)
        self.assign(written.where(value, self))
