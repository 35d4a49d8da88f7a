"""The AMD renderer's kernels run: compiled by llvmlite, executed by the RDNA3 emulator (tg.drivers.amd.rdna3), and
compared with the PYTHON renderer running the same linear program (bit for bit where the ops are exact) and with
numpy. This is the proof that the IR computes what the kernel means, not only that LLVM accepts it.

The launcher is tests/backends/amd_emulation.py (the kernel ABI of tg.codegen.render.amd, without PM4).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.codegen.opt import Opt, OptOps
from tg.codegen.uop.ops import Ops
from tg.tensor import Tensor

from .amd_emulation import amd_executor, python_executor, run_schedule
from .kernels import row_dots, row_sums, scaled_grid

DEVICE = "NULL:AMD"


def tensor_input(array: np.ndarray) -> tuple[Tensor, dict]:
    """A tensor on NULL:AMD and its BUFFER node's bytes (NULL keeps no data; the launcher holds it)."""
    tensor = Tensor(array, device=DEVICE)
    node = next(u for u in tensor.uop.toposort() if u.op is Ops.BUFFER)
    return tensor, {node: np.ascontiguousarray(array).tobytes()}


def run_both(build, *arrays: np.ndarray) -> tuple[list, list]:  # noqa: ANN001
    """Every kernel of `build(*tensors)` on the emulator and on the PYTHON renderer: (name, output bytes) each."""
    tensors, inputs = [], {}
    for array in arrays:
        tensor, data = tensor_input(array)
        tensors.append(tensor)
        inputs.update(data)
    root = build(*tensors).uop
    return run_schedule((root,), inputs, amd_executor), run_schedule((root,), inputs, python_executor)


RNG = np.random.default_rng(0)
F32 = RNG.standard_normal((8, 12)).astype(np.float32)
G32 = RNG.standard_normal((12, 5)).astype(np.float32)
I32 = RNG.integers(-50, 50, (4, 6)).astype(np.int32)
EXACT_PROGRAMS = {
    "elementwise": (lambda a: a * 2 + 1, [F32]),
    "sum": (lambda a: a.sum(axis=1), [F32]),
    "max": (lambda a: a.max(axis=0), [F32]),
    "matmul": (lambda a, b: a @ b, [F32, G32]),
    "int-div-mod-shift": (lambda i: (i // 3 + i % 5) << 1, [I32]),
    "int-edge-cases": (lambda i: (i // (i % 3)) + (i % (i % 4 - 2)) + (i >> 40 % 33), [I32]),
    "float16": (lambda a: (a.cast(dtypes.float16) * 2).exp(), [F32]),
    "where": (lambda a: (a > 0).where(a, -a), [F32]),
    "exp-log-software": (lambda a: a.exp() + a.abs().log(), [F32]),
    "softmax": (lambda a: a.softmax(axis=1), [F32]),
    "sqrt-div-reciprocal": (lambda a: a.abs().sqrt() / (a * a + 1) + a.reciprocal(), [F32]),
    "float64": (lambda a: a.cast(dtypes.float64) * 3 - 1, [F32]),
    "int64": (lambda i: i.cast(dtypes.int64) * 1000000007 // 7, [I32]),
    "uint8": (lambda i: (i.cast(dtypes.uint8) * 3) % 7, [I32]),
    "int8-uint16": (lambda i: i.cast(dtypes.int8) * 5 + i.cast(dtypes.uint16), [I32]),
    "float-to-int-casts": (
        lambda a: (a * 100).cast(dtypes.int32) + (a * 1e10).cast(dtypes.int64).cast(dtypes.int32),
        [F32],
    ),  # fmt: skip
    "bool-logic": (lambda a, b: ((a > 0) & (b[:8, :1] < 0.5)) | (a < -1), [F32, G32]),
    "argmax": (lambda a: a.argmax(axis=1), [F32]),
    "cumsum": (lambda a: a.cumsum(axis=1), [F32]),
    "bitcast": (lambda a: (a.bitcast(dtypes.int32) >> 3).bitcast(dtypes.float32), [F32]),
    "pad-gated-loads": (lambda a: a.pad(((1, 1), (2, 0))) * 2, [F32]),
    "gather": (lambda a, i: a[i.abs() % 8], [F32, np.array([3, 1, 7, 0], np.int32)]),
    "broadcast-sum": (lambda a: (a.reshape(1, -1).expand(64, -1) * 3).sum(axis=0), [F32]),
    "layernorm": (lambda a: a.layernorm(), [F32]),
    "mean-var": (lambda a: a.var(axis=1) + a.mean(), [F32]),
    "gelu-tanh-sigmoid": (lambda a: a.gelu() + a.tanh() + a.sigmoid(), [F32]),
    "transpose-matmul": (lambda a: (a.T @ a) + 1, [F32]),
    "int-reduce": (lambda i: i.sum() + i.max(), [I32]),
    "conv2d-padded": (
        lambda x, w: x.conv2d(w, padding=1).relu(),
        [RNG.standard_normal((1, 2, 6, 6)).astype(np.float32), RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)],
    ),  # fmt: skip
    "conv2d": (
        lambda x, w: x.conv2d(w),
        [RNG.standard_normal((1, 2, 6, 6)).astype(np.float32), RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)],
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(EXACT_PROGRAMS))
def test_kernels_equal_the_python_renderer_bit_for_bit(name: str) -> None:
    build, arrays = EXACT_PROGRAMS[name]
    emulated, reference = run_both(build, *arrays)
    assert emulated, "the program scheduled no kernel"
    for (kernel, got), (_, want) in zip(emulated, reference, strict=True):
        assert got == want, f"{kernel}: the emulated kernel differs from the PYTHON renderer"


ALL_DTYPES = [
    dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
    dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
]  # fmt: skip
X = RNG.integers(-300, 300, (4, 8)).astype(np.int32)
Y = RNG.integers(-9, 9, (4, 8)).astype(np.int32)


def dtype_programs(dtype) -> dict:  # noqa: ANN001
    """Every op of the dtype on values made from ints (wrapping, rounding, NaN-free), then every cast from it."""
    programs = {
        "add-mul": lambda x, y: x.cast(dtype) + y.cast(dtype) * x.cast(dtype),
        "max-min": lambda x, y: x.cast(dtype).maximum(y.cast(dtype)) * y.cast(dtype).minimum(x.cast(dtype)),
        "compare-where": lambda x, y: (x.cast(dtype) < y.cast(dtype)).where(x.cast(dtype), y.cast(dtype)),
        "sum": lambda x, y: x.cast(dtype).sum(axis=1),
        "max-reduce": lambda x, y: y.cast(dtype).max(axis=0),
    }
    if dtype is not dtypes.bool:
        programs["sub-div"] = lambda x, y: (x.cast(dtype) - y.cast(dtype)) / (y.cast(dtype) * y.cast(dtype) + 1)
    if dtype.kind in ("int", "uint"):
        programs["idiv-mod"] = lambda x, y: x.cast(dtype) // y.cast(dtype) + x.cast(dtype) % y.cast(dtype)
        programs["bits"] = lambda x, y: ((x.cast(dtype) << 3) ^ (x.cast(dtype) >> 2)) & y.cast(dtype) | 5
    for target in ALL_DTYPES:
        programs[f"to-{target}"] = lambda x, y, target=target: (x.cast(dtype) * 3).cast(target)
    return programs


DTYPE_CASES = [(dtype, name) for dtype in ALL_DTYPES for name in dtype_programs(dtype)]


@pytest.mark.parametrize("dtype, name", DTYPE_CASES, ids=[f"{d}-{n}" for d, n in DTYPE_CASES])
def test_every_dtype_equals_the_python_renderer_bit_for_bit(dtype, name: str) -> None:  # noqa: ANN001
    emulated, reference = run_both(dtype_programs(dtype)[name], X, Y)
    assert emulated
    for (kernel, got), (_, want) in zip(emulated, reference, strict=True):
        assert got == want, f"{kernel}: the emulated kernel differs from the PYTHON renderer"


def test_matmul_result_equals_numpy() -> None:
    emulated, _ = run_both(lambda a, b: a @ b, F32, G32)
    np.testing.assert_allclose(
        np.frombuffer(emulated[-1][1], np.float32).reshape(8, 5), F32 @ G32, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    "build, reference, rtol",
    [
        (lambda a: a.sin(), np.sin, 2e-6),  # v_sin_f32: the hardware's approximation
        (lambda a: a.abs() ** 1.7, lambda x: np.abs(x) ** np.float32(1.7), 5e-6),  # v_log_f32 / v_exp_f32
        (lambda a: a.cast(dtypes.float64).exp2(), lambda x: np.exp2(x.astype(np.float64)), 1e-15),  # software f64
        (lambda a: a.abs().cast(dtypes.float64).log2(), lambda x: np.log2(np.abs(x).astype(np.float64)), 1e-15),
        (lambda a: (a * 7).cast(dtypes.float64).sin(), lambda x: np.sin((x * np.float32(7)).astype(np.float64)), 1e-15),
        (lambda a: a.abs().cast(dtypes.float64) ** 2.5, lambda x: np.abs(x).astype(np.float64) ** 2.5, 1e-14),
    ],
    ids=["sin", "pow", "exp2-f64", "log2-f64", "sin-f64", "pow-f64"],
)
def test_approximate_functions_are_close_to_numpy(build, reference, rtol) -> None:  # noqa: ANN001
    emulated, _ = run_both(build, F32)
    want = reference(F32).reshape(-1)
    got = np.frombuffer(emulated[-1][1], want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize(
    "kernel, opts, inputs, expected",
    [
        (
            row_sums(8, 64),
            (Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 16)),
            lambda r: [r((8, 64))],
            lambda a: a.sum(axis=1),
        ),
        (
            row_dots(16, 64),
            (Opt(OptOps.GROUP, 0, 8), Opt(OptOps.UPCAST, 0, 4)),
            lambda r: [r((16, 64)), r(64)],
            lambda a, b: a @ b,
        ),
        (
            scaled_grid(12, 16),
            (Opt(OptOps.LOCAL, 0, 3), Opt(OptOps.LOCAL, 1, 4)),
            lambda r: [r((12, 16)), r(16)],
            lambda a, b: a * 3 + b,
        ),
        (row_sums(4, 256), (Opt(OptOps.GROUP, 0, 64),), lambda r: [r((4, 256))], lambda a: a.sum(axis=1)),
    ],
    ids=["local+group-two-waves", "group+upcast", "two-locals", "group-64-threads"],
)
def test_local_and_group_kernels_match_numpy(kernel, opts, inputs, expected) -> None:  # noqa: ANN001
    from tg.codegen.pipeline import with_opts

    rng = np.random.default_rng(5)
    arrays = [a.astype(np.float32) for a in inputs(rng.standard_normal)]
    want = expected(*arrays).astype(np.float32).reshape(-1)
    buffers = [bytes(want.nbytes), *(a.tobytes() for a in arrays)]
    got = np.frombuffer(amd_executor(with_opts(kernel, opts), buffers)[0], np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_kernel_with_a_variable_reads_it_from_the_kernargs() -> None:
    from tg.codegen import KernelInfo, UOp
    from tg.codegen.compiler.amd import AMDCompiler
    from tg.codegen.pipeline import CodegenFlags, kernel_to_program
    from tg.codegen.render.amd import AMDRenderer
    from tg.hcq.symbolic import resolve

    from .amd_emulation import run_on_emulator

    n = UOp.variable("n", 1, 64)
    out, a = UOp.param(0, dtypes.float32, 64), UOp.param(1, dtypes.float32, 64)
    i = UOp.range(n, 0)
    ast = UOp.sink(out.index(i).store(a.index(i).load() * 2.0 + n.cast(dtypes.float32)), arg=KernelInfo("scale_n"))
    source = kernel_to_program(ast, AMDRenderer(), CodegenFlags())
    values = np.arange(64, dtype=np.float32)
    launch = dataclasses.replace(source, global_size=tuple(resolve(g, {"n": 37}) for g in source.global_size))
    got = run_on_emulator(launch, AMDCompiler().compile(source.src), [bytes(256), values.tobytes()], vals=(37,))
    result = np.frombuffer(got[0], np.float32)
    np.testing.assert_array_equal(result[:37], values[:37] * 2 + 37)
    assert not result[37:].any() and math.isfinite(result.sum())


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.uint16, dtypes.int64, dtypes.float32, dtypes.bool])
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_group_reductions_of_every_kind_match_the_python_renderer(dtype, reduce: str) -> None:  # noqa: ANN001
    """GROUP_REDUCE (partials in LDS, two barriers, combined in thread order) with LOCAL threads beside it, two waves:
    integer sums and every max are exact whatever the order, so they equal the PYTHON renderer bit for bit."""
    from tg.codegen.pipeline import with_opts

    opts = (Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 16))
    values = RNG.integers(-100, 100, (8, 64)).astype(np.int32)
    if dtype is dtypes.float32:
        values = values // 4  # small integers: float sums are exact in any order

    def with_group(executor):  # noqa: ANN001, ANN202
        return lambda ast, buffers: executor(with_opts(ast, opts), buffers)

    tensor, inputs = tensor_input(values)
    cast = tensor.cast(dtype)
    root = (cast.sum(axis=1) if reduce == "sum" else cast.max(axis=1)).uop
    emulated = run_schedule((root,), inputs, with_group(amd_executor))
    reference = run_schedule((root,), inputs, with_group(python_executor))
    assert [got for _, got in emulated] == [want for _, want in reference]
    from tg.codegen.pipeline import CodegenFlags, kernel_to_program
    from tg.codegen.render.amd import AMDRenderer
    from tg.codegen.schedule.schedule import create_schedule

    kernel = create_schedule((root,)).items[-1].ast
    source = kernel_to_program(with_opts(kernel, opts), AMDRenderer(), CodegenFlags())
    assert source.local_size == (4, 1, 16) and "@llvm.amdgcn.s.barrier" in source.src  # 64 threads: two waves


def test_hardware_exp2_and_log2_when_transcendental_0() -> None:
    """TRANSCENDENTAL=0: float32 exp2/log2 are llvm.exp2/llvm.log2 (v_exp_f32, v_log_f32), within a few ulps."""
    from tg.codegen.flags import Context
    from tg.codegen.pipeline import CodegenFlags, kernel_to_program
    from tg.codegen.render.amd import AMDRenderer
    from tg.codegen.schedule.schedule import create_schedule

    tensor, _ = tensor_input(F32)
    kernel = create_schedule(((tensor.exp2() + tensor.abs().log2()).uop,)).items[-1].ast
    with Context(TRANSCENDENTAL=0):
        emulated, _ = run_both(lambda a: a.exp2() + a.abs().log2(), F32)
        source = kernel_to_program(kernel, AMDRenderer(), CodegenFlags.from_environment()).src
    assert "@llvm.exp2.f32" in source and "@llvm.log2.f32" in source
    want = np.exp2(F32.astype(np.float64)) + np.log2(np.abs(F32).astype(np.float64))
    np.testing.assert_allclose(np.frombuffer(emulated[-1][1], np.float32), want.reshape(-1), rtol=1e-6, atol=1e-6)
