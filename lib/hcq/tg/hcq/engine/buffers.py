"""The memory behind BUFFER nodes: one `tg.hcq.Buffer` per BUFFER node, alive exactly as long as the node.

Every tensor-graph node holds its sources, so the memory lives as long as any node that reads it. When the last
reference to a BUFFER node goes, its memory goes back to the device allocator (which keeps it for reuse).
"""

from __future__ import annotations

import weakref

from tg.codegen.uop.ops import Ops, UOp
from tg.hcq.buffer import Buffer

_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


def buffer_of(node: UOp) -> Buffer:
    """The Buffer behind BUFFER node `node`, allocated on first use."""
    if node.op is not Ops.BUFFER:
        raise TypeError(f"only BUFFER nodes have memory, not {node.op!r}")
    found = _buffers.get(node)
    if found is None:
        found = Buffer(node.src[0].arg, node.arg.size, node.dtype)
        found.ensure_allocated()
        _buffers[node] = found
        weakref.finalize(node, _release, found)
    return found


def adopt(node: UOp, memory: Buffer) -> None:
    """Make the allocated `memory` the Buffer behind the new BUFFER node `node` (released with the node)."""
    if node.op is not Ops.BUFFER or node in _buffers:
        raise ValueError("only a BUFFER node without memory can adopt a Buffer")
    _buffers[node] = memory
    weakref.finalize(node, _release, memory)


def has_memory(node: UOp) -> bool:
    return node in _buffers


def _release(buffer: Buffer) -> None:
    buffer.derived = None  # kept copies go with their source (a TinyJit capture may hold the Buffer object longer)
    if buffer.is_allocated():
        buffer.deallocate()
