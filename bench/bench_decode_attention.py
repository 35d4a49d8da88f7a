"""tg-llm's decode attention alone (scores, softmax, weighted values): one TinyJit capture of SmolLM2-135M's 30 blocks
attending from one query row over their own random KV caches at a symbolic position, timed per replay.

Run: `CC=gcc uv run python bench/bench_decode_attention.py [POSITION ...]` (default 288 1000; `CPU_COUNT=1` for figures
a loaded machine disturbs less). Per position: the best of 8 batches of 10 replays, as process CPU time (every thread
of the process) and wall time per replay. CPU time is what the kernels and their launches cost when the machine is
shared: wall time on a loaded machine also counts the time other processes hold the cores.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from tg.llm.model import KEY_TILE, attend, cache_keys, key_tiles
from tg.tensor import Tensor, Variable
from tg.tensor.jit import TinyJit

BLOCKS, HEADS, KV_HEADS, HEAD_DIM = 30, 9, 3, 64  # SmolLM2-135M


def attention_step(max_context: int) -> tuple[TinyJit, Variable]:
    rows = key_tiles(max_context + 255) * KEY_TILE  # as Transformer sizes its caches
    position = Variable("start_pos", 0, max_context - 1)
    positions = Tensor(np.arange(rows, dtype=np.int32)).realize()
    caches = [Tensor.rand(2, KV_HEADS, rows, HEAD_DIM).realize() for _ in range(BLOCKS)]
    queries = [Tensor.rand(1, HEADS, HEAD_DIM).realize() for _ in range(BLOCKS)]

    def step(start: Variable) -> Tensor:
        tiles = key_tiles(start + 1)
        mask = positions.reshape(-1, KEY_TILE)[:tiles].reshape(1, -1, KEY_TILE) <= positions[start : start + 1]
        outs = [attend(q, cache_keys(cache)[:, :tiles], cache[1, :, : start + 1], mask).realize()
                for q, cache in zip(queries, caches, strict=True)]  # fmt: skip
        return outs[-1]

    return TinyJit(step, plain_calls=0), position


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("positions", type=int, nargs="*", default=[288, 1000])
    args = parser.parse_args()
    step, position = attention_step(max(args.positions) + 32)
    load = os.getloadavg()
    for at in args.positions:
        for _ in range(3):  # capture, then warm up
            step(position.bind(at)).numpy()
        cpu, wall = [], []
        for _ in range(8):
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            for _ in range(10):
                step(position.bind(at)).numpy()
            cpu.append((time.process_time() - cpu_start) / 10)
            wall.append((time.perf_counter() - wall_start) / 10)
        print(f"position {at}: attention of {BLOCKS} blocks per replay: CPU {min(cpu) * 1e3:.2f} ms, "
              f"wall {min(wall) * 1e3:.2f} ms (best of 8 x 10)")  # fmt: skip
    print(f"load average before/after: {load[0]:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
