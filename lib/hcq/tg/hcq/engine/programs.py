"""Compiled programs: a kernel AST turned into a loaded program for one device, kept in a bounded LRU cache.

    get_program(device, ast) -> CompiledProgram    source from tg.codegen.pipeline, binary from the device's compiler
    to_program(ast, device) -> UOp                  the same as a PROGRAM node (a custom kernel may return one)

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
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tg.codegen.capture import capture_enabled, record_compile
from tg.codegen.flags import BEAM, DEBUG
from tg.codegen.pipeline import CodegenFlags, ProgramSource, kernel_to_program, with_opts
from tg.codegen.render.base import Renderer
from tg.codegen.serial import write_file
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.kernel_form import lowerable_kernel
from tg.codegen.uop.ops import Ops, UOp
from tg.hcq.device import Device
from tg.hcq.engine.capture import is_capturing
from tg.hcq.flags import JITBEAM, PROGRAM_CACHE_SIZE, TG_DUMP_KERNELS


@dataclass(frozen=True)
class CompiledProgram:
    """A loaded program and the source it came from. Call `program(*raw_buffers, global_size=..., wait=...)`."""

    device: str
    source: ProgramSource
    program: Any
    binary: bytes = b""  # what the device's compiler made of the source (empty where the maker did not keep it)

    @property
    def name(self) -> str:
        return self.source.name


@dataclass
class ProgramCacheStats:
    """How the in-memory program cache has answered since the last `clear_program_cache`."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    compiles: int = 0  # misses that rendered and compiled (the others loaded a program compiled for a like device)


CacheKey = tuple[str, UOp, CodegenFlags | None, int]  # device, kernel (or PROGRAM), flags, BEAM width
_cache: OrderedDict[CacheKey, CompiledProgram] = OrderedDict()
# the programs in the cache again, by what compiling them depended on instead of by device: a kernel wanted on another
# device of the same kind (the shards of a sharded tensor on CPU:0 and CPU:1) loads the binary compiled for the first
_by_kind: weakref.WeakValueDictionary[tuple, CompiledProgram] = weakref.WeakValueDictionary()
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
    binary = device.compiler.compile(source.src)
    return CompiledProgram(device.device, source, device.runtime(source.name, binary), binary)


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


def to_program(ast: UOp, device_name: str) -> UOp:
    """Kernel `ast` compiled for `device_name`, as a PROGRAM node: `PROGRAM(ast, SOURCE, BINARY)`, its arg the
    ProgramSource (name, launch size, variables). A custom kernel's fxn may return one: it runs as it is. `ast` may
    be written as a custom kernel's is (shaped placeholders, `.end`: tg.codegen.uop.kernel_form)."""
    ast = lowerable_kernel(ast)
    compiled = get_program(device_name, ast)
    source, binary = UOp(Ops.SOURCE, arg=compiled.source.src), UOp(Ops.BINARY, arg=compiled.binary)
    return UOp(Ops.PROGRAM, src=(ast, source, binary), arg=compiled.source)


def _loaded(device_name: str, source: ProgramSource, binary: bytes) -> CompiledProgram:
    """A compiled binary loaded on `device_name`, as it is (nothing rendered or compiled)."""
    device = Device[device_name]
    return CompiledProgram(device.device, source, device.runtime(source.name, binary), binary)


def get_program(device_name: str, ast: UOp, flags: CodegenFlags | None = None) -> CompiledProgram:
    """The program for kernel `ast` on `device_name` (a canonical name, as `Device.canonicalize` gives), compiled on
    first use; a PROGRAM node (`to_program`) is loaded as it is. `flags`: the environment's by default, compiled for
    replay inside a capture (CodegenFlags.replayed)."""
    if ast.op is Ops.PROGRAM:
        return _cached(device_name, ast, None, 0, lambda: _loaded(device_name, ast.arg, ast.src[2].arg))
    flags = CodegenFlags.from_environment(replayed=is_capturing()) if flags is None else flags
    width = beam_width()

    def compile_it() -> CompiledProgram:
        kind = (_device_kind(device_name), ast, flags, width)
        like = _by_kind.get(kind)
        if like is not None:  # compiled already for a device of the same kind: load that binary here
            return _loaded(device_name, like.source, like.binary)
        _dump_kernel(device_name, ast, flags)
        program_cache_stats.compiles += 1
        compiled = _compile_and_capture(device_name, _with_beam_opts(device_name, ast, flags, width), flags)
        _by_kind[kind] = compiled
        return compiled

    return _cached(device_name, ast, flags, width, compile_it)


def _device_kind(device_name: str) -> tuple:
    """What a program compiled for this device depends on: its class, renderer, Target and compiler. Two devices of
    one kind run each other's binaries."""
    device = Device[device_name]
    return type(device), type(device.renderer), device.target, device.compiler.identity()


def _cached(
    device_name: str, ast: UOp, flags: CodegenFlags | None, width: int, make: Callable[[], CompiledProgram]
) -> CompiledProgram:
    """The cached program for this key, else `make()`'s, cached."""
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
    found = make()
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
        _by_kind.clear()
        program_cache_stats.hits = program_cache_stats.misses = program_cache_stats.evictions = 0
        program_cache_stats.compiles = 0
