"""The autograd API: requires_grad, backward and .grad, gradient(*targets, gradient=), detach, no_grad, the train and
test modes, and that a backward graph is lazy and fuses with the forward. Values are checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import GlobalCounters, Tensor
from tg.tensor.autograd import no_grad

from .devices import DEVICES


@pytest.mark.parametrize("device", DEVICES)
def test_backward_fills_grad_of_tensors_that_require_it(device):
    xn = np.array([[1.0, -2.0, 3.0], [0.5, 0.25, -1.0]], dtype=np.float32)
    wn = np.array([[0.1, 0.2], [0.3, -0.4], [0.5, 0.6]], dtype=np.float32)
    x = Tensor(xn, device=device, requires_grad=True)
    w = Tensor(wn, device=device, requires_grad=True)
    constant = Tensor(wn, device=device)  # requires_grad None: no .grad
    loss = ((x @ w).relu() * (constant.sum() + 1)).sum()
    loss.backward()
    upstream = (xn @ wn > 0) * (wn.sum() + 1)
    np.testing.assert_allclose(x.grad.numpy(), upstream @ wn.T, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), xn.T @ upstream, rtol=1e-5)
    assert constant.grad is None
    assert x.grad.device == device


def test_backward_accumulates_until_grad_is_reset():
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2 + 3, 4 + 3])
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3, 3])


def test_requires_grad_false_and_requires_grad_underscore():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = Tensor([3.0, 4.0]).requires_grad_()
    assert y.requires_grad is True
    x.requires_grad = False
    (x * y).sum().backward()
    assert x.grad is None
    np.testing.assert_allclose(y.grad.numpy(), [1.0, 2.0])


def test_gradient_with_an_explicit_output_gradient():
    x = Tensor([1.0, 2.0, 3.0])
    y = Tensor([0.5, -1.0, 2.0])
    out = x * y + x
    gx, gy = out.gradient(x, y, gradient=Tensor([1.0, 10.0, 100.0]))
    np.testing.assert_allclose(gx.numpy(), [1.5, 0.0, 300.0])
    np.testing.assert_allclose(gy.numpy(), [1.0, 20.0, 300.0])


def test_gradient_of_a_target_below_another_target():
    x = Tensor([2.0])
    h = x * x
    gx, gh = (h * 3).sum().gradient(x, h)
    np.testing.assert_allclose(gh.numpy(), [3.0])
    np.testing.assert_allclose(gx.numpy(), [12.0])


def test_gradient_errors():
    x = Tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="non-scalar"):
        (x * 2).gradient(x)
    with pytest.raises(RuntimeError, match="only float"):
        Tensor([1, 2]).sum().gradient(x)
    with pytest.raises(RuntimeError, match="not in the graph"):
        x.sum().gradient(Tensor([3.0]))
    with pytest.raises(ValueError, match="shape"):
        (x * 2).gradient(x, gradient=Tensor([1.0]))


def test_target_reached_only_through_comparisons_gets_zeros():
    x = Tensor([1.0, -2.0])
    (g,) = (x > 0).where(1.0, 2.0).sum().gradient(x)
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0])


def test_detach_stops_the_gradient():
    x = Tensor([1.0, 2.0])
    (g,) = (x * x.detach()).sum().gradient(x)
    np.testing.assert_allclose(g.numpy(), [1.0, 2.0])  # d(x * c)/dx = c, not 2x


@pytest.mark.parametrize("device", DEVICES)
def test_cast_between_floats_passes_the_gradient_back_in_the_source_dtype(device):
    x = Tensor([1.5, -2.0], device=device, dtype=dtypes.float64)
    (g,) = (x.float() * 3).half().cast(dtypes.float32).double().sum().gradient(x)
    assert g.dtype is dtypes.float64
    np.testing.assert_array_equal(g.numpy(), [3.0, 3.0])
    (g,) = (x.cast(dtypes.int32).float() * 2).sum().gradient(x)  # through an int: piecewise constant
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0])


def test_no_grad_cuts_results_off_from_autograd():
    x = Tensor([1.0, 2.0], requires_grad=True)
    with no_grad():
        frozen = x * 5
    assert Tensor.no_grad is False
    (x * frozen).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 10.0])  # frozen counts as a constant
    np.testing.assert_allclose(frozen.numpy(), [5.0, 10.0])


def test_train_and_test_modes_as_context_and_decorator():
    assert Tensor.training is False
    with Tensor.train():
        assert Tensor.training is True
        with Tensor.test():
            assert Tensor.training is False
        assert Tensor.training is True

    @Tensor.train(False)
    def evaluate() -> bool:
        return Tensor.training

    with Tensor.train():
        assert evaluate() is False
    assert Tensor.training is False


def test_backward_graph_is_lazy_and_fuses_with_the_forward():
    """d/dx sum(exp(x) * y) = exp(x) * y: forward and backward of an elementwise chain are one kernel each."""
    x = Tensor(np.linspace(-1, 1, 64, dtype=np.float32)).realize()
    y = Tensor(np.linspace(1, 2, 64, dtype=np.float32)).realize()
    loss = (x.exp() * y).sum()
    (gx,) = loss.gradient(x)
    before = GlobalCounters.kernel_count
    gx.realize()
    assert GlobalCounters.kernel_count - before == 1
    np.testing.assert_allclose(gx.numpy(), np.exp(x.numpy()) * y.numpy(), rtol=1e-6)


def test_clone_and_contiguous_pass_the_gradient():
    x = Tensor([1.0, 2.0])
    (g,) = (x.clone() * x.contiguous()).sum().gradient(x)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])


def test_gradient_after_the_loss_and_the_targets_were_realized():
    """Realizing (printing) a loss or a parameter must not cut the graph that backward() differentiates."""
    w = Tensor([1.0, -2.0], requires_grad=True)
    hidden = (w * 3).realize()  # an intermediate read before the loss is built
    loss = (hidden * w).sum()
    assert loss.item() == 15.0
    w.numpy()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), [6.0, -12.0])  # d(3 w^2)/dw = 6 w


@pytest.mark.parametrize("ask", ["gradient", "backward"])
def test_gradient_flows_through_a_realized_intermediate_when_the_target_is_also_read_directly(ask):
    """Regression: with the target read both directly and through a realized intermediate, the intermediate's
    graph was not restored (the target was found without it), so the gradient silently missed that path."""
    x = Tensor([1.0, -2.0], requires_grad=True)
    hidden = (x * 3).realize()
    loss = (hidden * x).sum()  # not realized: x sits in its graph directly
    if ask == "gradient":
        grad = loss.gradient(x)[0]
    else:
        loss.backward()
        grad = x.grad
    np.testing.assert_allclose(grad.numpy(), [6.0, -12.0])  # d(3 x^2)/dx = 6 x
