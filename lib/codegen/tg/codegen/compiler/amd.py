"""LLVM IR for AMDGPU -> an HSA code object (a relocatable ELF: the kernel in .text, its 64-byte kernel descriptor
NAME.kd in .rodata with one relocation for the code's offset, the HSA metadata note), in process with llvmlite's
AMDGPU target: no ROCm, no linker (the loader, tg.drivers.amd.code_object, lays out the sections itself).

The IR from tg.codegen.render.amd goes through LLVM's O2 pipeline for the target (which promotes the accumulators
to registers and infers which ids a kernel reads) and its code generator for `arch`, wave32. `assembly` gives the
same compile as assembly text with the kernel descriptor's directives, what `DEBUG=4` prints as the disassembly.
llvmlite is imported lazily and its global state is used under the CPU LLVM compiler's lock.
"""

from __future__ import annotations

import functools
from typing import Any

from tg.codegen.compiler.base import CompileError, Compiler
from tg.codegen.compiler.llvm import _llvm_lock
from tg.codegen.render.amd import AMD_ARCHS, AMD_TRIPLE, WAVE_FEATURES

OPT_LEVEL = 2


@functools.cache
def _amdgpu() -> Any:
    """llvmlite.binding with every target (AMDGPU among them) initialized, once."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm


@functools.cache
def amdgpu_target_machine(arch: str) -> Any:
    llvm = _amdgpu()
    target = llvm.Target.from_triple(AMD_TRIPLE)
    return target.create_target_machine(cpu=arch, features=WAVE_FEATURES, opt=OPT_LEVEL, reloc="pic")


class AMDCompiler(Compiler):
    """Compiles the AMD renderer's LLVM IR to code-object bytes for `arch` (gfx1100)."""

    def __init__(self, arch: str = "gfx1100") -> None:
        if arch not in AMD_ARCHS:
            raise ValueError(f"the AMD compiler does not know arch {arch!r}; known archs: {', '.join(AMD_ARCHS)}")
        self.arch = arch

    def identity(self) -> str:
        import llvmlite

        version = ".".join(map(str, _amdgpu().llvm_version_info))
        return f"llvmlite {llvmlite.__version__}|llvm {version}|{AMD_TRIPLE}|{self.arch}|{WAVE_FEATURES}|O{OPT_LEVEL}"

    def compile_uncached(self, source: str) -> bytes:
        with _llvm_lock:
            return self._machine().emit_object(self._module(source))

    def assembly(self, source: str) -> str:
        """The kernel's machine code as assembly text (with the `.amdhsa_kernel` descriptor directives)."""
        with _llvm_lock:
            return str(self._machine().emit_assembly(self._module(source)))

    def _machine(self) -> Any:
        return amdgpu_target_machine(self.arch)

    def _module(self, source: str) -> Any:
        """The parsed, verified and optimized module (call under the lock)."""
        llvm = _amdgpu()
        try:
            module = llvm.parse_assembly(source)
            module.verify()
        except RuntimeError as error:
            raise CompileError(str(error), source, "llvmlite parse_assembly (amdgcn)") from None
        machine = self._machine()
        module.triple = machine.triple
        module.data_layout = str(machine.target_data)
        tuning = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
        return module
