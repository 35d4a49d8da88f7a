"""Property test: reductions over random shapes, axes and keepdim equal numpy's (PYTHON device: no compiles)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tg.codegen import dtypes, to_numpy
from tg.tensor import Tensor

DTYPES = [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.bool]
OPS = ["sum", "max", "min", "mean", "prod"]


@st.composite
def reduction_case(draw):
    shape = tuple(draw(st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=3)))
    axes = draw(st.lists(st.integers(min_value=-len(shape), max_value=len(shape) - 1), max_size=len(shape)))
    normalized = sorted({axis % len(shape) for axis in axes})
    axis = None if draw(st.booleans()) else tuple(normalized)
    if axis is not None and len(axis) == 1 and draw(st.booleans()):
        axis = axis[0]
    return shape, axis, draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(case=reduction_case(), dtype=st.sampled_from(DTYPES), op=st.sampled_from(OPS), seed=st.integers(0, 9))
def test_reductions_match_numpy(case, dtype, op, seed):
    shape, axis, keepdim = case
    rng = np.random.default_rng(seed)
    if dtype is dtypes.bool:
        x = rng.random(shape) < 0.5
    else:
        x = rng.integers(0 if dtypes.is_unsigned(dtype) else -3, 4, shape).astype(to_numpy(dtype))
    result = getattr(Tensor(x, device="PYTHON"), op)(axis, keepdim).numpy()
    expected = getattr(np, op)(x, axis=axis, keepdims=keepdim)
    assert result.shape == expected.shape
    np.testing.assert_allclose(result.astype(np.float64), np.asarray(expected).astype(np.float64), rtol=1e-6)
