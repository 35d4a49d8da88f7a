"""Gradients at kinks and extreme inputs, against the values of spec tensor.md Appendix B and section 1.7 (torch's
conventions): relu'(0) = 0, abs'(0) = 0, ties of max/min split the gradient evenly, clamp passes it at its bounds,
sqrt'(0) = inf, strict interiors for relu6/hardtanh/hardsigmoid, no 0 * inf NaN from unused exponential branches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


def _grad_of(values, fn, device: str) -> np.ndarray:
    x = Tensor(values, device=device, dtype=dtypes.float32)
    (grad,) = fn(x).sum().gradient(x)
    return grad.numpy()


CASES = [
    # name, inputs, function, expected gradient
    ("hardsigmoid", [1e7, 1e8, 2.68e8, 1e9], lambda x: x.hardsigmoid(), [0, 0, 0, 0]),
    ("hardsigmoid", [-3.1, -3, -2.9, 2.9, 3, 3.1], lambda x: x.hardsigmoid(), [0, 0, 1 / 6, 1 / 6, 0, 0]),
    ("relu6", [6.71089e7, 2.68435e8, 1e9], lambda x: x.relu6(), [0, 0, 0]),
    ("relu6", [0.0, 6.0, 3.0], lambda x: x.relu6(), [0, 0, 1]),
    ("hardtanh", [-1.0, 1.0, 0.5], lambda x: x.hardtanh(), [0, 0, 1]),
    ("hardswish", [-3.0, 3.0], lambda x: x.hardswish(), [-0.5, 1.5]),
    ("celu", [300.0, 350.0, 400.0], lambda x: x.celu(), [1, 1, 1]),
    ("elu", [300.0, 350.0, 400.0], lambda x: x.elu(), [1, 1, 1]),
    ("selu", [300.0, 400.0, -1.0, 0.0, 1.0], lambda x: x.selu(), None),  # finite (no 0 * inf)
    ("asin", [0.0], lambda x: x.asin(), [1.0]),
    ("acos", [0.0], lambda x: x.acos(), [-1.0]),
    ("atan", [0.0], lambda x: x.atan(), [1.0]),
    ("erf", [0.0], lambda x: x.erf(), [2 / math.sqrt(math.pi)]),
    ("relu", [-1.0, 0.0, 2.0], lambda x: x.relu(), [0, 0, 1]),
    ("abs", [-2.0, 0.0, 3.0], lambda x: x.abs(), [-1, 0, 1]),
    ("sign", [-2.0, 0.0, 3.0], lambda x: x.sign(), [0, 0, 0]),
    ("max", [1.0, 3.0, 3.0], lambda x: x.max(), [0, 0.5, 0.5]),
    ("max", [2.0, 2.0, 2.0, 2.0], lambda x: x.max(), [0.25, 0.25, 0.25, 0.25]),
    ("min", [1.0, 1.0, 3.0], lambda x: x.min(), [0.5, 0.5, 0]),
    ("maximum", [1.0, 2.0, 3.0], lambda x: x.maximum(2.0), [0, 0.5, 1]),
    ("minimum", [1.0, 2.0, 3.0], lambda x: x.minimum(2.0), [1, 0.5, 0]),
    ("clamp", [-1.0, 0.0, 0.5, 1.0, 2.0], lambda x: x.clamp(0.0, 1.0), [0, 1, 1, 1, 0]),
    ("clip", [-1.0, 0.0, 1.0, 2.0], lambda x: x.clip(min_=0.0), [0, 1, 1, 1]),
    ("sqrt", [0.0, 4.0], lambda x: x.sqrt(), [math.inf, 0.25]),
    ("leaky_relu", [0.0, -1.0], lambda x: x.leaky_relu(0.1), [0.1, 0.1]),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "values", "fn", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_gradient_at_kinks_and_extremes(name, values, fn, expected, device):
    grad = _grad_of(values, fn, device)
    assert grad.dtype == np.float32
    if expected is None:
        assert np.isfinite(grad).all(), f"{name}: {grad}"
        return
    np.testing.assert_allclose(grad, np.array(expected, dtype=np.float32), rtol=1e-5, atol=1e-6)


def test_maximum_tie_splits_between_both_operands():
    a, b = Tensor([1.0, 2.0]), Tensor([1.0, 3.0])
    ga, gb = a.maximum(b).sum().gradient(a, b)
    np.testing.assert_array_equal(ga.numpy(), [0.5, 0.0])
    np.testing.assert_array_equal(gb.numpy(), [0.5, 1.0])


def test_forward_values_keep_their_extremes():
    """The kink rewrites must not change forward values (spec 1.7's table)."""
    np.testing.assert_array_equal(Tensor([-2.0, -0.0, 0.0, 3.0, math.nan]).abs().numpy(), [2, 0, 0, 3, math.nan])
    np.testing.assert_array_equal(Tensor([6.71089e7, 2.68435e8, 1e9, 0.0]).relu6().numpy(), [6, 6, 6, 0])
    np.testing.assert_array_equal(Tensor([-1.0, math.nan, 5.0]).clamp(0, 1).numpy(), [0, math.nan, 1])
    np.testing.assert_array_equal(Tensor([2.0, math.nan]).maximum(Tensor([2.0, 1.0])).numpy(), [2.0, math.nan])
    np.testing.assert_array_equal(Tensor([-2.0, 0.0, 3.0, math.nan]).sign().numpy(), [-1, 0, 1, math.nan])
