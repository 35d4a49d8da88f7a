"""How a kernel's ranges map to a GPU launch: the one mapping every GPU renderer shares (the C-style languages of
tg.codegen.render.gpu, PTX, WGSL and the AMD LLVM renderer).

The outer output loops of a kernel that enclose all of its work (at most three, nested, each the only thing in its
parent) become grid dimensions, innermost first (dimension 0): a LOOP or GLOBAL range is a workgroup (block) id with
one thread per group in that dimension, a LOCAL range (the optimizer's LOCAL opt) is a thread id within the group.
The launch is `global_size` groups of `local_size` threads (`GPUKernel`). Every other range stays a loop inside a
thread, but GROUP_REDUCE ranges, which become thread ids in the dimensions the grid leaves free: each thread reduces
its share, then the partial accumulators meet in local memory behind a barrier and are combined in thread order
(`group_combine` says where each thread's partials go).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tg.codegen.dtype import DType
from tg.codegen.render.base import RenderedKernel, buffer_param
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import Ops, UOp

GRID_TYPES = (AxisType.LOOP, AxisType.GLOBAL, AxisType.LOCAL)
GROUP_REDUCE = AxisType.GROUP_REDUCE
MAX_GRID_DIMS = 3


@dataclass(frozen=True)
class GPUKernel(RenderedKernel):
    """A kernel launched as `global_size` workgroups of `local_size` threads."""

    local_size: tuple[int, int, int] = (1, 1, 1)


def grid_ranges(linear: UOp) -> list[UOp]:
    """The nested outer output ranges that can become grid dimensions, outermost first (see the module docstring).

    A range qualifies when its parent qualifies, it is an output range, no STORE comes between the parent's start and
    its own, and its END is followed directly by the parent's END (or ends the program): all the parent does is it."""
    program = list(linear.src)
    grid: list[UOp] = []
    start = 0
    while len(grid) < MAX_GRID_DIMS:
        position = next((i for i in range(start, len(program)) if program[i].op in (Ops.RANGE, Ops.STORE)), None)
        if position is None or program[position].op is not Ops.RANGE:
            break
        rng = program[position]
        if rng.arg.axis_type not in GRID_TYPES:
            break
        end = next(i for i in range(position + 1, len(program)) if closes(program[i], rng))
        after = program[end + 1] if end + 1 < len(program) else None
        if not (after is None if not grid else after is not None and closes(after, grid[-1])):
            break
        grid.append(rng)
        start = position + 1
    return grid


def closes(node: UOp, rng: UOp) -> bool:
    return node.op is Ops.END and node.src[0] is rng


def combining_op(update_op: Ops) -> Ops:
    """The op that combines two partial results of a reduction whose accumulator update is `update_op`: partial
    sums of products (MULACC updates) add."""
    return Ops.ADD if update_op is Ops.MULACC else update_op


def range_size(rng: UOp) -> Any:
    """A range's trip count: an int, or the index UOp of the kernel's variables it depends on (resolved at launch)."""
    return rng.src[0].arg if rng.src[0].op is Ops.CONST else rng.src[0]


@dataclass(frozen=True)
class ThreadLayout:
    """How a kernel's ranges map to the launch (see the module docstring): `grid` maps the ranges that become
    workgroup or thread ids to their dimension, `group` the GROUP_REDUCE ranges that take the free dimensions."""

    grid: dict[UOp, int]
    group: dict[UOp, int]
    global_size: tuple[Any, Any, Any]  # ints, or UOps of the variables (a grid range of symbolic size)
    local_size: tuple[int, int, int]

    def is_workgroup(self, rng: UOp) -> bool:
        """Whether `rng` is a workgroup id (else, when it is in the layout, a thread id within the group)."""
        return rng in self.grid and rng.arg.axis_type is not AxisType.LOCAL


def thread_layout(linear: UOp) -> ThreadLayout:
    """The launch of `linear` on a GPU: which ranges are ids in which dimension, and the sizes."""
    grid_list = grid_ranges(linear)
    grid = {rng: len(grid_list) - 1 - i for i, rng in enumerate(grid_list)}  # innermost is dimension 0
    global_size: list[Any] = [1, 1, 1]
    local_size = [1, 1, 1]
    for rng, dim in grid.items():
        (local_size if rng.arg.axis_type is AxisType.LOCAL else global_size)[dim] = range_size(rng)
    # GROUP_REDUCE ranges take the free dimensions: threads that each reduce a share, then combine
    groups = [u for u in dict.fromkeys(linear.src) if u.op is Ops.RANGE and u.arg.axis_type is GROUP_REDUCE]
    group = {rng: len(grid_list) + i for i, rng in enumerate(groups[: MAX_GRID_DIMS - len(grid_list)])}
    for rng, dim in group.items():
        local_size[dim] = rng.src[0].arg
    return ThreadLayout(grid, group, (global_size[0], global_size[1], global_size[2]),
                        (local_size[0], local_size[1], local_size[2]))  # fmt: skip


@dataclass(frozen=True)
class GroupCombine:
    """The combine at the end of a GROUP_REDUCE range: the accumulator (a REG param of `lanes` elements) each of
    `threads` threads holds, the op that combines two partials, and the local memory they meet in. Threads of LOCAL
    ranges in the same work-group reduce other outputs: each has its own slice, at the sum of its LOCAL ids times
    their `strides` (in elements); `size` is the whole local array."""

    accumulator: UOp
    op: Ops
    threads: int
    strides: tuple[tuple[UOp, int], ...]
    size: int

    @property
    def lanes(self) -> int:
        return self.accumulator.ptrdtype.size

    @property
    def dtype(self) -> DType:
        return self.accumulator.ptrdtype.base.scalar()


def group_combine(linear: UOp, layout: ThreadLayout, rng: UOp) -> GroupCombine:
    """What the combine at the end of GROUP_REDUCE range `rng` works on (see GroupCombine)."""
    end = next(u for u in linear.src if closes(u, rng))
    update = end.src[1] if len(end.src) > 1 else None
    while update is not None and update.op is Ops.END:
        update = update.src[1] if len(update.src) > 1 else None
    if update is None or update.op is not Ops.STORE:
        raise NotImplementedError("a GROUP_REDUCE that does not update an accumulator")
    accumulator = buffer_param(update.src[0])
    threads = rng.src[0].arg
    strides, size = [], threads * accumulator.ptrdtype.size
    for other in (r for r in layout.grid if r.arg.axis_type is AxisType.LOCAL):
        strides.append((other, size))
        size *= other.src[0].arg
    return GroupCombine(accumulator, combining_op(update.src[1].op), threads, tuple(strides), size)
