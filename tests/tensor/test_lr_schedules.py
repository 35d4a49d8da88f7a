"""Learning-rate schedules against torch.optim.lr_scheduler's documented closed forms, written out here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.tensor import Tensor
from tg.tensor.nn.optim import SGD
from tg.tensor.nn.schedules import CosineAnnealingLR, MultiStepLR, OneCycleLR, StepLR


def optimizer(lr: float = 0.1) -> SGD:
    return SGD([Tensor(np.ones(3, np.float64), requires_grad=True)], lr=lr)


def lrs(schedule: object, steps: int) -> list[float]:
    values = [schedule.optimizers[0].lr.item()]
    for _ in range(steps - 1):
        schedule.step()
        values.append(schedule.optimizers[0].lr.item())
    return values


def test_step_lr() -> None:
    expected = [0.1 * 0.5 ** (epoch // 3) for epoch in range(10)]
    np.testing.assert_allclose(lrs(StepLR(optimizer(), step_size=3, gamma=0.5), 10), expected)


def test_multi_step_lr() -> None:
    expected = [0.1 * 0.1 ** sum(m <= epoch for m in (2, 5)) for epoch in range(8)]
    np.testing.assert_allclose(lrs(MultiStepLR(optimizer(), milestones=[5, 2]), 8), expected)


def test_cosine_annealing_lr() -> None:
    expected = [0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * t / 6)) / 2 for t in range(7)]
    np.testing.assert_allclose(lrs(CosineAnnealingLR(optimizer(), t_max=6, eta_min=0.01), 7), expected)


def one_cycle_reference(step: int, max_lr: float, total: int, pct: float, div: float, final_div: float) -> float:
    initial, minimum, end_up = max_lr / div, max_lr / div / final_div, pct * total - 1

    def cosine(start: float, end: float, frac: float) -> float:
        return end + (start - end) / 2.0 * (math.cos(math.pi * frac) + 1)

    if step <= end_up:
        return cosine(initial, max_lr, step / end_up)
    return cosine(max_lr, minimum, (step - end_up) / (total - 1 - end_up))


def test_one_cycle_lr() -> None:
    got = lrs(OneCycleLR(optimizer(), max_lr=0.5, total_steps=20), 20)
    expected = [one_cycle_reference(s, 0.5, 20, 0.3, 25.0, 1e4) for s in range(20)]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert max(got) == pytest.approx(0.5)


def test_schedule_changes_the_lr_the_next_optimizer_step_uses() -> None:
    weight = Tensor(np.array([1.0], np.float64), requires_grad=True)
    opt = SGD([weight], lr=1.0)
    schedule = StepLR(opt, step_size=1, gamma=0.5)
    for expected_lr in (1.0, 0.5, 0.25):
        before = weight.numpy().copy()
        (weight * 2).sum().backward()  # gradient 2
        opt.step()
        opt.zero_grad()
        np.testing.assert_allclose(before - weight.numpy(), [2 * expected_lr])
        schedule.step()


def test_bad_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError, match="step_size"):
        StepLR(optimizer(), step_size=0)
    with pytest.raises(ValueError, match="t_max"):
        CosineAnnealingLR(optimizer(), t_max=0)
    schedule = OneCycleLR(optimizer(), max_lr=0.1, total_steps=3)
    schedule.step(), schedule.step()
    with pytest.raises(ValueError, match="total_steps"):
        schedule.step()
