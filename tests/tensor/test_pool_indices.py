"""max_pool2d(return_indices=True) and max_unpool2d against a direct numpy definition of torch's semantics."""

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


def numpy_max_pool_indices(x, kernel, stride, padding):
    """For every window: the maximum and the flat input position of its first occurrence in row-major order."""
    batch, channels, height, width = x.shape
    out_h = (height + 2 * padding - kernel) // stride + 1
    out_w = (width + 2 * padding - kernel) // stride + 1
    values = np.zeros((batch, channels, out_h, out_w), dtype=x.dtype)
    indices = np.zeros((batch, channels, out_h, out_w), dtype=np.int32)
    for n in range(batch):
        for c in range(channels):
            for i in range(out_h):
                for j in range(out_w):
                    best, where = None, None
                    for p in range(kernel):
                        for q in range(kernel):
                            r, s = i * stride - padding + p, j * stride - padding + q
                            if 0 <= r < height and 0 <= s < width and (best is None or x[n, c, r, s] > best):
                                best, where = x[n, c, r, s], r * width + s
                    values[n, c, i, j], indices[n, c, i, j] = best, where
    return values, indices


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [(2, 2, 0), (3, 2, 1), (3, 1, 1)], ids=str)
def test_max_pool2d_indices_match_first_maximum(device, case):
    kernel, stride, padding = case
    x = np.random.default_rng(1).integers(-3, 3, (1, 2, 6, 5)).astype(np.float32)  # many ties
    expected_values, expected_indices = numpy_max_pool_indices(x, kernel, stride, padding)
    values, indices = Tensor(x, device=device).max_pool2d(kernel, stride, padding=padding, return_indices=True)
    assert indices.dtype is dtypes.int32
    np.testing.assert_array_equal(values.numpy(), expected_values)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)


@pytest.mark.parametrize("device", DEVICES)
def test_max_unpool2d_puts_maxima_back(device):
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 4)).astype(np.float32)
    values, indices = numpy_max_pool_indices(x, 2, 2, 0)
    expected = np.zeros_like(x).reshape(2, 3, -1)
    np.put_along_axis(expected, indices.reshape(2, 3, -1), values.reshape(2, 3, -1), 2)
    t_values, t_indices = Tensor(values, device=device), Tensor(indices, device=device)
    result = t_values.max_unpool2d(t_indices, 2)
    np.testing.assert_array_equal(result.numpy(), expected.reshape(x.shape))
    bigger = t_values.max_unpool2d(t_indices, 2, output_size=(7, 5))
    assert bigger.shape == (2, 3, 7, 5)
