"""Optimizers step by step against float64 numpy references written from the papers' and torch's formulas.

The loss is sum(c * w^2 + d * w) per parameter, whose gradient 2 c w + d the reference computes itself; parameters
are float64 so the comparison is tight. Each step must also be one schedule of a few kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import GlobalCounters, Tensor
from tg.tensor.nn.optim import LAMB, LARS, SGD, Adam, AdamW, Muon, OptimizerGroup, newton_schulz

SHAPES = [(3, 4), (5,)]
STEPS = 4


def _problem(seed: int = 0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=s), rng.uniform(0.5, 2.0, s), rng.normal(size=s)) for s in shapes]


def _grad(w, c, d):
    return 2 * c * w + d


class SGDRef:
    def __init__(self, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        self.lr, self.momentum, self.wd, self.nesterov, self.buf = lr, momentum, weight_decay, nesterov, {}

    def step(self, i, w, g):
        g = g + self.wd * w
        if self.momentum:
            self.buf[i] = self.momentum * self.buf.get(i, 0.0) + g
            g = g + self.momentum * self.buf[i] if self.nesterov else self.buf[i]
        return w - self.lr * g


class AdamRef:
    """Adam (L2 decay in the gradient), AdamW (decoupled decay) and LAMB (trust ratio) in one reference."""

    def __init__(self, lr, b1, b2, eps, weight_decay=0.0, mode="adam"):
        self.lr, self.b1, self.b2, self.eps, self.wd, self.mode = lr, b1, b2, eps, weight_decay, mode
        self.m, self.v, self.t = {}, {}, {}

    def step(self, i, w, g):
        if self.mode == "adam":
            g = g + self.wd * w
        self.t[i] = self.t.get(i, 0) + 1
        self.m[i] = self.b1 * self.m.get(i, 0.0) + (1 - self.b1) * g
        self.v[i] = self.b2 * self.v.get(i, 0.0) + (1 - self.b2) * g * g
        m_hat = self.m[i] / (1 - self.b1 ** self.t[i])
        v_hat = self.v[i] / (1 - self.b2 ** self.t[i])
        update = m_hat / (np.sqrt(v_hat) + self.eps)
        if self.mode == "adamw":
            return w * (1 - self.lr * self.wd) - self.lr * update
        if self.mode == "lamb":
            update = update + self.wd * w
            wn, un = np.linalg.norm(w), np.linalg.norm(update)
            trust = wn / un if wn > 0 and un > 0 else 1.0
            return w - self.lr * trust * update
        return w - self.lr * update


class LARSRef:
    def __init__(self, lr, momentum, weight_decay, nesterov, tcoef):
        self.lr, self.momentum, self.wd, self.nesterov, self.tcoef, self.buf = (
            lr,
            momentum,
            weight_decay,
            nesterov,
            tcoef,
            {},
        )

    def step(self, i, w, g):
        wn, gn = np.linalg.norm(w), np.linalg.norm(g)
        ratio = self.tcoef * wn / (gn + self.wd * wn) if wn > 0 and gn > 0 else 1.0
        g = (g + self.wd * w) * ratio * self.lr
        self.buf[i] = self.momentum * self.buf.get(i, 0.0) + g
        return w - (g + self.momentum * self.buf[i] if self.nesterov else self.buf[i])


def _newton_schulz_ref(g, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if g.shape[0] > g.shape[1] else x


class MuonRef:
    def __init__(self, lr, momentum, weight_decay, nesterov, ns_steps):
        self.lr, self.momentum, self.wd, self.nesterov, self.ns, self.buf = (
            lr,
            momentum,
            weight_decay,
            nesterov,
            ns_steps,
            {},
        )

    def step(self, i, w, g):
        self.buf[i] = self.momentum * self.buf.get(i, 0.0) + g
        g = g + self.momentum * self.buf[i] if self.nesterov else self.buf[i]
        rows = w.shape[0]
        update = _newton_schulz_ref(g.reshape(rows, -1), self.ns).reshape(w.shape) * math.sqrt(
            max(1, rows / (w.size // rows))
        )
        return w * (1 - self.lr * self.wd) - self.lr * update


CASES = [
    ("sgd", lambda p: SGD(p, lr=0.1), SGDRef(0.1)),
    ("sgd_momentum_wd", lambda p: SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01), SGDRef(0.05, 0.9, 0.01)),
    ("sgd_nesterov", lambda p: SGD(p, lr=0.05, momentum=0.8, nesterov=True), SGDRef(0.05, 0.8, 0.0, True)),
    ("adam", lambda p: Adam(p, lr=0.01), AdamRef(0.01, 0.9, 0.999, 1e-8)),
    ("adam_l2", lambda p: Adam(p, lr=0.01, weight_decay=0.1), AdamRef(0.01, 0.9, 0.999, 1e-8, 0.1)),
    ("adamw", lambda p: AdamW(p, lr=0.01, weight_decay=0.1), AdamRef(0.01, 0.9, 0.999, 1e-8, 0.1, "adamw")),
    ("lamb", lambda p: LAMB(p, lr=0.01, weight_decay=0.01), AdamRef(0.01, 0.9, 0.999, 1e-6, 0.01, "lamb")),
    ("lars", lambda p: LARS(p, lr=0.1, tcoef=0.01), LARSRef(0.1, 0.9, 1e-4, False, 0.01)),
    ("lars_nesterov", lambda p: LARS(p, lr=0.1, nesterov=True), LARSRef(0.1, 0.9, 1e-4, True, 0.001)),
]


def _run_and_compare(make, reference, problem, device="CPU"):
    params = [Tensor(w, dtype=dtypes.float64, device=device, requires_grad=True) for w, _, _ in problem]
    consts = [(Tensor(c, device=device), Tensor(d, device=device)) for _, c, d in problem]
    opt = make(params)
    expected = [w.copy() for w, _, _ in problem]
    kernels = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = sum(((c * p * p) + d * p).sum() for p, (c, d) in zip(params, consts, strict=True))
        loss.backward()
        before = GlobalCounters.kernel_count
        opt.step()
        kernels.append(GlobalCounters.kernel_count - before)
        for i, (_, c, d) in enumerate(problem):
            expected[i] = reference.step(i, expected[i], _grad(expected[i], c, d))
        for param, want in zip(params, expected, strict=True):
            np.testing.assert_allclose(param.numpy(), want, rtol=1e-10, atol=1e-12)
    return kernels


@pytest.mark.parametrize(("name", "make", "reference"), CASES, ids=[c[0] for c in CASES])
def test_optimizer_matches_numpy_reference_step_by_step(name, make, reference):
    kernels = _run_and_compare(make, reference, _problem())
    # one schedule per step; each parameter and state buffer is written by its own kernel, nothing more
    assert len(set(kernels[1:])) == 1, kernels
    assert kernels[-1] <= 4 * len(SHAPES) + 6, kernels


def test_muon_matches_numpy_reference():
    problem = _problem(1, [(4, 3), (2, 3, 2)])
    _run_and_compare(
        lambda p: Muon(p, lr=0.02, weight_decay=0.1, ns_steps=3), MuonRef(0.02, 0.95, 0.1, True, 3), problem
    )


def test_newton_schulz_orthogonalizes():
    g = np.random.default_rng(2).normal(size=(4, 6))
    x = newton_schulz(Tensor(g), steps=5).numpy()
    np.testing.assert_allclose(x, _newton_schulz_ref(g, 5), rtol=1e-4, atol=1e-5)
    singular = np.linalg.svd(x, compute_uv=False)
    assert np.all((singular > 0.6) & (singular < 1.3)), singular  # Muon's iteration lands near 1, not exactly


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_sgd_on_python_device(device):
    problem = _problem(3, [(2, 2)])
    _run_and_compare(lambda p: SGD(p, lr=0.1, momentum=0.9), SGDRef(0.1, 0.9), problem, device)


def test_optimizer_group_steps_all_in_one_schedule():
    problem = _problem(4, [(3, 3), (3,)])
    params = [Tensor(w, dtype=dtypes.float64, requires_grad=True) for w, _, _ in problem]
    group = OptimizerGroup(SGD(params[:1], lr=0.1), Adam(params[1:], lr=0.01))
    refs = [SGDRef(0.1), AdamRef(0.01, 0.9, 0.999, 1e-8)]
    expected = [w.copy() for w, _, _ in problem]
    for _ in range(3):
        group.zero_grad()
        sum(
            ((Tensor(c) * p * p) + Tensor(d) * p).sum() for p, (_, c, d) in zip(params, problem, strict=True)
        ).backward()
        group.step()
        for i, (_, c, d) in enumerate(problem):
            expected[i] = refs[i].step(0, expected[i], _grad(expected[i], c, d))
    for param, want in zip(params, expected, strict=True):
        np.testing.assert_allclose(param.numpy(), want, rtol=1e-10)
    assert group[1].params == params[1:]


def test_learning_rate_is_a_tensor_that_can_change_between_steps():
    w = Tensor([1.0, 2.0], dtype=dtypes.float64, requires_grad=True)
    opt = SGD([w], lr=0.1)
    for lr in (0.1, 0.5):
        opt.lr.assign(Tensor(lr, dtype=dtypes.float64))
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    np.testing.assert_allclose(w.numpy(), np.array([1.0, 2.0]) * (1 - 0.2) * (1 - 1.0))


def test_errors():
    with pytest.raises(ValueError, match="requires_grad"):
        SGD([Tensor([1.0], requires_grad=False)])
    w = Tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="no .grad"):
        SGD([w]).step()
    with pytest.raises(ValueError, match="matrices"):
        Muon([w])


# ---------------------------------------------------------------------------------------------------- coupled params


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_step_when_two_parameters_gradients_read_each_other(momentum: float) -> None:
    """loss = sum(x * W): dL/dx reads W and dL/dW reads x, and both updates fuse into the writes. torch updates both
    from the old values; the scheduler must order the step instead of reporting a cycle."""
    x0 = np.array([[1.0, -2.0, 3.0, 4.0]])
    w0 = np.eye(4)
    x = Tensor(x0.tolist(), dtype=dtypes.float64)
    w = Tensor.eye(4, dtype=dtypes.float64).contiguous().realize()
    opt = SGD([x, w], lr=0.1, momentum=momentum)
    ref = SGDRef(lr=0.1, momentum=momentum)
    xs, ws = x0, w0
    for _ in range(2):
        opt.zero_grad()
        (x * w).sum().backward()
        opt.step()
        grad_x = np.broadcast_to(ws.sum(axis=0, keepdims=True), xs.shape)  # d/dx sum(x*W) = column sums of W
        grad_w = np.broadcast_to(xs, ws.shape)  # d/dW = x on every row
        xs, ws = ref.step(0, xs, grad_x), ref.step(1, ws, grad_w)
        np.testing.assert_allclose(x.numpy(), xs, rtol=1e-12)
        np.testing.assert_allclose(w.numpy(), ws, rtol=1e-12)


def test_sgd_coupled_step_first_values_by_hand() -> None:
    x = Tensor([[1.0, -2, 3, 4]])
    w = Tensor.eye(4).contiguous().realize()
    opt = SGD([x, w], lr=0.1)
    (x * w).sum().backward()
    opt.step()
    np.testing.assert_allclose(x.numpy(), [[0.9, -2.1, 2.9, 3.9]], rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), np.eye(4) - 0.1 * np.array([1.0, -2, 3, 4]), rtol=1e-6, atol=1e-7)
