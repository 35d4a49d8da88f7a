"""Property test: binary ops over random dtype pairs and broadcastable shapes equal numpy computed in the dtype tg
promotes to (tg's promotion lattice differs from numpy's on purpose, e.g. int32 with float16 is float16).

Runs on the PYTHON device, which compiles nothing, so many random graphs stay cheap.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tg.codegen import dtypes, least_upper_dtype, to_numpy
from tg.tensor import Tensor

DTYPES = [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.bool]
OPS = {
    "add": (lambda a, b: a + b, np.add),
    "mul": (lambda a, b: a * b, np.multiply),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "lt": (lambda a, b: a < b, np.less),
    "eq": (lambda a, b: a == b, np.equal),
}


def array_of(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if dtype is dtypes.bool:
        return rng.random(shape) < 0.5
    return rng.integers(-20 if not dtypes.is_unsigned(dtype) else 0, 20, shape).astype(to_numpy(dtype))


@st.composite
def broadcastable_shapes(draw):
    full = draw(st.lists(st.integers(min_value=1, max_value=3), min_size=0, max_size=3))
    first = [draw(st.sampled_from([size, 1])) for size in full]
    second = [draw(st.sampled_from([size, 1])) for size in full][draw(st.integers(0, len(full))) :]
    return tuple(first), tuple(second)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(DTYPES),
    st.sampled_from(DTYPES),
    broadcastable_shapes(),
    st.sampled_from(sorted(OPS)),
    st.integers(0, 9),
)
def test_binary_ops_compute_in_the_promoted_dtype(dtype_a, dtype_b, shapes, op, seed):
    a, b = array_of(dtype_a, shapes[0], seed), array_of(dtype_b, shapes[1], seed + 1)
    tg_op, np_op = OPS[op]
    result = tg_op(Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON"))
    common = to_numpy(least_upper_dtype(dtype_a, dtype_b))
    with np.errstate(over="ignore"):
        expected = np_op(a.astype(common), b.astype(common))
    assert result.dtype is (dtypes.bool if op in ("lt", "eq") else least_upper_dtype(dtype_a, dtype_b))
    np.testing.assert_array_equal(result.numpy(), expected)
