"""Small ops of the existing surface that had no test of their own: relu, clamp, square, the cast shorthands and
the size properties, against numpy on CPU and PYTHON."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES

X = np.array([-2.5, -0.0, 0.0, 1.5, 1e9, -1e9, np.inf, -np.inf], dtype=np.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_relu_matches_numpy_and_keeps_nan(device):
    np.testing.assert_array_equal(Tensor(X, device=device).relu().numpy(), np.where(X > 0, X, 0))
    assert math.isnan(Tensor([math.nan], device=device).relu().item())
    assert Tensor([-3, 4], dtype=dtypes.int8, device=device).relu().tolist() == [0, 4]


@pytest.mark.parametrize("device", DEVICES)
def test_clamp_is_clip_and_keeps_nan(device):
    t = Tensor(np.r_[X, np.nan].astype(np.float32), device=device)
    expected = np.clip(np.r_[X, np.nan], -1.0, 2.0)
    np.testing.assert_array_equal(t.clamp(-1.0, 2.0).numpy(), expected)
    np.testing.assert_array_equal(t.clamp(max_=2.0).numpy(), np.minimum(np.r_[X, np.nan], 2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_square_matches_numpy(device):
    np.testing.assert_array_equal(Tensor(X, device=device).square().numpy(), np.square(X))
    ints = np.array([-7, 0, 11], dtype=np.int16)
    np.testing.assert_array_equal(Tensor(ints, device=device).square().numpy(), np.square(ints))


@pytest.mark.parametrize("device", DEVICES)
def test_cast_shorthands(device):
    t = Tensor([1.75, -2.5, 3.0], device=device)
    assert t.double().dtype is dtypes.float64 and t.double().tolist() == [1.75, -2.5, 3.0]
    assert t.half().dtype is dtypes.float16 and t.half().tolist() == [1.75, -2.5, 3.0]
    assert t.int().dtype is dtypes.int32 and t.int().tolist() == [1, -2, 3]


def test_size_properties():
    t = Tensor.zeros(2, 3, dtype=dtypes.float16)
    assert (t.ndim, t.numel(), t.element_size(), t.nbytes()) == (2, 6, 2, 12)
    assert t.is_floating_point() and not Tensor([1, 2]).is_floating_point()


@pytest.mark.parametrize("device", DEVICES)
def test_data_is_the_contiguous_bytes(device):
    values = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert bytes(Tensor(values, device=device).T.data()) == values.T.copy().tobytes()


@pytest.mark.parametrize("device", DEVICES)
def test_clip_with_one_or_both_bounds(device):
    t = Tensor(X, device=device)
    np.testing.assert_array_equal(t.clip(-1.0, 2.0).numpy(), np.clip(X, -1.0, 2.0))
    np.testing.assert_array_equal(t.clip(min_=0.5).numpy(), np.maximum(X, 0.5))
    assert Tensor([-5, 5, 300], dtype=dtypes.int16, device=device).clip(-1, 200).tolist() == [-1, 5, 200]


@pytest.mark.parametrize("device", DEVICES)
def test_logical_not_of_numbers_and_bools(device):
    values = np.array([0.0, -0.0, 2.0, np.nan], dtype=np.float32)
    np.testing.assert_array_equal(Tensor(values, device=device).logical_not().numpy(), np.logical_not(values))
    assert Tensor([True, False], device=device).logical_not().tolist() == [False, True]


@pytest.mark.parametrize("device", DEVICES)
def test_view_is_reshape(device):
    values = np.arange(12, dtype=np.float32)
    np.testing.assert_array_equal(Tensor(values, device=device).view(3, -1).numpy(), values.reshape(3, 4))
