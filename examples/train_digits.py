"""Train a small CNN with Adam on scikit-learn's handwritten digits (1,797 real 8x8 images, bundled: no network).

Run with `uv run python examples/train_digits.py` (options: --epochs, --batch-size, --lr, --seed). It prints one line
per epoch (a progress bar while it runs, on a terminal) and the test accuracy at the end. Each training step is one
schedule: forward, backward and the Adam update of every parameter are realized together, and from the second
step on the schedule and its compiled kernels come from the cache.
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


def train_step(model: DigitsCNN, optimizer: nn.optim.Optimizer, images: np.ndarray, labels: np.ndarray) -> Tensor:
    optimizer.zero_grad()
    loss = model(Tensor(images)).sparse_categorical_crossentropy(Tensor(labels))
    loss.backward()
    Tensor.realize(loss, *optimizer.schedule_step())  # the loss, every parameter and Adam's state: one schedule
    return loss


def accuracy(model: DigitsCNN, images: np.ndarray, labels: np.ndarray) -> float:
    with Tensor.train(False):
        predictions = model(Tensor(images)).argmax(axis=1).numpy()
    return float((predictions == labels).mean())


@dataclass
class Result:
    test_accuracy: float
    seconds: float
    losses: list[float]


def train(epochs: int = 8, batch_size: int = 32, lr: float = 3e-3, seed: int = 0, show_progress: bool = False):
    """Train from a seeded initialization; returns the test accuracy, the wall time and each epoch's mean loss."""
    from rich.progress import Progress

    Tensor.manual_seed(seed)
    data = load_digits_split(seed)
    model = DigitsCNN()
    optimizer = nn.optim.Adam(nn.get_parameters(model), lr=lr)
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
                loss = train_step(model, optimizer, data.train_images[batch], data.train_labels[batch])
                epoch_losses.append(loss)
                progress.advance(task)
            losses.append(float(np.mean([loss.item() for loss in epoch_losses])))
            progress.remove_task(task)
            progress.console.print(f"epoch {epoch + 1}/{epochs}: mean loss {losses[-1]:.4f}")
    test_accuracy = accuracy(model, data.test_images, data.test_labels)
    return Result(test_accuracy, time.perf_counter() - start, losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = train(args.epochs, args.batch_size, args.lr, args.seed, show_progress=sys.stdout.isatty())
    print(f"test accuracy {result.test_accuracy:.2%} after {args.epochs} epochs in {result.seconds:.1f} s")


if __name__ == "__main__":
    main()
