"""The NULL device: renders and compiles like a real device, but never runs anything.

Use it to test renderers and compilers on a machine without the target (`DEV=NULL:HIP:gfx950`). Buffers
have no memory: copyin is accepted and dropped, and copyout raises unless `NULL_ALLOW_COPYOUT=1` (then it
returns zeros, which mean nothing). Programs return a fixed 1 ms when asked to wait.
"""

from __future__ import annotations

from typing import Any

from tg.codegen.compiler import Compiler
from tg.codegen.render.c import C_RENDERER_NAMES
from tg.codegen.render.registry import check_renderer, make_renderer
from tg.hcq.allocator import Allocator, BufferSpec
from tg.hcq.device import Compiled, DeviceSpec
from tg.hcq.flags import NULL_ALLOW_COPYOUT
from tg.hcq.host import cache_sizes, host_c_compiler
from tg.hcq.memory import HCQBuffer
from tg.hcq.program import Program, ProgramCall

NULL_PROGRAM_SECONDS = 1e-3


class NullAllocator(Allocator):
    def _alloc(self, size: int, options: BufferSpec) -> HCQBuffer:
        return HCQBuffer(0, size, owner=self.device)

    def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
        pass

    def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
        if not NULL_ALLOW_COPYOUT:
            raise RuntimeError("no copyout on NULL: it computes nothing; set NULL_ALLOW_COPYOUT=1 to read zeros")
        dest[:] = bytes(len(dest))

    def _transfer(self, dest: HCQBuffer, src: HCQBuffer, size: int, src_dev: Any, dest_dev: Any) -> None:
        pass


class NullProgram(Program):
    """Loads nothing and runs nothing; a call with wait=True reports a fixed time."""

    def __init__(self, dev: Any, name: str, lib: bytes) -> None:
        super().__init__(dev, name)
        self.lib = lib

    def run(self, bufs: tuple[Any, ...], call: ProgramCall) -> float | None:
        return NULL_PROGRAM_SECONDS if call.wait else None


class SourceOnlyCompiler(Compiler):
    """For renderers whose compiler this machine does not have (CUDA, HIP, Metal, WGSL, PTX): the binary is the
    source itself, so NULL still renders every kernel through the whole pipeline."""

    def identity(self) -> str:
        return "source-only"

    def compile_uncached(self, source: str) -> bytes:
        return source.encode()


def null_compiler(renderer_name: str, arch: str) -> Compiler:
    """The compiler NULL uses for a renderer: the real one where it runs on this machine (C, LLVM, AMD, and PTX where
    NVIDIA's ptxas is on PATH)."""
    if renderer_name in C_RENDERER_NAMES:
        return host_c_compiler()
    if renderer_name == "LLVM":
        from tg.codegen.compiler.llvm import LLVMCompiler

        return LLVMCompiler()
    if renderer_name == "AMD":  # llvmlite's AMDGPU target: a real code object
        from tg.codegen.compiler.amd import AMDCompiler

        return AMDCompiler(check_renderer("AMD", arch))
    if renderer_name == "PTX":
        from tg.codegen.compiler.ptx import PTXCompiler, find_ptxas

        if find_ptxas() is not None:
            return PTXCompiler(check_renderer("PTX", arch))
    return SourceOnlyCompiler()


class NullDevice(Compiled):
    """`NULL`, `NULL:<RENDERER>[:ARCH]`: any renderer of tg.codegen.render.registry, compiled where possible."""

    def __init__(self, spec: DeviceSpec) -> None:
        allocator = NullAllocator()
        super().__init__(spec, allocator, null_compiler(spec.renderer, spec.arch), NullProgram)
        allocator.device = self
        # compile-only: the layout stage lays kernels out as for the host's caches, as it does for the CPU device
        self.renderer = make_renderer(spec.renderer or "C", spec.arch, machine=cache_sizes())
