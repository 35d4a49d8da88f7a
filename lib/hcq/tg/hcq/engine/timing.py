"""Compile and time one kernel AST on a device with scratch buffers: what tg-beam and tg-replay need, no Tensor.

    timing = time_kernel(ast, "CPU", flags=CodegenFlags(), repeats=3)
    timing.seconds          # the fastest of `repeats` timed launches
    timing.program.source   # ProgramSource: name, src, global_size, applied_opts, ops, mem

The scratch buffers come from the kernel's PARAMs (slot order, element count from the pointer type) and hold zeros,
written once so that every page is memory of its own: fresh host memory that is only read maps every page onto the
kernel's one shared zero page, always in cache, so a memory-bound kernel timed on it ran several times faster than on
real inputs (a 16M-element sum's first stage: 1.3 ms against 3-4.5 ms, load 6) and BEAM ranked its candidates by a
cache that real data never has. The timing says nothing about the values. Programs compiled
here skip the engine's in-memory cache (a search compiles thousands of candidates that are never run again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tg.codegen.dtype import PtrDType
from tg.codegen.pipeline import CodegenFlags
from tg.codegen.uop.ops import Ops, UOp
from tg.hcq.buffer import Buffer
from tg.hcq.device import Device
from tg.hcq.engine.programs import CompiledProgram, compile_program
from tg.hcq.symbolic import resolve


@dataclass(frozen=True)
class KernelTiming:
    program: CompiledProgram
    seconds: float  # the fastest timed launch


def scratch_buffers(ast: UOp, device: str) -> list[Buffer]:
    """One allocated buffer per global PARAM of kernel `ast`, in slot order, as large as its pointer type says, its
    memory written (zeros: see the module docstring)."""
    params = {u.arg.slot: u for u in ast.toposort() if u.op is Ops.PARAM and u.addrspace.name == "GLOBAL"}
    buffers = []
    for slot in sorted(params):
        dtype = params[slot].dtype
        if not isinstance(dtype, PtrDType) or dtype.size < 0:
            raise ValueError(f"PARAM slot {slot} of kernel has no known size ({dtype!r}); cannot make a scratch buffer")
        buffer = Buffer(device, max(dtype.size, 1), dtype.base).ensure_allocated()
        buffers.append(buffer.copyin(bytes(buffer.nbytes)))
    return buffers


def time_program(
    program: CompiledProgram, buffers: list[Buffer], repeats: int = 3, var_vals: dict[str, int] | None = None
) -> float:
    """Seconds of the fastest of `repeats` launches of `program` on `buffers` (each launch waits for the device).
    A kernel of symbolic size takes its variables' values from `var_vals` (by name)."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    raw = [b.raw for b in buffers]
    values = var_vals or {}
    vals = tuple(resolve(variable, values) for variable in program.source.variables)
    global_size = tuple(resolve(size, values) for size in program.source.global_size)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        reported = program.program(
            *raw, global_size=global_size, local_size=program.source.local_size, vals=vals, wait=True
        )
        times.append(time.perf_counter() - start if reported is None else reported)
    return min(times)


def time_kernel(
    ast: UOp,
    device: str,
    flags: CodegenFlags | None = None,
    repeats: int = 3,
    buffers: list[Buffer] | None = None,
    var_vals: dict[str, int] | None = None,
) -> KernelTiming:
    """Compile kernel `ast` for `device` (flags: the environment's by default) and time it on `buffers`
    (default: fresh scratch buffers), its variables set to `var_vals`."""
    name = Device.canonicalize(device)
    program = compile_program(name, ast, CodegenFlags.from_environment() if flags is None else flags)
    scratch = scratch_buffers(ast, name) if buffers is None else buffers
    return KernelTiming(program, time_program(program, scratch, repeats, var_vals))
