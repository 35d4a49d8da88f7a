"""Data-parallel training step of examples/train_digits.py on one CPU device and on two (CPU:0, CPU:1).

    uv run python bench/bench_multidev.py [--batch-size 64] [--repeats 10]

Each setup trains the same model on the same random batch: on two devices the weights are copied to each and the
batch is split (Tensor.shard), so each device runs the step on half the batch and the loss and gradients are
all-reduced. "plain" runs the example's train_step (graph built, lowered per device and scheduled every step);
"jit" captures the step with TinyJit and replays it. Prints the median step time of each and the two-device time
over the one-device time (below 1: two devices are faster). The CPU devices share the machine's cores, so two
devices split the work between two queues, not two processors: on a busy or small machine expect no speed-up.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from timing import median_seconds  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_digits.py"
TWO = ("CPU:0", "CPU:1")


def _example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # dataclasses look their module up there
    spec.loader.exec_module(example)
    return example


def plain_step(example, images: np.ndarray, labels: np.ndarray, devices):
    from tg.tensor import Tensor

    model, optimizer = example.make_model(0, 1e-3, devices)

    def step() -> None:
        with Tensor.train():
            example.train_step(model, optimizer, images, labels, devices).item()

    return step


def jit_step(example, images: np.ndarray, labels: np.ndarray, devices):
    from tg.tensor import Tensor, TinyJit

    model, optimizer = example.make_model(0, 1e-3, devices)

    train = TinyJit(lambda x, y: example.tensor_step(model, optimizer, x, y))

    def step() -> None:
        x, y = Tensor(images), Tensor(labels)
        if devices:
            x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
        with Tensor.train():
            train(x.realize(), y.realize()).item()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    images = rng.random((args.batch_size, 1, 8, 8), dtype=np.float32)
    labels = rng.integers(0, 10, args.batch_size).astype(np.int32)
    example = _example()
    print(f"digits CNN train step, batch {args.batch_size}, median of {args.repeats} after warm-up")
    for name, make in (("plain", plain_step), ("jit", jit_step)):
        one_step, two_step = make(example, images, labels, None), make(example, images, labels, TWO)
        for _ in range(2):  # (a TinyJit captures on its second call: both warm-ups before timing)
            one_step(), two_step()
        one = median_seconds(one_step, args.repeats)
        two = median_seconds(two_step, args.repeats)
        print(f"{name:6s} 1 device {one * 1e3:8.2f} ms   2 devices {two * 1e3:8.2f} ms   2/1 {two / one:5.2f}")


if __name__ == "__main__":
    main()
