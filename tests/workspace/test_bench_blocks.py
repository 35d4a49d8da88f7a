"""bench/bench_blocks.py's ratios (issue 38, item 3): each tg/peer ratio pairs the two calls of one turn, so a slow
spell of the shared machine divides out instead of skewing a ratio of two medians."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def bench_blocks(import_bench):
    return import_bench("bench_blocks")


def test_a_slow_spell_shared_by_both_calls_of_a_turn_leaves_the_ratio_alone(bench_blocks) -> None:
    # tg takes 0.8 of torch's time in every turn; turns 0, 2 and 4 ran while the machine was three times slower
    slow = [3.0, 1.0, 3.0, 1.0, 3.0]
    torch = [0.010 * s for s in slow]
    tg = [0.008 * s for s in slow]
    ratio, low, high = bench_blocks.paired_ratio(tg, torch)
    assert ratio == pytest.approx(0.8) and low == pytest.approx(0.8) and high == pytest.approx(0.8)


def test_the_quartiles_bracket_the_median_of_the_turns_ratios(bench_blocks) -> None:
    ratio, low, high = bench_blocks.paired_ratio([1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 1.0, 1.0, 1.0, 1.0])
    assert (low, ratio, high) == (2.0, 3.0, 4.0)
    assert bench_blocks.paired_ratio([2.0], [4.0]) == (0.5, 0.5, 0.5)


def test_each_timed_call_follows_an_untimed_call_of_the_same_runner(bench_blocks, monkeypatch) -> None:
    # the other library's threads spin after its call: a runner is timed only after a call of its own
    calls: list[str] = []
    clock = iter(range(1000))
    monkeypatch.setattr(bench_blocks.time, "perf_counter", lambda: float(next(clock)))
    runners = {"tg": lambda: calls.append("tg"), "torch": lambda: calls.append("torch")}
    times = bench_blocks.interleaved_times(runners, repeats=2, warmups=1)
    assert calls == ["tg", "torch"] + ["tg", "tg", "torch", "torch"] * 2
    assert times == {"tg": [1.0, 1.0], "torch": [1.0, 1.0]}
