"""BEAM benchmark: the bench_opt workloads after BEAM=N against the hand-coded heuristics and numpy, same run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE uv run python bench/bench_beam.py [--beam 4] [--repeats 5]

For each workload: the search time (a fresh BEAM cache, so every kernel is searched), then tg with the heuristics,
tg with the BEAM winners, and numpy, timed in turns. Ratios are numpy_time / tg_time (above 1: tg is faster).
DEBUG=3 prints the opts each kernel won. The machine is shared: the load average is printed first.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from timing import median_seconds  # noqa: E402

WORKLOADS = {
    "matmul 1024": ((1024, 1024), (1024, 1024), lambda a, b: a @ b),
    "matmul 2048": ((2048, 2048), (2048, 2048), lambda a, b: a @ b),
    "sum 16M": ((1 << 24,), None, lambda a, b: a.sum()),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args()
    os.environ["TG_CACHE_DIR"] = tempfile.mkdtemp(prefix="tg-bench-beam-")  # every kernel is searched afresh

    from tg.codegen.flags import Context
    from tg.hcq import Device
    from tg.hcq.engine import clear_program_cache
    from tg.tensor import Tensor

    print(f"load average {os.getloadavg()[0]:.2f}; BEAM={args.beam}; median of {args.repeats}")
    rng = np.random.default_rng(0)
    for name in args.only:
        shape_a, shape_b, op = WORKLOADS[name]
        a = rng.standard_normal(shape_a).astype(np.float32)
        b = rng.standard_normal(shape_b).astype(np.float32) if shape_b else None
        ta = Tensor(a).realize()
        tb = Tensor(b).realize() if b is not None else None

        def run_tg(ta=ta, tb=tb, op=op) -> None:
            op(ta, tb).realize()
            Device["CPU"].synchronize()

        clear_program_cache()
        heuristic = median_seconds(run_tg, args.repeats)
        clear_program_cache()
        with Context(BEAM=args.beam):
            start = time.perf_counter()
            run_tg()
            search = time.perf_counter() - start
            beamed = median_seconds(run_tg, args.repeats)
        peer = median_seconds(lambda a=a, b=b, op=op: op(a, b), args.repeats)
        print(
            f"{name:12s} search {search:6.1f} s | heuristics {heuristic * 1e3:8.2f} ms ({peer / heuristic:.2f}x numpy)"
        )
        print(f"{'':12s} BEAM {beamed * 1e3:8.2f} ms ({peer / beamed:.2f}x numpy) | numpy {peer * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
