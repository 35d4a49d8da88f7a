"""Movement ops as index arithmetic: where element `idx` of a movement op's result lives in its source.

Each function takes the index of the result (one index UOp per axis) and returns the index into the source.
Nothing here moves data: a kernel reads its inputs through these expressions, and `simplify_indices`
(tg.codegen.uop.index_algebra) folds them back into plain strides.
"""

from __future__ import annotations

from tg.codegen.dtype import dtypes
from tg.codegen.uop.ops import Ops, UOp

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
    """Source index of a RESHAPE, group by group (see `axis_groups`): within a group through its flat position,
    so axes a reshape leaves alone map one to one. A group of symbolic sizes needs this: `(h, t, 16) -> (h, t*16)`
    through the flat position of all three axes divides by `t*16` (a symbolic divisor the simplifier cannot fold
    back), while the group `(t, 16) -> t*16` alone gives `r // 16`, `r % 16` (a buffer address of r)."""
    new_axes = [axis for axis, size in enumerate(new_shape) if size != 1]
    old_axes = [axis for axis, size in enumerate(old_shape) if size != 1]
    source = [index_const(0)] * len(old_shape)
    for new_group, old_group in axis_groups([new_shape[a] for a in new_axes], [old_shape[a] for a in old_axes]):
        news, olds = [new_axes[a] for a in new_group], [old_axes[a] for a in old_group]
        flat = flat_index(tuple(idx[a] for a in news), tuple(new_shape[a] for a in news))
        for axis, index in zip(olds, unflatten_index(flat, tuple(old_shape[a] for a in olds)), strict=True):
            source[axis] = index
    return tuple(source)


def axis_groups(new_sizes: list[int | UOp], old_sizes: list[int | UOp]) -> list[tuple[range, range]]:
    """Consecutive groups of axes (new, old) whose sizes have equal products, split wherever a prefix product of
    the new sizes equals one of the old (as an expression, so for every value of the variables); the rest of the
    axes form the last group."""
    groups: list[tuple[range, range]] = []
    new_start = old_start = 0
    new_product: int | UOp = 1
    for new_end in range(1, len(new_sizes) + 1):
        new_product = new_product * new_sizes[new_end - 1]
        old_product: int | UOp = 1
        for old_end in range(1, len(old_sizes) + 1):
            old_product = old_product * old_sizes[old_end - 1]
            if old_end > old_start and _same_size(new_product, old_product):
                groups.append((range(new_start, new_end), range(old_start, old_end)))
                new_start, old_start = new_end, old_end
                break
    if new_start < len(new_sizes) or old_start < len(old_sizes):
        groups.append((range(new_start, len(new_sizes)), range(old_start, len(old_sizes))))
    return groups


def _same_size(a: int | UOp, b: int | UOp) -> bool:
    difference = a - b
    if isinstance(difference, UOp):
        difference = difference.simplify()
        return difference.op is Ops.CONST and difference.arg == 0
    return difference == 0


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
