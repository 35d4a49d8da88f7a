"""Time tg-autogen against tinygrad's generator (tinygrad.runtime.support.autogen.gen) on the same headers.

Run: uv sync --group bench && uv run --group bench python bench/bench_autogen.py [--repeats N]
Both generators run in this process, one after the other, after one warm-up each (imports and libclang loading are
not timed). tinygrad's generator loads the system libclang (e.g. libclang-19); ours uses the pinned libclang
wheel (18.1.1). The machine is shared, so the medians are what to read.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time
from collections.abc import Callable
from pathlib import Path

HEADERS = ["/usr/include/elf.h", "/usr/include/linux/vfio.h", "/usr/include/linux/io_uring.h"]


def ours(header: str) -> Callable[[], object]:
    from tg.autogen.generate import gen

    return lambda: gen("bench", [header])


def tinygrads(header: str) -> Callable[[], object] | None:
    try:
        from tinygrad.runtime.support.autogen import gen
    except ImportError:
        return None
    return lambda: gen("bench", [header])


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"{'header':32} {'tg-autogen':>12} {'tinygrad gen':>13} {'ratio':>7}   (median of {args.repeats})")
    for header in HEADERS:
        if not Path(header).is_file():
            print(f"{header:32} missing")
            continue
        mine, theirs = ours(header), tinygrads(header)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            mine()
            if theirs:
                theirs()
        ours_s = median_seconds(mine, args.repeats)
        if theirs is None:
            print(f"{header:32} {ours_s:11.3f}s {'unavailable':>13}")
            continue
        theirs_s = median_seconds(theirs, args.repeats)
        print(f"{header:32} {ours_s:11.3f}s {theirs_s:12.3f}s {theirs_s / ours_s:6.2f}x")


if __name__ == "__main__":
    main()
