"""softmax, log_softmax, logsumexp, var/std, argmax/argmin, any/all against numpy on CPU and PYTHON, including
infinite and NaN inputs."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES

RNG = np.random.default_rng(5)
X = RNG.uniform(-20, 20, (3, 4, 5)).astype(np.float32)


def np_logsumexp(x, axis, keepdims=False):
    return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax_match_numpy(axis, device):
    x64 = X.astype(np.float64)
    expected = np.exp(x64) / np.exp(x64).sum(axis, keepdims=True)
    np.testing.assert_allclose(Tensor(X, device=device).softmax(axis).numpy(), expected, rtol=3e-6, atol=1e-12)
    expected_log = x64 - np_logsumexp(x64, axis, keepdims=True)
    np.testing.assert_allclose(Tensor(X, device=device).log_softmax(axis).numpy(), expected_log, rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_of_huge_logits_does_not_overflow(device):
    result = Tensor([[1000.0, 1001.0], [-1000.0, -1001.0]], device=device).softmax(-1).numpy()
    expected = np.array([[1 / (1 + math.e), math.e / (1 + math.e)], [math.e / (1 + math.e), 1 / (1 + math.e)]])
    np.testing.assert_allclose(result, expected, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [None, 0, (1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp_matches_numpy(axis, keepdim, device):
    result = Tensor(X, device=device).logsumexp(axis, keepdim=keepdim)
    expected = np_logsumexp(X.astype(np.float64), axis, keepdims=keepdim)
    assert result.shape == expected.shape
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_logsumexp_with_infinities(device):
    inf = math.inf
    assert Tensor([-inf, -inf], device=device).logsumexp(0).item() == -inf
    assert Tensor([-inf, 3.0], device=device).logsumexp(0).item() == pytest.approx(3.0)
    assert Tensor([inf, 3.0], device=device).logsumexp(0).item() == inf
    assert Tensor([1e30, 1e30], device=device).logsumexp(0).item() == pytest.approx(1e30, rel=1e-6)
    assert math.isnan(Tensor([math.nan, 3.0], device=device).logsumexp(0).item())


@pytest.mark.parametrize("device", DEVICES)
def test_log_softmax_keeps_minus_inf_logits(device):
    result = Tensor([-math.inf, 0.0, 0.0], device=device).log_softmax().tolist()
    assert result[0] == -math.inf
    assert result[1:] == pytest.approx([-math.log(2)] * 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("axis", [None, 1, (0, 2)])
def test_var_and_std_match_numpy(axis, correction, device):
    x = Tensor(X, device=device)
    x64 = X.astype(np.float64)
    np.testing.assert_allclose(x.var(axis, correction=correction).numpy(), x64.var(axis, ddof=correction), rtol=1e-5)
    np.testing.assert_allclose(x.std(axis, correction=correction).numpy(), x64.std(axis, ddof=correction), rtol=1e-5)
    variance, mean = x.var_mean(axis, keepdim=True, correction=correction)
    np.testing.assert_allclose(variance.numpy(), x64.var(axis, ddof=correction, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(mean.numpy(), x64.mean(axis, keepdims=True), rtol=1e-5, atol=1e-6)
    deviation, _ = x.std_mean(axis, correction=correction)
    np.testing.assert_allclose(deviation.numpy(), x64.std(axis, ddof=correction), rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_var_of_ints_is_float_and_of_one_element_is_nan(device):
    result = Tensor([1, 2, 3, 4], device=device).var()
    assert result.dtype is dtypes.float32
    assert result.item() == pytest.approx(np.var([1, 2, 3, 4], ddof=1))
    assert math.isnan(Tensor([5.0], device=device).var().item())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin_match_numpy_with_ties(axis, keepdim, device):
    x = RNG.integers(0, 4, (4, 6)).astype(np.float32)  # many ties: the first position must win
    t = Tensor(x, device=device)
    np_keep = keepdim if axis is not None else False
    for ours, theirs in ((t.argmax(axis, keepdim), np.argmax), (t.argmin(axis, keepdim), np.argmin)):
        expected = theirs(x, axis=axis, keepdims=np_keep)
        if axis is None and keepdim:
            expected = np.reshape(expected, (1, 1))
        assert ours.dtype is dtypes.int32
        np.testing.assert_array_equal(ours.numpy(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_argmax_argmin_of_ints_bools_and_nans(device):
    ints = np.array([[-128, 127, 127], [5, -128, 0]], dtype=np.int8)
    np.testing.assert_array_equal(Tensor(ints, device=device).argmax(1).numpy(), ints.argmax(1))
    np.testing.assert_array_equal(Tensor(ints, device=device).argmin(1).numpy(), ints.argmin(1))
    assert Tensor([False, True, True], device=device).argmax().item() == 1
    assert Tensor([True, False, False], device=device).argmin().item() == 1
    with_nan = np.array([1.0, np.nan, 3.0, np.nan], dtype=np.float32)
    assert Tensor(with_nan, device=device).argmax().item() == int(np.argmax(with_nan))
    assert Tensor(with_nan, device=device).argmin().item() == int(np.argmin(with_nan))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_any_all_match_numpy(axis, device):
    x = np.array([[0.0, 0.0, 1.0], [2.0, np.nan, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(t.any(axis).numpy(), x.any(axis))
    np.testing.assert_array_equal(t.all(axis).numpy(), x.all(axis))
    assert t.any(axis).dtype is dtypes.bool


def test_argmax_over_an_empty_axis_is_an_index_error_as_torch():
    with pytest.raises(IndexError):
        Tensor.zeros(2, 0).argmax(1)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_dtype_casts_the_input_first(device):
    x = np.array([[1, 2, 3]], dtype=np.int32)
    result = Tensor(x, device=device).softmax(dtype=dtypes.float64)
    assert result.dtype is dtypes.float64
    np.testing.assert_allclose(result.numpy(), np.exp(x) / np.exp(x).sum(), rtol=1e-12)
    assert Tensor(x, device=device).log_softmax(dtype=dtypes.float16).dtype is dtypes.float16
