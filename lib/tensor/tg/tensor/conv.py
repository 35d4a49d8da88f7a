"""Convolution and pooling: conv2d (any number of spatial axes), conv_transpose2d, avg_pool2d, max_pool2d.

All of them are one idea: pad the spatial axes, view every spatial axis as sliding windows (tg.tensor.shape_ops
`sliding_window`, movement ops only), then reduce each window: a multiply-and-sum with the weights for a
convolution, a mean or a max for pooling. A transposed convolution is an ordinary one over the input with
(stride - 1) zeros put between its elements, padded by dilation * (kernel - 1) - padding, with the kernel flipped
and its channel axes swapped. conv2d has its own backward (tg.tensor.conv_backward), faster than the gradients of
its primitives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.codegen import DType, Ops, UOp, dtypes
from tg.codegen.schedule.graph import KEPT_COPY, ShapeError
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.errors import ArgumentError
from tg.tensor.reduce import sum_accumulator
from tg.tensor.shape_ops import on_axis, sliding_window
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

IntOrTuple = int | Sequence[int]


POSITIVE_SETTINGS = ("stride", "dilation", "kernel_size")
VECTOR_CHANNELS = 16  # output channels per group: a full AVX-512 vector of float32 (output_channels_innermost)


def per_axis(value: IntOrTuple, count: int, name: str) -> tuple[int, ...]:
    """An int repeated for every spatial axis, or a tuple with one entry per axis. Strides, dilations and kernel
    sizes must be at least 1 (a zero stride would otherwise fail later as a bare ZeroDivisionError)."""
    values = (value,) * count if isinstance(value, int) else tuple(value)
    if len(values) != count:
        raise ValueError(f"{name} needs {count} values (one per spatial axis), got {values}")
    if name in POSITIVE_SETTINGS and any(v < 1 for v in values):
        raise ArgumentError(f"{name} must be at least 1 on every axis, got {values}")
    return values


def padding_pairs(padding: IntOrTuple, count: int) -> tuple[tuple[int, int], ...]:
    """(before, after) per spatial axis from an int, one int per axis, or torch's flat pairs starting at the
    last axis (left, right, top, bottom)."""
    if isinstance(padding, int):
        return ((padding, padding),) * count
    padding = tuple(padding)
    if len(padding) == count:
        return tuple((p, p) for p in padding)
    if len(padding) == 2 * count:
        pairs = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)]
        return tuple(pairs[::-1])
    raise ValueError(f"padding {padding} needs 1, {count} or {2 * count} values")


@dataclass(frozen=True)
class WindowSpec:
    """How each spatial axis is windowed."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]


@dataclass(frozen=True)
class ConvGeometry:
    """What conv2d's backward needs besides its tensors."""

    window: WindowSpec
    groups: int
    padding: tuple[tuple[int, int], ...]


def windows(x: Tensor, spec: WindowSpec) -> Tensor:
    """(N, C, *spatial) -> (N, C, *out_spatial, *kernel): every spatial axis becomes windows (each
    sliding_window keeps the axis in place as the window count and appends its kernel axis at the end)."""
    for i in range(len(spec.kernel)):
        x = sliding_window(x, 2 + i, spec.kernel[i], spec.stride[i], spec.dilation[i])
    return x


def output_channels_innermost(weight: Tensor, groups: int, out_width: int | UOp) -> Tensor:
    """`weight` (C_out, C_in / G, *kernel) unchanged in value and shape, but copied so that each group's output
    channels are its contiguous axis: stored (G, C_in / G, *kernel, C_out / G). The conv kernel then loads 16
    output channels of one tap as a vector, and the heuristics give the output channel axis the vector lanes, each
    input value broadcast to them (an outer product per tap, as in a matmul). Otherwise the vector axis is the
    output row, whose width (56 in ResNet) is rarely a multiple of 16: 8-wide vectors ran the 8x64x56x56 3x3
    benchmark conv at about 90 GFLOP/s on one AVX-512 core, 16 output channels x 14 pixels at about 165. The copy
    is one small kernel (the weights, not the activations). The weight stays as it is when a group has no multiple
    of VECTOR_CHANNELS output channels (a depthwise conv) or when the output rows (`out_width` wide) have one: the
    rows then make full vectors themselves, with contiguous stores."""
    channels_out, per_group_in = weight.shape[:2]
    kernel = weight.shape[2:]
    per_group = channels_out // groups
    if not all(isinstance(size, int) for size in weight.shape) or per_group % VECTOR_CHANNELS:
        return weight
    if isinstance(out_width, int) and out_width % VECTOR_CHANNELS == 0:
        return weight
    spatial = len(kernel)
    grouped = weight.reshape((groups, per_group, per_group_in) + kernel)
    moved = grouped.permute((0, 2) + tuple(range(3, 3 + spatial)) + (1,))
    # a kept copy (tg.hcq.engine.kept): while a realized weight is unchanged, later calls reuse the copy
    stored = moved._wrap(UOp(Ops.CONTIGUOUS, moved.dtype, (moved.uop,), KEPT_COPY))
    return stored.permute((0, 2 + spatial, 1) + tuple(range(2, 2 + spatial))).reshape(weight.shape)


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    groups: int = 1,
    stride: IntOrTuple = 1,
    dilation: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    dtype: DType | None = None,
) -> Tensor:
    """Cross-correlation as torch's conv: x (N, C_in, *spatial), weight (C_out, C_in / groups, *kernel).

    Works for any number of spatial axes (weight.ndim - 2). The multiply-and-sum accumulates as `sum` does and the
    result has the operands' promoted dtype (or `dtype`)."""
    spatial = weight.ndim - 2
    if x.ndim != spatial + 2:
        raise ShapeError(f"conv of input {x.shape} with weight {weight.shape}: expected {spatial + 2}-d input")
    batch, channels_in = x.shape[:2]
    channels_out, group_channels = weight.shape[:2]
    if channels_in != group_channels * groups or channels_out % groups:
        raise ShapeError(
            f"conv of input {x.shape} with weight {weight.shape} and groups={groups}: channels do not match"
        )
    pads = padding_pairs(padding, spatial)
    unpadded = x
    if any(before or after for before, after in pads):
        # Materialize the padded input: a small copy that spares every window load of the conv kernel a padding
        # check, so the loads along the contiguous axis stay unit-stride and the C compiler vectorizes them
        # (measured 65 ms -> 40 ms for the 8x64x56x56 3x3 benchmark conv).
        x = x.pad(((0, 0), (0, 0)) + pads).contiguous()
    kernel_sizes = tuple(concrete_size(size, "a conv kernel") for size in weight.shape[2:])
    spec = WindowSpec(kernel_sizes, per_axis(stride, spatial, "stride"), per_axis(dilation, spatial, "dilation"))
    patches = windows(x, spec)  # (N, C_in, *out, *kernel)
    out_spatial = patches.shape[2 : 2 + spatial]
    per_group = channels_out // groups
    patches = patches.reshape((batch, groups, 1, group_channels) + out_spatial + spec.kernel)
    stored = output_channels_innermost(weight, groups, out_spatial[-1])
    kernel = stored.reshape((1, groups, per_group, group_channels) + (1,) * spatial + spec.kernel)
    from tg.tensor.elementwise import broadcast

    patches, kernel = broadcast(patches, kernel)
    result_dtype = patches.dtype if dtype is None else dtype
    accumulator = sum_accumulator(result_dtype)
    reduce_axes = (3,) + tuple(range(4 + spatial, 4 + 2 * spatial))
    product = patches.cast(accumulator) * kernel.cast(accumulator)
    result = product.sum(reduce_axes).cast(result_dtype).reshape((batch, channels_out) + out_spatial)
    from tg.tensor.conv_backward import differentiate_as_conv

    differentiate_as_conv(result, unpadded, x, weight, ConvGeometry(spec, groups, pads))
    if bias is None:
        return result
    return result + bias.reshape((1, channels_out) + (1,) * spatial)


def spread(x: Tensor, axis: int, stride: int) -> Tensor:
    """(stride - 1) zeros between the elements of `axis`."""
    if stride == 1:
        return x
    size = x.shape[axis]
    spread = x.reshape(x.shape[: axis + 1] + (1,) + x.shape[axis + 1 :])
    spread = on_axis(spread, axis + 1, (0, stride - 1)).reshape(x.shape[:axis] + (size * stride,) + x.shape[axis + 1 :])
    return on_axis(spread, axis, (0, (size - 1) * stride + 1), shrink=True)


def conv_transpose2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    groups: int = 1,
    stride: IntOrTuple = 1,
    dilation: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    output_padding: IntOrTuple = 0,
) -> Tensor:
    """torch's conv_transpose: x (N, C_in, *spatial), weight (C_in, C_out / groups, *kernel)."""
    spatial = weight.ndim - 2
    strides = per_axis(stride, spatial, "stride")
    dilations = per_axis(dilation, spatial, "dilation")
    pads = per_axis(padding, spatial, "padding")
    extra = per_axis(output_padding, spatial, "output_padding")
    kernel_size = weight.shape[2:]
    channels_in, per_group = weight.shape[:2]
    for i in range(spatial):
        x = spread(x, 2 + i, strides[i])
    full = tuple(
        (dilations[i] * (kernel_size[i] - 1) - pads[i], dilations[i] * (kernel_size[i] - 1) - pads[i] + extra[i])
        for i in range(spatial)
    )
    x = x.pad(((0, 0), (0, 0)) + full)
    # (C_in, C_out/g, *k) -> (g, C_in/g, C_out/g, *k) -> (g, C_out/g, C_in/g, *k) -> (C_out, C_in/g, *k), flipped
    grouped = weight.reshape((groups, channels_in // groups, per_group) + kernel_size).transpose(1, 2)
    flipped = grouped.reshape((groups * per_group, channels_in // groups) + kernel_size)
    flipped = flipped.flip(tuple(range(2, 2 + spatial)))
    return conv2d(x, flipped, bias, groups=groups, stride=1, dilation=dilations)


@dataclass(frozen=True)
class PoolSpec:
    window: WindowSpec
    padding: tuple[tuple[int, int], ...]
    ceil_extra: tuple[int, ...]  # padding added after each axis so that ceil_mode's last window fits


def pool_spec(
    x: Tensor, kernel_size: IntOrTuple, stride, padding: IntOrTuple, dilation: IntOrTuple, ceil_mode: bool
) -> PoolSpec:
    spatial = x.ndim - 2
    kernel = per_axis(kernel_size, spatial, "kernel_size")
    strides = kernel if stride is None else per_axis(stride, spatial, "stride")
    dilations = per_axis(dilation, spatial, "dilation")
    pads = padding_pairs(padding, spatial)
    extra = []
    for i in range(spatial):
        length = concrete_size(x.shape[2 + i], "pooling")
        size = length + pads[i][0] + pads[i][1]
        span = dilations[i] * (kernel[i] - 1) + 1
        count = (size - span) // strides[i] + 1
        if ceil_mode:
            count = math.ceil((size - span) / strides[i]) + 1
            if (count - 1) * strides[i] >= length + pads[i][0]:  # torch: the last window must start inside
                count -= 1
        extra.append(max(0, (count - 1) * strides[i] + span - size))
    return PoolSpec(WindowSpec(kernel, strides, dilations), pads, tuple(extra))


def pool_windows(x: Tensor, spec: PoolSpec, value: float) -> Tensor:
    pads = tuple((before, after + extra) for (before, after), extra in zip(spec.padding, spec.ceil_extra, strict=True))
    return windows(x.pad(((0, 0), (0, 0)) + pads, value=value), spec.window)


def max_pool2d(
    x: Tensor,
    kernel_size: IntOrTuple = 2,
    stride: IntOrTuple | None = None,
    dilation: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    ceil_mode: bool = False,
) -> Tensor:
    """The largest value of every window; padding never wins (it is the dtype's lowest value)."""
    spec = pool_spec(x, kernel_size, stride, padding, dilation, ceil_mode)
    lowest = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
    patches = pool_windows(x, spec, lowest)
    spatial = x.ndim - 2
    return patches.max(tuple(range(2 + spatial, 2 + 2 * spatial)))


def avg_pool2d(
    x: Tensor,
    kernel_size: IntOrTuple = 2,
    stride: IntOrTuple | None = None,
    dilation: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """The mean of every window. With `count_include_pad` the divisor counts the zero padding (but never the extra
    padding ceil_mode adds), as torch."""
    spec = pool_spec(x, kernel_size, stride, padding, dilation, ceil_mode)
    spatial = x.ndim - 2
    kernel_axes = tuple(range(2 + spatial, 2 + 2 * spatial))
    total = pool_windows(x, spec, 0.0).sum(kernel_axes)
    ones = x.ones_like(dtype=dtypes.float32).shrink(((0, 1), (0, 1)) + tuple((0, s) for s in x.shape[2:]))
    if count_include_pad:
        ones = ones.pad(((0, 0), (0, 0)) + spec.padding, value=1.0)
        counted = PoolSpec(spec.window, tuple((0, 0) for _ in spec.padding), spec.ceil_extra)
    else:
        counted = spec
    divisor = pool_windows(ones, counted, 0.0).sum(kernel_axes)
    result = total / divisor
    return result.cast(x.dtype) if dtypes.is_float(x.dtype) else result


class ConvOps(TensorBase):
    """`conv2d, conv_transpose2d, max_pool2d, max_unpool2d, avg_pool2d, interpolate`."""

    def conv2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: IntOrTuple = 1,
        dilation: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        dtype: DType | None = None,
    ) -> Tensor:
        return conv2d(as_tensor(self), weight, bias, groups, stride, dilation, padding, dtype)

    def conv_transpose2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: IntOrTuple = 1,
        dilation: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        output_padding: IntOrTuple = 0,
    ) -> Tensor:
        return conv_transpose2d(as_tensor(self), weight, bias, groups, stride, dilation, padding, output_padding)

    def max_pool2d(
        self,
        kernel_size: IntOrTuple = 2,
        stride: IntOrTuple | None = None,
        dilation: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Arguments in tinygrad's order (dilation before padding); pass them by name to be safe.
        `return_indices` also returns each maximum's int32 position in the flattened spatial input, as torch."""
        if return_indices:
            from tg.tensor.pool_indices import max_pool_with_indices

            return max_pool_with_indices(as_tensor(self), kernel_size, stride, dilation, padding, ceil_mode)
        return max_pool2d(as_tensor(self), kernel_size, stride, dilation, padding, ceil_mode)

    def max_unpool2d(
        self,
        indices: Tensor,
        kernel_size: IntOrTuple = 2,
        stride: IntOrTuple | None = None,
        dilation: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        output_size: tuple[int, ...] | None = None,
    ) -> Tensor:
        """The inverse of `max_pool2d(return_indices=True)`: values back at their positions, zeros elsewhere."""
        from tg.tensor.pool_indices import max_unpool2d

        return max_unpool2d(as_tensor(self), indices, kernel_size, stride, dilation, padding, output_size)

    def avg_pool2d(
        self,
        kernel_size: IntOrTuple = 2,
        stride: IntOrTuple | None = None,
        dilation: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """Arguments in tinygrad's order (dilation before padding); pass them by name to be safe."""
        return avg_pool2d(as_tensor(self), kernel_size, stride, dilation, padding, ceil_mode, count_include_pad)

    def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
        from tg.tensor.interpolate import interpolate

        return interpolate(as_tensor(self), tuple(size), mode, align_corners)
