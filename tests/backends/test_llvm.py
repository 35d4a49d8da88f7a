"""CPU:LLVM: LLVM IR rendered from the linear program, compiled in process by llvmlite, run like a C kernel.

Expected values come from numpy; where numpy has no opinion (division by zero, NaN -> int) the expectation is the
documented C-path semantics, checked on the C device and the PYTHON emulator in the same test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tg.codegen.compiler.llvm import LLVMCompiler
from tg.codegen.dtype import dtypes
from tg.codegen.flags import Context
from tg.codegen.render.llvmir import LLVMRenderer, float_literal
from tg.hcq import Device
from tg.tensor import Tensor

LLVM = "CPU:LLVM"


def run_on(device: str, build, *arrays: np.ndarray) -> np.ndarray:  # noqa: ANN001 - a test callback
    return build(*(Tensor(a, device=device) for a in arrays)).numpy()


def test_device_uses_llvm_renderer_and_compiler() -> None:
    device = Device[LLVM]
    assert isinstance(device.renderer, LLVMRenderer)
    assert isinstance(device.compiler, LLVMCompiler)
    assert device.spec.renderer == "LLVM" and device.spec.full_name == "CPU:LLVM"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8, np.uint16, np.int64])
def test_elementwise_and_reduce_match_numpy(dtype) -> None:  # noqa: ANN001
    rng = np.random.default_rng(1)
    a = (rng.uniform(-50, 50, (33, 17))).astype(dtype)
    b = (rng.uniform(1, 9, (33, 17))).astype(dtype)
    got = run_on(LLVM, lambda x, y: (x * y + x).max(axis=1), a, b)
    np.testing.assert_array_equal(got, (a * b + a).max(axis=1))


def test_matmul_matches_numpy_and_c() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((65, 70)).astype(np.float32), rng.standard_normal((70, 33)).astype(np.float32)
    got = run_on(LLVM, lambda x, y: x @ y, a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_integer_edge_cases_agree_with_c_and_python() -> None:
    """x / 0 == 0, INT_MIN / -1 wraps, small ints divide and shift with C's promotion, float MAX keeps NaN."""
    a = np.array([7, -7, -(2**31), 5, -128, 100], dtype=np.int32)
    b = np.array([0, 2, -1, -1, 3, 0], dtype=np.int32)
    results = {}
    for device in ("CPU", LLVM, "PYTHON"):
        quotient = run_on(device, lambda x, y: x // y, a, b)
        small = run_on(device, lambda x: (x.cast(dtypes.int8) << 3).cast(dtypes.int32), a)
        results[device] = (quotient, small)
    for device in ("CPU", "PYTHON"):
        np.testing.assert_array_equal(results[LLVM][0], results[device][0])
        np.testing.assert_array_equal(results[LLVM][1], results[device][1])
    assert results[LLVM][0][0] == 0 and results[LLVM][0][2] == -(2**31)


def test_float_special_values_agree_with_c() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 3.7, -2.5, 1e20, 0.0, -0.0], dtype=np.float32)
    y = np.array([1.0, np.nan, 2.0, np.nan, -3.0, 1.0, -0.0, 0.0], dtype=np.float32)
    for build in (
        lambda p, q: p.maximum(q),
        lambda p, q: p.cast(dtypes.int32),
        lambda p, q: p.cast(dtypes.float16).cast(dtypes.float32),
        lambda p, q: p.cast(dtypes.bfloat16).cast(dtypes.float32),
        lambda p, q: (p.sqrt() + q.exp2()).sin(),
    ):
        llvm = run_on(LLVM, build, x, y)
        reference = run_on("PYTHON", build, x, y)
        np.testing.assert_array_equal(llvm, reference)  # NaN where the emulator has NaN (any NaN bits)
        number = ~np.isnan(llvm) if llvm.dtype.kind == "f" else np.ones(llvm.shape, bool)
        np.testing.assert_array_equal(np.signbit(llvm[number]), np.signbit(reference[number]))  # -0.0 stays -0.0
    np.testing.assert_array_equal(run_on(LLVM, lambda p, q: p.maximum(q), x, y), np.maximum(x, y))


def test_casts_to_bfloat16_round_once_from_double_and_int() -> None:
    """1 + 2**-8 + 2**-30 is just above a bfloat16 tie: one rounding goes up, rounding through float would go down."""
    doubles = np.array([1 + 2**-8 + 2**-30, 1 + 2**-8, -(1 + 3 * 2**-8 + 2**-40), 1e300, 3.0], dtype=np.float64)
    ints = np.array([16777217 + 65536, 2**31 - 1, -(2**24) - 3, 257], dtype=np.int32)
    for values in (doubles, ints):
        build = lambda p: p.cast(dtypes.bfloat16).cast(dtypes.float32)  # noqa: E731
        got = run_on(LLVM, build, values)
        np.testing.assert_array_equal(got, run_on("PYTHON", build, values))
        np.testing.assert_array_equal(got, run_on("CPU", build, values))
    assert run_on(LLVM, build, doubles[:1])[0] == 1 + 2**-7


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float64])
def test_16_bit_floats_round_per_op_like_the_emulator(dtype) -> None:  # noqa: ANN001
    """Every op rounds to its dtype (bfloat16 too, which gcc 12's C cannot compute with at all)."""
    a = np.random.default_rng(3).uniform(-4, 4, 97).astype(np.float32)
    build = lambda p: ((p.cast(dtype) * p.cast(dtype) + 1) / 3).log2().cast(dtypes.float32)  # noqa: E731
    got = run_on(LLVM, build, a)
    np.testing.assert_array_equal(got.view(np.uint32), run_on("PYTHON", build, a).view(np.uint32))


def rendered_sources(build, capsys) -> str:  # noqa: ANN001
    """The LLVM IR of every kernel `build()` compiles (DEBUG=4 prints each kernel's source when first compiled)."""
    capsys.readouterr()
    with Context(DEBUG=4):
        result = build()
    return result, capsys.readouterr().out


def test_big_kernel_is_split_across_cores(capsys) -> None:  # noqa: ANN001
    """Same multi-core split as C: a large elementwise kernel launches one call per core, each doing its chunk."""
    a = np.arange(1 << 18, dtype=np.float32).reshape(512, 512)
    got, src = rendered_sources(lambda: run_on(LLVM, lambda x: x * 2 + 1, a), capsys)
    if Device[LLVM].cores.count > 1:
        assert "sext i32 %core_id to i64" in src
    np.testing.assert_array_equal(got, a * 2 + 1)


def test_sums_are_bit_exact_with_the_emulator_and_upcast_loops_unroll(capsys) -> None:  # noqa: ANN001
    """No fast-math: a float sum adds in the emulator's order. UPCAST/UNROLL loops carry full-unroll metadata."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((48, 80)).astype(np.float32)
    got, src = rendered_sources(lambda: run_on(LLVM, lambda x: x.sum(axis=1), a), capsys)
    assert "reassoc" not in src and "fast" not in src
    np.testing.assert_array_equal(got, run_on("PYTHON", lambda x: x.sum(axis=1), a))
    b = rng.standard_normal((80, 48)).astype(np.float32)
    got, src = rendered_sources(lambda: run_on(LLVM, lambda x, y: x @ y, a, b), capsys)
    assert "llvm.loop.unroll.full" in src
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_compiles_are_cached_on_disk(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    calls = []
    compiler = LLVMCompiler()
    original = compiler.compile_uncached
    compiler.compile_uncached = lambda src: calls.append(src) or original(src)  # type: ignore[method-assign]
    source = "define void @k(ptr noalias %data0, i32 %core_id) nounwind {\nentry:\n  ret void\n}\n"
    with Context(CACHELEVEL=1):
        first = compiler.compile(source)
        second = compiler.compile(source)
    assert first == second and first[:4] == b"\x7fELF"
    assert len(calls) <= 1  # the second compile comes from the cache (the first may too, from an earlier run)
    assert "llvmlite" in compiler.identity() and "llvm 22" in compiler.identity()


def test_bad_ir_raises_compile_error_with_numbered_source() -> None:
    from tg.codegen.compiler import CompileError

    with pytest.raises(CompileError, match=r"1 \| define void @k"):
        LLVMCompiler().compile_uncached("define void @k() {\nentry:\n  ret i32 0\n}\n")


def test_float_literals_are_exact() -> None:
    assert float_literal(0.1, dtypes.float32) == "0x3FB99999A0000000"  # float(0.1) widened to double
    assert float_literal(1.0, dtypes.float16) == "0xH3C00"
    assert float_literal(1.0, dtypes.bfloat16) == "0xR3F80"
    assert float_literal(float("inf"), dtypes.float64) == "0x7FF0000000000000"


def test_runs_without_any_system_compiler(tmp_path) -> None:  # noqa: ANN001
    """llvmlite ships its own LLVM: with no cc/gcc/clang on PATH, CPU:LLVM still compiles and runs kernels."""
    script = (
        "import numpy as np\nfrom tg.tensor import Tensor\n"
        "x = Tensor(np.arange(10, dtype=np.float32))\nprint((x * x).sum().numpy())\n"
    )
    env = {**os.environ, "PATH": str(tmp_path), "DEV": "CPU:LLVM", "CC": "", "TG_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) == 285.0


def test_symbolic_sizes_compile_once_and_match_numpy() -> None:
    """A kernel over a Variable's range takes it as an i32 argument; big loops are cut across cores."""
    from tg.tensor import Variable

    rows = 1 << 17
    data = np.random.default_rng(0).standard_normal(rows).astype(np.float32)
    a = Tensor(data, device="CPU:LLVM")
    from tg.hcq.engine import program_cache_stats

    n = Variable("n", 1, rows)
    for k in (1, 7, rows):
        if k == 7:
            misses = program_cache_stats.misses
        np.testing.assert_allclose((a[: n.bind(k)] * 2).numpy(), data[:k] * 2)
        np.testing.assert_allclose(a[: n.bind(k)].sum().numpy(), data[:k].sum(), rtol=1e-4, atol=1e-4)
    assert program_cache_stats.misses == misses  # compiled for n=1, launched for every other value
