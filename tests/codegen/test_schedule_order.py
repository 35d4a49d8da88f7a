"""The scheduler's ordering (Kahn's algorithm, tg.codegen.schedule.schedule.first_ready_order) against its definition:
at each step the earliest found point whose predecessors have all run."""

from __future__ import annotations

import random

import pytest

from tg.codegen import UOp, dtypes
from tg.codegen.schedule.schedule import first_ready_order


def by_definition(points: list[UOp], before: dict[UOp, set[UOp]]) -> list[UOp]:
    """The order written as its definition (quadratic): scan for the first ready point, emit it, repeat."""
    done: list[UOp] = []
    remaining = list(points)
    while remaining:
        ready = next(p for p in remaining if before[p] <= set(done))
        done.append(ready)
        remaining.remove(ready)
    return done


@pytest.mark.parametrize("seed", range(20))
def test_the_order_is_the_earliest_ready_point_first_on_random_graphs(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.randrange(1, 60)
    rank = list(range(count))
    rng.shuffle(rank)  # a hidden topological order, so the graph has no cycle whatever order points are found in
    points = [UOp.const(i, dtypes.int32) for i in range(count)]
    before = {
        points[i]: {points[j] for j in range(count) if rank[j] < rank[i] and rng.random() < 0.1} for i in range(count)
    }
    order = first_ready_order(points, before)
    assert order == by_definition(points, before)
    assert all(order.index(q) < order.index(p) for p in points for q in before[p])


def test_a_cycle_is_an_error_naming_the_assign() -> None:
    a, b = UOp.const(1, dtypes.int32), UOp.const(2, dtypes.int32)
    with pytest.raises(RuntimeError, match="cycle"):
        first_ready_order([a, b], {a: {b}, b: {a}})
