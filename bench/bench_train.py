"""One training step (forward, backward, Adam update) of the digits CNN of examples/train_digits.py, against torch
(when installed) and tinygrad (the `bench` group) measured in the same run.

    uv run --group bench python bench/bench_train.py [--batch-size 32] [--repeats 15]

Each framework trains the same architecture (conv 3x3 1->16, relu, conv 3x3 16->32, relu, max pool 2, linear 512->10)
on the same random batch; the first steps (compilation, allocation) are warm-up. Prints the median step time and
peer_time / tg_time (above 1: tg is faster). The machine is shared: compare medians, and repeat the run.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_digits.py"


def median_step_seconds(step: Callable[[], None], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tg_step(images: np.ndarray, labels: np.ndarray) -> Callable[[], None]:
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # dataclasses look their module up there
    spec.loader.exec_module(example)
    from tg.tensor import Tensor, nn

    model = example.DigitsCNN()
    optimizer = nn.optim.Adam(nn.get_parameters(model), lr=1e-3)

    def step() -> None:
        with Tensor.train():
            example.train_step(model, optimizer, images, labels).item()

    return step


def tinygrad_step(images: np.ndarray, labels: np.ndarray) -> Callable[[], None] | None:
    try:
        from tinygrad import Tensor, nn
        from tinygrad.helpers import Context
    except ImportError:
        return None

    class Model:
        def __init__(self) -> None:
            self.conv1, self.conv2 = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
            self.head = nn.Linear(512, 10)

        def __call__(self, x):
            x = self.conv2(self.conv1(x).relu()).relu().max_pool2d(2)
            return self.head(x.flatten(1))

    model = Model()
    optimizer = nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3)

    def step() -> None:
        with Context(TRAINING=1):  # tinygrad 0.14's training switch
            optimizer.zero_grad()
            loss = model(Tensor(images)).sparse_categorical_crossentropy(Tensor(labels))
            loss.backward()
            Tensor.realize(loss, *optimizer.schedule_step())
            loss.item()

    return step


def torch_step(images: np.ndarray, labels: np.ndarray) -> Callable[[], None] | None:
    try:
        import torch
    except ImportError:
        return None
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(512, 10),
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))

    def step() -> None:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()

    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (args.batch_size, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, args.batch_size).astype(np.int32)
    tg_time = median_step_seconds(tg_step(images, labels), warmup=3, repeats=args.repeats)
    print(f"tg       one Adam step, batch {args.batch_size}: {tg_time * 1e3:8.2f} ms")
    for name, make in (("tinygrad", tinygrad_step), ("torch", torch_step)):
        step = make(images, labels)
        if step is None:
            print(f"{name:8} not installed")
            continue
        peer = median_step_seconds(step, warmup=3, repeats=args.repeats)
        print(
            f"{name:8} one Adam step, batch {args.batch_size}: {peer * 1e3:8.2f} ms   {name}/tg = {peer / tg_time:.2f}"
        )


if __name__ == "__main__":
    main()
