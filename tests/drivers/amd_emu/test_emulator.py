"""The RDNA3 emulator runs code objects LLVM compiles from the IR kernels in kernels.py; results equal numpy."""

import numpy as np
import pytest

from tg.drivers.amd.rdna3 import RDNA3Emulator

from . import kernels
from .harness import run_kernel

RNG = np.random.default_rng(31)


def test_float_elementwise_with_bounds_check() -> None:
    n = 100  # 2 workgroups of 64: the last 28 lanes fail the bounds check (exec mask) and must not store
    a = RNG.standard_normal(128).astype(np.float32) * 4
    b = RNG.standard_normal(128).astype(np.float32)
    out = np.full(128, -7.0, dtype=np.float32)
    run = run_kernel(kernels.FLOAT_ELEMENTWISE, [out, a, b], ints=(n,), grid=(2, 1, 1), local=(64, 1, 1))
    x, y = a[:n], b[:n]
    mx = np.fmax(x * y - np.float32(0.75), y)
    r = -np.fmin(mx, np.abs(x)) + np.floor(x)
    expected = (r.astype(np.float64) * x + 3.5).astype(np.float32)  # fma: one rounding
    got = run.read(0, out)
    np.testing.assert_array_equal(got[:n], expected)
    np.testing.assert_array_equal(got[n:], np.float32(-7.0))


def test_int_elementwise_division_and_shifts() -> None:
    a = RNG.integers(-(2**31), 2**31 - 1, 64, dtype=np.int64).astype(np.int32)
    b = RNG.integers(-1000, 1000, 64).astype(np.int32)
    b[b == 0] = 3
    out = np.zeros(64, dtype=np.int32)
    run = run_kernel(kernels.INT_ELEMENTWISE, [out, a, b], local=(64, 1, 1), name="int_elementwise")
    x, y = a.astype(np.int64), b.astype(np.int64)
    wrap = lambda v: ((v + 2**31) % 2**32 - 2**31)  # noqa: E731
    s = wrap(x * 7 + y)
    o1 = (s ^ (x >> 3)) | ((y & 0xFFFFFFFF) >> 5)
    d = np.trunc(x / y).astype(np.int64)  # C division truncates toward zero
    r = x - np.trunc(x / 13).astype(np.int64) * 13
    ud = (y & 0xFFFFFFFF) // 10
    t3 = wrap(wrap(wrap(o1 + d) * r) - ud)
    np.testing.assert_array_equal(run.read(0, out), np.maximum(t3, x).astype(np.int32))


def test_divergent_loop_and_branches() -> None:
    a = RNG.standard_normal(96).astype(np.float32)
    out = np.zeros(96, dtype=np.float32)
    run = run_kernel(kernels.DIVERGENT_LOOP, [out, a], grid=(1, 1, 1), local=(96, 1, 1), name="divergent_loop")
    expected = np.zeros(96, dtype=np.float32)
    for i in range(96):
        acc = np.float32(0)
        for k in range(i % 7):
            acc = np.float32(acc + a[i]) if i & 1 else np.float32(acc - np.float32(k))
        expected[i] = acc
    np.testing.assert_array_equal(run.read(0, out), expected)


def test_lds_reduction_with_barriers_across_four_waves() -> None:
    groups = 3
    a = RNG.integers(-50, 50, 128 * groups).astype(np.float32)  # integers: the sum is exact in any order
    out = np.zeros(groups, dtype=np.float32)
    run = run_kernel(kernels.LDS_REDUCE, [out, a], grid=(groups, 1, 1), local=(128, 1, 1), name="lds_reduce")
    np.testing.assert_array_equal(run.read(0, out), a.reshape(groups, 128).sum(axis=1))


def test_lds_reduction_of_floats_follows_the_tree_order() -> None:
    a = RNG.standard_normal(128).astype(np.float32)
    out = np.zeros(1, dtype=np.float32)
    run = run_kernel(kernels.LDS_REDUCE, [out, a], local=(128, 1, 1), name="lds_reduce")
    tree = a.copy()
    stride = 64
    while stride:
        tree[:stride] = tree[:stride] + tree[stride : 2 * stride]
        stride //= 2
    np.testing.assert_array_equal(run.read(0, out), tree[:1])


def test_int64_address_math() -> None:
    stride = 3
    a = RNG.integers(-(2**62), 2**62, 64 * stride, dtype=np.int64)
    b = RNG.integers(-(2**40), 2**40, 64, dtype=np.int64)
    out = np.zeros(64, dtype=np.int64)
    run = run_kernel(kernels.INT64_MATH, [out, a, b], ints=(stride,), local=(64, 1, 1), name="int64_math")
    x = a[::stride]
    with np.errstate(over="ignore"):
        m = x * b
        u = (m + (x >> 7)) ^ (b << 13)
        expected = np.where(x < b, u, m) - 1234567890123
    np.testing.assert_array_equal(run.read(0, out), expected)


def test_select_and_conversions() -> None:
    a = (RNG.standard_normal(64) * 300).astype(np.float32)
    b = RNG.integers(-500, 500, 64).astype(np.int32)
    b[:4] = [-1, -(2**31), 2**31 - 1, 255]  # uitofp of negatives, extremes
    outf = np.zeros(64, dtype=np.float32)
    outi = np.zeros(64, dtype=np.int32)
    run = run_kernel(kernels.SELECT_CONVERT, [outf, outi, a, b], local=(64, 1, 1), name="select_convert")
    xi = np.trunc(a).astype(np.int32)
    yf, yu = b.astype(np.float32), b.view(np.uint32).astype(np.float32)
    sel = np.where(a > yf, a, yu)
    with np.errstate(over="ignore"):  # out of half range: inf
        hf = sel.astype(np.float16).astype(np.float32)
    back = (a.astype(np.float64) * 1.000000001 + 0.25).astype(np.float32)
    expected_f = (hf + back) + (b & 255).astype(np.float32)
    np.testing.assert_array_equal(run.read(0, outf), expected_f)
    np.testing.assert_array_equal(run.read(1, outi), np.minimum(xi, b))


def test_transcendentals_and_division() -> None:
    a = RNG.uniform(-4, 4, 64).astype(np.float32)
    out = np.zeros(64, dtype=np.float32)
    run = run_kernel(
        kernels.TRANSCENDENTAL, [out, np.abs(a) + np.float32(0.01)], local=(64, 1, 1), name="transcendental"
    )
    x = (np.abs(a) + 0.01).astype(np.float64)
    e = np.exp2(x)
    expected = np.log2(e) + np.sin(x) + np.sqrt(e) / e + 1 / np.sqrt(x)
    # v_sin_f32 takes revolutions: LLVM's afn lowering multiplies by 1/(2 pi) in f32 first (a few 1e-6 absolute)
    np.testing.assert_allclose(run.read(0, out), expected, rtol=2e-6, atol=1e-5)


def test_half_precision_true16_and_d16_loads() -> None:
    # LLVM's gfx11 true16 code: v_mul_f16 v0.h, v1.l, v1.h (both halves of one VGPR), global_load_d16_i8
    a = RNG.standard_normal(65).astype(np.float16)
    b = RNG.integers(-100, 100, 64).astype(np.int8)
    out = np.zeros(64, dtype=np.float16)
    run = run_kernel(kernels.HALVES, [out, a, b], local=(64, 1, 1), name="halves")
    expected = (a[:64] * a[1:] + b.astype(np.float16)) * np.float16(0.5)
    np.testing.assert_array_equal(run.read(0, out), expected)


def test_private_array_in_scratch() -> None:
    # a dynamically indexed private array: LLVM puts it in scratch (scratch_store/scratch_load), per lane
    a = RNG.integers(0, 16, 64).astype(np.int32)
    out = np.zeros(64, dtype=np.int32)
    run = run_kernel(kernels.PRIVATE_ARRAY, [out, a], local=(64, 1, 1), name="private_array")
    np.testing.assert_array_equal(run.read(0, out), a * np.arange(64, dtype=np.int32))


def test_decoded_instructions_are_cached_across_waves_and_dispatches() -> None:
    emulator = RDNA3Emulator()
    a = np.ones(128, dtype=np.float32)
    out = np.zeros(1, dtype=np.float32)
    run_kernel(kernels.LDS_REDUCE, [out, a], local=(128, 1, 1), name="lds_reduce", emulator=emulator)
    compiled = len(emulator.compiler.cache)
    executed = emulator.instructions_executed
    run = run_kernel(kernels.LDS_REDUCE, [out, a], local=(128, 1, 1), name="lds_reduce", emulator=emulator)
    assert len(emulator.compiler.cache) == compiled  # the second dispatch decoded nothing new
    assert emulator.instructions_executed == 2 * executed
    assert run.read(0, out)[0] == 128


@pytest.mark.parametrize("local", [(8, 4, 2), (5, 3, 1)])
def test_workitem_ids_are_packed_in_v0(local: tuple[int, int, int]) -> None:
    ir = (
        kernels.PRELUDE
        + """
declare i32 @llvm.amdgcn.workitem.id.y()
declare i32 @llvm.amdgcn.workitem.id.z()
declare i32 @llvm.amdgcn.workgroup.id.y()
define amdgpu_kernel void @ids(ptr addrspace(1) %out) #0 {
  %x = call i32 @llvm.amdgcn.workitem.id.x()
  %y = call i32 @llvm.amdgcn.workitem.id.y()
  %z = call i32 @llvm.amdgcn.workitem.id.z()
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %lx = mul i32 %z, LY
  %ly = add i32 %lx, %y
  %lz = mul i32 %ly, LX
  %flat = add i32 %lz, %x
  %g = mul i32 %gy, 2
  %g2 = add i32 %g, %gx
  %gbase = mul i32 %g2, N
  %slot = add i32 %gbase, %flat
  %v1 = shl i32 %g2, 16
  %v2 = shl i32 %z, 8
  %v3 = shl i32 %y, 4
  %v = or i32 %v1, %v2
  %vv = or i32 %v, %v3
  %val = or i32 %vv, %x
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %slot
  store i32 %val, ptr addrspace(1) %p
  ret void
}
"""
    )
    lx, ly, lz = local
    n = lx * ly * lz
    ir = (
        ir.replace("LY", str(ly))
        .replace("LX", str(lx))
        .replace("N", str(n))
        .replace("%gbase = mul i32 %g2, " + str(n), f"%gbase = mul i32 %g2, {n}")
    )
    out = np.full(n * 4, -1, dtype=np.int32)
    run = run_kernel(ir, [out], grid=(2, 2, 1), local=local, name="ids")
    expected = [
        g << 16 | z << 8 | y << 4 | x for g in range(4) for z in range(lz) for y in range(ly) for x in range(lx)
    ]
    np.testing.assert_array_equal(run.read(0, out), np.array(expected, dtype=np.int32))
