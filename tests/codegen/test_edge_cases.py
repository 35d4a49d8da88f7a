"""The one table of edge-case semantics (tg.codegen.uop.alu.EDGE_CASES), checked row by row on all three places
that compute ops: constant folding, the PYTHON emulator and the compiled C of the CPU device.

The expected values are the table's; the table itself is checked against C's and IEEE's definitions where they
define a result (0/0 is NaN, pow overflow is inf, ...) by the float rows, and is a decision where they do not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen import KernelInfo, Ops, UOp, dtypes
from tg.codegen.dtype import DType, from_numpy, to_numpy
from tg.codegen.pipeline import CodegenFlags, kernel_to_program
from tg.codegen.uop.alu import EDGE_CASES, exec_alu
from tg.hcq import Buffer, Device

ROWS = [
    (case.name, case.op, dtype, operands, expected)
    for case in EDGE_CASES
    for dtype, operands, expected in case.examples
]


def _same(got: object, expected: object) -> bool:
    if isinstance(expected, float):
        got = float(got)  # type: ignore[arg-type]
        if math.isnan(expected):
            return math.isnan(got)
        return got == expected and math.copysign(1, got) == math.copysign(1, expected)
    return got == expected


def _result_dtype(op: Ops, dtype: DType) -> DType:
    return dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype


@pytest.mark.parametrize(
    ("name", "op", "dtype", "operands", "expected"), ROWS, ids=[f"{r[1].name}-{i}" for i, r in enumerate(ROWS)]
)
def test_constant_folding_follows_the_table(
    name: str, op: Ops, dtype: DType, operands: tuple, expected: object
) -> None:
    assert _same(exec_alu(op, dtype, operands), expected), name
    folded = UOp(op, _result_dtype(op, dtype), tuple(UOp.const(v, dtype) for v in operands)).simplify()
    assert folded.op is Ops.CONST and _same(folded.arg, expected), (name, folded)


def edge_case_kernel() -> tuple[UOp, list[np.ndarray]]:
    """One kernel computing every row: out_i[0] = op(a_i[0], b_i[0], ...) with the operands loaded from memory
    (so the compiler cannot fold them), and the arrays it runs on (outputs first, in PARAM slot order)."""
    stores, arrays, slot = [], [], 0
    zero = UOp.const(0, dtypes.index)
    for _, op, dtype, operands, _ in ROWS:
        out = UOp.param(slot, _result_dtype(op, dtype), 1)
        inputs = [UOp.param(slot + 1 + k, dtype, 1) for k in range(len(operands))]
        slot += 1 + len(operands)
        loaded = tuple(p.index(zero).load() for p in inputs)
        stores.append(out.index(zero).store(UOp(op, _result_dtype(op, dtype), loaded)))
        arrays.append(np.zeros(1, to_numpy(_result_dtype(op, dtype))))
        arrays.extend(np.array([v], to_numpy(dtype)) for v in operands)
    return UOp.sink(*stores, arg=KernelInfo("edge_cases")), arrays


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_every_backend_computes_the_table(device: str) -> None:
    ast, arrays = edge_case_kernel()
    dev = Device[device]
    # through the device's whole pipeline: its renderer's choices (the CPU's software exp2/log2) included
    rendered = kernel_to_program(ast, dev.renderer, CodegenFlags.from_environment())
    program = dev.runtime(rendered.name, dev.compiler.compile(rendered.src))
    buffers = []
    for array in arrays:
        buf = Buffer(device, 1, from_numpy(array.dtype)).ensure_allocated()
        buf.copyin(array.tobytes())
        buffers.append(buf)
    program(*(b.raw for b in buffers), global_size=rendered.global_size, wait=True)
    position = 0
    for name, _, dtype, operands, expected in ROWS:
        got = np.frombuffer(buffers[position].as_buffer(), arrays[position].dtype)[0].item()
        assert _same(got, expected), (device, name, dtype, operands, got)
        position += 1 + len(operands)


def test_float64_multiply_add_is_the_nearest_double() -> None:
    """Regression: the round-to-odd step that makes float32/float16 MULACC exact was also applied to float64, so
    an inexact float64 MULACC came out one ulp off (odd) instead of rounded to nearest, unlike C's fma."""
    from fractions import Fraction

    a = 1 + 2**-52
    exact = Fraction(a) * Fraction(a)  # 1 + 2**-51 + 2**-104: the nearest double is 1 + 2**-51
    assert exec_alu(Ops.MULACC, dtypes.float64, (a, a, 0.0)) == float(exact) == 1 + 2**-51
    assert exec_alu(Ops.MULACC, dtypes.float32, (1 + 2**-12, 1 + 2**-12, -(1 + 2**-11))) == 2**-24


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_negative_float_cast_to_uint64_wraps(device: str) -> None:
    """Regression: the C renderer converted a float straight to unsigned long long, undefined for a negative value
    (a GPU gives 0); it goes through long long now and wraps, as the emulator and numpy's int64 path do."""
    from tg.tensor import Tensor

    out = Tensor(np.array([-24.75, 3.5], np.float32), device=device).cast(dtypes.uint64).numpy()
    assert out.tolist() == [2**64 - 24, 3]


def _nearest_float32(exact: object) -> float:
    """The float32 nearest to a Fraction, ties to the even mantissa (an oracle independent of the emulator)."""
    from fractions import Fraction

    assert isinstance(exact, Fraction)
    guess = np.float32(float(exact))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    distances = [abs(Fraction(float(c)) - exact) for c in candidates]
    best = min(distances)
    ties = [c for c, d in zip(candidates, distances, strict=True) if d == best]
    return float(next((c for c in ties if int(c.view(np.uint32)) & 1 == 0), ties[0]))


def test_float32_multiply_add_rounds_once_on_the_fast_path() -> None:
    """The emulator's float32 MULACC (several per software exp2/log2) skips fractions: a * b exact in double, the sum's
    error by TwoSum, rounded to odd. Checked against the exact value rounded once, on products that cancel."""
    from fractions import Fraction

    rng = np.random.default_rng(7)
    a = rng.standard_normal(3000).astype(np.float32) * np.float32(2.0) ** rng.integers(-60, 60, 3000)
    b = rng.standard_normal(3000).astype(np.float32)
    near = (a.astype(np.float64) * b).astype(np.float32)  # c close to -a*b: the sum cancels to its last bits
    c = np.where(rng.random(3000) < 0.5, -near, rng.standard_normal(3000).astype(np.float32))
    # 1 + 2**-24 + 2**-70: the double sum rounds to the float32 midpoint 1 + 2**-24, whose tie goes to 1.0; the
    # exact value is above it, so the right result is 1 + 2**-23 (rounding to odd keeps that information)
    double_rounding = (-(1 + 2**-23), 2**-24 * (1 - 2**-23), 1 + 2**-23)
    assert exec_alu(Ops.MULACC, dtypes.float32, double_rounding) == 1 + 2**-23
    for x, y, z in zip(a.tolist(), b.tolist(), c.tolist(), strict=True):
        expected = _nearest_float32(Fraction(x) * Fraction(y) + Fraction(z))
        assert exec_alu(Ops.MULACC, dtypes.float32, (x, y, z)) == expected, (x, y, z)
