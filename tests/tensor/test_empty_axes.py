"""Issue 30 item 4: reductions, scans and sorts over empty axes give torch's results (written out by hand below):
a sum of nothing is 0, a product 1, a mean or variance NaN, logsumexp -inf, any False, all True; scans and sorts of
an empty axis are empty; max, min, argmax and argmin have no identity and raise as torch does (RuntimeError for a
reduction of all axes, IndexError naming an empty axis)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


@pytest.mark.parametrize("device", DEVICES)
def test_sum_prod_any_all_of_nothing_are_their_identities(device: str) -> None:
    empty = Tensor.zeros(0, device=device)
    assert empty.sum().item() == 0.0 and empty.prod().item() == 1.0
    assert empty.any().item() is False and empty.all().item() is True
    rows = Tensor.zeros(2, 0, dtype=dtypes.int32, device=device)
    assert rows.sum(1).tolist() == [0, 0] and rows.prod(1).tolist() == [1, 1]
    assert rows.sum(1, keepdim=True).shape == (2, 1)
    assert rows.sum(0).shape == (0,)


@pytest.mark.parametrize("device", DEVICES)
def test_mean_var_std_of_nothing_are_nan(device: str) -> None:
    rows = Tensor.zeros(2, 0, device=device)
    for result in (rows.mean(1), rows.var(1), rows.std(1)):
        assert result.shape == (2,) and all(math.isnan(v) for v in result.tolist())


@pytest.mark.parametrize("device", DEVICES)
def test_logsumexp_of_nothing_is_minus_infinity(device: str) -> None:
    assert Tensor.zeros(0, device=device).logsumexp(0).item() == -math.inf
    rows = Tensor.zeros(2, 0, device=device).logsumexp(1, keepdim=True)
    assert rows.shape == (2, 1) and rows.tolist() == [[-math.inf], [-math.inf]]


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_extremes_of_nothing_raise_as_torch(op: str) -> None:
    """torch: 'Expected reduction dim to be specified for input.numel() == 0' (RuntimeError) without a dim,
    'Expected reduction dim 1 to have non-zero size' (IndexError) with one."""
    with pytest.raises(RuntimeError, match="empty"):
        getattr(Tensor.zeros(0), op)()
    with pytest.raises(IndexError, match="axis 1"):
        getattr(Tensor.zeros(2, 0), op)(1)


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_extremes_over_a_non_empty_axis_of_an_empty_tensor_are_empty(op: str) -> None:
    result = getattr(Tensor.zeros(0, 3), op)(1)
    assert result.shape == (0,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["cumsum", "cumprod", "logcumsumexp"])
@pytest.mark.parametrize("shape,axis", [((0,), 0), ((2, 0), 1), ((0, 3), 0), ((0, 3), 1)])
def test_scans_of_empty_tensors_are_empty(device: str, op: str, shape: tuple, axis: int) -> None:
    result = getattr(Tensor.zeros(*shape, device=device), op)(axis)
    assert result.shape == shape
    assert result.numpy().size == 0


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax"])
def test_scans_of_empty_int8_tensors_have_the_dtype_of_non_empty_ones(op: str) -> None:
    def scanned(x: Tensor) -> Tensor:
        result = getattr(x, op)(0)
        return result[0] if isinstance(result, tuple) else result

    assert scanned(Tensor.zeros(0, dtype=dtypes.int8)).dtype is scanned(Tensor.zeros(3, dtype=dtypes.int8)).dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("shape,axis", [((0,), 0), ((2, 0), 1), ((0, 3), 1)])
def test_cummax_cummin_of_empty_tensors_are_empty_values_and_indices(device: str, op: str, shape, axis) -> None:
    values, indices = getattr(Tensor.zeros(*shape, device=device), op)(axis)
    assert values.shape == shape and indices.shape == shape
    assert values.numpy().size == 0 and indices.numpy().size == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,dim", [((0,), 0), ((2, 0), 1), ((2, 0), 0), ((0, 3), 1)])
def test_sort_argsort_and_topk_of_empty_tensors_are_empty(device: str, shape: tuple, dim: int) -> None:
    x = Tensor.zeros(*shape, device=device)
    values, indices = x.sort(dim)
    assert values.shape == shape and indices.shape == shape
    assert x.argsort(dim, descending=True).shape == shape
    top_values, top_indices = x.topk(0, dim)
    expected = tuple(0 if a == dim % len(shape) else size for a, size in enumerate(shape))
    assert top_values.shape == expected and top_indices.shape == expected


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_and_log_softmax_over_an_empty_axis_are_empty(device: str) -> None:
    x = Tensor.zeros(2, 0, device=device)
    for result in (x.softmax(1), x.log_softmax(1), x.softmax(0)):
        assert result.shape == (2, 0)
        np.testing.assert_array_equal(result.numpy(), np.zeros((2, 0), np.float32))


def test_sum_over_an_empty_axis_has_a_zero_gradient_of_the_right_shape() -> None:
    x = Tensor.zeros(2, 0, dtype=dtypes.float64, requires_grad=True)
    (x.sum(1) * 3.0).sum().backward()
    assert x.grad is not None and x.grad.shape == (2, 0)
