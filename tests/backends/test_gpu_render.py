"""The C-style GPU renderers without their GPUs: OpenCL C, CUDA, HIP and Metal.

1. `NULL:<R>` renders every kernel of a set of tensor programs through the whole pipeline.
2. The source is checked by a compiler where this machine has one: clang's OpenCL, CUDA (device only, no CUDA
   install) and HIP (device only, no ROCm) front ends, and Metal as C++ against a small stub of metal_stdlib. Without
   clang these checks skip, naming clang.
3. The semantics: the same linear program (same opts, LOCAL included) runs on the PYTHON emulator and matches numpy,
   and each renderer's grid mapping is checked on it structurally.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.codegen.opt import Opt, OptOps
from tg.codegen.pipeline import CodegenFlags, lower_kernel, with_opts
from tg.codegen.render.emulate import load_function
from tg.codegen.render.gpu import CUDARenderer, HIPRenderer, MetalRenderer, OpenCLRenderer
from tg.codegen.render.ptx import PTXRenderer
from tg.codegen.render.python import PythonRenderer
from tg.codegen.render.wgsl import WGSLRenderer
from tg.hcq import Device
from tg.tensor import Tensor

from .kernels import row_sums, scaled_grid

RENDERERS = ["OPENCL", "CUDA", "HIP", "METAL", "WGSL"]
CLANG = next((c for c in ("clang", *(f"clang-{v}" for v in range(20, 13, -1))) if shutil.which(c)), None)
needs_clang = pytest.mark.skipif(CLANG is None, reason="missing clang: the syntax checks need clang")

METAL_STUB = """#pragma once
#define kernel
#define device
#define threadgroup
#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()
typedef unsigned char uchar; typedef unsigned short ushort; typedef unsigned int uint; typedef unsigned long ulong;
typedef _Float16 half;
struct uint3 { uint x, y, z; };
namespace metal {
template <class T> T trunc(T x) { return __builtin_trunc(x); }
template <class T> T abs(T x) { return __builtin_fabs(x); }
template <class T> T fma(T a, T b, T c) { return __builtin_fma(a, b, c); }
namespace precise {
inline float sqrt(float x) { return __builtin_sqrtf(x); }
inline float exp2(float x) { return __builtin_exp2f(x); }
inline float log2(float x) { return __builtin_log2f(x); }
inline float sin(float x) { return __builtin_sinf(x); }
inline float pow(float x, float y) { return __builtin_powf(x, y); }
}
template <class T, class F> T as_type(F x) { T t; __builtin_memcpy(&t, &x, sizeof(T)); return t; }
enum class mem_flags { mem_none, mem_device, mem_threadgroup };
void threadgroup_barrier(mem_flags flags);
}
"""
CUDA_FP16_STUB = "#pragma once\ntypedef __fp16 half;  // cuda_fp16.h gives a class with float arithmetic\n"
# what nvcc always includes (host_defines.h), spelled as clang's CUDA attributes; -nocudainc leaves it out
CUDA_QUALIFIERS_STUB = """#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include <__clang_cuda_builtin_vars.h>
"""


def programs(device: str) -> list:
    """Tensor programs that exercise elementwise ops, reductions, casts, gates (padding) and a matmul."""
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((8, 12)).astype(np.float32), device=device)
    b = Tensor(rng.standard_normal((12, 5)).astype(np.float32), device=device)
    i = Tensor(np.arange(24, dtype=np.int32).reshape(4, 6), device=device)
    return [
        (a * 2 + 1).exp2().sqrt(),
        a.sum(axis=1),
        a.max(axis=0),
        a @ b,
        (i // 3 + i % 5) << 1,
        a.cast(dtypes.float16) * 2,
        a.pad(((1, 1), (2, 0))),
        (a > 0).where(a, -a),
        i.cast(dtypes.float32).log2(),
    ]


def group_reduction_sources() -> dict[str, str]:
    """A row sum with LOCAL and GROUP opts (local memory and barriers) in every GPU language."""
    linear = lower_kernel(
        with_opts(row_sums(8, 64), (Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 16))), CodegenFlags(has_local=True)
    )
    renderers = {"OPENCL": OpenCLRenderer(), "CUDA": CUDARenderer("sm_80"), "HIP": HIPRenderer("gfx1100")}
    return {name: r.render(linear).src for name, r in {**renderers, "METAL": MetalRenderer()}.items()}


def rendered_sources(renderer: str, capsys) -> list[str]:  # noqa: ANN001
    """The source of every kernel of `programs` on NULL:<renderer> (DEBUG=4 prints it when a kernel compiles)."""
    from tg.codegen.flags import Context
    from tg.hcq.engine.programs import clear_program_cache

    clear_program_cache()  # kernels compiled by an earlier test would not be printed again
    capsys.readouterr()
    with Context(DEBUG=4):
        for program in programs(f"NULL:{renderer}"):
            program.realize()
    out = capsys.readouterr().out
    # DEBUG=4 prints "NAME: opts [...]", the kernel's source, then (DEBUG>=2) the "***" launch line
    pattern = re.compile(r"^\w+: opts \[.*?\]\n(.*?)(?=^\*\*\* |^\w+: opts |\Z)", re.MULTILINE | re.DOTALL)
    return [match.group(1).strip() + "\n" for match in pattern.finditer(out)]


@pytest.mark.parametrize("renderer", RENDERERS)
def test_null_renders_every_kernel(renderer: str, capsys) -> None:  # noqa: ANN001
    sources = rendered_sources(renderer, capsys)
    assert len(sources) >= 8  # some programs fuse into one kernel
    device = Device[f"NULL:{renderer}"]
    assert type(device.renderer).__name__.upper().startswith(renderer[:4])
    assert all(source.count("{") == source.count("}") for source in sources)


def clang_check(arguments: list[str], source: str, tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"kernel{suffix}"
    path.write_text(source)
    result = subprocess.run([CLANG, *arguments, str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{result.stderr}\n--- source ---\n{source}"


CHECKS = {
    "OPENCL": (["-x", "cl", "-cl-std=CL1.2", "-fsyntax-only", "-Xclang", "-finclude-default-header"], ".cl"),
    "CUDA": (["-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80",
              "-fsyntax-only", "-Wno-unknown-cuda-version", "-I", "{stubs}", "-include", "{stubs}/cuda_qualifiers.h"],
             ".cu"),
    "HIP": (["-x", "hip", "--cuda-device-only", "-nogpuinc", "-nogpulib", "--offload-arch=gfx1100", "-fsyntax-only"],
            ".hip"),
    "METAL": (["-x", "c++", "-std=c++17", "-fsyntax-only", "-Wno-unknown-attributes", "-I", "{stubs}"], ".cpp"),
}  # fmt: skip


@needs_clang
@pytest.mark.parametrize("renderer", ["OPENCL", "CUDA", "HIP", "METAL"])
def test_rendered_source_compiles_with_clang(renderer: str, capsys, tmp_path) -> None:  # noqa: ANN001
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "metal_stdlib").write_text(METAL_STUB)
    (stubs / "cuda_fp16.h").write_text(CUDA_FP16_STUB)
    (stubs / "cuda_qualifiers.h").write_text(CUDA_QUALIFIERS_STUB)
    arguments, suffix = CHECKS[renderer]
    arguments = [a.format(stubs=stubs) for a in arguments]
    sources = [*rendered_sources(renderer, capsys), group_reduction_sources()[renderer]]
    for source in sources:
        clang_check(arguments, source, tmp_path, suffix)


def test_a_syntax_error_is_caught_by_the_check(tmp_path) -> None:  # noqa: ANN001
    """The clang check is not vacuous: a broken kernel fails it."""
    if CLANG is None:
        pytest.skip("missing clang: the syntax checks need clang")
    with pytest.raises(AssertionError):
        clang_check(CHECKS["OPENCL"][0], "__kernel void k(__global float* a) { a[0] = nope; }", tmp_path, ".cl")


@pytest.mark.parametrize("opts", [(), (Opt(OptOps.LOCAL, 1, 4),), (Opt(OptOps.LOCAL, 0, 3), Opt(OptOps.UPCAST, 1, 4))])
def test_same_linear_program_runs_on_the_emulator_and_maps_to_threads(opts) -> None:  # noqa: ANN001
    """The GPU renderers render exactly the linear program the PYTHON emulator runs here (has_local on)."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((12, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    linear = lower_kernel(with_opts(scaled_grid(12, 16), opts), CodegenFlags(has_local=True))
    emulated = PythonRenderer().render(linear)
    out = np.zeros(192, np.float32)
    load_function(emulated.src, emulated.name)(memoryview(out).cast("B"), memoryview(a).cast("B"),
                                               memoryview(b).cast("B"), 0)  # fmt: skip
    np.testing.assert_array_equal(out.reshape(12, 16), a * 3 + b)
    locals_used = any(o.op is OptOps.LOCAL for o in opts)
    for renderer, group, thread in (
        (OpenCLRenderer(), "get_group_id(", "get_local_id("),
        (CUDARenderer("sm_80"), "blockIdx.", "threadIdx."),
        (HIPRenderer("gfx1100"), "__builtin_amdgcn_workgroup_id_", "__builtin_amdgcn_workitem_id_"),
        (MetalRenderer(), "gid.", "lid."),
        (WGSLRenderer(), "gid.", "lid."),
        (PTXRenderer("sm_80"), "%ctaid.", "%tid."),
    ):
        kernel = renderer.render(linear)
        assert group in kernel.src and (thread in kernel.src) == locals_used, kernel.src
        threads = np.prod(kernel.global_size) * np.prod(kernel.local_size)
        assert threads * (4 if len(opts) == 2 else 1) == 192  # every output element has one thread (x UPCAST lanes)


def test_reduction_linear_program_matches_numpy_on_the_emulator() -> None:
    a = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    linear = lower_kernel(with_opts(row_sums(8, 32), (Opt(OptOps.LOCAL, 0, 4),)), CodegenFlags(has_local=True))
    emulated = PythonRenderer().render(linear)
    out = np.zeros(8, np.float32)
    load_function(emulated.src, emulated.name)(memoryview(out).cast("B"), memoryview(a).cast("B"), 0)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert "reqd_work_group_size(4, 1, 1)" in OpenCLRenderer().render(linear).src


def test_metal_refuses_doubles() -> None:
    with pytest.raises(NotImplementedError, match="double"):
        Tensor(np.ones(4), device="NULL:METAL").exp2().realize()


def test_wgsl_gates_loads_with_select_and_stores_bools_as_u32(capsys) -> None:  # noqa: ANN001
    """A padded read is a gated load: WGSL selects between the (safely read) value and the padding."""
    from tg.codegen.flags import Context

    a = Tensor(np.ones((3, 5), np.float32), device="NULL:WGSL")
    capsys.readouterr()
    with Context(DEBUG=4):
        a.pad(((1, 1), (0, 2))).contiguous().realize()
        (a > 0).realize()
    out = capsys.readouterr().out
    assert re.search(r"select\(0x0\.0p\+0f, data1\[\w+\], \w+\)", out), out
    assert "array<u32>" in out and "select(0u, 1u, " in out
    assert "@compute @workgroup_size(1, 1, 1)" in out


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int64, dtypes.float64])
def test_wgsl_names_the_dtypes_it_does_not_have(dtype) -> None:  # noqa: ANN001
    with pytest.raises(NotImplementedError, match="WGSL has no type"):
        Tensor(np.ones(4, np.float32), device="NULL:WGSL").cast(dtype).realize()


@pytest.mark.parametrize("name", ["C", "LLVM", "OPENCL", "CUDA", "PTX", "HIP", "METAL", "WGSL", "PYTHON"])
def test_every_registered_renderer_renders_on_null(name: str) -> None:
    from tg.codegen.render.registry import RENDERERS

    assert name in RENDERERS
    out = Tensor(np.arange(6, dtype=np.float32), device=f"NULL:{name}") * 2
    out.realize()  # renders (and, for C and LLVM, compiles) the kernel; NULL runs nothing
