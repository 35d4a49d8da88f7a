"""Kept copies: the output of a copy kernel marked `kept` (a matmul's packed weight) is remembered and reused while
the buffer it copies is unchanged, so that later schedules with the same copy launch no kernel for it.

    copy = kept_copy(call)     # the remembered output of this copy of this buffer, or None (stale or never made)
    keep_copy(call)            # after `call` ran: remember its output

A copy is keyed by its source BUFFER node (weakly: it is freed with the source) and its kernel AST (the layout).
It is valid while the source's `Buffer.writes` count is what it was when the copy ran: every kernel output, copy,
copyin and TinyJit replay counts a write, so an `assign`, an optimizer step or a replayed training step makes the
copy stale and the next schedule copies again. At most one copy per source and layout is kept.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from tg.codegen.schedule.schedule import KernelCall
from tg.codegen.uop.ops import UOp
from tg.hcq.engine.buffers import buffer_of, has_memory


@dataclass(frozen=True)
class KeptCopy:
    """The BUFFER node holding a copy, and its source's write count when the copy was made."""

    copy: UOp
    source_writes: int


_kept: weakref.WeakKeyDictionary[UOp, dict[UOp, KeptCopy]] = weakref.WeakKeyDictionary()


def kept_copy(call: KernelCall) -> UOp | None:
    """The BUFFER node holding the output of `call` (a kept copy kernel) from an earlier run, if its source has not
    been written since."""
    source = call.buffers[1]
    found = _kept.get(source, {}).get(call.ast)
    if found is None or not has_memory(source) or buffer_of(source).base.writes != found.source_writes:
        return None
    return found.copy


def keep_copy(call: KernelCall) -> None:
    """Remember the output of `call`, which has just been launched, as the copy of its source (replacing a stale
    one, whose memory goes back to the allocator)."""
    source = call.buffers[1]
    _kept.setdefault(source, {})[call.ast] = KeptCopy(call.buffers[0], buffer_of(source).base.writes)


def kept_copy_count() -> int:
    """How many copies are kept (tests check that they go with their sources)."""
    return sum(len(copies) for copies in _kept.values())
