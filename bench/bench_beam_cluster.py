"""tg-beam search of a program's kernels: here, one after another, vs on a local Ray cluster of N workers.

Run: `CC=gcc uv run --extra cluster python bench/bench_beam_cluster.py [--model examples/tiny_mlp.py ...] [--beam 2]
[--workers 2]` (default: the kernels of examples/tiny_mlp.py, then of examples/resnet_block.py, a ResNet basic
block). Each program runs under `tg-beam dump`; its kernels are searched from an empty cache (the same beam, the
same flags) first here, then with one Ray task per kernel on `ray.init(num_cpus=WORKERS)` (started once, before the
first program; its start is timed apart). Printed per program: the time to a full cache each way and their ratio,
how many kernels got the same opts both ways (real timings differ from run to run, so a near tie can go either
way), and for a kernel whose opts differ, both winners timed again here, in turns, and the ratio of the two (1.0:
the searches found kernels as fast). The load average is printed with the figures: on a busy machine they move.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

MODELS = ["examples/tiny_mlp.py", "examples/resnet_block.py"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="A program whose kernels to search (repeatable).")
    parser.add_argument("--beam", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-beam-cluster-"))

    import ray

    start = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    print(f"{args.workers} Ray workers started in {time.perf_counter() - start:.1f} s")
    for model in args.model or MODELS:
        compare(model, args.beam, args.workers, scratch / Path(model).stem)
    ray.shutdown()


def compare(model: str, beam: int, workers: int, scratch: Path) -> None:
    """Search `model`'s kernels here and on the cluster, each from an empty cache, and print the comparison."""
    from tg.beam.batch import SearchSettings, plan_folder, search_here
    from tg.beam.cluster import search_on_ray
    from tg.codegen.flags import Context

    kernels = scratch / "kernels"
    subprocess.run(["tg-beam", "dump", str(kernels), "--", sys.executable, model], check=True)
    plan = plan_folder(kernels, None)
    settings = SearchSettings(beam, _flags(), ignore_cache=True)
    with Context(TG_CACHE_DIR=str(scratch / "cache-local")):
        start = time.perf_counter()
        local = search_here(plan, settings)
        local_seconds = time.perf_counter() - start
    with Context(TG_CACHE_DIR=str(scratch / "cache-cluster")):
        start = time.perf_counter()
        remote = search_on_ray(plan, settings)
        cluster_seconds = time.perf_counter() - start
    print(f"{len(plan)} kernels of {model}, beam {beam}; load {os.getloadavg()[0]:.1f}")
    print(f"time to a full cache: here {local_seconds:.1f} s, {workers} Ray workers {cluster_seconds:.1f} s: "
          f"{local_seconds / cluster_seconds:.2f}x")  # fmt: skip
    found_remote = {o.kernel.label: o.result.opts for o in remote.outcomes}
    same = sum(found_remote[o.kernel.label] == o.result.opts for o in local.outcomes)
    print(f"  the same opts found both ways for {same} of {len(plan)} kernels")
    for outcome in local.ordered():
        _time_winners(outcome, found_remote[outcome.kernel.label], settings)


def _flags() -> Any:
    from tg.codegen.pipeline import CodegenFlags

    return CodegenFlags.from_environment()


def _time_winners(outcome: Any, remote_opts: Any, settings: Any) -> None:
    """Time the kernel with the local and the cluster search's opts, in turns, and print the ratio (when the two
    searches found other opts)."""
    from tg.codegen.pipeline import with_opts
    from tg.hcq.engine import time_kernel

    kernel = outcome.kernel
    if remote_opts == outcome.result.opts:  # the same kernel: timing it twice would only show the machine's noise
        print(f"  {kernel.label}: the same opts both ways ({outcome.result.seconds * 1e6:.1f} us in the local search)")
        return
    here_winner = with_opts(kernel.job.ast, outcome.result.opts)
    remote_winner = with_opts(kernel.job.ast, remote_opts)
    times: dict[str, list[float]] = {"here": [], "cluster": []}
    for _ in range(5):  # in turns, so that load changes hit both alike
        times["here"].append(time_kernel(here_winner, kernel.device, settings.flags, repeats=10).seconds)
        times["cluster"].append(time_kernel(remote_winner, kernel.device, settings.flags, repeats=10).seconds)
    best_here, best_cluster = min(times["here"]), min(times["cluster"])
    print(f"  {kernel.label}: other opts; cluster winner / local winner {best_cluster / best_here:.2f}x "
          f"({best_cluster * 1e6:.1f} vs {best_here * 1e6:.1f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
