"""Train a small CNN with Adam on scikit-learn's handwritten digits (1,797 real 8x8 images, bundled: no network).

Run with `uv run python examples/train_digits.py` (options: --epochs, --batch-size, --lr, --seed). It prints one line
per epoch (a progress bar while it runs, on a terminal) and the test accuracy at the end. Each training step is one
schedule: forward, backward and the Adam update of every parameter are realized together, and from the second
step on the schedule and its compiled kernels come from the cache.

Data parallel: `--devices CPU:0,CPU:1` keeps a copy of the weights on each device and splits every batch between
them (`Tensor.shard`); the loss's mean over the batch all-reduces, so every device computes the same gradient and
the weights stay equal to those one device trains (to float rounding).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from tg.tensor import Tensor, nn


class DigitsCNN:
    """conv 3x3 (1 -> 16) -> relu -> conv 3x3 (16 -> 32) -> relu -> max pool 2 -> linear (512 -> 10)."""

    def __init__(self) -> None:
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.head = nn.Linear(32 * 4 * 4, 10)

    def __call__(self, images: Tensor) -> Tensor:
        x = self.conv1(images).relu()
        x = self.conv2(x).relu().max_pool2d(2)
        return self.head(x.flatten(1))


@dataclass
class Digits:
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def load_digits_split(seed: int = 0, test_fraction: float = 0.2) -> Digits:
    """The bundled digits as (N, 1, 8, 8) float32 in [0, 1], split into train and test by a seeded permutation."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return Digits(images[train], labels[train], images[test], labels[test])


Devices = tuple[str, ...] | None  # several devices: data parallel (weights copied, batches split)


def train_step(
    model: DigitsCNN, optimizer: nn.optim.Optimizer, images: np.ndarray, labels: np.ndarray, devices: Devices = None
) -> Tensor:
    x, y = Tensor(images), Tensor(labels)
    if devices:
        x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
    return tensor_step(model, optimizer, x, y)


def tensor_step(model: DigitsCNN, optimizer: nn.optim.Optimizer, x: Tensor, y: Tensor) -> Tensor:
    """One step on a batch already in tensors (what a TinyJit captures: `TinyJit(lambda x, y: tensor_step(...))`)."""
    optimizer.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    Tensor.realize(loss, *optimizer.schedule_step())  # the loss, every parameter and Adam's state: one schedule
    return loss


def accuracy(model: DigitsCNN, images: np.ndarray, labels: np.ndarray, devices: Devices = None) -> float:
    x = Tensor(images) if not devices else Tensor(images).shard(devices)
    with Tensor.train(False):
        predictions = model(x).argmax(axis=1).numpy()
    return float((predictions == labels).mean())


@dataclass
class Result:
    test_accuracy: float
    seconds: float
    losses: list[float]


def make_model(seed: int, lr: float, devices: Devices = None) -> tuple[DigitsCNN, nn.optim.Optimizer]:
    """The model from a seeded initialization (its weights copied to each of `devices`) and its Adam optimizer."""
    Tensor.manual_seed(seed)
    model = DigitsCNN()
    parameters = nn.get_parameters(model)
    if devices:
        for parameter in parameters:
            parameter.shard_(devices)
    return model, nn.optim.Adam(parameters, lr=lr)


def train(
    epochs: int = 8,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    show_progress: bool = False,
    devices: Devices = None,
):
    """Train from a seeded initialization; returns the test accuracy, the wall time and each epoch's mean loss."""
    from rich.progress import Progress

    data = load_digits_split(seed)
    model, optimizer = make_model(seed, lr, devices)
    rng = np.random.default_rng(seed)
    steps = len(data.train_labels) // batch_size  # whole batches only: every step has one shape, one schedule
    losses = []
    start = time.perf_counter()
    with Tensor.train(), Progress(disable=not show_progress, transient=True) as progress:
        for epoch in range(epochs):
            task = progress.add_task(f"epoch {epoch + 1}/{epochs}", total=steps)
            order = rng.permutation(len(data.train_labels))
            epoch_losses = []
            for step in range(steps):
                batch = order[step * batch_size : (step + 1) * batch_size]
                loss = train_step(model, optimizer, data.train_images[batch], data.train_labels[batch], devices)
                epoch_losses.append(loss)
                progress.advance(task)
            losses.append(float(np.mean([loss.item() for loss in epoch_losses])))
            progress.remove_task(task)
            progress.console.print(f"epoch {epoch + 1}/{epochs}: mean loss {losses[-1]:.4f}")
    test_accuracy = accuracy(model, data.test_images, data.test_labels, devices)
    return Result(test_accuracy, time.perf_counter() - start, losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", default="", help="data parallel over these devices, e.g. CPU:0,CPU:1")
    args = parser.parse_args()
    devices = tuple(args.devices.split(",")) if args.devices else None
    result = train(args.epochs, args.batch_size, args.lr, args.seed, sys.stdout.isatty(), devices)
    print(f"test accuracy {result.test_accuracy:.2%} after {args.epochs} epochs in {result.seconds:.1f} s")


if __name__ == "__main__":
    main()
