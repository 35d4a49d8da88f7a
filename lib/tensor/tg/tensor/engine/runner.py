"""Running a schedule: kernel ASTs are lowered, rendered and compiled once per device, then launched.

DEBUG=2 prints one line per kernel launch (device, name, shape, time, GFLOP/s, GB/s); DEBUG=4 also prints each
kernel's source when it is first compiled.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from tg.codegen.dtype import dtypes
from tg.codegen.flags import DEBUG
from tg.codegen.lower import lower
from tg.codegen.schedule.schedule import CopyCall, KernelCall, Schedule
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.hcq import Device
from tg.tensor.engine.buffers import buffer_of
from tg.tensor.engine.counters import GlobalCounters


@dataclass(frozen=True)
class CompiledKernel:
    name: str
    src: str
    global_size: tuple[int, int, int]
    program: Any
    loop_sizes: tuple[int, ...]  # sizes of the loops, outermost first (what DEBUG shows as the shape)
    ops: int  # estimated ALU operations per launch


_compiled: dict[tuple[str, UOp], CompiledKernel] = {}


def estimate_ops(linear: UOp) -> int:
    """ALU operations on values (not index arithmetic), each counted once per iteration of its loops."""
    multiplier, stack, ops = 1, [], 0
    for node in linear.src:
        if node.op is Ops.RANGE:
            stack.append(node.src[0].arg)
            multiplier *= node.src[0].arg
        elif node.op is Ops.END:
            size = stack.pop()
            multiplier = multiplier // size if size else math.prod(stack)
        elif node.op in GroupOp.ALU and node.dtype.scalar() is not dtypes.index:
            ops += multiplier
    return ops


def renderer_for(device: Any) -> Any:
    if device.renderer is None:
        wanted = ""
        if device.renderer_name:
            wanted = f" (it asks for the {device.renderer_name} renderer, which tg does not have)"
        raise RuntimeError(f"device {device.device} has no renderer, so it cannot run kernels{wanted}")
    return device.renderer


def compile_kernel(device_name: str, ast: UOp) -> CompiledKernel:
    """The program for kernel `ast` on `device_name` (lowered, rendered and compiled on first use)."""
    key = (device_name, ast)
    found = _compiled.get(key)
    if found is not None:
        return found
    device = Device[device_name]
    linear = lower(ast)
    rendered = renderer_for(device).render(linear)
    if DEBUG >= 4:
        print(rendered.src)
    program = device.runtime(device, rendered.name, device.compiler.compile(rendered.src))
    loop_sizes = tuple(u.src[0].arg for u in dict.fromkeys(u for u in linear.src if u.op is Ops.RANGE))
    found = CompiledKernel(rendered.name, rendered.src, rendered.global_size, program, loop_sizes, estimate_ops(linear))
    _compiled[key] = found
    return found


def run_schedule(schedule: Schedule) -> None:
    for item in schedule.items:
        if isinstance(item, KernelCall):
            run_kernel(item)
        else:
            run_copy(item)


def run_kernel(call: KernelCall) -> None:
    kernel = compile_kernel(call.device, call.ast)
    buffers = [buffer_of(node) for node in call.buffers]
    timed = DEBUG >= 2
    start = time.perf_counter()
    seconds = kernel.program(*(b.raw for b in buffers), global_size=kernel.global_size, wait=timed)
    memory = sum(b.nbytes for b in buffers)
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += kernel.ops
    GlobalCounters.global_mem += memory
    if timed:
        seconds = seconds if seconds is not None else time.perf_counter() - start
        GlobalCounters.time_sum_s += seconds
        print(debug_line(call.device, kernel, seconds, memory))


def debug_line(device: str, kernel: CompiledKernel, seconds: float, memory: int) -> str:
    gflops = kernel.ops / seconds / 1e9 if seconds > 0 else 0.0
    gbytes = memory / seconds / 1e9 if seconds > 0 else 0.0
    shape = "(" + ",".join(map(str, kernel.loop_sizes)) + ")"
    return (
        f"*** {device:<8} {GlobalCounters.kernel_count:5d} {kernel.name:<28} shape {shape:<20} "
        f"{seconds * 1e6:10.2f} us {gflops:9.2f} GFLOP/s {gbytes:8.2f} GB/s"
    )


def run_copy(call: CopyCall) -> None:
    source, dest = buffer_of(call.src), buffer_of(call.dest)
    if source.nbytes:
        dest.copyin(source.copyout(memoryview(bytearray(source.nbytes))))
    if DEBUG >= 2:
        print(f"*** copy {source.device} -> {dest.device} {source.nbytes} bytes")
