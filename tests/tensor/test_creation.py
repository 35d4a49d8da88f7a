"""Creating tensors and reading them back, against numpy, on CPU and PYTHON."""

import numpy as np
import pytest

from tg.codegen import dtypes, to_numpy
from tg.tensor import Tensor

from .devices import DEVICES

DTYPES = [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.bool]


def ids(dtype) -> str:
    return np.dtype(to_numpy(dtype)).name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_numpy_round_trip_keeps_dtype_and_values(np_check, device, dtype):
    x = np_check.random((2, 3, 4), dtype, seed=1)
    t = Tensor(x, device=device)
    assert t.dtype is dtype and t.device == device and t.shape == (2, 3, 4)
    np_check.matches(t, x)
    assert t.tolist() == x.tolist()
    assert t.numel() == 24 and t.nbytes() == 24 * dtype.itemsize


@pytest.mark.parametrize("device", DEVICES)
def test_python_data(np_check, device):
    np_check.matches(Tensor([[1, 2], [3, 4]], device=device), np.array([[1, 2], [3, 4]], dtype=np.int32))
    np_check.matches(Tensor([1.5, 2], device=device), np.array([1.5, 2], dtype=np.float32))
    np_check.matches(Tensor([True, False], device=device), np.array([True, False]))
    np_check.matches(Tensor([1, 2], dtype=dtypes.float16, device=device), np.array([1, 2], dtype=np.float16))
    np_check.matches(Tensor([], device=device), np.zeros((0,), dtype=np.float32))
    assert Tensor(7, device=device).item() == 7
    assert Tensor(2.5, device=device).item() == 2.5
    assert Tensor(True, device=device).item() is True
    assert Tensor(3, dtype=dtypes.float64, device=device).numpy().dtype == np.float64


@pytest.mark.parametrize("device", DEVICES)
def test_bytes_are_raw_elements(np_check, device):
    data = np.array([1.5, -2.0, 3.25], dtype=np.float32).tobytes()
    np_check.matches(Tensor(data, device=device), np.frombuffer(data, dtype=np.uint8))
    np_check.matches(Tensor(data, dtype=dtypes.float32, device=device), np.frombuffer(data, dtype=np.float32))
    with pytest.raises(ValueError, match="not a whole number of float32"):
        Tensor(b"abc", dtype=dtypes.float32)


def test_ragged_lists_are_a_clear_error():
    with pytest.raises(ValueError, match="rectangular"):
        Tensor([[1, 2], [3]])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_constant_constructors_match_numpy(np_check, device, dtype):
    np_dtype = to_numpy(dtype)
    np_check.matches(Tensor.zeros(2, 3, dtype=dtype, device=device), np.zeros((2, 3), np_dtype))
    np_check.matches(Tensor.ones((4,), dtype=dtype, device=device), np.ones(4, np_dtype))
    np_check.matches(Tensor.full((2, 2), 7, dtype=dtype, device=device), np.full((2, 2), 7, np_dtype))
    like = Tensor(np.zeros((3, 1), np_dtype), device=device)
    np_check.matches(like.ones_like(), np.ones((3, 1), np_dtype))
    np_check.matches(like.full_like(2), np.full((3, 1), 2, np_dtype))
    np_check.matches(like.zeros_like(dtype=dtypes.int8), np.zeros((3, 1), np.int8))
    assert like.empty_like().shape == (3, 1) and like.empty_like().dtype is dtype


@pytest.mark.parametrize("device", DEVICES)
def test_arange_and_eye_match_numpy(np_check, device):
    np_check.matches(Tensor.arange(5, device=device), np.arange(5, dtype=np.int32))
    np_check.matches(Tensor.arange(2, 11, 3, device=device), np.arange(2, 11, 3, dtype=np.int32))
    np_check.matches(Tensor.arange(5, 0, -2, device=device), np.arange(5, 0, -2, dtype=np.int32))
    np_check.matches(Tensor.arange(0, 1, 0.25, device=device), np.arange(0, 1, 0.25, dtype=np.float32))
    np_check.matches(Tensor.arange(3, dtype=dtypes.float16, device=device), np.arange(3, dtype=np.float16))
    np_check.matches(Tensor.arange(0, device=device), np.arange(0, dtype=np.int32))
    np_check.matches(Tensor.eye(3, device=device), np.eye(3, dtype=np.float32))
    np_check.matches(Tensor.eye(2, 5, dtype=dtypes.int32, device=device), np.eye(2, 5, dtype=np.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_tensors(device):
    for shape in [(0,), (2, 0), (0, 3, 1)]:
        t = Tensor.empty(*shape, device=device)
        assert t.shape == shape and t.numel() == 0 and t.nbytes() == 0
        assert t.numpy().shape == shape
        assert (Tensor.zeros(*shape, device=device) + 1).realize().numpy().shape == shape


@pytest.mark.parametrize("device", DEVICES)
def test_empty_has_storage_of_its_shape(device):
    t = Tensor.empty(2, 3, dtype=dtypes.int8, device=device)
    assert t.numpy().shape == (2, 3) and t.numpy().dtype == np.int8
    t.assign(Tensor.full((2, 3), 4, dtype=dtypes.int8, device=device))
    assert t.tolist() == [[4, 4, 4], [4, 4, 4]]


def test_item_needs_one_element():
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        Tensor([1, 2]).item()


@pytest.mark.parametrize("device", DEVICES)
def test_zero_dimensional_numpy_arrays_stay_zero_dimensional(np_check, device):
    np_check.matches(Tensor(np.array(5, dtype=np.int8), device=device), np.array(5, dtype=np.int8))
    np_check.matches(Tensor(np.float16(1.5), device=device), np.array(1.5, dtype=np.float16))
