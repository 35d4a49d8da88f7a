"""float16 -> float32 casts under a C compiler that converts `_Float16` one element at a time (gcc 12): the C
renderer widens a float16 read from memory from its bits with integer ops (tg_half_bits_to_float), chosen by the
Target the CPU device builds from its compiler; under clang, which vectorizes the conversion, it stays a cast."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from tg.codegen import KernelInfo, UOp, dtypes
from tg.codegen.compiler.c import CCompiler, gcc_major_version
from tg.codegen.dtype import from_numpy
from tg.codegen.lower import lower
from tg.codegen.render.c import CRenderer
from tg.hcq import Buffer, Device
from tg.hcq.host import cpu_target

from .test_render import run_rendered

# every float16 bit pattern: zeros, subnormals, normals, infinities and NaNs of both signs
ALL_HALVES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def widening_kernel(n: int) -> UOp:
    """out[i] = float(a[i])."""
    out, a = UOp.param(0, dtypes.float32, n), UOp.param(1, dtypes.float16, n)
    i = UOp.range(n, 0)
    return UOp.sink(out.index(i).store(a.index(i).load().cast(dtypes.float32)), arg=KernelInfo("widen"))


def shifted_widening_kernel(n: int) -> UOp:
    """out[i] = float(a[i - 1]) for i >= 1, 0 for i = 0: a gated load (a padded read) widened."""
    out, a = UOp.param(0, dtypes.float32, n), UOp.param(1, dtypes.float16, n)
    i = UOp.range(n, 0)
    inside = UOp.const(0, dtypes.index) < i
    shifted = a.index(i - 1, inside).load(UOp.const(0.0, dtypes.float16))
    return UOp.sink(out.index(i).store(shifted.cast(dtypes.float32)), arg=KernelInfo("shifted_widen"))


def widening_and_copying_kernel(n: int) -> UOp:
    """out[i] = float(a[i]) and copy[i] = a[i]: the float16 load has a user besides the cast."""
    out, copy, a = (UOp.param(0, dtypes.float32, n), UOp.param(1, dtypes.float16, n), UOp.param(2, dtypes.float16, n))
    i = UOp.range(n, 0)
    value = a.index(i).load()
    stores = [out.index(i).store(value.cast(dtypes.float32)), copy.index(i).store(value)]
    return UOp.sink(*stores, arg=KernelInfo("widen_and_copy"))


def gcc_target_renderer(scalar_half_conversion: bool) -> CRenderer:
    return CRenderer(dataclasses.replace(cpu_target(CRenderer, 1), scalar_half_conversion=scalar_half_conversion))


def assert_same_floats(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, except that a NaN may be any NaN (a hardware conversion may quiet a signalling one)."""
    assert got.dtype == np.float32
    nan = np.isnan(want)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all()


def test_the_integer_widening_compiled_by_gcc_is_exact_for_every_float16() -> None:
    """numpy's conversion is the oracle for all 65,536 patterns (subnormals, -0, inf and NaN included)."""
    renderer = gcc_target_renderer(scalar_half_conversion=True)
    n = ALL_HALVES.size
    src = renderer.render(lower(widening_kernel(n), renderer.target)).src
    # the element is read as bits; no _Float16 local is left in the loop (with AVX2 one kept gcc to 8-byte vectors)
    assert "tg_half_bits_to_float(" in src and "_Float16 v" not in src
    got = run_rendered(renderer, widening_kernel(n), np.zeros(n, np.float32), ALL_HALVES, compiler=CCompiler("gcc"))
    assert_same_floats(got, ALL_HALVES.astype(np.float32))


def test_a_gated_float16_read_widens_from_its_bits_and_keeps_the_alternative() -> None:
    renderer = gcc_target_renderer(scalar_half_conversion=True)
    n = ALL_HALVES.size
    got = run_rendered(
        renderer, shifted_widening_kernel(n), np.full(n, 7, np.float32), ALL_HALVES, compiler=CCompiler("gcc")
    )
    assert_same_floats(got, np.concatenate([[np.float32(0)], ALL_HALVES[:-1].astype(np.float32)]))


def test_a_float16_load_with_another_user_is_kept_beside_its_widening() -> None:
    renderer = gcc_target_renderer(scalar_half_conversion=True)
    n = ALL_HALVES.size
    ast = widening_and_copying_kernel(n)
    assert "_Float16 v" in renderer.render(lower(ast, renderer.target)).src
    dev = Device["CPU"]
    rendered = renderer.render(lower(ast, renderer.target))
    program = dev.runtime(rendered.name, CCompiler("gcc").compile(rendered.src))
    arrays = [np.zeros(n, np.float32), np.zeros(n, np.float16), ALL_HALVES]
    buffers = [Buffer("CPU", n, from_numpy(a.dtype)).ensure_allocated() for a in arrays]
    for buf, array in zip(buffers, arrays, strict=True):
        buf.copyin(array.tobytes())
    program(*(b.raw for b in buffers), global_size=rendered.global_size, wait=True)
    assert_same_floats(np.frombuffer(buffers[0].as_buffer(), np.float32).copy(), ALL_HALVES.astype(np.float32))
    np.testing.assert_array_equal(np.frombuffer(buffers[1].as_buffer(), np.uint16), ALL_HALVES.view(np.uint16))


def test_gcc_before_13_gets_the_integer_form_in_its_target_and_generated_c() -> None:
    gcc = CCompiler("gcc")
    scalar = gcc_major_version(gcc.cc) < 13
    assert gcc.vectorizes_half_conversion is not scalar
    renderer = CRenderer(cpu_target(CRenderer, 1, gcc))
    assert renderer.target.scalar_half_conversion is scalar
    src = renderer.render(lower(widening_kernel(64), renderer.target)).src
    assert ("tg_half_bits_to_float(" in src) is scalar


@pytest.mark.skipif(shutil.which("clang") is None and shutil.which("clang-15") is None, reason="clang not installed")
def test_clang_keeps_the_plain_cast() -> None:
    """clang converts _Float16 in vector instructions (vcvtph2ps), so its kernels keep the cast."""
    clang = CCompiler(shutil.which("clang") or shutil.which("clang-15"))
    assert clang.vectorizes_half_conversion
    renderer = CRenderer(cpu_target(CRenderer, 1, clang))
    assert not renderer.target.scalar_half_conversion
    src = renderer.render(lower(widening_kernel(64), renderer.target)).src
    assert "tg_half_bits_to_float(" not in src and "(float)" in src


def test_the_cpu_device_target_follows_its_compiler() -> None:
    dev = Device["CPU"]
    assert dev.renderer.target.scalar_half_conversion is not dev.compiler.vectorizes_half_conversion
