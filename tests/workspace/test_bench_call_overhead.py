"""bench/bench_call_overhead.py (issue 38): the steps of one matmul call, each timed on the path the engine takes,
with the product checked against numpy's first."""

from __future__ import annotations

import argparse

import pytest


@pytest.fixture(scope="module")
def bench(import_bench):
    return import_bench("bench_call_overhead")


def test_every_step_of_a_call_is_timed_and_the_rest_is_what_realize_adds(bench) -> None:
    medians = bench.time_steps(3, 5, 7, repeats=3, settle=0)
    assert set(medians) == {"eager", *bench.STEPS, "realize", "numpy"}
    assert all(medians[name] > 0 for name in ("eager", *bench.STEPS, "numpy"))
    assert medians["realize"] == pytest.approx(medians["eager"] - sum(medians[name] for name in bench.STEPS))


def test_shapes_are_three_positive_sizes(bench) -> None:
    assert bench.parse_shape("1x768x3072") == (1, 768, 3072)
    for bad in ("256x256", "0x4x4", "4x4x4x4"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_shape(bad)
