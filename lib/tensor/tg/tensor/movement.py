"""Movement ops: views of the same values in another shape or order. They never copy; the scheduler turns them
into index arithmetic. Each checks its arguments when the op is built and says what was asked when they are wrong.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.schedule.graph import Shape, ShapeError, canonical_size, symbolic_numel
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.errors import ArgumentError, UnsupportedModeError
from tg.tensor.symbolic import check_size, fits_in, is_symbolic, is_symbolic_shape, known_le, shape_text

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def normalize_axis(axis: int, ndim: int) -> int:
    """`axis` counted from the front; negative axes count from the back."""
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis % max(ndim, 1)


def _shape_argument(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _keep_none_sizes(old_shape: Shape, new_shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """tinygrad's reshape: a None at position i keeps the input's size at position i."""
    if None not in new_shape:
        return new_shape
    past = [i for i, size in enumerate(new_shape) if size is None and i >= len(old_shape)]
    if past:
        raise ShapeError(f"reshape of {old_shape} to {new_shape}: a None at position {past[0]} has no size to keep")
    return tuple(old_shape[i] if size is None else size for i, size in enumerate(new_shape))


def _int_sizes(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """Sizes as Python ints (numpy ints too); a float or other non-integer is a TypeError, as torch's reshape."""
    try:
        return tuple(operator.index(size) for size in shape)
    except TypeError:
        raise TypeError(f"reshape needs int sizes, got {shape}") from None


def _infer_reshape(old_shape: Shape, new_shape: tuple[int, ...]) -> Shape:
    """`new_shape` with a single -1 filled in so the element counts agree."""
    if is_symbolic_shape(old_shape) or is_symbolic_shape(new_shape):
        return _infer_symbolic_reshape(old_shape, new_shape)
    new_shape = _int_sizes(new_shape)
    if new_shape.count(-1) > 1:
        raise ShapeError(f"reshape of {old_shape} to {new_shape}: only one size may be -1")
    if min(new_shape, default=0) < -1:
        raise ShapeError(f"reshape of {old_shape} to {new_shape}: sizes must be non-negative or -1")
    count = math.prod(_int_sizes(old_shape))  # (not symbolic here)
    if -1 in new_shape:
        known = math.prod(size for size in new_shape if size != -1)
        if known == 0 or count % known:
            raise ShapeError(f"cannot reshape {old_shape} ({count} elements) to {new_shape}")
        new_shape = tuple(count // known if size == -1 else size for size in new_shape)
    if math.prod(new_shape) != count:
        raise ShapeError(
            f"cannot reshape {old_shape} ({count} elements) to {new_shape} ({math.prod(new_shape)} elements)"
        )
    return new_shape


def _infer_symbolic_reshape(old_shape: Shape, new_shape: tuple) -> Shape:
    """A reshape where a size is symbolic: the element counts must simplify to the same expression."""
    sizes = [size if isinstance(size, int) and size == -1 else check_size(size, "reshape") for size in new_shape]
    count = symbolic_numel(old_shape)
    if sum(isinstance(size, int) and size == -1 for size in sizes) == 1:
        known = symbolic_numel(tuple(size for size in sizes if not (isinstance(size, int) and size == -1)))
        inferred = canonical_size(count // known) if not (isinstance(known, int) and known == 0) else 0
        sizes = [inferred if isinstance(size, int) and size == -1 else size for size in sizes]
    new = tuple(sizes)
    if symbolic_numel(new) != count:  # (UOps compare by identity: simplified equal expressions are one node)
        raise ShapeError(f"cannot reshape {shape_text(old_shape)} to {shape_text(new)}: the element counts differ")
    return new


def _grows_only_ones(old_shape: Shape, new_shape: tuple[Any, ...]) -> bool:
    """Whether expanding `old_shape` to `new_shape` keeps the axes and only grows size-1 ones, all sizes plain ints."""
    return len(old_shape) == len(new_shape) and all(
        type(new) is int and new >= 0 and (old == new or old == 1)
        for old, new in zip(old_shape, new_shape, strict=True)
    )


class MovementOps(TensorBase):
    """`reshape, permute, expand, pad, shrink, flip, transpose, T, squeeze, unsqueeze, flatten`."""

    def _movement(self, op: Ops, arg: Any) -> Tensor:
        return self._wrap(UOp(op, self.dtype, (self.uop,), arg))

    def reshape(self, *shape: Any) -> Tensor:
        new_shape = _infer_reshape(self.shape, _keep_none_sizes(self.shape, _shape_argument(shape)))
        if new_shape == self.shape:
            return as_tensor(self)
        return self._movement(Ops.RESHAPE, new_shape)

    def view(self, *shape: Any) -> Tensor:
        return self.reshape(*shape)

    def permute(self, *order: Any) -> Tensor:
        order = tuple(normalize_axis(axis, self.ndim) for axis in _shape_argument(order))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute of a tensor of shape {self.shape} needs an order of its axes, got {order}")
        if order == tuple(range(self.ndim)):
            return as_tensor(self)
        return self._movement(Ops.PERMUTE, order)

    def expand(self, *shape: Any) -> Tensor:
        """Broadcast size-1 axes to `shape` (-1 keeps a size); new leading axes may be added."""
        new_shape = _shape_argument(shape)
        old_shape = self.shape
        if _grows_only_ones(old_shape, new_shape):  # the common case, without the general checks below
            return as_tensor(self) if new_shape == old_shape else self._movement(Ops.EXPAND, new_shape)
        if len(new_shape) < self.ndim:
            raise ShapeError(f"cannot expand shape {self.shape} to {new_shape}: fewer dimensions")
        padded = (1,) * (len(new_shape) - self.ndim) + self.shape
        new_shape = tuple(old if isinstance(new, int) and new == -1 else check_size(new, "expand")
                          for old, new in zip(padded, new_shape, strict=True))  # fmt: skip
        if any(old is not new and old != new and old != 1 for old, new in zip(padded, new_shape, strict=True)):
            raise ShapeError(f"cannot expand shape {self.shape} to {new_shape}: only size-1 axes can grow")
        source = self.reshape(padded)
        if new_shape == padded:
            return source
        return source._movement(Ops.EXPAND, new_shape)

    def pad(self, padding: Sequence[Any], mode: str = "constant", value: float = 0.0) -> Tensor:
        """Pad with `value`: `padding` is ((before, after) or None) per axis, or torch's flat form
        (left, right, top, bottom, ...) starting at the last axis. Negative padding removes elements.

        `mode` (tinygrad's and torch's): "constant" fills with `value`; "reflect", "replicate" and "circular"
        repeat the tensor's own values (see tg.tensor.pad_modes)."""
        from tg.tensor.pad_modes import PAD_MODES, pad_from_values

        if mode not in PAD_MODES:
            raise UnsupportedModeError(
                f"pad mode must be one of {', '.join(PAD_MODES)}; got {mode!r} (pass a fill as value=)"
            )
        per_axis = _padding_per_axis(padding, self.ndim, self.shape)
        if mode != "constant":
            return pad_from_values(as_tensor(self), per_axis, mode)
        if any(is_symbolic(amount) for pair in per_axis for amount in pair):  # symbolic padding: never negative
            padded = self._movement(Ops.PAD, per_axis)
            if value == 0:
                return padded
            inside = self.ones_like(dtype=dtypes.bool)._movement(Ops.PAD, per_axis)
            return inside.where(padded, value).cast(self.dtype)
        if any(before < 0 or after < 0 for before, after in per_axis):
            keep = tuple((max(0, -b), size - max(0, -a)) for (b, a), size in zip(per_axis, self.shape, strict=True))
            return self.shrink(keep).pad(tuple((max(0, b), max(0, a)) for b, a in per_axis), value=value)
        if all(before == 0 and after == 0 for before, after in per_axis):
            return as_tensor(self)
        padded = self._movement(Ops.PAD, per_axis)
        if value == 0:
            return padded
        inside = self.ones_like(dtype=dtypes.bool)._movement(Ops.PAD, per_axis)
        return inside.where(padded, value).cast(self.dtype)

    def pad_to(self, shape: Any, *more: Any, value: float = 0.0) -> Tensor:
        """Pad at the end of each axis up to `shape` (None keeps an axis as it is)."""
        target = _shape_argument((shape, *more))
        if len(target) != self.ndim:
            raise ShapeError(f"pad_to {target} needs {self.ndim} sizes for shape {self.shape}")
        padding = tuple(None if t is None else (0, t - s) for t, s in zip(target, self.shape, strict=True))
        return self.pad(padding, value=value)

    def shrink_to(self, shape: Any, *more: Any) -> Tensor:
        """Keep the first `shape` elements of each axis (None keeps an axis whole)."""
        target = _shape_argument((shape, *more))
        if len(target) != self.ndim:
            raise ShapeError(f"shrink_to {target} needs {self.ndim} sizes for shape {self.shape}")
        return self.shrink(tuple(None if t is None else (0, t) for t in target))

    def shrink(self, bounds: Sequence[tuple[int | UOp, int | UOp] | None]) -> Tensor:
        """Keep [start, end) of each axis (None keeps the whole axis)."""
        if len(bounds) != self.ndim:
            raise ShapeError(f"shrink of a tensor of shape {self.shape} needs {self.ndim} (start, end) pairs")
        full = tuple((0, size) if b is None else (check_size(b[0], "shrink"), check_size(b[1], "shrink"))
                     for b, size in zip(bounds, self.shape, strict=True))  # fmt: skip
        for (start, end), size in zip(full, self.shape, strict=True):
            if not (known_le(0, start) and known_le(start, end) and fits_in(end, size)):
                where = f"({_text(start)}, {_text(end)}) is not within 0..{_text(size)} for every value"
                raise ShapeError(f"shrink of shape {shape_text(self.shape)} to {_bounds_text(full)}: {where}")
        if all(start == 0 and end == size for (start, end), size in zip(full, self.shape, strict=True)):
            return as_tensor(self)
        return self._movement(Ops.SHRINK, full)

    def flip(self, *axes: Any, axis: Any = None) -> Tensor:
        """Reverse the order along `axes` (`flip(0, 1)`, `flip((0, 1))` or tinygrad's `flip(axis=...)`)."""
        if axis is not None:
            axes = (*axes, *(axis if isinstance(axis, (tuple, list)) else (axis,)))
        axes_argument = axes
        listed = [normalize_axis(axis, self.ndim) for axis in _shape_argument(axes)]
        flipped = set(listed)
        if len(flipped) != len(listed):
            raise ArgumentError(f"flip: an axis appears more than once in {_shape_argument(axes_argument)}")
        if not flipped:
            return as_tensor(self)
        return self._movement(Ops.FLIP, tuple(axis in flipped for axis in range(self.ndim)))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        order = list(range(self.ndim))
        dim0, dim1 = normalize_axis(dim0, self.ndim), normalize_axis(dim1, self.ndim)
        order[dim0], order[dim1] = order[dim1], order[dim0]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802 - the name everyone knows
        return self.transpose()

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Remove size-1 axes (all of them, or only `dim`, which is kept if its size is not 1)."""
        if dim is None:
            return self.reshape(tuple(size for size in self.shape if size != 1))
        dim = normalize_axis(dim, self.ndim)
        if not self.shape or self.shape[dim] != 1:
            return as_tensor(self)
        return self.reshape(self.shape[:dim] + self.shape[dim + 1 :])

    def unsqueeze(self, dim: int) -> Tensor:
        dim = normalize_axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        start, end = normalize_axis(start_dim, self.ndim), normalize_axis(end_dim, self.ndim)
        merged = math.prod(self.shape[start : end + 1])
        return self.reshape(self.shape[:start] + (merged,) + self.shape[end + 1 :])


def _text(size: Any) -> str:
    return size.render() if isinstance(size, UOp) else str(size)


def _bounds_text(bounds: tuple) -> str:
    return "(" + ", ".join(f"({_text(a)}, {_text(b)})" for a, b in bounds) + ")"


def _padding_per_axis(padding: Sequence[Any], ndim: int, shape: Shape) -> tuple[tuple[int, int], ...]:
    if all(isinstance(p, int) for p in padding):  # torch's flat form, last axis first
        if len(padding) % 2 or len(padding) > 2 * ndim:
            raise ShapeError(f"flat padding {tuple(padding)} needs an even count up to {2 * ndim} for shape {shape}")
        pairs = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)]
        return tuple([(0, 0)] * (ndim - len(pairs)) + pairs[::-1])
    if len(padding) != ndim:
        raise ShapeError(f"padding {tuple(padding)} has {len(padding)} entries for a tensor of shape {shape}")
    return tuple((0, 0) if p is None else (_pad_amount(p[0]), _pad_amount(p[1])) for p in padding)


def _pad_amount(amount: Any) -> Any:
    return check_size(amount, "pad") if isinstance(amount, UOp) else int(amount)
