"""Timing helpers shared by the Tensor benchmarks (run as `python bench/<name>.py`, so this folder is on sys.path)."""

import statistics
import time
from collections.abc import Callable


def median_seconds(function: Callable[[], object], repeats: int) -> float:
    """The median wall time of `repeats` calls, after one warm-up call (which compiles and allocates)."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def realized(make: Callable[[], object]) -> Callable[[], None]:
    """A function that builds a Tensor with `make`, realizes it and waits for the CPU device to finish."""
    from tg.hcq import Device

    def run() -> None:
        make().realize()
        Device["CPU"].synchronize()

    return run
