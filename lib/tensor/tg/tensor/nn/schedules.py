"""Learning-rate schedules: each `step()` moves to the next epoch (or batch) and assigns the optimizer's lr tensor.

    opt = nn.optim.Adam(params, lr=1e-3)
    schedule = CosineAnnealingLR(opt, t_max=10)
    for epoch in range(10):
        train_one_epoch(opt)
        schedule.step()

The values follow torch.optim.lr_scheduler's closed forms. The lr is a tensor the optimizer's step graph reads,
so a new value reuses the compiled step instead of compiling a new one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tg.tensor.nn.optim import Optimizer, OptimizerGroup


class LRSchedule:
    """Counts steps and sets every optimizer's lr to `lr_at(step)`; `base_lr` is the lr the optimizer started with."""

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizers = list(optimizer.optimizers) if isinstance(optimizer, OptimizerGroup) else [optimizer]
        self.base_lrs = [float(opt.lr.item()) for opt in self.optimizers]
        self.step_count = 0
        self._apply()

    def lr_at(self, step: int, base_lr: float) -> float:
        raise NotImplementedError

    def step(self) -> None:
        self.step_count += 1
        self._apply()

    def get_lr(self) -> list[float]:
        """The lr each optimizer has now."""
        return [self.lr_at(self.step_count, base) for base in self.base_lrs]

    def _apply(self) -> None:
        for optimizer, lr in zip(self.optimizers, self.get_lr(), strict=True):
            optimizer.lr.assign(optimizer.lr.full_like(lr)).realize()


class StepLR(LRSchedule):
    """lr = base * gamma ** (step // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1) -> None:
        if step_size < 1:
            raise ValueError(f"step_size must be at least 1, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** (step // self.step_size)


class MultiStepLR(LRSchedule):
    """lr = base * gamma ** (how many milestones are <= step)."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1) -> None:
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** sum(1 for m in self.milestones if m <= step)


class CosineAnnealingLR(LRSchedule):
    """lr = eta_min + (base - eta_min) * (1 + cos(pi * step / t_max)) / 2."""

    def __init__(self, optimizer: Optimizer, t_max: int, eta_min: float = 0.0) -> None:
        if t_max < 1:
            raise ValueError(f"t_max must be at least 1, got {t_max}")
        self.t_max, self.eta_min = t_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * step / self.t_max)) / 2


class OneCycleLR(LRSchedule):
    """Warm up from max_lr / div_factor to max_lr over pct_start of total_steps, then anneal (cosine) to
    initial / final_div_factor; one `step()` per batch. The optimizer's own lr is replaced."""

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float,
        total_steps: int,
        pct_start: float = 0.3,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
    ) -> None:
        if total_steps < 2 or not 0 < pct_start < 1:
            raise ValueError("OneCycleLR needs total_steps >= 2 and 0 < pct_start < 1")
        self.initial = max_lr / div_factor
        self.max_lr, self.minimum = max_lr, self.initial / final_div_factor
        self.warmup_end = pct_start * total_steps - 1
        self.total_steps = total_steps
        super().__init__(optimizer)

    @staticmethod
    def _cosine(start: float, end: float, fraction: float) -> float:
        return end + (start - end) / 2 * (1 + math.cos(math.pi * fraction))

    def lr_at(self, step: int, base_lr: float) -> float:
        if step > self.total_steps - 1:
            raise ValueError(f"OneCycleLR was stepped {step} times, more than total_steps - 1 = {self.total_steps - 1}")
        if step <= self.warmup_end:
            return self._cosine(self.initial, self.max_lr, step / self.warmup_end)
        fraction = (step - self.warmup_end) / (self.total_steps - 1 - self.warmup_end)
        return self._cosine(self.max_lr, self.minimum, fraction)
