"""Kept copies: the output of a copy kernel marked `kept` (a matmul's packed weight) is remembered and reused while
the buffer it copies is unchanged, so that later schedules with the same copy launch no kernel for it.

    copy = kept_copy(call)     # the remembered output of this copy of this buffer, or None
    keep_copy(call)            # after `call` ran: remember its output
    remember(buffer, key, v)   # the general form: `v` under `key`, until `buffer` is next written (a TinyJit's mark)

The copies live in the source Buffer's `derived`, keyed by kernel AST (the layout): at most one per source and layout,
freed with the source. Any write of the source drops them (`Buffer.note_write`: every kernel output, copy, copyin and
TinyJit replay), so an `assign`, an optimizer step or a replayed training step frees the stale copy at once and the
next schedule copies again.
"""

from __future__ import annotations

from tg.codegen.schedule.schedule import KernelCall
from tg.codegen.uop.ops import UOp
from tg.hcq.buffer import Buffer
from tg.hcq.engine.buffers import buffer_of, has_memory


def remember(source: Buffer, key: object, value: object) -> None:
    """Note `value` under `key` in `source`'s derived dict, which the next write of `source` clears."""
    if source.derived is None:
        source.derived = {}
    source.derived[key] = value


def is_remembered(source: Buffer, key: object) -> bool:
    """Whether `source` has not been written since `key` was remembered on it."""
    return source.derived is not None and key in source.derived


def kept_copy(call: KernelCall) -> UOp | None:
    """The BUFFER node holding the output of `call` (a kept copy kernel) from an earlier run, if its source has not
    been written since."""
    source = call.buffers[1]
    if not has_memory(source):
        return None
    derived = buffer_of(source).base.derived
    return None if derived is None else derived.get(call.ast)


def keep_copy(call: KernelCall) -> None:
    """Remember the output of `call`, which has just been launched, as the copy of its source in that layout."""
    remember(buffer_of(call.buffers[1]).base, call.ast, call.buffers[0])
