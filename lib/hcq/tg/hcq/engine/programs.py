"""Compiled programs: a kernel AST turned into a loaded program for one device, kept in a bounded LRU cache.

    get_program(device, ast) -> CompiledProgram    source from tg.codegen.pipeline, binary from the device's compiler

The cache is keyed by (device, kernel AST, codegen flags) and holds at most PROGRAM_CACHE_SIZE programs; the
least recently used one is dropped first, and with it the last reference to its kernel AST (UOps are hash-consed
weakly), so a process that keeps making new kernels (changing shapes in a server or a training loop) stays flat.
Binaries are also cached on disk by source (tg.codegen.compiler.cache), so an evicted kernel recompiles cheaply.

DEBUG=3 prints the opts of each kernel when it is compiled; DEBUG=4 also prints its source, and its machine code
where the compiler gives it as text (the AMD compiler's assembly).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tg.codegen.capture import capture_enabled, record_compile
from tg.codegen.flags import BEAM, DEBUG
from tg.codegen.pipeline import CodegenFlags, ProgramSource, kernel_to_program, with_opts
from tg.codegen.render.base import Renderer
from tg.codegen.serial import write_file
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.ops import Ops, UOp
from tg.hcq.device import Device
from tg.hcq.engine.capture import capturing_one_call, is_capturing
from tg.hcq.flags import JITBEAM, PROGRAM_CACHE_SIZE, TG_DUMP_KERNELS


@dataclass(frozen=True)
class CompiledProgram:
    """A loaded program and the source it came from. Call `program(*raw_buffers, global_size=..., wait=...)`."""

    device: str
    source: ProgramSource
    program: Any

    @property
    def name(self) -> str:
        return self.source.name


@dataclass
class ProgramCacheStats:
    """How the in-memory program cache has answered since the last `clear_program_cache`."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0


CacheKey = tuple[str, UOp, CodegenFlags, int]  # device, kernel, flags, BEAM width
_cache: OrderedDict[CacheKey, CompiledProgram] = OrderedDict()
_lock = threading.Lock()
program_cache_stats = ProgramCacheStats()


def renderer_for(device: Any) -> Renderer:
    """The device's renderer, or a clear error for a device that cannot run kernels."""
    if device.renderer is None:
        wanted = ""
        if device.renderer_name:
            wanted = f" (it asks for the {device.renderer_name} renderer, which tg does not have)"
        raise RuntimeError(f"device {device.device} has no renderer, so it cannot run kernels{wanted}")
    return device.renderer


def compile_program(device_name: str, ast: UOp, flags: CodegenFlags) -> CompiledProgram:
    """Render, compile and load kernel `ast` for `device_name` (no in-memory cache)."""
    device = Device[device_name]
    source = kernel_to_program(ast, renderer_for(device), flags)
    if DEBUG >= 3:
        print(f"{source.name}: opts {list(source.applied_opts)}")
    if DEBUG >= 4:
        print(source.src)
        listing = device.compiler.assembly(source.src)
        if listing:
            print(listing)
    program = device.runtime(source.name, device.compiler.compile(source.src))
    return CompiledProgram(device.device, source, program)


def _compile_and_capture(device_name: str, ast: UOp, flags: CodegenFlags) -> CompiledProgram:
    """compile_program, recorded for process replay when CAPTURE_PROCESS_REPLAY=1 (only cache misses land here)."""
    compiled = compile_program(device_name, ast, flags)
    if capture_enabled():
        device = Device[device_name]
        record_compile(device_name, ast, renderer_for(device), flags, compiled.source, device.compiler.identity())
    return compiled


def _dump_kernel(device_name: str, ast: UOp, flags: CodegenFlags) -> None:
    """With TG_DUMP_KERNELS=DIR, write the kernel AST as DIR/<name>.pkl (a k.pkl for tg-beam, in
    tg.codegen.serial's format: ops by name, with the codegen version, commit, compiler and codegen flags)."""
    folder = TG_DUMP_KERNELS.value
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    name = getattr(ast.arg, "function_name", "kernel")
    path, number = os.path.join(folder, f"{name}.pkl"), 1
    while os.path.exists(path):
        number += 1
        path = os.path.join(folder, f"{name}_{number}.pkl")
    write_file(path, ast, device=device_name, compiler=Device[device_name].compiler.identity(), flags=repr(flags))


def beam_width() -> int:
    """The BEAM width that applies now: JITBEAM while a TinyJit captures (when set), else BEAM."""
    if is_capturing() and int(JITBEAM) > 0:
        return int(JITBEAM)
    return int(BEAM)


def _with_beam_opts(device_name: str, ast: UOp, flags: CodegenFlags, width: int) -> UOp:
    """The kernel set to the opts a beam of `width` found (cached), unless width is 0 or it names its opts."""
    from tg.hcq.engine.beam import search_opts  # beam times programs, so it imports this module

    info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
    if width <= 0 or info.opts_to_apply is not None or info.applied_opts:
        return ast
    if any(u.op is Ops.DEFINE_VAR for u in ast.toposort()):  # timing needs values for its variables: heuristics
        return ast
    return with_opts(ast, search_opts(ast, device_name, width, flags=flags).opts)


def get_program(device_name: str, ast: UOp, flags: CodegenFlags | None = None) -> CompiledProgram:
    """The program for kernel `ast` on `device_name` (a canonical name, as `Device.canonicalize` gives), compiled on
    first use. `flags`: the environment's by default, one call per kernel inside a capture that asks for it."""
    flags = CodegenFlags.from_environment(one_call=capturing_one_call()) if flags is None else flags
    width = beam_width()
    key = (device_name, ast, flags, width)
    found = _cache.get(key)  # the hit path runs at every launch: no lock (one OrderedDict call is atomic)
    if found is not None:
        try:
            _cache.move_to_end(key)
        except KeyError:  # another thread evicted it just now; the program is still good
            pass
        program_cache_stats.hits += 1
        return found
    program_cache_stats.misses += 1
    _dump_kernel(device_name, ast, flags)
    found = _compile_and_capture(device_name, _with_beam_opts(device_name, ast, flags, width), flags)
    with _lock:
        _cache[key] = found
        _evict(int(PROGRAM_CACHE_SIZE))
    return found


def _evict(capacity: int) -> None:
    while len(_cache) > max(capacity, 0):
        _cache.popitem(last=False)
        program_cache_stats.evictions += 1


def program_cache_size() -> int:
    """How many compiled programs the in-memory cache holds now."""
    return len(_cache)


def clear_program_cache() -> None:
    """Drop every cached program and reset the statistics (benchmarks use it to time compiles)."""
    with _lock:
        _cache.clear()
        program_cache_stats.hits = program_cache_stats.misses = program_cache_stats.evictions = 0
