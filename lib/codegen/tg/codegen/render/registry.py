"""Every renderer tg has, by the name a device string uses (`CPU:LLVM`, `NULL:HIP:gfx1100`), with the archs it knows.

`make_renderer(name, arch)` builds one; renderer modules are imported on first use. A renderer with no arch list takes
no arch; one with a list takes any arch of it (the first is the default when the device string names none).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RendererEntry:
    target: str  # "module:Class"
    archs: tuple[str, ...] = ()  # known archs, default first; empty: the renderer takes no arch
    description: str = ""


CUDA_ARCHS = ("sm_80", "sm_70", "sm_75", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
AMD_ARCHS = ("gfx1100",)  # what tg.codegen.render.amd renders for (RDNA3, wave32)
HIP_ARCHS = ("gfx1100", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1101", "gfx1102", "gfx1200", "gfx1201")

RENDERERS: dict[str, RendererEntry] = {
    "C": RendererEntry("tg.codegen.render.c:CRenderer", description="C for the CPU (gcc or clang)"),
    "CLANG": RendererEntry("tg.codegen.render.c:CRenderer", description="the C renderer (tinygrad's name)"),
    "LLVM": RendererEntry("tg.codegen.render.llvmir:LLVMRenderer", description="LLVM IR, compiled by llvmlite"),
    "OPENCL": RendererEntry("tg.codegen.render.gpu:OpenCLRenderer", description="OpenCL C"),
    "CUDA": RendererEntry("tg.codegen.render.gpu:CUDARenderer", CUDA_ARCHS, "CUDA C"),
    "PTX": RendererEntry("tg.codegen.render.ptx:PTXRenderer", CUDA_ARCHS, "PTX assembly for NVIDIA GPUs"),
    "HIP": RendererEntry("tg.codegen.render.gpu:HIPRenderer", HIP_ARCHS, "HIP C++"),
    "AMD": RendererEntry("tg.codegen.render.amd:AMDRenderer", AMD_ARCHS, "LLVM IR for AMD RDNA3 (amdgcn), by llvmlite"),
    "METAL": RendererEntry("tg.codegen.render.gpu:MetalRenderer", description="Metal Shading Language"),
    "WGSL": RendererEntry("tg.codegen.render.wgsl:WGSLRenderer", description="WebGPU Shading Language"),
    "PYTHON": RendererEntry("tg.codegen.render.python:PythonRenderer", description="the exact Python emulator"),
}


class UnknownRendererError(ValueError):
    """A renderer name or arch that tg does not have; the message lists the known ones."""


def check_renderer(name: str, arch: str, allowed: tuple[str, ...] | None = None) -> str:
    """The arch to use for renderer `name` (its default when `arch` is empty); raises naming the known choices.

    `allowed` restricts the names (the renderers one device supports); None allows every registered one."""
    known = tuple(RENDERERS) if allowed is None else allowed
    if name not in known:
        raise UnknownRendererError(f"unknown renderer {name!r}; known renderers: {', '.join(known)}")
    entry = RENDERERS[name]
    if not arch:
        return entry.archs[0] if entry.archs else ""
    if not entry.archs:
        raise UnknownRendererError(f"renderer {name} takes no arch (got {arch!r})")
    if arch not in entry.archs:
        raise UnknownRendererError(f"unknown arch {arch!r} for {name}; known archs: {', '.join(entry.archs)}")
    return arch


def make_renderer(name: str, arch: str = "", machine: dict[str, Any] | None = None, **options: Any) -> Any:
    """An instance of renderer `name` for `arch` (checked against the known archs), its Target made of its declared
    capabilities and the Target fields in `machine` (tg.codegen.target)."""
    from tg.codegen.target import Target

    arch = check_renderer(name, arch)
    module_name, class_name = RENDERERS[name].target.split(":")
    renderer_class = getattr(importlib.import_module(module_name), class_name)
    target = Target.of(renderer_class, **(machine or {}))
    if RENDERERS[name].archs:
        return renderer_class(arch=arch, target=target, **options)
    return renderer_class(target=target, **options)
