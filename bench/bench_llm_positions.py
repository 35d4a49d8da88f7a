"""tg-llm decode step time at given positions of the embedded SmolLM2-135M, and its kernels' times there.

Run: `CC=gcc uv run python bench/bench_llm_positions.py [POSITION ...] [--kv-cache f16]` (default 64 1000, an f32 cache;
`CPU_COUNT=1` for figures a loaded machine disturbs less: a kernel split across cores waits for every worker thread).
The cache is not prefilled: a step reads the same rows whatever they hold. Per position: the median and best of 20
replayed decode steps, then the kernels of one plain step (JIT=0, DEBUG=2) summed over the blocks by name and shape, the
least of 5 runs each; the attention kernels are the ones whose shape holds `start_pos`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import re
import statistics
import time

from tg.llm import registry
from tg.llm.config import DEFAULT_KV_CACHE, KV_CACHE_TYPES
from tg.llm.model import Transformer, load_model
from tg.tensor import Context

KERNEL_LINE = re.compile(r"^\*\*\* \S+\s+\d+ (\S+)\s+shape (\S+)\s+([\d.]+) us")


def step_times(model: Transformer, position: int, steps: int = 20) -> list[float]:
    """Seconds per replayed decode step at position, position + 1, ... (two more first: capture and warm-up)."""
    times = []
    for offset in range(steps + 2):
        start = time.perf_counter()
        model.forward([42], position + offset).numpy()
        times.append(time.perf_counter() - start)
    return times[2:]


def kernel_times(model: Transformer, position: int, runs: int = 5) -> dict[tuple[str, str], float]:
    """Milliseconds per (kernel name, shape) in one plain step, summed over the blocks; the least of `runs`."""
    found = []
    for _ in range(runs):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), Context(DEBUG=2, JIT=0):
            model.forward([42], position).numpy()
        one: dict[tuple[str, str], float] = collections.defaultdict(float)
        for line in out.getvalue().splitlines():
            if match := KERNEL_LINE.match(line):
                one[(match.group(1), match.group(2))] += float(match.group(3)) * 1e-3
        found.append(one)
    return {key: min(run.get(key, 0.0) for run in found) for key in found[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("positions", type=int, nargs="*", default=[64, 1000])
    parser.add_argument("--kv-cache", default=DEFAULT_KV_CACHE, choices=list(KV_CACHE_TYPES))
    args = parser.parse_args()
    path = registry.resolve(registry.EMBEDDED_NAME)
    model, _ = load_model(path, max_context=max(args.positions) + 32, kv_cache=args.kv_cache)
    print(f"KV cache {args.kv_cache}: {sum(cache.nbytes() for cache in model.caches) / 1e6:.1f} MB")
    load = os.getloadavg()
    for position in args.positions:
        steps = step_times(model, position)
        kernels = kernel_times(model, position)
        attention = sum(ms for (_, shape), ms in kernels.items() if "start_pos" in shape)
        median, best, total = statistics.median(steps) * 1e3, min(steps) * 1e3, sum(kernels.values())
        print(f"position {position}: decode step median {median:.1f} ms, best {best:.1f} ms; kernels {total:.1f} ms, "
              f"attention {attention:.1f} ms")  # fmt: skip
        for (name, shape), ms in sorted(kernels.items(), key=lambda item: -item[1])[:8]:
            print(f"  {ms:7.2f} ms  {name} {shape}")
    print(f"load average before/after: {load[0]:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
