"""What an optimization is: `Opt(op, axis, arg)`, the `OptOps` it names, and the error an illegal one raises.

The current form is one op, SPLIT: `Opt(OptOps.SPLIT, axis, (amount, AxisType[, top]))` cuts axis `axis` (of size
n) into an outer axis of n/amount that keeps its type and an inner axis of `amount` with the new type (with
`top=True` the new axis is the outer one). `amount=0` takes the whole axis. The classic spellings map onto it:

    UPCAST a k   -> SPLIT (k, UPCAST)          on an output axis; unrolled into registers (vectors)
    UNROLL a k   -> SPLIT (k, UNROLL)          on the a-th reduce axis; the reduction loop unrolled
    LOCAL a k    -> SPLIT (k, LOCAL)           on an output axis; a workgroup dimension
    GROUP a k    -> SPLIT (k, GROUP_REDUCE)    on the a-th reduce axis; reduced through shared memory
    GROUPTOP a k -> SPLIT (k, GROUP_REDUCE, top=True)
    BLOCK a k    -> SPLIT (n/k, BLOCK_REDUCE, top=True)   on the a-th reduce axis; blocks of k elements (see below)

GROUP on a CPU splits the reduction across cores: each core call reduces one share into a partial result and the
partials are combined in share order, so the bits do not depend on the core count. BLOCK cuts the reduction into
blocks looped outside the output loops (k-blocking: a matmul streams one block of its operands through the cache
for every output tile); the output buffer holds the running result between blocks.

SPLIT (k, LOOP) on an output axis makes its inner part a loop of its own, nested inside every other output loop:
a matmul's row tiles in groups of k that share each strip of the right operand (tg.codegen.opt.heuristics).

PADTO a k grows axis a to a multiple of k (the extra iterations are masked off); SWAP a b exchanges the loop
order of two output axes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from tg.codegen.serial import enum_by_name


class OptOps(Enum):
    def __reduce_ex__(self, protocol: Any) -> tuple:
        return enum_by_name(self)  # by name, never by number: stored IR survives a new or reordered member

    SPLIT = auto()
    PADTO = auto()
    SWAP = auto()
    # classic spellings, translated to SPLIT against the kernel's axes when applied
    UPCAST = auto()
    UNROLL = auto()
    LOCAL = auto()
    GROUP = auto()
    GROUPTOP = auto()
    BLOCK = auto()
    NOLOCALS = auto()

    def __repr__(self) -> str:
        return f"OptOps.{self.name}"

    def __lt__(self, other: OptOps) -> bool:
        return self.value < other.value


@dataclass(frozen=True, order=True)
class Opt:
    """One optimization step; see the module docstring for what `axis` and `arg` mean per op."""

    op: OptOps
    axis: int | None = None
    arg: Any = None

    def __repr__(self) -> str:
        return f"Opt(op={self.op!r}, axis={self.axis}, arg={self.arg!r})"


class KernelOptError(ValueError):
    """An optimization that cannot be applied to this kernel; the message says why."""
