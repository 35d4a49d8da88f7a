"""Movement ops as index arithmetic: where element `idx` of a movement op's result lives in its source.

Each function takes the index of the result (one index UOp per axis) and returns the index into the source.
Nothing here moves data: a kernel reads its inputs through these expressions, and `simplify_indices`
(tg.codegen.uop.index_algebra) folds them back into plain strides.
"""

from __future__ import annotations

from tg.codegen.dtype import dtypes
from tg.codegen.uop.ops import UOp

Index = tuple[UOp, ...]
Shape = tuple[int | UOp, ...]  # a size may be symbolic (see tg.codegen.schedule.graph)


def index_const(value: int) -> UOp:
    return UOp.const(value, dtypes.index)


def strides_of(shape: Shape) -> tuple[int | UOp, ...]:
    """Row-major (C-contiguous) strides in elements (UOps after a symbolic size)."""
    strides: list[int | UOp] = []
    step: int | UOp = 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def flat_index(idx: Index, shape: Shape) -> UOp:
    """The position of `idx` in a C-contiguous buffer of `shape`."""
    total = index_const(0)
    for i, stride in zip(idx, strides_of(shape), strict=True):
        total = total + i * stride
    return total


def unflatten_index(flat: UOp, shape: Shape) -> Index:
    """The multi-axis index of position `flat` in a C-contiguous `shape` (size-1 axes get 0)."""
    out: list[UOp] = []
    for axis, (size, stride) in enumerate(zip(shape, strides_of(shape), strict=True)):
        if size == 1:
            out.append(index_const(0))
            continue
        part = flat // stride if stride != 1 else flat
        out.append(part if axis == 0 else part % size)
    return tuple(out)


def reshape_index(idx: Index, new_shape: Shape, old_shape: Shape) -> Index:
    """Source index of a RESHAPE. Adding or removing size-1 axes maps axes one to one; anything else goes
    through the flat position."""
    if [s for s in new_shape if s != 1] == [s for s in old_shape if s != 1]:
        kept = iter([i for i, s in zip(idx, new_shape, strict=True) if s != 1])
        return tuple(index_const(0) if s == 1 else next(kept) for s in old_shape)
    return unflatten_index(flat_index(idx, new_shape), old_shape)


def permute_index(idx: Index, order: tuple[int, ...]) -> Index:
    source = [index_const(0)] * len(order)
    for result_axis, source_axis in enumerate(order):
        source[source_axis] = idx[result_axis]
    return tuple(source)


def expand_index(idx: Index, old_shape: Shape) -> Index:
    """A broadcast axis (size 1 in the source) reads element 0 whatever the result index."""
    return tuple(index_const(0) if size == 1 else i for i, size in zip(idx, old_shape, strict=True))


def _nonzero(amount: int | UOp) -> bool:
    """Whether a padding or offset may be non-zero (a symbolic one may be, for some value of its variables)."""
    return isinstance(amount, UOp) or amount != 0


def shrink_index(idx: Index, bounds: tuple[tuple[int, int], ...]) -> Index:
    return tuple(i + start if _nonzero(start) else i for i, (start, _) in zip(idx, bounds, strict=True))


def flip_index(idx: Index, flips: tuple[bool, ...], old_shape: Shape) -> Index:
    return tuple((size - 1) - i if flip else i for i, flip, size in zip(idx, flips, old_shape, strict=True))


def pad_index(idx: Index, padding: tuple[tuple[int, int], ...], old_shape: Shape) -> tuple[Index, UOp | None]:
    """Source index of a PAD and the condition under which it is inside the source (None: always)."""
    source: list[UOp] = []
    inside: UOp | None = None
    for i, (before, after), size in zip(idx, padding, old_shape, strict=True):
        source.append(i - before if _nonzero(before) else i)
        conditions = []
        if _nonzero(before):
            conditions.append(UOp.const(before - 1, dtypes.index) < i)
        if _nonzero(after):
            conditions.append(i < before + size)
        for condition in conditions:
            inside = condition if inside is None else inside & condition
    return tuple(source), inside
