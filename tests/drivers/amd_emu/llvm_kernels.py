"""Compile small LLVM IR kernels for gfx1100 (wave32) with llvmlite's AMDGPU target, for the loader and emulator
tests. The IR is written in the tests; this only wraps it in a module and runs LLVM's code generator."""

from __future__ import annotations

import functools

import llvmlite.binding as llvm

TRIPLE = "amdgcn-amd-amdhsa"
# The attributes that drop LLVM's default dispatch/queue/implicit-arg user SGPRs, as the tg renderer does.
NO_IMPLICIT = (
    '"amdgpu-no-dispatch-ptr" "amdgpu-no-queue-ptr" "amdgpu-no-dispatch-id" "amdgpu-no-implicitarg-ptr" '
    '"amdgpu-no-hostcall-ptr" "amdgpu-no-heap-ptr" "amdgpu-no-multigrid-sync-arg" "amdgpu-no-default-queue" '
    '"amdgpu-no-completion-action" "amdgpu-no-lds-kernel-id"'
)


@functools.cache
def _target_machine(opt: int) -> llvm.TargetMachine:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu="gfx1100", features="+wavefrontsize32", opt=opt, reloc="pic")


def module_text(body: str, max_workgroup: int = 256, implicit: bool = False) -> str:
    attrs = f'"amdgpu-flat-work-group-size"="1,{max_workgroup}"' + ("" if implicit else " " + NO_IMPLICIT)
    return f'target triple = "{TRIPLE}"\n{body}\nattributes #0 = {{ {attrs} }}\n'


def compile_ir(body: str, *, max_workgroup: int = 256, implicit: bool = False, opt: int = 2) -> bytes:
    """The ELF code object LLVM emits for kernels in `body` (functions marked `#0` get the kernel attributes)."""
    module = llvm.parse_assembly(module_text(body, max_workgroup, implicit))
    module.verify()
    return bytes(_target_machine(opt).emit_object(module))


def assembly(body: str, *, max_workgroup: int = 256, implicit: bool = False, opt: int = 2) -> str:
    module = llvm.parse_assembly(module_text(body, max_workgroup, implicit))
    return str(_target_machine(opt).emit_assembly(module))
