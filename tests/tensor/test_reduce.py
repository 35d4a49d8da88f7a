"""Reductions against numpy on CPU and PYTHON: sum, prod, max, min, mean over axes, keepdim and dtype=."""

import numpy as np
import pytest

from tg.codegen import dtypes, to_numpy
from tg.tensor import Tensor

from .devices import DEVICES

DTYPES = [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.bool]
AXES = [None, 0, 1, -1, (0, 2)]
SHAPE = (3, 4, 5)


def ids(dtype) -> str:
    return np.dtype(to_numpy(dtype)).name


def loose(dtype) -> dict:
    """Sums are reassociated (and 16-bit floats accumulate in float32, unlike numpy's float16 pairwise sum)."""
    return {dtypes.float16: {"rtol": 3e-3, "atol": 3e-3}, dtypes.float32: {"rtol": 1e-5, "atol": 1e-5}}.get(
        dtype, {"rtol": 1e-12, "atol": 1e-12}
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("axis", AXES, ids=repr)
def test_sum_matches_numpy(np_check, device, dtype, axis):
    x = np_check.random(SHAPE, dtype, seed=1)
    result = Tensor(x, device=device).sum(axis)
    np_check.matches(result, x.sum(axis), dtype=result.dtype, **loose(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_match_numpy(np_check, device, dtype, op):
    x = np_check.random(SHAPE, dtype, seed=2)
    if not dtypes.is_unsigned(dtype) and dtype is not dtypes.bool:
        x[0, 0, 0] = dtypes.min(dtype) if not dtypes.is_float(dtype) else -np.inf
    t = Tensor(x, device=device)
    for axis in (None, 1, (0, 2)):
        np_check.matches(getattr(t, op)(axis), getattr(x, op)(axis))
    np_check.matches(getattr(t, op)(-1, keepdim=True), getattr(x, op)(-1, keepdims=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int8, dtypes.uint8], ids=ids)
def test_prod_matches_numpy(np_check, device, dtype):
    x = np_check.random((3, 4), dtype, seed=3, low=0.5, high=1.5)
    if not dtypes.is_float(dtype):
        x = (x % 5).astype(x.dtype)  # small factors: no overflow of the int32 accumulator
    result = Tensor(x, device=device).prod(1)
    np_check.matches(result, x.prod(1), dtype=result.dtype, **loose(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_mean_matches_numpy(np_check, device, dtype):
    x = np_check.random(SHAPE, dtype, seed=4)
    t = Tensor(x, device=device)
    expected_dtype = dtype if dtypes.is_float(dtype) else dtypes.float32
    np_check.matches(t.mean(), x.mean(dtype=np.float64), dtype=expected_dtype, **loose(expected_dtype))
    np_check.matches(
        t.mean((0, 1), keepdim=True),
        x.mean((0, 1), keepdims=True, dtype=np.float64),
        dtype=expected_dtype,
        **loose(expected_dtype),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_sum_with_accumulation_dtype(np_check, device):
    x = np.full((4, 64), 100, dtype=np.int8)
    t = Tensor(x, device=device)
    np_check.matches(t.sum(1, dtype=dtypes.int16), x.sum(1, dtype=np.int16))
    np_check.matches(t.sum(dtype=dtypes.float32), x.sum(dtype=np.float32))
    h = np.full(3000, 1.0, dtype=np.float16)  # float16 alone stops counting at 2048; the float32 accumulator does not
    np_check.matches(Tensor(h, device=device).sum(), np.float16(3000))


@pytest.mark.parametrize("device", DEVICES)
def test_reductions_of_empty_axes(np_check, device):
    x = np.zeros((0, 3), dtype=np.float32)
    t = Tensor(x, device=device)
    np_check.matches(t.sum(0), x.sum(0))
    np_check.matches(t.sum(), x.sum())
    np_check.matches(t.prod(0), x.prod(0))
    np_check.matches(t.sum(1), x.sum(1))
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        np_check.matches(t.mean(0), x.mean(0))
    with pytest.raises(IndexError, match="empty"):  # torch: IndexError for an empty reduced axis
        t.max(0)


@pytest.mark.parametrize("device", DEVICES)
def test_reduce_fused_with_elementwise_before_and_after(np_check, device):
    x = np_check.random((4, 6), dtypes.float32, seed=5)
    t = Tensor(x, device=device)
    np_check.matches(((t * 2 + 1).sum(1) / 3).exp(), np.exp((x * 2 + 1).sum(1) / 3), rtol=1e-5, atol=1e-6)
    softmax = (t - t.max(-1, keepdim=True)).exp()
    softmax = softmax / softmax.sum(-1, keepdim=True)
    e = np.exp(x - x.max(-1, keepdims=True))
    np_check.matches(softmax, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_any_all_match_numpy(np_check, device):
    x = np_check.random((3, 4), dtypes.int8, seed=6) % 3
    t = Tensor(x, device=device)
    np_check.matches(t.any(1), x.any(1))
    np_check.matches(t.all(0), x.all(0))


def test_any_all_of_empty_tensors_match_numpy(np_check):
    x = np.zeros((0, 3), dtype=np.int32)
    np_check.matches(Tensor(x).any(0), x.any(0))
    np_check.matches(Tensor(x).all(0), x.all(0))
    np_check.matches(Tensor(x).any(), x.any())


def _prod_of_others(x: np.ndarray, axis: int) -> np.ndarray:
    """d prod(x, axis) / d x_i = the product of the other elements along axis (torch's value, zeros included)."""
    grad = np.empty_like(x)
    for i in range(x.shape[axis]):
        others = np.delete(x, i, axis=axis)
        np.put_along_axis(
            grad, np.full(x.shape[:axis] + (1,) + x.shape[axis + 1 :], i), others.prod(axis, keepdims=True), axis
        )
    return grad


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_prod_gradient_at_zeros_is_the_product_of_the_others(device):
    """One zero: its gradient is the product of the rest, the others' is 0; two zeros: all 0 (never NaN)."""
    x = Tensor([2.0, 0.0, 3.0], dtype=dtypes.float64, device=device, requires_grad=True)
    x.prod().backward()
    assert x.grad.tolist() == [0.0, 6.0, 0.0]
    y = Tensor([2.0, 0.0, 0.0], dtype=dtypes.float64, device=device, requires_grad=True)
    y.prod().backward()
    assert y.grad.tolist() == [0.0, 0.0, 0.0]
    rows = np.array([[1.5, 0.0, -2.0, 4.0], [0.0, 3.0, 0.0, 1.0], [1.0, 2.0, -3.0, 0.5]])
    for axis in (0, 1):
        z = Tensor(rows, device=device, requires_grad=True)
        z.prod(axis).sum().backward()
        np.testing.assert_allclose(z.grad.numpy(), _prod_of_others(rows, axis), rtol=1e-12)
