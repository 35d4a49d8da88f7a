"""BEAM benchmark: the bench_opt workloads after BEAM=N against the hand-coded heuristics and the peers, same run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE uv run python bench/bench_beam.py [--beam 4] [--repeats 5]
        [--only "matmul 1024" ...] [--tinygrad-beam N]

For each workload: every kernel is searched afresh (a new BEAM cache) and the search time of each is printed with
the opts that won and what the search's confirming turns measured: the winner's and the hand-coded opts' medians of
interleaved repeats, their ratio and spread, and whether the winner replaced the hand-coded opts (only when faster by
more than the spread); then tg with the heuristics, tg with the BEAM winners, numpy, torch (conv2d; when installed)
and, with --tinygrad-beam N, the tinygrad release at BEAM=N (its own search runs first, with a fresh cache of its
own, not timed) are timed in turns (a sample of a small matmul is several calls back to back: bench_opt's
calls_per_sample). Ratios are peer_time / tg_time (above 1: tg is faster). The machine is shared: the load average
is printed before, per row and after. Each kernel's search stops at BEAM_TIME_BUDGET (default
60 s) with the best so far, and says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from bench_opt import (  # noqa: E402
    alternating_medians,
    calls_per_sample,
    inputs,
    numpy_workloads,
    tg_workloads,
    tinygrad_workloads,
    torch_workloads,
)

WORKLOADS = ("matmul 512", "matmul 1024", "matmul 2048", "conv2d", "sum 16M")  # issue 35: matmuls, a conv, a sum


def record_searches(log: list[tuple[str, float, Any]]) -> None:
    """Wrap the engine's search so each kernel's search time and winning opts land in `log`."""
    from tg.hcq.engine import beam

    search = beam.search_opts

    def timed_search(ast: Any, device_name: str, width: int, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = search(ast, device_name, width, *args, **kwargs)
        log.append((ast.arg.name if ast.arg is not None else "?", time.perf_counter() - start, result))
        return result

    beam.search_opts = timed_search


def confirmation(result: Any) -> str:
    """What the confirming turns (winner against the hand-coded opts, interleaved) decided, with their spread."""
    if result.hand_coded_seconds is None:
        return " (the hand-coded opts themselves, or there were none)"
    verdict = "replaces" if result.seconds < result.hand_coded_seconds - result.spread else "kept"
    hand, ratio = result.hand_coded_seconds * 1e3, result.hand_coded_seconds / result.seconds
    return f"; hand-coded {hand:.2f} ms, ratio {ratio:.2f}, spread {result.spread * 1e3:.2f} ms: {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--tinygrad-beam", type=int, default=0, help="also time tinygrad at this BEAM (0: no)")
    args = parser.parse_args()
    fresh = tempfile.mkdtemp(prefix="tg-bench-beam-")
    os.environ["TG_CACHE_DIR"] = fresh  # every kernel is searched afresh
    # tinygrad too (read when it is imported): a result its search stored earlier, even one from a search whose
    # candidates all failed to compile, would otherwise be replayed without searching
    os.environ["CACHEDB"] = os.path.join(fresh, "tinygrad-cache.db")

    from tg.codegen.flags import Context

    print(
        f"load average {os.getloadavg()[0]:.2f}; BEAM={args.beam}; median of {args.repeats}; CC={os.environ.get('CC')}"
    )
    data = inputs()
    tg, peers = tg_workloads(data), numpy_workloads(data)
    torch_runs = torch_workloads(data)
    if isinstance(torch_runs, str):
        print(f"  {torch_runs}")
        torch_runs = {}
    tiny: dict[str, Callable[[], object]] | str = {}
    if args.tinygrad_beam:
        tiny = tinygrad_workloads(data, beam=args.tinygrad_beam)
        if isinstance(tiny, str):
            print(f"  {tiny}")
            tiny = {}
    searches: list[tuple[str, float, Any]] = []
    record_searches(searches)
    for name in args.only:
        run = tg[name]

        def heuristic(run: Callable[[], object] = run) -> None:
            with Context(BEAM=0):
                run()

        def beamed(run: Callable[[], object] = run) -> None:
            with Context(BEAM=args.beam):
                run()

        searches.clear()
        beamed()  # the search, one kernel at a time
        for kernel, seconds, result in searches:
            spent = " (time budget spent: the best so far)" if result.out_of_time else ""
            print(f"{name:12s} search {kernel}: {seconds:6.1f} s{spent}, {result.seconds * 1e3:.2f} ms with "
                  f"{list(result.opts)}{confirmation(result)}")  # fmt: skip
        tiny_run = tiny.get(name) if isinstance(tiny, dict) else None
        if tiny_run is not None:
            start = time.perf_counter()
            tiny_run()
            searched = time.perf_counter() - start
            print(f"{name:12s} tinygrad BEAM={args.tinygrad_beam} warm-up (its search) {searched:.1f} s")
        runs = [heuristic, beamed, peers[name], torch_runs.get(name), tiny_run]
        h, b, numpy_time, torch_time, tiny_time = alternating_medians(runs, args.repeats, calls_per_sample(name))
        line = f"{name:12s} heuristics {h * 1e3:8.2f} ms | BEAM {b * 1e3:8.2f} ms | numpy {numpy_time * 1e3:8.2f} ms"
        line += f" | BEAM {numpy_time / b:.2f}x numpy (heuristics {numpy_time / h:.2f}x)"
        if torch_time == torch_time:  # not NaN
            line += f" | torch {torch_time * 1e3:.2f} ms: BEAM {torch_time / b:.2f}x torch"
        if tiny_time == tiny_time:
            line += f" | tinygrad BEAM={args.tinygrad_beam} {tiny_time * 1e3:.2f} ms"
        print(f"{line} | load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
