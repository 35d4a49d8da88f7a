"""Advanced indexing: `t[idx]` and `t[idx] = v` where some indices are integer or boolean tensors (or lists and
numpy arrays), with numpy's rules for the result's shape.

Reading works in two steps. First the plain indices (ints, slices, None) are applied as basic indexing, with
every tensor index replaced by a full slice. Then one GATHER reads, for every element of the broadcast index
tensors, the source element they point at: one load each, whatever the indexed axes' sizes. numpy's placement
rule decides where the index tensors' broadcast axes go: where the indexed axes were if they are adjacent, else
first.

Writing compares every indexed position with every index element (a one-hot mask per axis, and-ed together): the
value at every indexed position is the value element whose indices point there (exactly, through its bit pattern,
see tg.tensor.gather_scatter); positions nobody points at keep their contents. The result goes back through basic
setitem.

A boolean index stands for the positions of its true elements: it is realized to learn them (the result's shape
depends on the data). Indices given as host data (lists, tuples, numpy arrays, ints) out of range raise IndexError,
as numpy; tensor indices are not checked (that would read them): out of range they select zeros / write nowhere.
Where several indices write one position, the last one wins, as in numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tg.codegen import dtypes
from tg.codegen.schedule.graph import Shape
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.errors import IndexDtypeError
from tg.tensor.gather_scatter import gather_at, require_integer_index, select_where, wrap_negative
from tg.tensor.indexing import IndexingOps
from tg.tensor.positions import positions
from tg.tensor.promotion import broadcast_shapes
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _is_tensor_like(index: Any) -> bool:
    import numpy as np

    return hasattr(index, "uop") or isinstance(index, (list, tuple, np.ndarray))


def has_advanced_index(indices: Any) -> bool:
    if not isinstance(indices, tuple):
        indices = (indices,)
    return any(_is_tensor_like(index) for index in indices)


@dataclass(frozen=True)
class AdvancedPlan:
    """Basic indices to apply first, then which axes of that result the index tensors select from."""

    basic: tuple[Any, ...]
    indexed_axes: tuple[int, ...]  # axes of the basic result, in order
    index_tensors: tuple[Tensor, ...]  # broadcast to one shape, negative indices already wrapped
    rest_axes: tuple[int, ...]  # the other axes of the basic result

    @property
    def broadcast_shape(self) -> Shape:
        return self.index_tensors[0].shape

    @property
    def adjacent(self) -> bool:
        first = self.indexed_axes[0]
        return self.indexed_axes == tuple(range(first, first + len(self.indexed_axes)))


def _as_index_tensors(tensor: Tensor, index: Any) -> list[Tensor]:
    """An index as int tensors, one per axis it consumes (a boolean mask consumes as many axes as it has)."""
    import numpy as np

    if not hasattr(index, "uop"):
        array = np.asarray(index)
        if array.dtype.kind == "f":
            raise IndexDtypeError(f"indexing: an index array must have an integer (or bool) dtype, not {array.dtype}")
        if array.dtype != np.bool_:
            array = array.astype(np.int32)
        index = type(tensor)(array, device=tensor.device)
    require_integer_index(index, "indexing")
    if index.dtype is not dtypes.bool:
        return [index]
    found = np.nonzero(index.numpy())  # data-dependent: realize the mask
    return [type(tensor)(axis_positions.astype(np.int32), device=tensor.device) for axis_positions in found]


def _check_host_index(index: Any, entry_count: int, tensor: Tensor, indices: tuple[Any, ...]) -> None:
    """An index given as Python ints (a list, tuple, numpy array or int) must lie within its axis: IndexError
    otherwise, as numpy and torch. Only host data is checked: checking a Tensor index would mean reading it."""
    import numpy as np

    if hasattr(index, "uop") or Ellipsis in [i for i in indices if not _is_tensor_like(i)]:
        return  # after an ellipsis the axis an entry consumes is known only later; the common forms have none
    array = np.asarray(index)
    if array.dtype == np.bool_ or array.size == 0 or entry_count >= tensor.ndim:
        return
    size = tensor.shape[entry_count]
    low, high = int(array.min()), int(array.max())
    if low < -size or high >= size:
        bad = high if high >= size else low
        raise IndexError(f"index {bad} is out of range for axis {entry_count} with size {size}")


def _expand_entries(tensor: Tensor, indices: tuple[Any, ...]) -> list[Any]:
    """Every entry as None, a slice, or an int tensor for one axis; ints become 0-d tensors (numpy treats them as
    advanced indices once any index is); the ellipsis becomes full slices."""
    entries: list[Any] = []
    for index in indices:
        consumed = sum(entry is not None for entry in entries)
        if _is_tensor_like(index):
            _check_host_index(index, consumed, tensor, indices)
            entries.extend(_as_index_tensors(tensor, index))
        elif isinstance(index, int) and not isinstance(index, bool):
            _check_host_index(index, consumed, tensor, indices)
            entries.append(type(tensor)(index, device=tensor.device, dtype=dtypes.int32))
        else:
            entries.append(index)
    consumed = sum(entry is not None and entry is not Ellipsis for entry in entries)
    if consumed > tensor.ndim:
        raise IndexError(f"too many indices: {consumed} indices for a tensor with {tensor.ndim} dimensions")
    fill = [slice(None)] * (tensor.ndim - consumed)
    ellipses = [at for at, entry in enumerate(entries) if entry is Ellipsis]  # `in` would compare tensors
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if ellipses:
        at = ellipses[0]
        return entries[:at] + fill + entries[at + 1 :]
    return entries + fill


def plan_advanced(tensor: Tensor, indices: Any) -> AdvancedPlan:
    if not isinstance(indices, tuple):
        indices = (indices,)
    entries = _expand_entries(tensor, indices)
    basic, indexed_axes, raw_tensors, source_sizes = [], [], [], []
    output_axis, source_axis = 0, 0
    for entry in entries:
        if hasattr(entry, "uop"):
            basic.append(slice(None))
            indexed_axes.append(output_axis)
            raw_tensors.append(entry)
            source_sizes.append(tensor.shape[source_axis])
        else:
            basic.append(entry)
        output_axis += 1
        source_axis += entry is not None
    shape = broadcast_shapes(*(index.shape for index in raw_tensors))
    wrapped = tuple(
        wrap_negative(index, size).expand(shape) for index, size in zip(raw_tensors, source_sizes, strict=True)
    )
    basic_rank = output_axis
    rest = tuple(axis for axis in range(basic_rank) if axis not in indexed_axes)
    return AdvancedPlan(tuple(basic), tuple(indexed_axes), wrapped, rest)


def _match_mask(plan: AdvancedPlan, sizes: Shape, leading: int) -> Tensor:
    """bool (1 * leading, *broadcast, *sizes): whether index element b points at position (n_0, n_1, ...)."""
    broadcast_rank, count = len(plan.broadcast_shape), len(sizes)
    mask: Tensor | None = None
    for k, (index, axis_size) in enumerate(zip(plan.index_tensors, sizes, strict=True)):
        size = concrete_size(axis_size, "advanced indexing")
        pointer = index.reshape((1,) * leading + plan.broadcast_shape + (1,) * count)
        view = [1] * (leading + broadcast_rank + count)
        view[leading + broadcast_rank + k] = size
        matches = pointer == positions(index, size, index.dtype).reshape(view)
        mask = matches if mask is None else mask & matches
    assert mask is not None  # (an advanced index has at least one index tensor)
    return mask


def _result_order(plan: AdvancedPlan, rest_rank: int) -> list[int]:
    """The permutation from (rest axes, broadcast axes) to numpy's result order."""
    broadcast_axes = list(range(rest_rank, rest_rank + len(plan.broadcast_shape)))
    rest_axes = list(range(rest_rank))
    if not plan.adjacent:
        return broadcast_axes + rest_axes
    at = plan.indexed_axes[0]  # rest axes before the first indexed axis stay in front of the broadcast axes
    return rest_axes[:at] + broadcast_axes + rest_axes[at:]


def advanced_getitem(tensor: Tensor, indices: Any) -> Tensor:
    plan = plan_advanced(tensor, indices)
    selected = IndexingOps.__getitem__(tensor, plan.basic)
    sizes = tuple(selected.shape[axis] for axis in plan.indexed_axes)
    rest_shape = tuple(selected.shape[axis] for axis in plan.rest_axes)
    moved = selected.permute(plan.rest_axes + plan.indexed_axes)
    broadcast_shape, count = plan.broadcast_shape, len(sizes)
    source = moved.reshape(rest_shape + (1,) * len(broadcast_shape) + sizes)  # (GATHER broadcasts the 1s)
    out_shape = rest_shape + broadcast_shape + (1,) * count
    pointers = tuple(
        index.reshape((1,) * len(rest_shape) + broadcast_shape + (1,) * count).expand(out_shape)
        for index in plan.index_tensors
    )
    gathered_axes = tuple(range(len(rest_shape) + len(broadcast_shape), len(out_shape)))
    picked = gather_at(source, pointers, gathered_axes).reshape(rest_shape + broadcast_shape)
    return picked.permute(_result_order(plan, len(rest_shape)))


def _last_writer(mask: Tensor, broadcast_shape: Shape, leading: int, count: int) -> Tensor:
    """Keep, for every written position, only the last index element (in row-major order) that points there:
    numpy's answer when an index repeats a position."""
    if not broadcast_shape:
        return mask
    index_count = math.prod(concrete_size(size, "advanced indexing") for size in broadcast_shape)
    order = positions(mask, index_count).reshape((1,) * leading + broadcast_shape + (1,) * count)
    broadcast_axes = tuple(range(leading, leading + len(broadcast_shape)))
    last = mask.where(order, -1).max(broadcast_axes, keepdim=True)
    return mask & (order == last)


def advanced_setitem(tensor: Tensor, indices: Any, value: Any) -> None:
    plan = plan_advanced(tensor, indices)
    selected = IndexingOps.__getitem__(tensor, plan.basic)
    sizes = tuple(selected.shape[axis] for axis in plan.indexed_axes)
    rest_shape = tuple(selected.shape[axis] for axis in plan.rest_axes)
    broadcast_shape = plan.broadcast_shape
    if not hasattr(value, "uop"):
        value = type(tensor)(value, device=tensor.device, dtype=tensor.dtype)
    value = value.cast(tensor.dtype)
    order = _result_order(plan, len(rest_shape))
    result_shape = tuple((rest_shape + broadcast_shape)[axis] for axis in order)
    value = value.expand(result_shape)
    inverse = sorted(range(len(order)), key=lambda axis: order[axis])
    value = value.permute(inverse)  # (*rest, *broadcast)
    values = value.reshape(rest_shape + broadcast_shape + (1,) * len(sizes))
    values = values.expand(rest_shape + broadcast_shape + sizes)
    mask = _match_mask(plan, sizes, len(rest_shape))
    broadcast_axes = tuple(range(len(rest_shape), len(rest_shape) + len(broadcast_shape)))
    mask = _last_writer(mask, broadcast_shape, len(rest_shape), len(sizes))
    placed = select_where(mask.expand(values.shape), values, broadcast_axes)  # (*rest, *sizes)
    hit = mask.any(broadcast_axes) if broadcast_axes else mask
    axis_order = plan.rest_axes + plan.indexed_axes  # where each axis of `placed` sits in `selected`
    back = sorted(range(len(axis_order)), key=lambda axis: axis_order[axis])
    updated = hit.permute(back).where(placed.permute(back), selected)
    IndexingOps.__setitem__(tensor, plan.basic, updated)


class AdvancedIndexingOps(TensorBase):
    """`t[int_or_bool_tensor_indices]` and `t[...] = value`; plain indices fall through to basic indexing."""

    def __getitem__(self, indices: Any) -> Tensor:
        if has_advanced_index(indices):
            return advanced_getitem(as_tensor(self), indices)
        return super().__getitem__(indices)

    def __setitem__(self, indices: Any, value: Any) -> None:
        if has_advanced_index(indices):
            advanced_setitem(as_tensor(self), indices, value)
            return
        super().__setitem__(indices, value)
