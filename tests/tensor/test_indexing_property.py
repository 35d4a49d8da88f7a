"""Property tests: random basic indices (ints, slices with any step, None, Ellipsis) read and write like numpy.

Values run on the PYTHON device (no compile per kernel), shapes are checked for many more indices at graph level.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tg.tensor import Tensor

sizes = st.integers(min_value=0, max_value=5)
shapes = st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=3).map(tuple)


@st.composite
def shape_and_index(draw):
    shape = draw(shapes)
    index = []
    for size in shape:
        if draw(st.booleans()) and size > 0:
            index.append(draw(st.integers(min_value=-size, max_value=size - 1)))
        else:
            bound = st.none() | st.integers(min_value=-size - 2, max_value=size + 2)
            step = st.none() | st.integers(min_value=-4, max_value=4).filter(lambda s: s != 0)
            index.append(slice(draw(bound), draw(bound), draw(step)))
        if draw(st.integers(0, 4)) == 0:
            index.append(None)
    if index and draw(st.booleans()):  # replace a run of trailing full slices by an ellipsis
        cut = draw(st.integers(min_value=0, max_value=len(index)))
        index = index[:cut] + [Ellipsis] + [i for i in index[cut:] if i is None]
    return shape, tuple(index)


@settings(max_examples=300, deadline=None)
@given(shape_and_index())
def test_getitem_shape_matches_numpy(case):
    shape, index = case
    assert Tensor.empty(*shape)[index].shape == np.empty(shape)[index].shape


@settings(max_examples=40, deadline=None)
@given(shape_and_index())
def test_getitem_and_setitem_values_match_numpy(case):
    shape, index = case
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    t = Tensor(x, device="PYTHON")
    np.testing.assert_array_equal(t[index].numpy(), x[index])
    value = -1 - np.arange(x[index].size, dtype=np.int32).reshape(x[index].shape)
    t[index] = Tensor(value, device="PYTHON")
    x[index] = value
    np.testing.assert_array_equal(t.numpy(), x)
