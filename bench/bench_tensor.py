"""Engine benchmark against numpy, measured in the same run: a fused elementwise chain, a full sum, and the
latency from a new graph to a compiled kernel.

    uv run python bench/bench_tensor.py [--size 16777216] [--repeats 9] [--cc gcc]

Prints medians of several repeats and the ratio numpy_time / tg_time (above 1: tg is faster). The machine is
shared, so timings are noisy; the medians are what to compare. Built on tensor-graph nodes and the engine API.
When gcc and clang are both installed and no --cc is given, it runs once per compiler and prints the ratios side
by side (bench/compilers.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
from compilers import installed_compilers, side_by_side
from timing import median_seconds

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.flags import Context
from tg.codegen.schedule import schedule as scheduler
from tg.codegen.schedule.graph import ReduceArg, const_node
from tg.hcq import Device
from tg.hcq.engine import buffer_from_bytes, clear_program_cache, realize


def tensor(array: np.ndarray) -> UOp:
    buf = buffer_from_bytes(array.tobytes(), dtypes.float32, "CPU")
    return UOp(Ops.RESHAPE, dtypes.float32, (buf,), array.shape)


def chain(a: UOp, b: UOp, c: UOp) -> UOp:
    zero = UOp(
        Ops.EXPAND,
        dtypes.float32,
        (UOp(Ops.RESHAPE, dtypes.float32, (const_node(0.0, dtypes.float32, "CPU"),), (1,)),),
        (a.arg[0],),
    )
    return UOp(Ops.MAX, dtypes.float32, (UOp(Ops.ADD, dtypes.float32, (UOp(Ops.MUL, dtypes.float32, (a, b)), c)), zero))


def total(a: UOp) -> UOp:
    return UOp(Ops.REDUCE_AXIS, dtypes.float32, (a,), ReduceArg(Ops.ADD, (0,)))


def run(node: UOp) -> None:
    """Realize and wait: the CPU device runs kernels asynchronously."""
    realize(node)
    Device["CPU"].synchronize()


def column_sum(m: UOp) -> UOp:
    return UOp(Ops.REDUCE_AXIS, dtypes.float32, (m,), ReduceArg(Ops.ADD, (0,)))


def first_call_seconds(size: int) -> float:
    """Time from a graph never seen in this process to its kernel compiled and run (tiny tensors)."""
    scheduler._schedule_cache.clear()
    clear_program_cache()
    a = tensor(np.ones(size, np.float32))
    start = time.perf_counter()
    run(chain(a, a, a))
    return time.perf_counter() - start


def measure(size: int, repeats: int) -> list[dict]:
    """The chain, the full sum and the column sum against numpy, each timed right after its numpy peer."""
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(size).astype(np.float32) for _ in range(3))
    A, B, C = tensor(a), tensor(b), tensor(c)
    np.testing.assert_allclose(np.frombuffer(_bytes(chain(A, B, C)), np.float32), np.maximum(a * b + c, 0), rtol=1e-6)
    side = int(size**0.5)
    matrix = a[: side * side].reshape(side, side)
    M = UOp(Ops.RESHAPE, dtypes.float32, (A,), (side, side)) if side * side == size else tensor(matrix)
    workloads = [
        ("chain (a*b+c).maximum(0)", lambda: run(chain(A, B, C)), lambda: np.maximum(a * b + c, 0), 3.0),
        ("full sum", lambda: run(total(A)), lambda: a.sum(), 1.0),
        (f"sum over axis 0 ({side}x{side})", lambda: run(column_sum(M)), lambda: matrix.sum(0), None),
    ]
    rows = []
    for name, mine, peer, target in workloads:
        tg_time, np_time = median_seconds(mine, repeats), median_seconds(peer, repeats)
        rows.append({"workload": name, "peer": "numpy", "tg_ms": tg_time * 1e3, "peer_ms": np_time * 1e3,
                     "ratio": np_time / tg_time, "target": target})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 24)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--cc", help="measure with this C compiler only (default: each installed one)")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON document")
    args = parser.parse_args()
    if args.cc is None and len(installed_compilers()) > 1:
        side_by_side(__file__, [f"--size={args.size}", f"--repeats={args.repeats}"], installed_compilers())
        return
    if args.cc is not None:
        os.environ["CC"] = args.cc
    rows = measure(args.size, args.repeats)
    if args.json:
        print(json.dumps(rows))
        return
    with tempfile.TemporaryDirectory() as cache, Context(TG_CACHE_DIR=cache):
        cold = statistics.median(first_call_seconds(1024 + i) for i in range(3))
        warm = statistics.median(first_call_seconds(1024 + i) for i in range(3))
    print(f"elements: {args.size}, repeats: {args.repeats} (medians; shared machine, expect noise)")
    print(f"C compiler: {os.environ.get('CC') or 'the default (see DEBUG=1)'}")
    for row in rows:
        target = f"(target >= {row['target']})" if row["target"] else "(no target)"
        print(f"{row['workload']:<30} tg {row['tg_ms']:8.2f} ms  numpy {row['peer_ms']:8.2f} ms  "
              f"ratio numpy/tg {row['ratio']:5.2f}x  {target}")  # fmt: skip
    print(f"first call (graph -> compiled kernel -> run): cold cache {cold * 1e3:7.1f} ms, "
          f"warm disk cache {warm * 1e3:7.1f} ms")  # fmt: skip


def _bytes(node: UOp) -> memoryview:
    from tg.hcq.engine import read_bytes

    return read_bytes(node)


if __name__ == "__main__":
    main()
