"""Optimizers: SGD (momentum, nesterov, weight decay), Adam, AdamW, LAMB, LARS, Muon, and OptimizerGroup.

An optimizer builds, for each parameter, the lazy graph of its new value (and of its state buffers: momentum,
moments, step powers) and assigns it; `step()` realizes every assign at once, so the whole update (and the forward
and backward graphs the gradients still hold) is one schedule. Learning rate and step counts are tensors, so
changing the learning rate or taking the next step reuses the cached schedule and kernels instead of compiling new
ones (`opt.lr.assign(...)`, or the schedules in tg.tensor.nn.schedules).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tg.tensor.tensor import Tensor


def _state_like(param: Tensor) -> Tensor:
    """A zero-filled buffer shaped like `param` (realized now, so every step's graph has the same shape)."""
    return Tensor.zeros(param.shape, dtype=param.dtype, device=param.device).contiguous().realize()


def _scalar(value: float, like: Tensor) -> Tensor:
    """A 0-d tensor in realized memory (a value that later steps may assign without recompiling)."""
    return Tensor([value], dtype=like.dtype, device=like.device).realize().reshape(())


class Optimizer:
    """The shared part: parameters to train, a learning-rate tensor, `zero_grad`, `step`.

    Tensors passed with `requires_grad=None` are switched to True; tensors with `requires_grad=False` are kept as
    buffers that `step()` realizes with the update (BatchNorm's running statistics, for example).
    """

    def __init__(self, params: Sequence[Tensor], lr: float) -> None:
        for param in params:
            if param.requires_grad is None:
                param.requires_grad = True
        unique = list({id(param): param for param in params}.values())
        self.params: list[Tensor] = [param for param in unique if param.requires_grad]
        self.buffers: list[Tensor] = [param for param in unique if not param.requires_grad]
        if not self.params:
            raise ValueError("an optimizer needs at least one tensor with requires_grad")
        self.lr = _scalar(lr, self.params[0])

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    def step(self) -> None:
        """Assign every parameter its new value and realize them (with the state buffers) in one schedule."""
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """The tensors to realize for one step: the assigned parameters, their state and the buffers."""
        for param in self.params:
            if param.grad is None:
                raise RuntimeError(f"{param!r} has no .grad: call backward() on a loss that depends on it first")
        return self._update() + self.params + self.buffers

    def _update(self) -> list[Tensor]:
        """Assign new values to the parameters; return the state tensors that changed."""
        raise NotImplementedError


def _grad_of(param: Tensor) -> Tensor:
    """The parameter's gradient (schedule_step has checked that every parameter has one)."""
    assert param.grad is not None
    return param.grad


class OptimizerGroup(Optimizer):
    """Several optimizers stepped together (one schedule), e.g. Muon for matrices and AdamW for the rest."""

    def __init__(self, *optimizers: Optimizer) -> None:
        self.optimizers = optimizers
        self.params = [param for optimizer in optimizers for param in optimizer.params]
        self.buffers = [buffer for optimizer in optimizers for buffer in optimizer.buffers]

    def __getitem__(self, index: int) -> Optimizer:
        return self.optimizers[index]

    def zero_grad(self) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        return [tensor for optimizer in self.optimizers for tensor in optimizer.schedule_step()]


class SGD(Optimizer):
    """p -= lr * g with g = grad + weight_decay * p, through momentum buffers as torch (dampening 0):
    b = momentum * b + g; the step uses b, or g + momentum * b with nesterov."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(params, lr)
        if nesterov and momentum <= 0:
            raise ValueError("nesterov momentum needs momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.velocity = [_state_like(param) for param in self.params] if momentum else []

    def _update(self) -> list[Tensor]:
        for i, param in enumerate(self.params):
            grad = _grad_of(param).detach() + self.weight_decay * param.detach()
            if self.momentum:
                velocity = self.velocity[i].assign(self.momentum * self.velocity[i] + grad)
                grad = grad + self.momentum * velocity if self.nesterov else velocity
            param.assign(param.detach() - self.lr * grad)
        return self.velocity


class LAMB(Optimizer):
    """Adam's moment estimates with bias correction; the update u = m / (sqrt(v) + eps) + weight_decay * p is
    scaled by the trust ratio ||p|| / ||u|| (1 where either is zero). `adam=True` drops the trust ratio: that is
    AdamW (decoupled weight decay)."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
    ) -> None:
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.weight_decay, self.adam = b1, b2, eps, weight_decay, adam
        self.b1_power, self.b2_power = _scalar(1.0, self.params[0]), _scalar(1.0, self.params[0])
        self.m = [_state_like(param) for param in self.params]
        self.v = [_state_like(param) for param in self.params]

    def _direction(self, param: Tensor, grad: Tensor) -> Tensor:
        """The gradient the moments see (Adam adds L2 weight decay here; LAMB and AdamW do not)."""
        return grad

    def _update(self) -> list[Tensor]:
        self.b1_power.assign(self.b1_power * self.b1)
        self.b2_power.assign(self.b2_power * self.b2)
        # the bias corrections as factors: m_hat / (sqrt(v_hat) + eps) = m * c1 / (sqrt(v) * c2 + eps), with the 0-d
        # c1 = 1 / (1 - b1^t) and c2 = 1 / sqrt(1 - b2^t) worked out once per kernel (hoisted out of its loop) where
        # dividing m and v per element cost two divisions of every element (the update kernel ran at 2/3 of the
        # bandwidth of its neighbours)
        m_correction = (1.0 - self.b1_power).reciprocal()
        v_correction = (1.0 - self.b2_power).sqrt().reciprocal()
        for i, param in enumerate(self.params):
            grad = self._direction(param, _grad_of(param).detach())
            m = self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * grad)
            v = self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (grad * grad))
            update = m * m_correction / (v.sqrt() * v_correction + self.eps) + self.weight_decay * param.detach()
            if self.adam:
                param.assign(param.detach() - self.lr * update)
                continue
            param_norm, update_norm = param.detach().square().sum().sqrt(), update.square().sum().sqrt()
            trust = ((param_norm > 0) & (update_norm > 0)).where(param_norm / update_norm, 1.0)
            param.assign(param.detach() - self.lr * trust * update)
        return [self.b1_power, self.b2_power, *self.m, *self.v]


class AdamW(LAMB):
    """Adam with decoupled weight decay (torch's AdamW: p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p))."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, weight_decay, adam=True)


class Adam(LAMB):
    """Adam (torch's): weight_decay, if given, is L2 regularization added to the gradient before the moments."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, 0.0, adam=True)
        self.l2 = weight_decay

    def _direction(self, param: Tensor, grad: Tensor) -> Tensor:
        return grad + self.l2 * param.detach() if self.l2 else grad


class LARS(Optimizer):
    """Layer-wise adaptive rate scaling (You et al.): SGD with momentum whose step is scaled per tensor by the trust
    ratio tcoef * ||p|| / (||g|| + weight_decay * ||p||) (1 where a norm is zero); `tcoef=0` turns it off.
    Classic momentum applies the learning rate and ratio before the momentum buffer, as tinygrad's LARS."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        nesterov: bool = False,
        tcoef: float = 0.001,
    ) -> None:
        super().__init__(params, lr)
        self.momentum, self.weight_decay, self.nesterov, self.tcoef = momentum, weight_decay, nesterov, tcoef
        self.velocity = [_state_like(param) for param in self.params] if momentum else []

    def _update(self) -> list[Tensor]:
        for i, param in enumerate(self.params):
            grad, weights = _grad_of(param).detach(), param.detach()
            ratio: Tensor | float
            if self.tcoef:
                weight_norm, grad_norm = weights.square().sum().sqrt(), grad.square().sum().sqrt()
                ratio = self.tcoef * weight_norm / (grad_norm + self.weight_decay * weight_norm)
                ratio = ((weight_norm > 0) & (grad_norm > 0)).where(ratio, 1.0)
            else:
                ratio = 1.0
            grad = (grad + self.weight_decay * weights) * ratio * self.lr
            if self.momentum:
                velocity = self.velocity[i].assign(self.momentum * self.velocity[i] + grad)
                grad = grad + self.momentum * velocity if self.nesterov else velocity
            param.assign(weights - grad)
        return self.velocity


MUON_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(matrix: Tensor, steps: int, coefficients: tuple[float, float, float] = MUON_COEFFICIENTS) -> Tensor:
    """An approximately orthogonal matrix with matrix's singular vectors (Muon's quintic Newton-Schulz iteration)."""
    a, b, c = coefficients
    transposed = matrix.shape[0] > matrix.shape[1]
    x = matrix.T if transposed else matrix
    x = x / (x.square().sum().sqrt() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if transposed else x


class Muon(Optimizer):
    """MomentUm Orthogonalized by Newton-schulz: SGD momentum (nesterov by default) whose update, per matrix,
    is replaced by its orthogonalization and scaled by sqrt(max(1, rows / cols)). Tensors of more than two axes
    are treated as matrices of their first axis by the rest; weight decay is decoupled (p *= 1 - lr * wd)."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.02,
        momentum: float = 0.95,
        weight_decay: float = 0.0,
        nesterov: bool = True,
        ns_steps: int = 5,
    ) -> None:
        super().__init__(params, lr)
        if any(param.ndim < 2 for param in self.params):
            raise ValueError("Muon trains matrices; give vectors and scalars to another optimizer (OptimizerGroup)")
        self.momentum, self.weight_decay, self.nesterov, self.ns_steps = momentum, weight_decay, nesterov, ns_steps
        self.velocity = [_state_like(param) for param in self.params]

    def _update(self) -> list[Tensor]:
        for i, param in enumerate(self.params):
            grad = _grad_of(param).detach()
            velocity = self.velocity[i].assign(self.momentum * self.velocity[i] + grad)
            grad = grad + self.momentum * velocity if self.nesterov else velocity
            rows = param.shape[0]
            cols = param.numel() // rows
            update = newton_schulz(grad.reshape(rows, cols), self.ns_steps).reshape(param.shape)
            update = update * math.sqrt(max(1.0, rows / cols))
            weights = param.detach() * (1.0 - self.lr * self.weight_decay) if self.weight_decay else param.detach()
            param.assign(weights - self.lr * update)
        return self.velocity
