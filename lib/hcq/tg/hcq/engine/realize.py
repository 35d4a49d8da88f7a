"""Realizing tensor graphs: schedule them (tg.codegen.schedule), then run the schedule on the devices.

    realize(*nodes) -> nodes that read realized memory (a BUFFER, maybe under movement ops)
    buffer_from_bytes(data, dtype, device) -> a BUFFER node holding a copy of data
    buffer_over(memory) -> a BUFFER node whose memory is an existing Buffer (a view into a mapped file)
    read_bytes(node) -> the node's contents as C-contiguous bytes

Nothing runs before `realize` or `read_bytes`. Realized memory lives as long as a node that refers to it.
"""

from __future__ import annotations

import math
from typing import Any

from tg.codegen.capture import capture_enabled, record_schedule
from tg.codegen.dtype import DType
from tg.codegen.schedule.graph import new_buffer, shape_of
from tg.codegen.schedule.realize import buffer_holding
from tg.codegen.schedule.schedule import KernelCall, Schedule, create_schedule, use_device_targets
from tg.codegen.target import Target
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.hcq.buffer import Buffer
from tg.hcq.device import Device
from tg.hcq.engine.buffers import adopt, buffer_of
from tg.hcq.engine.run import run_schedule


def _is_view_of_buffer(node: UOp) -> bool:
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op is Ops.BUFFER


def device_target(device: str) -> Target:
    """The Target device `device` built when it opened (what the scheduler's layout stage reads)."""
    return Device[device].target


use_device_targets(device_target)  # direct callers of create_schedule (tests, tools) schedule for these devices too


def realize(*nodes: UOp) -> tuple[UOp, ...]:
    """Schedule and run everything `nodes` need; for each node, an equivalent node over realized memory."""
    if all(_is_view_of_buffer(node) for node in nodes):
        return nodes
    schedule = create_schedule(tuple(nodes), device_target)
    if capture_enabled():
        record_schedule(tuple(nodes), kernel_names(schedule))
    run_schedule(schedule)
    return schedule.results


def kernel_names(schedule: Schedule) -> list[str]:
    """The names of a schedule's kernels in order (copies are `copy`): what `tg-replay diff --schedule` compares."""
    return [getattr(i.ast.arg, "name", "kernel") if isinstance(i, KernelCall) else "copy" for i in schedule.items]


def buffer_from_bytes(data: bytes | memoryview, dtype: DType, device: str) -> UOp:
    """A realized BUFFER node holding a copy of `data` (its length must be a multiple of the itemsize)."""
    view = memoryview(data).cast("B") if memoryview(data).format != "B" else memoryview(data)
    if view.nbytes % dtype.itemsize:
        raise ValueError(f"{view.nbytes} bytes is not a whole number of {dtype!r} elements ({dtype.itemsize} bytes)")
    node = new_buffer(Device.canonicalize(device), view.nbytes // dtype.itemsize, dtype)
    if view.nbytes:
        buffer_of(node).copyin(view)
    return node


def buffer_over(memory: Buffer) -> UOp:
    """A realized BUFFER node whose memory is `memory` (shared, not copied): how a tensor reads a range of a file
    mapped by the DISK device without reading the rest. `memory` stays alive as long as the node."""
    node = new_buffer(memory.device, memory.size, memory.dtype)
    adopt(node, memory.ensure_allocated())
    return node


def buffer_at_address(address: int, size: int, dtype: DType, device: str) -> UOp:
    """A realized BUFFER node whose memory is the `size` elements of `dtype` at host `address`, owned by the
    caller (never freed or reused here): what `Tensor.from_blob` wraps. Kernels read and write that memory, so
    both sides see each other's writes. Only devices whose buffers are host memory can (CPU devices, PYTHON)."""
    import ctypes

    from tg.hcq.allocator import BufferSpec
    from tg.hcq.devices.cpu import CPUAllocator
    from tg.hcq.devices.python import PythonAllocator, PythonMemory
    from tg.hcq.memory import HCQBuffer

    device = Device.canonicalize(device)
    nbytes = size * dtype.itemsize
    view = memoryview((ctypes.c_uint8 * max(nbytes, 1)).from_address(address)).cast("B")[:nbytes]
    allocator = Device[device].allocator
    raw: Any
    if isinstance(allocator, CPUAllocator):
        raw = HCQBuffer(address, nbytes, view, owner=Device[device])
    elif isinstance(allocator, PythonAllocator):
        raw = PythonMemory(view)
    else:
        raise ValueError(f"from_blob needs a device whose memory is host memory (CPU, PYTHON), not {device}")
    memory = Buffer(device, size, dtype, options=BufferSpec(nolru=True))  # (freeing must not recycle the memory)
    memory.allocate(raw)
    node = new_buffer(device, size, dtype)
    adopt(node, memory)
    return node


def read_bytes(node: UOp, nbytes: int | None = None) -> memoryview:
    """The contents of `node` as C-contiguous bytes in its shape (realizing it first if needed). A node of symbolic
    shape lives at the start of a buffer of its largest size: `nbytes` says how much of it the value is now."""
    (result,) = realize(node)
    buf = buffer_holding(result)
    if buf is None:
        (result,) = realize(UOp(Ops.CONTIGUOUS, node.dtype, (result,)))
        buf = buffer_holding(result)
        assert buf is not None, "a realized CONTIGUOUS is a whole buffer"
    if nbytes == 0 or math.prod(shape_of(node)) == 0:
        return memoryview(b"")
    data = buffer_of(buf)
    if nbytes is not None and nbytes < data.nbytes:
        return memoryview(data.copyout(memoryview(bytearray(data.nbytes))))[:nbytes]
    return data.copyout(memoryview(bytearray(data.nbytes)))
