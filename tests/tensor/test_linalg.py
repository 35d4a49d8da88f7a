"""matmul/@/dot (batched, broadcast, 1-d operands), linear and einsum against numpy on CPU and PYTHON."""

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.codegen.schedule.graph import ShapeError
from tg.tensor import Tensor

from .devices import DEVICES

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4, 2)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),
    ((2, 1, 3, 4), (3, 4, 2)),
    ((1, 4), (2, 4, 3)),
]


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_matches_numpy(device, shapes):
    a, b = _random(shapes[0], 1), _random(shapes[1], 2)
    result = Tensor(a, device=device) @ Tensor(b, device=device)
    np.testing.assert_allclose(result.numpy(), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_dot_and_rmatmul_match_numpy(device):
    a, b = _random((3, 4), 3), _random((4, 2), 4)
    np.testing.assert_allclose(Tensor(a, device=device).dot(Tensor(b, device=device)).numpy(), a @ b, rtol=1e-5)
    np.testing.assert_allclose((b.T @ Tensor(a.T, device=device)).numpy(), b.T @ a.T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_int_matmul_is_exact_and_keeps_dtype(device):
    rng = np.random.default_rng(5)
    a, b = rng.integers(-100, 100, (3, 6), dtype=np.int32), rng.integers(-100, 100, (6, 2), dtype=np.int32)
    result = Tensor(a, device=device) @ Tensor(b, device=device)
    assert result.dtype is dtypes.int32
    np.testing.assert_array_equal(result.numpy(), a @ b)


def test_half_matmul_accumulates_in_float32():
    a = np.full((1, 4096), 1.0, dtype=np.float16)
    b = np.full((4096, 1), 1.0, dtype=np.float16)
    result = Tensor(a, device="CPU") @ Tensor(b, device="CPU")
    assert result.dtype is dtypes.float16
    assert result.item() == 4096.0  # a float16 running sum would stop at 2048


def test_matmul_with_accumulation_dtype():
    a = np.full((1, 3), 100, dtype=np.int8)
    result = Tensor(a, device="CPU").matmul(Tensor(a.T, device="CPU"), dtype=dtypes.int32)
    assert result.dtype is dtypes.int32 and result.item() == 30000


def test_matmul_of_mismatched_inner_sizes_is_a_shape_error():
    with pytest.raises(ShapeError, match="inner sizes"):
        Tensor.ones(2, 3, device="CPU") @ Tensor.ones(4, 2, device="CPU")


@pytest.mark.parametrize("device", DEVICES)
def test_linear_matches_numpy(device):
    x, w, bias = _random((2, 3), 6), _random((3, 4), 7), _random((4,), 8)
    t = Tensor(x, device=device)
    result = t.linear(Tensor(w, device=device), Tensor(bias, device=device))
    np.testing.assert_allclose(result.numpy(), x @ w + bias, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t.linear(Tensor(w[:, 0], device=device)).numpy(), x * w[:, 0], rtol=1e-6)


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("abc,cd,bd->ad", [(2, 3, 4), (4, 5), (3, 5)]),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", EINSUM_CASES, ids=lambda case: case[0])
def test_einsum_matches_numpy(device, case):
    formula, shapes = case
    arrays = [_random(shape, seed) for seed, shape in enumerate(shapes)]
    result = Tensor.einsum(formula, *(Tensor(a, device=device) for a in arrays))
    np.testing.assert_allclose(result.numpy(), np.einsum(formula, *arrays), rtol=1e-5, atol=1e-5)


def test_einsum_with_wrong_operand_count_is_an_error():
    with pytest.raises(ValueError, match="operands"):
        Tensor.einsum("ij,jk->ik", Tensor.ones(2, 2, device="CPU"))


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_with_infinities_and_nan_matches_numpy(device):
    a = np.array([[np.inf, 1.0], [2.0, np.nan], [-np.inf, 0.0]], dtype=np.float32)
    b = np.array([[0.0, 1.0], [1.0, -1.0]], dtype=np.float32)
    with np.errstate(invalid="ignore"):  # inf * 0 is NaN, as it should be
        expected = a @ b
    np.testing.assert_array_equal((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), expected)
