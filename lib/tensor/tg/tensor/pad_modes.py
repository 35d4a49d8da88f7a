"""Padding that repeats the tensor's own values instead of a constant: `reflect`, `replicate` and `circular`.

Each axis is padded in turn by concatenating views of the tensor itself (torch's `F.pad` modes):
- reflect mirrors the values next to the edge, without repeating the edge (`[1,2,3]` -> `[3,2,1,2,3,2,1]`);
- replicate repeats the edge value (`[1,2,3]` -> `[1,1,1,2,3,3,3]`);
- circular wraps around (`[1,2,3]` -> `[2,3,1,2,3,1,2]`).
Everything is movement ops and one `cat` per axis, so it fuses with what reads it. A negative amount crops that
side (torch's and tinygrad's rule: output position j reads the padded input at j - before), so the positive amounts
are padded from the whole input first and the negative ones cut afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen import UOp
from tg.codegen.schedule.graph import Shape, ShapeError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _along(x: Tensor, axis: int, start: int | UOp, end: int | UOp) -> Tensor:
    """x restricted to [start, end) on `axis`."""
    return x.shrink(tuple((start, end) if i == axis else None for i in range(x.ndim)))


def _edge_pieces(x: Tensor, axis: int, before: int, after: int, mode: str) -> tuple[Tensor, Tensor]:
    size = x.shape[axis]
    if mode == "reflect":
        return _along(x, axis, 1, before + 1).flip(axis), _along(x, axis, size - 1 - after, size - 1).flip(axis)
    if mode == "replicate":
        grown = [list(x.shape), list(x.shape)]
        grown[0][axis], grown[1][axis] = before, after
        return _along(x, axis, 0, 1).expand(grown[0]), _along(x, axis, size - 1, size).expand(grown[1])
    return _along(x, axis, size - before, size), _along(x, axis, 0, after)  # circular


def _check(mode: str, size: int | UOp, axis: int, before: int, after: int, shape: Shape) -> None:
    """`before` and `after` here are the amounts to grow by (non-negative)."""
    if mode == "reflect" and max(before, after) >= size:
        raise ShapeError(f"reflect padding ({before}, {after}) on axis {axis} of shape {shape} must be below {size}")
    if mode == "circular" and max(before, after) > size:
        raise ShapeError(f"circular padding ({before}, {after}) on axis {axis} of shape {shape} exceeds {size}")
    if mode == "replicate" and size == 0 and (before or after):
        raise ShapeError(f"cannot replicate-pad the empty axis {axis} of shape {shape}")


def pad_from_values(x: Tensor, per_axis: tuple[tuple[int, int], ...], mode: str) -> Tensor:
    """x padded by `per_axis` ((before, after) for every axis) in a non-constant `mode`."""
    for axis, (before, after) in enumerate(per_axis):
        size = x.shape[axis]
        if size + before + after < 0:
            raise ShapeError(f"padding ({before}, {after}) crops more than axis {axis} of shape {x.shape} holds")
        grow_before, grow_after = max(before, 0), max(after, 0)
        _check(mode, size, axis, grow_before, grow_after, x.shape)
        if grow_before or grow_after:
            head, tail = _edge_pieces(x, axis, grow_before, grow_after, mode)
            x = head.cat(x, tail, dim=axis)
        if before < 0 or after < 0:
            x = _along(x, axis, -min(before, 0), x.shape[axis] + min(after, 0))
    return x
