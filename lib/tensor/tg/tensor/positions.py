"""Element positions computed in kernels: `positions(n)` is 0, 1, ..., n-1 without reading memory.

The tensor graph has no index node, and `Tensor.arange` uploads its values from the host. Ops that compare
positions (tril, one_hot, gather, the random generator's counters) want them computed where they are used instead.
A position is a sum of its binary digits: for n <= 2**k, view the positions as a (2, 2, ..., 2) block whose axis j
holds [0, 2**(k-1-j)] (a padded constant), broadcast and add the k axes, flatten, and keep the first n. Every
piece is a constant under movement ops, so the scheduler turns the whole thing into k additions per element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen import DType, dtypes
from tg.codegen.schedule.graph import Shape
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def positions(like: Tensor, count: int, dtype: DType = dtypes.int32) -> Tensor:
    """The lazy tensor [0, 1, ..., count-1] of `dtype` on `like`'s device."""
    tensor_type = type(like)
    if count <= 1:
        return tensor_type.zeros(count, dtype=dtype, device=like.device)
    bits = (count - 1).bit_length()
    block = (2,) * bits
    total = None
    for axis in range(bits):
        weight = 1 << (bits - 1 - axis)  # the first axis is the most significant digit
        digit = tensor_type.full((1,), weight, dtype=dtype, device=like.device).pad(((1, 0),))
        shape = [1] * bits
        shape[axis] = 2
        digit = digit.reshape(shape).expand(block)
        total = digit if total is None else total + digit
    assert total is not None  # (count > 1: at least one digit)
    return total.reshape(1 << bits).shrink(((0, count),))


def positions_along(like: Tensor, shape: Shape, axis: int, dtype: DType = dtypes.int32) -> Tensor:
    """A tensor of `shape` whose every element holds its index along `axis` (whose size must be concrete)."""
    count = concrete_size(shape[axis], "positions along an axis")
    view = [1] * len(shape)
    view[axis] = count
    return positions(like, count, dtype).reshape(view).expand(shape)
