"""`rearrange`: einops-style axis notation, "b c (h w) -> b h w c", turned into reshape + permute + reshape.

Each side is a list of groups; a group is one axis (`h`), several names merged into one axis (`(h w)`), the literal
`1` (a size-1 axis), or `...` (whatever axes are left over). The left side's merged groups are split (sizes from the
keyword arguments, at most one unknown per group), the names are permuted into the right side's order, and the right
side's groups are merged. Every name must appear once on each side.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from tg.codegen import UOp
from tg.codegen.schedule.graph import Shape, ShapeError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

ELLIPSIS = "..."
_TOKEN = re.compile(r"\.\.\.|\(|\)|[A-Za-z_][A-Za-z0-9_]*|1|\S")


def parse_side(text: str) -> list[list[str]]:
    """'b (h w) 1 ...' -> [['b'], ['h', 'w'], [], ['...']] (a `1` is an empty group: one axis of size 1)."""
    groups: list[list[str]] = []
    current: list[str] | None = None  # the open parenthesised group, if any
    for token in _TOKEN.findall(text):
        if token == "(":
            if current is not None:
                raise ValueError(f"rearrange: nested parentheses in {text!r}")
            current = []
        elif token == ")":
            if current is None:
                raise ValueError(f"rearrange: unmatched ')' in {text!r}")
            groups.append(current)
            current = None
        elif token == "1":
            if current is None:  # inside a group a 1 multiplies nothing
                groups.append([])
        elif token == ELLIPSIS or token.isidentifier():
            if current is None:
                groups.append([token])
            else:
                current.append(token)
        else:
            raise ValueError(f"rearrange: unexpected {token!r} in {text!r}")
    if current is not None:
        raise ValueError(f"rearrange: unclosed '(' in {text!r}")
    return groups


def _names(groups: list[list[str]]) -> list[str]:
    return [name for group in groups for name in group]


def _axis_sizes(groups: list[list[str]], shape: Shape, sizes: dict[str, int]) -> dict[str, Shape]:
    """The axes each left-side name stands for after splitting: one size per name, several for `...`."""
    known: dict[str, Shape] = {name: (size,) for name, size in sizes.items()}
    has_ellipsis = [ELLIPSIS] in groups
    ellipsis_rank = len(shape) - (len(groups) - has_ellipsis)
    if ellipsis_rank < 0 or (not has_ellipsis and ellipsis_rank != 0):
        raise ShapeError(f"rearrange: the pattern has {len(groups)} axes, the tensor has shape {shape}")
    axis = 0
    for group in groups:
        if group == [ELLIPSIS]:
            known[ELLIPSIS] = shape[axis : axis + ellipsis_rank]
            axis += ellipsis_rank
            continue
        unknown = [name for name in group if name not in known]
        if len(unknown) > 1:
            raise ValueError(f"rearrange: give the sizes of all but one of {group}")
        product = math.prod(known[name][0] for name in group if name in known)
        if unknown:
            if product == 0 or shape[axis] % product:
                raise ShapeError(f"rearrange: axis of size {shape[axis]} cannot split into {group} with {sizes}")
            known[unknown[0]] = (shape[axis] // product,)
        elif product != shape[axis]:
            raise ShapeError(f"rearrange: {group or '1'} has size {product}, the axis has {shape[axis]}")
        axis += 1
    return known


def rearrange(tensor: Tensor, formula: str, **sizes: int) -> Tensor:
    if formula.count("->") != 1:
        raise ValueError(f"rearrange needs one '->' in {formula!r}")
    left, right = (parse_side(side) for side in formula.split("->"))
    left_names, right_names = _names(left), _names(right)
    if sorted(left_names) != sorted(right_names) or len(set(left_names)) != len(left_names):
        raise ValueError(f"rearrange: both sides need the same names, each once: {formula!r}")
    known = _axis_sizes(left, tensor.shape, sizes)
    axes_of: dict[str, list[int]] = {}  # name -> its axes in the split tensor
    split_shape: list[int | UOp] = []
    for name in left_names:
        axes_of[name] = list(range(len(split_shape), len(split_shape) + len(known[name])))
        split_shape += known[name]
    order = [axis for name in right_names for axis in axes_of[name]]
    moved = tensor.reshape(split_shape).permute(order)
    final: list[int | UOp] = []
    for group in right:
        if group == [ELLIPSIS]:
            final += known[ELLIPSIS]
        else:
            final.append(math.prod(math.prod(known[name]) for name in group))
    return moved.reshape(final)
