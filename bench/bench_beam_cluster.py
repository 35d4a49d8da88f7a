"""tg-beam search of a program's kernels: here, one after another, vs on a local Ray cluster of N workers.

Run: `CC=gcc uv run --extra cluster python bench/bench_beam_cluster.py [--model examples/tiny_mlp.py] [--beam 2]
[--workers 2]`. The program runs under `tg-beam dump`; its kernels are searched from an empty cache (the same beam,
the same flags) first here, then with one Ray task per kernel on `ray.init(num_cpus=WORKERS)` (the cluster's own
start is timed apart). Printed: the time to a full cache each way and their ratio, then each kernel's winner from
either search timed again here, in turns, and the ratio of the two (1.0: the searches found kernels as fast).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="examples/tiny_mlp.py")
    parser.add_argument("--beam", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-beam-cluster-"))
    os.environ["TG_CACHE_DIR"] = str(scratch / "cache-local")
    kernels = scratch / "kernels"
    subprocess.run(["tg-beam", "dump", str(kernels), "--", sys.executable, args.model], check=True)

    import ray

    from tg.beam.batch import SearchSettings, plan_folder, search_here
    from tg.beam.cluster import search_on_ray
    from tg.codegen.flags import Context
    from tg.codegen.pipeline import CodegenFlags, with_opts
    from tg.hcq.engine import time_kernel

    plan = plan_folder(kernels, None)
    settings = SearchSettings(args.beam, CodegenFlags.from_environment(), ignore_cache=True)
    start = time.perf_counter()
    local = search_here(plan, settings)
    local_seconds = time.perf_counter() - start
    start = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - start
    with Context(TG_CACHE_DIR=str(scratch / "cache-cluster")):
        start = time.perf_counter()
        remote = search_on_ray(plan, settings)
        cluster_seconds = time.perf_counter() - start
    ray.shutdown()
    print(f"{len(plan)} kernels of {args.model}, beam {args.beam}; load {os.getloadavg()[0]:.1f}")
    print(f"time to a full cache: here {local_seconds:.1f} s, {args.workers} Ray workers {cluster_seconds:.1f} s "
          f"(+{ray_start:.1f} s to start Ray): {local_seconds / cluster_seconds:.2f}x")  # fmt: skip
    found_remote = {o.kernel.label: o.result.opts for o in remote.outcomes}
    for outcome in local.ordered():
        kernel = outcome.kernel
        here_winner = with_opts(kernel.job.ast, outcome.result.opts)
        remote_winner = with_opts(kernel.job.ast, found_remote[kernel.label])
        times: dict[str, list[float]] = {"here": [], "cluster": []}
        for _ in range(5):  # in turns, so that load changes hit both alike
            times["here"].append(time_kernel(here_winner, kernel.device, settings.flags, repeats=10).seconds)
            times["cluster"].append(time_kernel(remote_winner, kernel.device, settings.flags, repeats=10).seconds)
        best_here, best_cluster = min(times["here"]), min(times["cluster"])
        print(f"  {kernel.label}: cluster winner / local winner {best_cluster / best_here:.2f}x "
              f"({best_cluster * 1e6:.1f} vs {best_here * 1e6:.1f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
