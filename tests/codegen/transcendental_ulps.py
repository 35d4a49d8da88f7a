"""Measures the largest error, in float32 ulps of the exact result (numpy's float64 exp2/log2), of the CPU device's
software float32 exp2 and log2 (tg.codegen.lower.transcendental) over every float32 input where the result is not
decided by the clamp alone: x in [-151, 129] for exp2, every positive float for log2 (subnormals included).
`--stride N` takes every N-th bit pattern instead (N = 1: all of them, about 4.4e9 values, minutes on 2 cores).

    CC=gcc uv run python -m tests.codegen.transcendental_ulps [--stride N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tg.codegen import KernelInfo, Ops, UOp, dtypes
from tg.codegen.dtype import DType, from_numpy
from tg.codegen.pipeline import CodegenFlags
from tg.hcq import Buffer
from tg.hcq.engine import time_kernel

CHUNK = 1 << 22
REFERENCE = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2}
# every bit pattern a function is measured on: exp2 on [-151, 129] (both signs), log2 on the positive floats
FLOAT32_BITS = {
    Ops.EXP2: [(0, 0x43010000), (0x80000000, 0xC3170000)],  # +0 .. 129, -0 .. -151
    Ops.LOG2: [(1, 0x7F800000)],  # the smallest subnormal .. the largest finite float
}


def unary_kernel(op: Ops, size: int, dtype: DType = dtypes.float32) -> UOp:
    """out[i] = op(a[i]) over `size` elements."""
    out, a = UOp.param(0, dtype, size), UOp.param(1, dtype, size)
    i = UOp.range(size, 0)
    value = UOp(op, dtype, (a.index(i).load(),))
    return UOp.sink(out.index(i).store(value), arg=KernelInfo(f"unary_{op.name.lower()}"))


def run_unary(
    op: Ops, x: np.ndarray, device: str = "CPU", flags: CodegenFlags | None = None, dtype: DType | None = None
) -> np.ndarray:
    """op of every element of `x` computed by a kernel on `device` (flags: the default CodegenFlags); `dtype` reads
    x's bits as another dtype of the same size (bfloat16 from uint16)."""
    dtype = from_numpy(x.dtype) if dtype is None else dtype
    buffers = [Buffer(device, x.size, dtype).ensure_allocated() for _ in range(2)]
    buffers[1].copyin(memoryview(np.ascontiguousarray(x).tobytes()))
    time_kernel(unary_kernel(op, x.size, dtype), device, CodegenFlags() if flags is None else flags, 1, buffers)
    out = np.empty(x.size, x.dtype)
    buffers[0].copyout(memoryview(out).cast("B"))
    return out


def ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in ulps of float32 at `exact` (a float64 array): the spacing of the float32 binade that holds
    the exact value (2**-149 in the subnormals). An exact value beyond the largest float32 is measured in the
    ulps of the top binade, so a finite result there is an error and inf is none when it is the rounded value."""
    exponent = np.frexp(exact)[1].astype(np.float64)  # exact = m * 2**e, m in [0.5, 1)
    spacing = np.exp2(np.maximum(exponent - 24, -149))
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = exact.astype(np.float32).astype(np.float64)
        errors = np.abs(got.astype(np.float64) - exact) / spacing
        # a result of inf is right where the exact value rounds to inf (and vice versa), and NaN where exact is NaN
        same_special = (np.isinf(rounded) & (got == rounded)) | (np.isnan(exact) & np.isnan(got))
    return np.where(same_special, 0.0, np.where(np.isnan(errors), np.inf, errors))


def measure(op: Ops, stride: int) -> tuple[float, float, int]:
    """The largest error in ulps, the input where it occurs, and how many inputs were checked."""
    worst, worst_at, checked = 0.0, float("nan"), 0
    for low, high in FLOAT32_BITS[op]:
        for start in range(low, high + 1, CHUNK * stride):
            bits = np.arange(start, min(start + CHUNK * stride, high + 1), stride, dtype=np.uint64).astype(np.uint32)
            x = bits.view(np.float32)
            errors = ulps(run_unary(op, x), REFERENCE[op](x.astype(np.float64)))
            at = int(np.argmax(errors))
            if errors[at] > worst:
                worst, worst_at = float(errors[at]), float(x[at])
            checked += x.size
    return worst, worst_at, checked


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stride", type=int, default=97, help="check every N-th float32 bit pattern")
    args = parser.parse_args()
    for op in (Ops.EXP2, Ops.LOG2):
        start = time.perf_counter()
        worst, at, checked = measure(op, args.stride)
        seconds = time.perf_counter() - start
        print(f"{op.name}: at most {worst:.4f} ulp (at {at!r}) over {checked} inputs, {seconds:.0f} s")


if __name__ == "__main__":
    main()
