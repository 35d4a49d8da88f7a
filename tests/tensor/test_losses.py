"""Losses against numpy implementations of torch's definitions, on CPU and PYTHON."""

import math

import numpy as np
import pytest

from tg.tensor import Tensor

from .devices import DEVICES

RNG = np.random.default_rng(21)
LOGITS = RNG.uniform(-4, 4, (6, 5)).astype(np.float32)
LABELS = np.array([0, 4, 2, 2, 1, 3], dtype=np.int32)


def np_log_softmax(x, axis):
    x = x.astype(np.float64)
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def np_reduce(loss, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction](loss)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_with_indices_and_probabilities(reduction, smoothing, device):
    classes = LOGITS.shape[1]
    one_hot = np.eye(classes)[LABELS]
    target = one_hot * (1 - smoothing) + smoothing / classes
    expected = np_reduce(-(np_log_softmax(LOGITS, 1) * target).sum(1), reduction)
    logits = Tensor(LOGITS, device=device)
    from_indices = logits.cross_entropy(Tensor(LABELS, device=device), reduction, smoothing)
    np.testing.assert_allclose(from_indices.numpy(), expected, rtol=1e-5)
    from_probabilities = logits.cross_entropy(Tensor(one_hot.astype(np.float32), device=device), reduction, smoothing)
    np.testing.assert_allclose(from_probabilities.numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_over_spatial_axes_uses_axis_one(device):
    logits = RNG.uniform(-3, 3, (2, 4, 3)).astype(np.float32)  # (N, C, d)
    labels = RNG.integers(0, 4, (2, 3)).astype(np.int32)
    picked = np.take_along_axis(np_log_softmax(logits, 1), labels[:, None, :], 1)[:, 0, :]
    result = Tensor(logits, device=device).cross_entropy(Tensor(labels, device=device))
    np.testing.assert_allclose(result.numpy(), -picked.mean(), rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_with_weights_and_ignored_targets(reduction, device):
    log_probabilities = np_log_softmax(LOGITS, 1).astype(np.float32)
    weight = np.array([1.0, 2.0, 0.5, 1.5, 3.0], dtype=np.float32)
    labels = LABELS.copy()
    labels[1] = -100
    kept = labels != -100
    w = np.where(kept, weight[np.where(kept, labels, 0)], 0.0)
    losses = -w * log_probabilities[np.arange(6), np.where(kept, labels, 0)]
    expected = {"mean": losses.sum() / w.sum(), "sum": losses.sum(), "none": losses}[reduction]
    result = Tensor(log_probabilities, device=device).nll_loss(
        Tensor(labels, device=device), weight=Tensor(weight, device=device), ignore_index=-100, reduction=reduction
    )
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_sparse_categorical_crossentropy_ignores_the_ignore_index(smoothing, device):
    labels = LABELS.copy()
    labels[2] = -1
    kept = labels != -1
    log_probabilities = np_log_softmax(LOGITS, -1)
    picked = -log_probabilities[np.arange(6), np.where(kept, labels, 0)]
    per_row = (1 - smoothing) * picked - smoothing * log_probabilities.mean(-1)
    expected = (per_row * kept).sum() / kept.sum()
    result = Tensor(LOGITS, device=device).sparse_categorical_crossentropy(
        Tensor(labels, device=device), label_smoothing=smoothing
    )
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_binary_crossentropy_clamps_its_logs_at_minus_100(device):
    p = np.array([0.0, 0.3, 0.9, 1.0], dtype=np.float32)
    y = np.array([1.0, 0.0, 1.0, 0.0], dtype=np.float32)
    with np.errstate(divide="ignore"):
        log_p = np.maximum(np.log(p.astype(np.float64)), -100)
        log_not_p = np.maximum(np.log(1 - p.astype(np.float64)), -100)
    expected = -(y * log_p + (1 - y) * log_not_p)
    result = Tensor(p, device=device).binary_crossentropy(Tensor(y, device=device), reduction="none")
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)
    mean = Tensor(p, device=device).binary_crossentropy(Tensor(y, device=device))
    np.testing.assert_allclose(mean.numpy(), expected.mean(), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_binary_crossentropy_logits_is_exact_for_huge_logits(device):
    x = np.array([-200.0, -3.0, 0.0, 2.0, 200.0, 1e30], dtype=np.float32)
    y = np.array([1.0, 0.0, 1.0, 0.25, 0.0, 1.0], dtype=np.float32)
    x64 = x.astype(np.float64)
    expected = (1 - y) * x64 + np.logaddexp(0, -x64)  # -(y log sigmoid(x) + (1-y) log(1 - sigmoid(x)))
    result = Tensor(x, device=device).binary_crossentropy_logits(Tensor(y, device=device), reduction="none")
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)
    pos_weight = np.float32(3.0)
    weighted = (1 - y) * x64 + (1 + (pos_weight - 1) * y) * np.logaddexp(0, -x64)
    result = Tensor(x, device=device).binary_crossentropy_logits(
        Tensor(y, device=device), reduction="sum", pos_weight=Tensor([pos_weight], device=device)
    )
    np.testing.assert_allclose(result.numpy(), weighted.sum(), rtol=1e-6)
    assert math.isfinite(result.item())


def test_unknown_reduction_is_an_error():
    with pytest.raises(ValueError, match="reduction"):
        Tensor(LOGITS).cross_entropy(Tensor(LABELS), reduction="average")
