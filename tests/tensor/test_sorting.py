"""sort, argsort and topk against numpy (stable order, NaN last, descending) on CPU and PYTHON."""

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_matches_numpy_stable_sort(device, dim):
    x = np.random.default_rng(1).integers(0, 4, (3, 5, 4)).astype(np.float32)  # many ties
    values, indices = Tensor(x, device=device).sort(dim)
    np.testing.assert_array_equal(values.numpy(), np.sort(x, dim))
    np.testing.assert_array_equal(indices.numpy(), np.argsort(x, dim, kind="stable"))


@pytest.mark.parametrize("device", DEVICES)
def test_sort_puts_nan_last_and_first_when_descending(device):
    x = np.array([3.0, np.nan, -np.inf, 1.0, np.nan, np.inf], dtype=np.float32)
    ascending = Tensor(x, device=device).sort()
    np.testing.assert_array_equal(ascending.values.numpy(), np.sort(x))
    np.testing.assert_array_equal(ascending.indices.numpy(), np.argsort(x, kind="stable"))
    descending = Tensor(x, device=device).sort(descending=True).values.numpy()
    np.testing.assert_array_equal(descending, [np.nan, np.nan, np.inf, 3.0, 1.0, -np.inf])


@pytest.mark.parametrize("device", DEVICES)
def test_argsort_descending_of_ints_is_stable(device):
    x = np.array([[2, 7, 2, -1, 7]], dtype=np.int32)
    result = Tensor(x, device=device).argsort(descending=True)
    assert result.dtype is dtypes.int32
    np.testing.assert_array_equal(result.numpy(), np.argsort(-x, kind="stable"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_numpy(device, largest):
    x = np.random.default_rng(2).standard_normal((4, 7)).astype(np.float32)
    values, indices = Tensor(x, device=device).topk(3, largest=largest)
    order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, order, 1))
    with pytest.raises(ValueError):
        Tensor(x, device=device).topk(8)


def test_sort_result_is_a_values_indices_tuple():
    result = Tensor([3, 1, 2], device="CPU").sort()
    assert isinstance(result, tuple) and len(result) == 2
    assert result[0].tolist() == [1, 2, 3] and result.indices.tolist() == [1, 2, 0]
