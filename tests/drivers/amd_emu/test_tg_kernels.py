"""Real tg kernels (tensor programs scheduled, rendered by tg.codegen's AMD renderer, compiled by llvmlite) on the
RDNA3 emulator: results equal numpy, and every code object's disassembly equals llvm-objdump-19's."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.codegen.compiler.amd import AMDCompiler
from tg.codegen.pipeline import CodegenFlags, kernel_to_program
from tg.codegen.render.amd import AMDRenderer
from tg.codegen.uop.ops import Ops, UOp
from tg.tensor import Tensor

from ...backends.amd_emulation import run_on_emulator, run_schedule  # the kernel-ABI launcher of branch amdgen
from .objdump import compare, objdump_path

RNG = np.random.default_rng(7)
A = RNG.standard_normal((6, 20)).astype(np.float32)
B = RNG.standard_normal((20, 9)).astype(np.float32)
INTS = RNG.integers(-1000, 1000, (5, 7)).astype(np.int32)


def softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# name -> (tensor program, numpy program, inputs, tolerance (0: exact))
PROGRAMS: dict[str, tuple[Callable[..., Tensor], Callable[..., np.ndarray], list[np.ndarray], float]] = {
    "half-math": (
        lambda a: ((a.cast(dtypes.float16) * 3 + 1).maximum(a.cast(dtypes.float16))).cast(dtypes.float32),
        lambda a: np.maximum(a.astype(np.float16) * np.float16(3) + np.float16(1), a.astype(np.float16)).astype(
            np.float32
        ),
        [A],
        0,
    ),
    "int64": (
        lambda i: (i.cast(dtypes.int64) * 123456789 + 987654321987) // 1000,
        lambda i: (i.astype(np.int64) * 123456789 + 987654321987) // 1000,
        [INTS],
        0,
    ),
    "uint32-wrap": (
        lambda i: i.cast(dtypes.uint32) * 2654435761 + 17,
        lambda i: i.astype(np.uint32) * np.uint32(2654435761) + np.uint32(17),
        [INTS],
        0,
    ),
    "where-compare": (
        lambda a: (a > 0.3).where(a * 2, a.abs() - 1),
        lambda a: np.where(a > 0.3, a * 2, np.abs(a) - 1),
        [A],
        0,
    ),
    "int8-max": (lambda i: i.cast(dtypes.int8).max(axis=1), lambda i: i.astype(np.int8).max(axis=1), [INTS], 0),
    "uint16-max": (lambda i: i.cast(dtypes.uint16).max(axis=0), lambda i: i.astype(np.uint16).max(axis=0), [INTS], 0),
    "int64-sum": (lambda i: i.cast(dtypes.int64).sum(axis=0), lambda i: i.astype(np.int64).sum(axis=0), [INTS], 0),
    "half-div": (
        lambda a: (a.cast(dtypes.float16) / 7).cast(dtypes.float32),
        lambda a: (a.astype(np.float16) / np.float16(7)).astype(np.float32),
        [A],
        1e-3,
    ),
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b, [A, B], 1e-5),
    "softmax": (lambda a: a.softmax(axis=1), lambda a: softmax(a), [A], 1e-6),
    "mean-var": (lambda a: a.var(axis=0), lambda a: a.var(axis=0, ddof=1), [A], 1e-5),
    "sqrt-reciprocal": (
        lambda a: a.abs().sqrt() + (a * a + 1).reciprocal(),
        lambda a: np.sqrt(np.abs(a)) + 1 / (a * a + 1),
        [A],
        1e-6,
    ),
    "int-minmax-shift": (
        lambda i: (i.maximum(-200) ^ (i >> 2)) + i.minimum(77),
        lambda i: (np.maximum(i, -200) ^ (i >> 2)) + np.minimum(i, 77),
        [INTS],
        0,
    ),
    "float-int-casts": (
        lambda a: (a * 1000).cast(dtypes.int32).cast(dtypes.float32) / 7,
        lambda a: (a * 1000).astype(np.int32).astype(np.float32) / np.float32(7),
        [A],
        1e-6,
    ),
}  # fmt: skip


class RecordingExecutor:
    """Renders and compiles each kernel for AMD, keeps the code object, runs it on the emulator."""

    def __init__(self) -> None:
        self.code_objects: list[tuple[str, bytes]] = []

    def __call__(self, ast: UOp, buffers: list[bytes]) -> list[bytes]:
        source = kernel_to_program(ast, AMDRenderer(), CodegenFlags.from_environment())
        binary = AMDCompiler().compile(source.src)
        self.code_objects.append((source.name, binary))
        return run_on_emulator(source, binary, buffers)


def run_program(name: str) -> tuple[np.ndarray, np.ndarray, RecordingExecutor]:
    build, reference, arrays, _ = PROGRAMS[name]
    tensors, inputs = [], {}
    for array in arrays:
        tensor = Tensor(array, device="NULL:AMD")
        node = next(u for u in tensor.uop.toposort() if u.op is Ops.BUFFER)
        tensors.append(tensor)
        inputs[node] = np.ascontiguousarray(array).tobytes()
    result = build(*tensors)
    executor = RecordingExecutor()
    outputs = run_schedule((result.uop,), inputs, executor)
    want = np.asarray(reference(*arrays))
    got = np.frombuffer(outputs[-1][1], dtype=want.dtype)[: want.size].reshape(want.shape)
    return got, want, executor


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_tg_kernel_on_the_emulator_equals_numpy(name: str) -> None:
    got, want, _ = run_program(name)
    tolerance = PROGRAMS[name][3]
    if tolerance:
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_tg_kernel_disassembly_equals_llvm_objdump(name: str) -> None:
    if objdump_path() is None:
        pytest.skip("missing llvm-objdump: llvm-objdump-19 is not installed (apt-get install llvm-19)")
    _, _, executor = run_program(name)
    assert executor.code_objects
    for kernel, code in executor.code_objects:
        compared, skipped, mismatches = compare(code)
        assert compared > 5 and not mismatches, (kernel, mismatches)
        assert all("16" in text.split()[0] for text in skipped), (kernel, skipped)
