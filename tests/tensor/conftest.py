"""Fixtures for the Tensor tests: random input data per dtype and a numpy comparison helper (`np_check`)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tg.codegen import dtypes, to_numpy
from tg.hcq import Device


def random_array(shape: tuple[int, ...], dtype, seed: int = 0, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    """Random values that every dtype holds: floats in [low, high), ints over a small range, bools."""
    rng = np.random.default_rng(seed)
    np_dtype = to_numpy(dtype)
    if dtype is dtypes.bool:
        return rng.random(shape) < 0.5
    if dtypes.is_float(dtype):
        return rng.uniform(low, high, shape).astype(np_dtype)
    info = np.iinfo(np_dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(np_dtype)


def assert_matches(actual, expected: np.ndarray, dtype=None, rtol: float = 0.0, atol: float = 0.0) -> None:
    """`actual` (a Tensor) equals the numpy result: same shape, dtype (numpy's unless `dtype` is given), values."""
    result = actual.numpy()
    expected = np.asarray(expected)
    if dtype is not None:
        assert actual.dtype is dtype, f"dtype {actual.dtype} != {dtype}"
        expected = expected.astype(to_numpy(dtype))
    assert result.shape == expected.shape, f"shape {result.shape} != {expected.shape}"
    assert result.dtype == expected.dtype, f"dtype {result.dtype} != {expected.dtype}"
    if np.issubdtype(expected.dtype, np.floating) and (rtol or atol):
        np.testing.assert_allclose(result.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(result, expected)


@pytest.fixture
def np_check():
    return SimpleNamespace(random=random_array, matches=assert_matches)


@pytest.fixture
def cpu_default():
    """The CPU device as the default for one test, whatever DEV says: for tests of what only the CPU device does (its
    cache-driven layout, its C source, its core split), so that they check the CPU also when the suite runs on
    another device (DEV=MOCKKFD+AMD)."""
    Device.DEFAULT = "CPU"
    try:
        yield
    finally:
        Device.DEFAULT = None
