"""Software float32 exp2 and log2 (tg.codegen.lower.transcendental): within 1 ulp of numpy's float64 result on
random and edge inputs over the whole float32 range, exact special values, the same bits on C, CPU:LLVM and the
PYTHON emulator, and a C kernel with no libm call that the compilers vectorize.

The whole range, every float32, is measured by `python -m tests.codegen.transcendental_ulps --stride 1`."""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest

from tg.codegen import Ops, dtypes
from tg.codegen.compiler.c import default_flags
from tg.codegen.lower.transcendental import decompose_transcendentals
from tg.codegen.pipeline import CodegenFlags, kernel_to_program
from tg.codegen.render.c import CRenderer
from tg.codegen.render.gpu import CUDARenderer
from tg.hcq.host import wide_vectors

from .transcendental_ulps import REFERENCE, run_unary, ulps, unary_kernel

EXP2_EDGES = [
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, 1e-30, -1e-30, 2.0**-149, -(2.0**-149), 3.3, -7.77, 10.0, 88.7,
    126.0, 127.0, 127.99999, 128.0, 128.00002, 129.0, 130.0, 200.0, 1e30, 3.4e38,
    -125.5, -126.0, -126.5, -127.0, -140.3, -148.5, -149.0, -149.4, -149.5, -149.6, -150.0, -150.01, -151.0, -152.0,
    -1000.0, -3.4e38, math.inf, -math.inf, math.nan,
]  # fmt: skip


def float32_bits(rng: np.random.Generator, low: int, high: int, count: int) -> np.ndarray:
    """Floats with uniformly random bit patterns in [low, high): every binade, subnormals included, equally often."""
    return rng.integers(low, high, count, dtype=np.uint64).astype(np.uint32).view(np.float32)


def exp2_inputs(count: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.concatenate([
        np.array(EXP2_EDGES, np.float32),
        rng.uniform(-155, 135, count).astype(np.float32),
        float32_bits(rng, 0, 0x43030000, count),  # +0 .. 131 at every magnitude
        float32_bits(rng, 0x80000000, 0xC3190000, count),  # -0 .. -153
    ])  # fmt: skip


def log2_inputs(count: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    powers = np.exp2(np.arange(-149, 128, dtype=np.float64)).astype(np.float32)
    edges = [np.finfo(np.float32).max, np.finfo(np.float32).tiny, 2.0**-149, 1.0, math.sqrt(2), math.sqrt(0.5)]
    return np.concatenate([
        np.array(edges, np.float32), powers,
        np.nextafter(powers, np.float32(0)), np.nextafter(powers, np.float32(np.inf)),
        rng.uniform(0.5, 2, count).astype(np.float32),
        float32_bits(rng, 1, 0x7F800000, count),  # every positive finite float, subnormals too
    ])  # fmt: skip


@pytest.mark.parametrize(("op", "inputs"), [(Ops.EXP2, exp2_inputs), (Ops.LOG2, log2_inputs)], ids=["exp2", "log2"])
def test_within_one_ulp_of_the_exact_result(op: Ops, inputs) -> None:  # noqa: ANN001 - a function of a count
    x = inputs(200_000)
    errors = ulps(run_unary(op, x), REFERENCE[op](x.astype(np.float64)))
    worst = int(np.argmax(errors))
    assert errors[worst] <= 1.0, (x[worst], errors[worst])


def test_exp2_special_values() -> None:
    x = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 128.0, 1000.0, -150.0, -149.0, -151.0, 10.0], np.float32)
    got = run_unary(Ops.EXP2, x)
    expected = np.array([1.0, 1.0, math.inf, 0.0, math.nan, math.inf, math.inf, 0.0, 2.0**-149, 0.0, 1024.0])
    np.testing.assert_array_equal(got, expected.astype(np.float32))
    assert not np.signbit(got[3]) and not np.signbit(got[7])  # underflow is +0


def test_log2_special_values() -> None:
    x = np.array([0.0, -0.0, -1.0, -math.inf, math.inf, math.nan, 1.0, 2.0**-149, 1024.0, 2.0**127], np.float32)
    got = run_unary(Ops.LOG2, x)
    expected = [-math.inf, -math.inf, math.nan, math.nan, math.inf, math.nan, 0.0, -149.0, 10.0, 127.0]
    np.testing.assert_array_equal(got, np.array(expected, np.float32))
    assert not np.signbit(got[6])  # log2(1) is +0


def test_exact_powers_of_two_have_exact_logarithms() -> None:
    k = np.arange(-149, 128)
    x = np.exp2(k.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(run_unary(Ops.LOG2, x), k.astype(np.float32))
    np.testing.assert_array_equal(run_unary(Ops.EXP2, k.astype(np.float32)), x)


@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2])
def test_c_llvm_and_python_compute_the_same_bits(op: Ops) -> None:
    """Issue 12 item 3 for the transcendentals: every backend runs the same float32 ops, each exactly rounded."""
    x = (exp2_inputs if op is Ops.EXP2 else log2_inputs)(300)
    if op is Ops.LOG2:
        x = np.concatenate([x, -x[:20], np.array([0.0, -0.0, math.inf, -math.inf, math.nan], np.float32)])
    c = run_unary(op, x, "CPU")
    for device in ("PYTHON", "CPU:LLVM"):
        np.testing.assert_array_equal(run_unary(op, x, device).view(np.uint32), c.view(np.uint32), err_msg=device)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2])
def test_16_bit_floats_compute_in_float32_and_round_once(op: Ops, dtype) -> None:  # noqa: ANN001
    """Within an ulp of the 16-bit format, and the same bits on C and PYTHON."""
    # exp2 up to the largest float16 and down to its subnormals, log2 over its whole positive range
    if op is Ops.EXP2:
        x32 = np.linspace(-24, 15.9, 801, dtype=np.float32)
    else:
        x32 = np.geomspace(1e-7, 6e4, 801, dtype=np.float32)
    if dtype is dtypes.float16:
        x, ulp_bits = x32.astype(np.float16), 10
        as_float = x.astype(np.float64)
    else:  # bfloat16 as its 16 bits (numpy has no bfloat16): the top half of the float32, rounded to nearest
        bits = x32.view(np.uint32)
        x = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        as_float, ulp_bits = (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64), 7
    got = run_unary(op, x, dtype=dtype)
    values = got.astype(np.float64) if dtype is dtypes.float16 else (got.astype(np.uint32) << 16).view(np.float32)
    exact = REFERENCE[op](as_float)
    smallest_exponent = -14 if dtype is dtypes.float16 else -126  # below it the spacing stays that of the subnormals
    spacing = np.exp2(np.maximum(np.frexp(exact)[1] - 1.0, smallest_exponent) - ulp_bits)
    assert np.all(np.abs(values - exact) <= spacing), np.max(np.abs(values - exact) / spacing)
    np.testing.assert_array_equal(run_unary(op, x, "PYTHON", dtype=dtype).view(np.uint16), got.view(np.uint16))


def c_source(op: Ops, dtype=dtypes.float32, transcendental: int = 1) -> str:  # noqa: ANN001
    flags = CodegenFlags(transcendental=transcendental)
    return kernel_to_program(unary_kernel(op, 4096, dtype), CRenderer(), flags).src


def test_the_c_kernel_calls_libm_only_for_float64_or_when_asked() -> None:
    for op in (Ops.EXP2, Ops.LOG2):
        name = f"__builtin_{op.name.lower()}("
        assert name not in c_source(op) and "__builtin_fmaf(" in c_source(op)
        assert name in c_source(op, dtypes.float64)  # float64 keeps libm
        assert name in c_source(op, transcendental=0)  # TRANSCENDENTAL=0: the libm path


def test_gpu_renderers_keep_their_own_functions_unless_forced() -> None:
    ast = unary_kernel(Ops.EXP2, 4096)
    assert "__builtin_exp2f(" in kernel_to_program(ast, CUDARenderer("sm_80"), CodegenFlags()).src
    forced = kernel_to_program(ast, CUDARenderer("sm_80"), CodegenFlags(transcendental=2)).src
    assert "__builtin_exp2f(" not in forced and "__builtin_fmaf(" in forced


def test_decomposition_leaves_float64_alone() -> None:
    ast = unary_kernel(Ops.LOG2, 16, dtypes.float64)
    assert decompose_transcendentals(ast) is ast


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2])
def test_the_c_compiler_vectorizes_the_kernel(op: Ops, compiler: str) -> None:
    """The reason for the decomposition (issue 23): libm's scalar call kept softmax's loops scalar."""
    found = shutil.which(compiler) or (shutil.which("clang-19") if compiler == "clang" else None)
    if found is None:
        pytest.skip(f"missing {compiler}: not installed (the other compiler's test runs)")
    with open("/proc/cpuinfo") as f:
        if "avx2" not in f.read():
            pytest.skip("needs an x86 CPU with AVX2 (the check reads x86 vector instructions)")
    flags = [f for f in default_flags(wide_vectors(), found) if f not in ("-shared", "-fPIC")]
    assembly = subprocess.run(
        [found, *flags, "-S", "-x", "c", "-", "-o", "-"], input=c_source(op), capture_output=True, text=True, check=True
    ).stdout
    instructions = [line.split()[0] for line in assembly.splitlines() if line.startswith("\t")]
    assert "call" not in instructions
    packed_fma = [line for line in assembly.splitlines() if line.split()[:1] and line.split()[0].startswith("vfmadd")]
    wide = [line for line in packed_fma if ("%ymm" in line or "%zmm" in line) and line.split()[0].endswith("ps")]
    assert wide, assembly[-3000:]


@pytest.mark.parametrize("level", [0, 1, 2])
def test_the_transcendental_flag_reaches_the_cpu_kernel(level: int) -> None:
    """README: TRANSCENDENTAL=0 brings back libm's double-precision call (correctly rounded here), 1 and 2 use the
    float32 ops on the CPU."""
    from tg.codegen.flags import Context

    with Context(TRANSCENDENTAL=level):
        flags = CodegenFlags.from_environment()
    assert flags.transcendental == level
    x = np.linspace(-30, 30, 1001, dtype=np.float32)
    got = run_unary(Ops.EXP2, x, flags=flags)
    exact = np.exp2(x.astype(np.float64))
    if level == 0:
        np.testing.assert_array_equal(got, exact.astype(np.float32))
    else:
        assert ulps(got, exact).max() <= 1.0
    assert ("__builtin_exp2(" in c_source(Ops.EXP2, transcendental=level)) == (level == 0)


@pytest.mark.parametrize("op", ["exp", "log", "sigmoid", "softmax", "tanh", "gelu"])
def test_gcc_vectorizes_the_kernels_of_exp_log_and_softmax(op: str) -> None:
    """Every kernel of these ops that computes an exp2 or log2 is vectorized by gcc 12 (issue 23: the libm call
    left softmax's loops scalar; the max kernel is not checked here). Regression for tanh and gelu: their clamp
    was `minimum`, whose tie select made gcc thread jumps and leave the loop scalar, 5x slower (gcc's
    -fno-thread-jumps would also vectorize it, but gcc 12.2 miscompiles a padding kernel with that flag)."""
    from tg.codegen.schedule.schedule import KernelCall, create_schedule
    from tg.tensor import Tensor

    found = shutil.which("gcc")
    if found is None:
        pytest.skip("missing gcc: not installed")
    x = Tensor(np.ones((64, 256), np.float32), device="CPU")
    out = getattr(x, op)()
    asts = [item.ast for item in create_schedule((out.uop,)).items if isinstance(item, KernelCall)]
    flags = [f for f in default_flags(wide_vectors(), found) if f not in ("-shared", "-fPIC")]
    sources = [kernel_to_program(ast, CRenderer(), CodegenFlags()).src for ast in asts]
    transcendental = [src for src in sources if "0x1.8000000000000p+23f" in src]  # ROUNDING_SHIFT: exp2 or log2
    assert transcendental
    for source in transcendental:
        report = subprocess.run(
            [found, *flags, "-fopt-info-vec-optimized", "-S", "-x", "c", "-", "-o", "/dev/null"],
            input=source, capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
        assert "vectorized" in report, source


def test_exp2_of_very_negative_inputs_takes_no_underflow_path() -> None:
    """Regression: exp2 below the clamp (-inf in a causal softmax's masked half) computed 2**-76 * 2**-75, an underflow
    that x86 handles in microcode: the masked kernels ran 3-4x slower. Timed against exp2 of zeros, best of 7."""
    from tg.hcq import Buffer
    from tg.hcq.engine import time_kernel

    size = 1 << 20
    times: dict[str, float] = {}
    for name, value in (("zeros", 0.0), ("-inf", -math.inf)):
        buffers = [Buffer("CPU", size, dtypes.float32).ensure_allocated() for _ in range(2)]
        buffers[1].copyin(memoryview(np.full(size, value, np.float32).tobytes()))
        times[name] = time_kernel(unary_kernel(Ops.EXP2, size), "CPU", CodegenFlags(), 7, buffers).seconds
    assert times["-inf"] < 2 * times["zeros"], times
