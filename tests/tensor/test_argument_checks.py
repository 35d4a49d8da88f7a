"""Issue 12 item 7: wrong arguments fail when the op is built, with an error that says what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor


def test_float_index_tensors_are_rejected_by_getitem_setitem_gather_and_scatter() -> None:
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    float_index = Tensor([[0.0, 1.0]], dtype=dtypes.float32)
    with pytest.raises(TypeError, match="integer .*dtype.*float"):
        x[float_index]
    with pytest.raises(TypeError, match="integer .*dtype"):
        x[np.array([0.5, 1.0])]
    with pytest.raises(TypeError, match="gather.*integer .*dtype"):
        x.gather(1, float_index)
    with pytest.raises(TypeError, match="scatter.*integer .*dtype"):
        x.scatter(1, float_index, 1.0)
    with pytest.raises(TypeError, match="integer .*dtype"):
        x[float_index] = 1.0
    np.testing.assert_array_equal(x.gather(1, Tensor([[0, 1]] * 3)).numpy(), [[0, 1], [4, 5], [8, 9]])  # ints work


@pytest.mark.parametrize("stride", [0, -1, (1, 0)])
def test_conv2d_with_a_stride_below_one_is_a_value_error(stride: object) -> None:
    x, w = Tensor(np.ones((1, 1, 4, 4), np.float32)), Tensor(np.ones((1, 1, 2, 2), np.float32))
    with pytest.raises(ValueError, match="stride must be at least 1"):
        x.conv2d(w, stride=stride)


@pytest.mark.parametrize("p", [2.0, -0.1])
def test_dropout_probability_outside_0_1_is_a_value_error(p: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        Tensor(np.ones(4, np.float32)).dropout(p)
