"""A TinyJit replay packs a weight it only reads once, not at every call, and packs it again after the weight is
written (tg.hcq.engine.capture.copies_on_change). Expected values come from numpy. On the CPU device, whatever the
default device is: the layout stage packs a matmul's weight for CPU kernels only."""

from __future__ import annotations

import numpy as np

from tg.hcq.engine.counters import GlobalCounters
from tg.tensor import Tensor
from tg.tensor.jit import TinyJit

CPU = "CPU"
ROWS, WIDTH = 32, 256  # a 256x256 weight under 32 rows: the product packs it into column strips (a kept copy)


def data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def replayed_kernels(step: TinyJit, x: np.ndarray) -> tuple[int, np.ndarray]:
    GlobalCounters.reset()
    out = step(Tensor(x, device=CPU)).numpy()
    return GlobalCounters.kernel_count, out


def test_a_forward_replay_packs_its_weight_once_and_again_after_the_weight_changes() -> None:
    w_values = data(0, WIDTH, WIDTH)
    weight = Tensor(w_values, device=CPU).realize()
    forward = TinyJit(lambda x: (x @ weight).relu())
    counts = []
    for call in range(5):
        x = data(10 + call, ROWS, WIDTH)
        count, out = replayed_kernels(forward, x)
        counts.append(count)
        np.testing.assert_allclose(out, np.maximum(x @ w_values, 0), rtol=1e-4, atol=1e-4)
    assert forward.graph is not None and len(forward.graph.copies_on_change) == 1
    # a plain call and the capture: pack + product; the first replay packs again (the capture left no mark), later
    # replays only multiply
    assert counts == [2, 2, 2, 1, 1]

    w_values = data(1, WIDTH, WIDTH)
    weight.assign(Tensor(w_values, device=CPU)).realize()  # the weight changes between replays
    x = data(20, ROWS, WIDTH)
    count, out = replayed_kernels(forward, x)
    assert count == 2  # packed again
    np.testing.assert_allclose(out, np.maximum(x @ w_values, 0), rtol=1e-4, atol=1e-4)
    count, _ = replayed_kernels(forward, x)
    assert count == 1


def test_a_replay_that_writes_the_weight_packs_it_at_every_call() -> None:
    w_values = data(2, WIDTH, WIDTH)
    weight = Tensor(w_values, device=CPU).realize()

    def step(x: Tensor) -> Tensor:
        out = (x @ weight).realize()  # (before the weight changes: lazily it would read the new one)
        weight.assign(weight * 0.5).realize()  # the step itself changes the weight it packed
        return out

    jitted = TinyJit(step)
    for call in range(4):
        x = data(30 + call, ROWS, WIDTH)
        out = jitted(Tensor(x, device=CPU)).numpy()
        np.testing.assert_allclose(out, x @ w_values, rtol=1e-4, atol=1e-4)
        w_values = w_values * np.float32(0.5)
    assert jitted.graph is not None and jitted.graph.copies_on_change == []


def test_another_replay_writing_the_weight_makes_the_forward_pack_it_again() -> None:
    w_values = data(3, WIDTH, WIDTH)
    weight = Tensor(w_values, device=CPU).realize()
    forward = TinyJit(lambda x: (x @ weight).contiguous())

    def scale(factor: Tensor) -> None:
        weight.assign(weight * factor).realize()

    scaler = TinyJit(scale)
    for call in range(5):
        x = data(40 + call, ROWS, WIDTH)
        np.testing.assert_allclose(forward(Tensor(x, device=CPU)).numpy(), x @ w_values, rtol=1e-4, atol=1e-4)
        scaler(Tensor([2.0], device=CPU))  # a replay (from the third call on) writes the weight
        w_values = w_values * np.float32(2.0)
