"""Indexing with integer and boolean tensors (and lists, numpy arrays), read and written, against numpy."""

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


INDEX_CASES = {
    "list": lambda: ([2, 0, -1],),
    "2d array": lambda: (np.array([[0, 1], [2, 2]]),),
    "two arrays broadcast": lambda: (np.array([[0], [2]]), np.array([1, 3, 0])),
    "slice then array": lambda: (slice(1, 3), np.array([0, 3, 2])),
    "int and array adjacent": lambda: (slice(None), 1, np.array([0, 2])),
    "arrays apart go first": lambda: (np.array([0, 2]), slice(None), np.array([1, 3])),
    "int and array apart": lambda: (1, slice(None), np.array([3, 0])),
    "ellipsis and none": lambda: (Ellipsis, None, np.array([4, 0])),
    "bool mask": lambda: (np.array([True, False, True]),),
    "bool mask over two axes": lambda: (np.random.default_rng(1).random((3, 4)) > 0.5,),
    "bool on last axis": lambda: (slice(None), slice(None), np.array([False, True, True, False, True])),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", INDEX_CASES, ids=str)
def test_getitem_matches_numpy(device, case):
    x = _random((3, 4, 5), 2)
    index = INDEX_CASES[case]()
    converted = tuple(Tensor(i, device=device) if isinstance(i, np.ndarray) else i for i in index)
    np.testing.assert_array_equal(Tensor(x, device=device)[converted].numpy(), x[index])


@pytest.mark.parametrize("device", DEVICES)
def test_index_tensor_dtypes_spec_appendix_b(device):
    t = Tensor([10, 20, 30, 40], device=device)
    assert t[Tensor([1, 2, 3, 0], dtype=dtypes.uint8, device=device)].tolist() == [20, 30, 40, 10]
    index = Tensor([0.5, 0, 2], device=device).cast(dtypes.bool).cast(dtypes.int32)
    assert Tensor([1, 2, 3], device=device)[index].tolist() == [2, 1, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_getitem_keeps_special_values_exactly(device):
    x = np.array([np.nan, -0.0, np.inf, -np.inf], dtype=np.float32)
    result = Tensor(x, device=device)[[1, 0, 3, 2]].numpy()
    np.testing.assert_array_equal(result, x[[1, 0, 3, 2]])
    assert np.signbit(result[0])


SET_CASES = {
    "list": (lambda: ([2, 0],), (2, 4, 5)),
    "broadcast value row": (lambda: (np.array([1, 2]),), (5,)),
    "scalar value": (lambda: (np.array([[0], [2]]), np.array([1, 3])), ()),
    "slice and array": (lambda: (slice(0, 2), slice(None), np.array([4, 0])), (2, 4, 2)),
    "arrays apart": (lambda: (np.array([0, 2]), slice(None), np.array([1, 3])), (2, 4)),
    "bool mask": (lambda: (np.random.default_rng(3).random((3, 4, 5)) > 0.5,), ()),
    "negative": (lambda: (slice(None), np.array([-1, -4])), (3, 2, 5)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", SET_CASES, ids=str)
def test_setitem_matches_numpy(device, case):
    make_index, value_shape = SET_CASES[case]
    x, index = _random((3, 4, 5), 4), make_index()
    value = _random(value_shape, 5) if value_shape else np.float32(7.5)
    expected = x.copy()
    expected[index] = value
    t = Tensor(x, device=device)
    converted = tuple(Tensor(i, device=device) if isinstance(i, np.ndarray) else i for i in index)
    t[converted] = Tensor(value, device=device) if value_shape else 7.5
    np.testing.assert_array_equal(t.numpy(), expected)


def test_setitem_into_ints_casts_a_python_value():
    t = Tensor([1, 2, 3, 4], device="CPU")
    t[[0, 3]] = 9
    assert t.tolist() == [9, 2, 3, 9]


@pytest.mark.parametrize("device", DEVICES)
def test_setitem_with_repeated_indices_keeps_the_last_write(device):
    x = np.zeros((4, 3), dtype=np.float32)
    index = np.array([[2, 0], [2, 2]])
    value = np.arange(12, 0, -1, dtype=np.float32).reshape(2, 2, 3)  # later writes are smaller
    expected = x.copy()
    expected[index] = value
    t = Tensor(x, device=device)
    t[Tensor(index, device=device)] = Tensor(value, device=device)
    np.testing.assert_array_equal(t.numpy(), expected)
