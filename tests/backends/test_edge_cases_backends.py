"""The edge-case table (tg.codegen.uop.alu.EDGE_CASES) on the new backends: CPU:LLVM always, CL where a driver is.

One kernel computes every row of the table from operands loaded from memory (so nothing is constant-folded); each
result must be the table's expected value, as on the C and PYTHON devices (tests/codegen/test_edge_cases.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen import KernelInfo, Ops, UOp, dtypes
from tg.codegen.dtype import DType, from_numpy, to_numpy
from tg.codegen.pipeline import CodegenFlags
from tg.codegen.uop.alu import EDGE_CASES
from tg.hcq import Buffer
from tg.hcq.devices.cl import all_devices
from tg.hcq.engine import time_kernel

ROWS = [(case.name, case.op, dtype, ops, expected) for case in EDGE_CASES for dtype, ops, expected in case.examples]
COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)


def result_dtype(op: Ops, dtype: DType) -> DType:
    return dtypes.bool if op in COMPARISONS else dtype


def same(got: object, expected: object) -> bool:
    if isinstance(expected, float):
        got = float(got)  # type: ignore[arg-type]
        return (
            math.isnan(got)
            if math.isnan(expected)
            else got == expected and math.copysign(1, got) == math.copysign(1, expected)
        )
    return got == expected


def edge_case_kernel() -> tuple[UOp, list[np.ndarray]]:
    stores, arrays, slot = [], [], 0
    zero = UOp.const(0, dtypes.index)
    for _, op, dtype, operands, _ in ROWS:
        out = UOp.param(slot, result_dtype(op, dtype), 1)
        loaded = tuple(UOp.param(slot + 1 + k, dtype, 1).index(zero).load() for k in range(len(operands)))
        slot += 1 + len(operands)
        stores.append(out.index(zero).store(UOp(op, result_dtype(op, dtype), loaded)))
        arrays.append(np.zeros(1, to_numpy(result_dtype(op, dtype))))
        arrays.extend(np.array([v], to_numpy(dtype)) for v in operands)
    return UOp.sink(*stores, arg=KernelInfo("edge_cases")), arrays


DEVICES = ["CPU:LLVM"] + (["CL"] if all_devices() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_backend_computes_the_edge_case_table(device: str) -> None:
    ast, arrays = edge_case_kernel()
    buffers = []
    for array in arrays:
        buffer = Buffer(device, 1, from_numpy(array.dtype)).ensure_allocated()
        buffer.copyin(memoryview(array.tobytes()))
        buffers.append(buffer)
    time_kernel(ast, device, CodegenFlags(noopt=True), repeats=1, buffers=buffers)
    position, wrong = 0, []
    for name, _, dtype, operands, expected in ROWS:
        got = np.frombuffer(buffers[position].as_buffer(), arrays[position].dtype)[0].item()
        if not same(got, expected):
            wrong.append((name, dtype, operands, got, expected))
        position += 1 + len(operands)
    assert not wrong, wrong
