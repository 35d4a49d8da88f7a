"""Issue 30 item 1: every creation op accepts and honours `requires_grad=`, `dtype=` and `device=` (torch's and
tinygrad's constructors take them all), and its own arguments (fill value, bounds, step, ...)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

# name -> a call of that constructor making a float tensor of 6 elements, given the keyword arguments under test
FLOAT_CONSTRUCTORS: dict[str, Callable[..., Tensor]] = {
    "empty": lambda **kw: Tensor.empty(2, 3, **kw),
    "invalids": lambda **kw: Tensor.invalids(2, 3, **kw),
    "zeros": lambda **kw: Tensor.zeros(2, 3, **kw),
    "ones": lambda **kw: Tensor.ones(2, 3, **kw),
    "full": lambda **kw: Tensor.full((2, 3), 1.5, **kw),
    "eye": lambda **kw: Tensor.eye(2, 3, **kw),
    "arange": lambda **kw: Tensor.arange(0.0, 3.0, 0.5, **kw),
    "linspace": lambda **kw: Tensor.linspace(0, 1, 6, **kw),
    "rand": lambda **kw: Tensor.rand(2, 3, **kw),
    "randn": lambda **kw: Tensor.randn(2, 3, **kw),
    "uniform": lambda **kw: Tensor.uniform(2, 3, low=-2.0, high=2.0, **kw),
    "normal": lambda **kw: Tensor.normal(2, 3, mean=1.0, std=0.5, **kw),
    "scaled_uniform": lambda **kw: Tensor.scaled_uniform(2, 3, **kw),
    "glorot_uniform": lambda **kw: Tensor.glorot_uniform(2, 3, **kw),
    "kaiming_uniform": lambda **kw: Tensor.kaiming_uniform(2, 3, a=0.5, **kw),
    "kaiming_normal": lambda **kw: Tensor.kaiming_normal(2, 3, a=0.5, **kw),
    "empty_like": lambda **kw: Tensor.ones(2, 3).empty_like(**kw),
    "zeros_like": lambda **kw: Tensor.ones(2, 3).zeros_like(**kw),
    "ones_like": lambda **kw: Tensor.ones(2, 3).ones_like(**kw),
    "full_like": lambda **kw: Tensor.ones(2, 3).full_like(-4.0, **kw),
    "rand_like": lambda **kw: Tensor.ones(2, 3).rand_like(**kw),
    "randn_like": lambda **kw: Tensor.ones(2, 3).randn_like(**kw),
}
NAMES = list(FLOAT_CONSTRUCTORS)


@pytest.mark.parametrize("name", NAMES)
def test_requires_grad_true_makes_a_leaf_whose_gradient_is_filled(name: str) -> None:
    t = FLOAT_CONSTRUCTORS[name](requires_grad=True, dtype=dtypes.float64)
    assert t.requires_grad is True
    values = t.numpy()
    (t * t * 3.0).sum().backward()  # d/dt sum(3 t^2) = 6 t
    assert t.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), 6.0 * values, rtol=1e-12)


def test_constant_leaves_with_requires_grad_do_not_share_their_gradient() -> None:
    """Two equal constants are one graph node; a leaf that requires grad must be its own (torch: distinct leaves)."""
    a = Tensor.zeros(3, requires_grad=True)
    b = Tensor.zeros(3)
    (a * 2.0 + b * 5.0).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0, 2.0])
    assert b.grad is None


@pytest.mark.parametrize("name", NAMES)
def test_requires_grad_false_and_none_are_kept(name: str) -> None:
    assert FLOAT_CONSTRUCTORS[name](requires_grad=False).requires_grad is False
    assert FLOAT_CONSTRUCTORS[name]().requires_grad is None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.float16])
def test_dtype_is_honoured(name: str, dtype) -> None:
    t = FLOAT_CONSTRUCTORS[name](dtype=dtype)
    assert t.dtype is dtype
    assert t.numpy().dtype == np.dtype(dtype.name if dtype is not dtypes.float16 else "float16")


@pytest.mark.parametrize("name", NAMES)
def test_device_is_honoured(name: str) -> None:
    t = FLOAT_CONSTRUCTORS[name](device="PYTHON")
    assert t.device == "PYTHON"
    assert t.numel() == 6
    t.numpy()  # runs on the emulator


def test_op_specific_arguments_are_honoured() -> None:
    np.testing.assert_array_equal(Tensor.full((2,), 7, dtype=dtypes.int16).numpy(), np.full(2, 7, np.int16))
    np.testing.assert_array_equal(Tensor.eye(2, 3).numpy(), np.eye(2, 3, dtype=np.float32))
    np.testing.assert_array_equal(Tensor.arange(1, 8, 3).numpy(), np.arange(1, 8, 3, dtype=np.int32))
    np.testing.assert_allclose(Tensor.linspace(-1, 1, 5).numpy(), np.linspace(-1, 1, 5, dtype=np.float32))
    u = Tensor.uniform(4000, low=-2.0, high=-1.5).numpy()
    assert u.min() >= -2.0 and u.max() < -1.5
    n = Tensor.normal(20000, mean=3.0, std=0.25, dtype=dtypes.float64).numpy()
    assert abs(n.mean() - 3.0) < 0.02 and abs(n.std() - 0.25) < 0.02
    # kaiming_uniform(a): bound = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in)
    k = Tensor.kaiming_uniform(300, 50, a=2.0).numpy()
    bound = np.sqrt(3.0) * np.sqrt(2.0 / 5.0) / np.sqrt(50)
    assert np.abs(k).max() <= bound and np.abs(k).max() > 0.9 * bound
    r = Tensor.randint(1000, low=-3, high=2, dtype=dtypes.int8, device="PYTHON")
    assert r.dtype is dtypes.int8 and set(r.numpy().tolist()) == {-3, -2, -1, 0, 1}
    p = Tensor.randperm(6, dtype=dtypes.int64, device="PYTHON")
    assert p.dtype is dtypes.int64 and sorted(p.tolist()) == list(range(6))


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.uint8])
def test_uniform_with_an_integer_dtype_draws_integers_in_low_high(dtype) -> None:
    values = Tensor.uniform(3000, low=2, high=9, dtype=dtype)
    assert values.dtype is dtype
    assert set(values.numpy().tolist()) == set(range(2, 9))  # every value of [low, high) appears, high never


def test_uniform_with_an_integer_dtype_needs_integer_bounds() -> None:
    with pytest.raises(ValueError, match="integer"):
        Tensor.uniform(3, low=0.5, high=2, dtype=dtypes.int32)
