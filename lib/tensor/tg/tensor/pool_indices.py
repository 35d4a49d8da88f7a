"""Max pooling that also says where each maximum came from, and its inverse, `max_unpool2d`.

The index of a maximum is its position in the flattened spatial axes of the (unpadded) input, as torch's
`return_indices`. The positions are windowed exactly like the values (padding gets an index larger than any real
one); among the window elements equal to the window's maximum, the smallest position wins, which is the first one
in the window's row-major scan, as in torch. Unpooling scatters every value back to its position; everything else
is zero.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg.codegen import dtypes
from tg.tensor.conv import IntOrTuple, per_axis, pool_spec, pool_windows
from tg.tensor.positions import positions
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def max_pool_with_indices(
    x: Tensor, kernel_size: IntOrTuple, stride, dilation: IntOrTuple, padding: IntOrTuple, ceil_mode: bool
) -> tuple[Tensor, Tensor]:
    spec = pool_spec(x, kernel_size, stride, padding, dilation, ceil_mode)
    spatial = x.ndim - 2
    kernel_axes = tuple(range(2 + spatial, 2 + 2 * spatial))
    lowest = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
    patches = pool_windows(x, spec, lowest)
    largest = patches.max(kernel_axes, keepdim=True)
    is_max = patches == largest
    if dtypes.is_float(x.dtype):
        is_max = is_max | (patches.isnan() & largest.isnan())
    count = math.prod(concrete_size(size, "max pool indices") for size in x.shape[2:])
    flat_positions = positions(x, count).reshape((1, 1) + x.shape[2:])
    position_patches = pool_windows(flat_positions, spec, count)  # padding: past every real position
    indices = is_max.where(position_patches, count).min(kernel_axes)
    return largest.reshape(indices.shape), indices


def max_unpool2d(
    x: Tensor,
    indices: Tensor,
    kernel_size: IntOrTuple = 2,
    stride: IntOrTuple | None = None,
    dilation: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    output_size: tuple[int, ...] | None = None,
) -> Tensor:
    """Every value of x put at its flat spatial position from `indices` in a zero tensor of the input's size."""
    spatial = x.ndim - 2
    kernel = per_axis(kernel_size, spatial, "kernel_size")
    strides = kernel if stride is None else per_axis(stride, spatial, "stride")
    dilations, pads = per_axis(dilation, spatial, "dilation"), per_axis(padding, spatial, "padding")
    if output_size is None:
        sizes = [(x.shape[2 + i] - 1) * strides[i] - 2 * pads[i] + dilations[i] * (kernel[i] - 1) + 1
                 for i in range(spatial)]  # fmt: skip
    else:
        sizes = list(output_size[-spatial:])
    batch, channels = x.shape[:2]
    flat = type(x).zeros(batch, channels, math.prod(sizes), dtype=x.dtype, device=x.device)
    placed = flat.scatter(2, indices.reshape(batch, channels, -1), x.reshape(batch, channels, -1))
    return placed.reshape((batch, channels) + tuple(sizes))
