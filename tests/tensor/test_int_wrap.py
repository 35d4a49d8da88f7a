"""Issue 30 item 7: Python ints given to a constructor with an integer dtype wrap modulo 2**bits (torch, tinygrad and
C casts; numpy's astype is the oracle), and ints that the default int32 cannot hold make an int64 tensor (torch's
default int) instead of an error or a wrapped int32."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import dtypes, to_numpy
from tg.tensor import Tensor

from .devices import DEVICES


@pytest.mark.parametrize("device", DEVICES)
def test_a_list_of_out_of_range_ints_wraps_into_uint8(device: str) -> None:
    assert Tensor([-1, 0, 1], dtype=dtypes.uint8, device=device).tolist() == [255, 0, 1]


@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32])
def test_nested_lists_wrap_as_numpy_astype(dtype) -> None:
    data = [[-1, 256, 70000], [-129, 2**31, -(2**33) + 5]]
    expected = np.array(data, dtype=np.int64).astype(to_numpy(dtype))
    result = Tensor(data, dtype=dtype)
    assert result.dtype is dtype
    np.testing.assert_array_equal(result.numpy(), expected)


def test_uint64_and_int64_hold_their_whole_range() -> None:
    assert Tensor([2**64 - 1, 0], dtype=dtypes.uint64).tolist() == [2**64 - 1, 0]
    assert Tensor([-1], dtype=dtypes.uint64).tolist() == [2**64 - 1]
    assert Tensor([2**63], dtype=dtypes.int64).tolist() == [-(2**63)]


@pytest.mark.parametrize("device", DEVICES)
def test_a_scalar_wraps_too(device: str) -> None:
    assert Tensor(-1, dtype=dtypes.uint8, device=device).item() == 255
    assert Tensor(300, dtype=dtypes.int8, device=device).item() == 44
    assert Tensor.full((2,), -2, dtype=dtypes.uint16, device=device).tolist() == [65534, 65534]


@pytest.mark.parametrize("device", DEVICES)
def test_arange_beyond_int32_is_int64(device: str) -> None:
    values = Tensor.arange(2**31, 2**31 + 3, device=device)
    assert values.dtype is dtypes.int64
    assert values.tolist() == [2**31, 2**31 + 1, 2**31 + 2]
    below = Tensor.arange(-(2**31) - 2, -(2**31) + 1, device=device)
    assert below.dtype is dtypes.int64 and below.tolist() == [-(2**31) - 2, -(2**31) - 1, -(2**31)]
    assert Tensor.arange(2**31 - 3, 2**31).dtype is dtypes.int32  # still fits: the default int


def test_ints_that_do_not_fit_int32_make_int64_tensors() -> None:
    assert Tensor([2**31, 1]).dtype is dtypes.int64
    assert Tensor([2**31, 1]).tolist() == [2**31, 1]
    assert Tensor([[1], [-(2**40)]]).tolist() == [[1], [-(2**40)]]
    assert Tensor(2**35).dtype is dtypes.int64 and Tensor(2**35).item() == 2**35
    assert Tensor([1, 2]).dtype is dtypes.int32 and Tensor(7).dtype is dtypes.int32


def test_ints_beyond_int64_and_uint64_are_still_an_error() -> None:
    with pytest.raises(OverflowError):
        Tensor([2**64])
    with pytest.raises(OverflowError):
        Tensor([-1, 2**63])
