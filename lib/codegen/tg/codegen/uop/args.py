"""Typed `arg` payloads of UOps: one frozen dataclass per op family instead of bare tuples."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from tg.codegen.serial import enum_by_name

if TYPE_CHECKING:
    from tg.codegen.uop.ops import Ops


class AxisType(Enum):
    """What a RANGE loops over; the letter is how kernel names and debug output show it."""

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return enum_by_name(self)  # by name, never by number: stored IR survives a new or reordered member

    DEVICE = "d"  # a multi-device shard
    GLOBAL = "g"  # a global work dimension
    WARP = "w"  # created by tensor cores
    LOCAL = "l"  # a local (workgroup) dimension, split from GLOBAL or LOOP
    LOOP = "L"  # the initial state of every non-reduce axis
    GROUP_REDUCE = "G"  # split from REDUCE, reduced through shared memory
    REDUCE = "R"  # a reduction axis
    BLOCK_REDUCE = "B"  # split from REDUCE: blocks of the reduction looped outside the output loops (cache blocking)
    UPCAST = "u"  # unrolled into registers (vectorized), split from GLOBAL/LOCAL/LOOP
    UNROLL = "r"  # unrolled reduction, split from REDUCE/GROUP_REDUCE

    @property
    def letter(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"AxisType.{self.name}"


@dataclass(frozen=True)
class RangeArg:
    """A RANGE's identity: its axis number (negative ids are allowed) and what kind of loop it is."""

    axis_id: int
    axis_type: AxisType = AxisType.LOOP


@dataclass(frozen=True)
class VarArg:
    """A symbolic variable (DEFINE_VAR): its name and inclusive bounds."""

    name: str
    vmin: int
    vmax: int


@dataclass(frozen=True)
class ParamArg:
    """A kernel parameter (PARAM): which argument slot it is and an optional readable name."""

    slot: int
    name: str = ""


@dataclass(frozen=True)
class CallInfo:
    """A CALL's arg: `grad_fxn(gradient, call)` gives the gradients of its arguments (None: autograd through a value
    body; no gradient for a custom kernel), and `precompile` runs a call with output buffers as one opaque call that
    materializes its outputs instead of being inlined where its results are used."""

    grad_fxn: Any = None
    precompile: bool = False


@dataclass(frozen=True)
class KernelInfo:
    """The arg of a kernel AST's SINK: its name and the optimizations planned for and applied to it."""

    name: str = "test"
    axis_types: tuple[AxisType, ...] = ()
    applied_opts: tuple[Any, ...] = ()
    opts_to_apply: tuple[Any, ...] | None = None
    estimates: Any = None

    @property
    def function_name(self) -> str:
        """The name as a C identifier."""
        return "".join(c if c.isalnum() or c == "_" else "_" for c in self.name)


@dataclass(frozen=True)
class BufferArg:
    """A BUFFER's identity: a unique id (so equal-sized buffers stay distinct nodes) and its size in elements."""

    uid: int
    size: int


@dataclass(frozen=True)
class ReduceArg:
    """A REDUCE_AXIS: the combining op (ADD, MUL or MAX) and the axes it reduces (kept as size-1 axes)."""

    op: Ops
    axes: tuple[int, ...]
