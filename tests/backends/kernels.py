"""Hand-built kernel ASTs for the backend tests, and a helper that runs one on a device with numpy inputs."""

from __future__ import annotations

import numpy as np

from tg.codegen import KernelInfo, Ops, UOp, dtypes, to_numpy
from tg.codegen.dtype import DType
from tg.codegen.opt import Opt
from tg.codegen.pipeline import CodegenFlags, with_opts
from tg.codegen.uop.args import AxisType
from tg.hcq import Buffer
from tg.hcq.engine import time_kernel


def scaled_grid(rows: int, cols: int) -> UOp:
    """out[i, j] = a[i, j] * 3 + b[j]: two output axes."""
    out, a = UOp.param(0, dtypes.float32, rows * cols), UOp.param(1, dtypes.float32, rows * cols)
    b = UOp.param(2, dtypes.float32, cols)
    i, j = UOp.range(rows, 0), UOp.range(cols, 1)
    value = a.index(i * cols + j).load() * 3.0 + b.index(j).load()
    return UOp.sink(out.index(i * cols + j).store(value), arg=KernelInfo(f"scaled_grid_{rows}_{cols}"))


def row_sums(rows: int, cols: int) -> UOp:
    """out[i] = sum_j a[i, j]: one output axis, one reduce axis."""
    out, a = UOp.param(0, dtypes.float32, rows), UOp.param(1, dtypes.float32, rows * cols)
    i, j = UOp.range(rows, 0), UOp.range(cols, 1, AxisType.REDUCE)
    total = a.index(i * cols + j).load().reduce(j, arg=Ops.ADD)
    return UOp.sink(out.index(i).store(total), arg=KernelInfo(f"row_sums_{rows}_{cols}"))


def row_dots(rows: int, cols: int) -> UOp:
    """out[i] = sum_j a[i, j] * b[j]: a reduction whose accumulator is updated by multiply-adds (MULACC)."""
    out, a = UOp.param(0, dtypes.float32, rows), UOp.param(1, dtypes.float32, rows * cols)
    b = UOp.param(2, dtypes.float32, cols)
    i, j = UOp.range(rows, 0), UOp.range(cols, 1, AxisType.REDUCE)
    total = (a.index(i * cols + j).load() * b.index(j).load()).reduce(j, arg=Ops.ADD)
    return UOp.sink(out.index(i).store(total), arg=KernelInfo(f"row_dots_{rows}_{cols}"))


def run_kernel(
    ast: UOp, device: str, inputs: list[np.ndarray], out_size: int, opts: tuple[Opt, ...] | None = None,
    out_dtype: DType = dtypes.float32,
) -> tuple[np.ndarray, str]:  # fmt: skip
    """Run kernel `ast` (optimized with exactly `opts` when given) on `device`; the output and the kernel source."""
    if opts is not None:
        ast = with_opts(ast, opts)
    buffers = [Buffer(device, out_size, out_dtype).ensure_allocated()]
    for array in inputs:
        buffer = Buffer(device, array.size, dtypes.float32).ensure_allocated()
        buffer.copyin(memoryview(np.ascontiguousarray(array, np.float32).tobytes()))
        buffers.append(buffer)
    timing = time_kernel(ast, device, CodegenFlags(), repeats=1, buffers=buffers)
    out = np.empty(out_size, to_numpy(out_dtype))
    buffers[0].copyout(memoryview(out).cast("B"))
    return out, timing.program.source.src
