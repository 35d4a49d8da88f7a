"""Where the time of one small matmul call goes (issue 38): the front end, the scheduler, the launch and the kernel,
beside numpy's whole call, in one process.

    CC=gcc uv run python bench/bench_call_overhead.py [--repeats 50] [--shape 256x256x256 ...]

Each row is a float32 (n, k) @ (k, m) product of realized operands. A turn times, one after the other:
  - eager: the call as bench_opt.py makes it, `(a @ b).realize()` and the device's synchronize;
  - the same call cut into its steps: build (`a @ b`, the tensor graph), schedule (create_schedule of that graph,
    a schedule-cache hit after the first turn), launch (run_schedule: buffers bound, the kernel submitted) and wait
    (synchronize: the kernel runs, on this thread and the core threads);
  - numpy's `a @ b`.
Each turn starts after a 0.3 s pause (OpenBLAS's threads spin after numpy's call and would steal the cores) and one
untimed eager call (the core threads wake from the pause there), so every figure is of a warm call. "realize" is
eager less the four steps: what Tensor.realize does around the engine's two. Every figure is a median
over the turns, in microseconds. Below a few milliseconds of kernel, the steps before the kernel are what separates
tg from numpy (bench_opt.py's 256, 512 and 1 x 768 x 3072 rows).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

DEFAULT_SHAPES = ("256x256x256", "512x512x512", "1x768x3072", "8x768x3072")
STEPS = ("build", "schedule", "launch", "wait")
SETTLE_SECONDS = 0.3  # after numpy's call: OpenBLAS's threads spin for a while and would steal tg's cores


def parse_shape(text: str) -> tuple[int, int, int]:
    """'NxKxM' -> (n, k, m)."""
    sizes = tuple(int(part) for part in text.lower().split("x"))
    if len(sizes) != 3 or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"a shape is NxKxM with positive sizes, got {text!r}")
    return sizes  # type: ignore[return-value]


def elapsed(function: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def time_steps(n: int, k: int, m: int, repeats: int, seed: int = 0, settle: float = SETTLE_SECONDS) -> dict[str, float]:
    """Median microseconds of each step, of the eager call and of numpy's call for one shape (checked first)."""
    from tg.codegen.schedule.schedule import create_schedule
    from tg.hcq import Device
    from tg.hcq.engine import run_schedule
    from tg.tensor import Tensor

    device = Device["CPU"]
    rng = np.random.default_rng(seed)
    left, right = rng.random((n, k), dtype=np.float32), rng.random((k, m), dtype=np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()

    def eager() -> None:
        (a @ b).realize()
        device.synchronize()

    def by_steps() -> dict[str, float]:
        times: dict[str, float] = {}
        times["build"], product = elapsed(lambda: a @ b)
        times["schedule"], schedule = elapsed(lambda: create_schedule((product.uop,)))  # type: ignore[attr-defined]
        times["launch"], _ = elapsed(lambda: run_schedule(schedule))  # type: ignore[arg-type]
        times["wait"], _ = elapsed(device.synchronize)
        return times

    np.testing.assert_allclose((a @ b).numpy(), left @ right, rtol=1e-4, atol=1e-3 * k)
    for _ in range(5):  # warm-up: compile, fill the schedule cache, start the core threads
        eager()
        by_steps()
    samples: dict[str, list[float]] = {name: [] for name in ("eager", *STEPS, "numpy")}
    for _ in range(repeats):
        time.sleep(settle)
        eager()  # untimed: the core threads wake from the pause here, so the steps below are all timed warm
        samples["eager"].append(elapsed(eager)[0])
        for name, seconds in by_steps().items():
            samples[name].append(seconds)
        samples["numpy"].append(elapsed(lambda: left @ right)[0])
    medians = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
    medians["realize"] = medians["eager"] - sum(medians[name] for name in STEPS)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=50, help="timed turns per shape (each after a 0.3 s pause)")
    parser.add_argument("--shape", type=parse_shape, action="append", help="NxKxM (repeatable)")
    args = parser.parse_args()
    shapes = args.shape or [parse_shape(text) for text in DEFAULT_SHAPES]
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}; medians of {args.repeats}")
    columns = ("eager", *STEPS, "realize", "numpy")
    print(f"{'shape (n x k x m)':20s}" + "".join(f"{name:>10s}" for name in columns) + "   (microseconds)")
    for n, k, m in shapes:
        medians = time_steps(n, k, m, args.repeats)
        print(f"{f'{n}x{k}x{m}':20s}" + "".join(f"{medians[name]:10.0f}" for name in columns), flush=True)


if __name__ == "__main__":
    main()
