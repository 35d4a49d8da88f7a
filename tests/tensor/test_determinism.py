"""Issue 12, determinism: float reductions have their partial sums written in the program (see
tg.codegen.lower.linearize), so the CPU (compiled C) and PYTHON (the emulator) devices compute the same bits, and
the CPU gives the same bits on every run."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.tensor import Tensor

rng = np.random.default_rng(12)

WORKLOADS: dict[str, tuple[Callable[..., Tensor], list[tuple[int, ...]]]] = {
    "sum": (lambda x: x.sum(), [(4096,)]),
    "row sums": (lambda x: x.sum(axis=1), [(3, 1024)]),
    "mean": (lambda x: x.mean(axis=0), [(512, 8)]),
    "softmax": (lambda x: x.softmax(axis=-1), [(4, 256)]),
    "matmul": (lambda a, b: a @ b, [(8, 128), (128, 8)]),
}


def _compute(name: str, device: str, arrays: list[np.ndarray]) -> np.ndarray:
    function, _ = WORKLOADS[name]
    return function(*(Tensor(a, device=device) for a in arrays)).numpy()


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_cpu_and_python_compute_the_same_bits(name: str) -> None:
    arrays = [(rng.random(shape, dtype=np.float32) * 100 - 20).astype(np.float32) for shape in WORKLOADS[name][1]]
    on_cpu = _compute(name, "CPU", arrays)
    again = _compute(name, "CPU", arrays)
    on_python = _compute(name, "PYTHON", arrays)
    assert on_cpu.tobytes() == again.tobytes()
    assert on_cpu.tobytes() == on_python.tobytes(), (on_cpu.ravel()[:4], on_python.ravel()[:4])
    reference = WORKLOADS[name][0](*(Tensor(a, device="CPU") for a in arrays)).numpy()  # and still correct:
    expected = {
        "sum": lambda: arrays[0].astype(np.float64).sum(),
        "row sums": lambda: arrays[0].astype(np.float64).sum(axis=1),
        "mean": lambda: arrays[0].astype(np.float64).mean(axis=0),
        "softmax": lambda: _softmax(arrays[0].astype(np.float64)),
        "matmul": lambda: arrays[0].astype(np.float64) @ arrays[1].astype(np.float64),
    }[name]()
    np.testing.assert_allclose(reference, expected, rtol=2e-5, atol=1e-5)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
