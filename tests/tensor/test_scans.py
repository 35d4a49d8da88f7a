"""cumsum, cumprod, cummax, cummin and logcumsumexp against numpy on CPU and PYTHON, along every axis."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES

RNG = np.random.default_rng(9)
X = RNG.uniform(-2, 2, (3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_scans_match_numpy(axis, device):
    t = Tensor(X, device=device)
    x64 = X.astype(np.float64)
    np.testing.assert_allclose(t.cumsum(axis).numpy(), np.cumsum(x64, axis), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t.cumprod(axis).numpy(), np.cumprod(x64, axis), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(t.cummax(axis)[0].numpy(), np.maximum.accumulate(X, axis))
    np.testing.assert_array_equal(t.cummin(axis)[0].numpy(), np.minimum.accumulate(X, axis))
    expected = np.logaddexp.accumulate(x64, axis)
    np.testing.assert_allclose(t.logcumsumexp(axis).numpy(), expected, rtol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_int_and_bool_scans(device):
    ints = np.array([[3, -1, 4], [1, -5, 9]], dtype=np.int32)
    t = Tensor(ints, device=device)
    np.testing.assert_array_equal(t.cumsum(1).numpy(), np.cumsum(ints, 1))
    np.testing.assert_array_equal(t.cumprod(1).numpy(), np.cumprod(ints, 1))
    np.testing.assert_array_equal(t.cummax(1).values.numpy(), np.maximum.accumulate(ints, 1))
    np.testing.assert_array_equal(t.cummin(1).values.numpy(), np.minimum.accumulate(ints, 1))
    small = np.array([-128, 5, 127, -3], dtype=np.int8)
    np.testing.assert_array_equal(Tensor(small, device=device).cummin().values.numpy(), np.minimum.accumulate(small))
    flags = Tensor([False, True, False, True], device=device)
    assert flags.cumsum().dtype is dtypes.int32
    assert flags.cumsum().tolist() == [0, 1, 1, 2]
    assert flags.cummax().values.tolist() == [False, True, True, True]


@pytest.mark.parametrize("device", DEVICES)
def test_logcumsumexp_with_infinities(device):
    inf = math.inf
    result = Tensor([-inf, 0.0, 1.0], device=device).logcumsumexp().numpy()
    np.testing.assert_allclose(result, [-inf, 0.0, 1.3132617], rtol=1e-6)
    assert Tensor([-inf, -inf], device=device).logcumsumexp().tolist() == [-inf, -inf]
    assert Tensor([1.0, inf, 2.0], device=device).logcumsumexp().tolist()[1:] == [inf, inf]
    big = Tensor([1000.0, 1000.0], device=device).logcumsumexp().numpy()
    np.testing.assert_allclose(big, [1000.0, 1000.0 + math.log(2)], rtol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_cummax_carries_nan_forward(device):
    x = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    result = Tensor(x, device=device).cummax().values.numpy()
    assert result[0] == 1.0 and np.isnan(result[1:]).all()


def test_cumsum_of_513_elements_repeated_and_reshaped():
    """Spec 1.8 (test_cumsum_parallel_reduce_fused): a realized arange's cumsum tiled and multiplied."""
    t = Tensor.arange(513, device="CPU").float().realize()
    pattern = RNG.uniform(-1, 1, (10, 513)).astype(np.float32)
    tiled = t.cumsum().unsqueeze(0).expand(10, 513)
    result = (tiled * Tensor(pattern, device="CPU")).flatten().numpy()
    expected = (np.tile(np.cumsum(np.arange(513, dtype=np.float64)), (10, 1)) * pattern).flatten()
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_scan_of_a_scalar_is_itself(device):
    assert Tensor(2.5, device=device).cumsum().item() == 2.5
    assert Tensor(2.5, device=device).logcumsumexp().item() == 2.5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [513, 700])
def test_long_scans_use_blocks_and_match_numpy(size, device):
    """Beyond 512 elements the axis is scanned in blocks (the padded last block included)."""
    x = RNG.uniform(-1, 1, (2, size)).astype(np.float32)
    t = Tensor(x, device=device)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(t.cumsum(1).numpy(), np.cumsum(x64, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(t.cummax(1).values.numpy(), np.maximum.accumulate(x, 1))
    np.testing.assert_allclose(t.logcumsumexp(1).numpy(), np.logaddexp.accumulate(x64, 1), rtol=1e-5)
    near_one = (1 + x / 1000).astype(np.float32)
    np.testing.assert_allclose(Tensor(near_one, device=device).cumprod(1).numpy(), np.cumprod(near_one, 1), rtol=1e-4)


def test_very_long_cumsum_of_ints_is_exact():
    values = RNG.integers(-1000, 1000, 300_000).astype(np.int32)  # blocks of blocks
    np.testing.assert_array_equal(Tensor(values, device="CPU").cumsum().numpy(), np.cumsum(values))
    flags = RNG.random(5000) < 0.5
    np.testing.assert_array_equal(Tensor(flags, device="CPU").cumsum().numpy(), np.cumsum(flags))
