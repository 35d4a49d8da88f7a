"""A dedicated backward for conv2d: the weight gradient as a matmul-shaped reduction, the input gradient as a conv.

Differentiating conv2d's primitives (a window view, a broadcast multiply, a sum) gives correct but slow kernels
(issue 23, a ResNet training step 3.5x torch's time): the weight gradient reduces two operands that are
contiguous only along the reduced pixel axis, so its vector lanes became gathers, and the input gradient went
through the gradient of the window view, stored at several times the input's size. conv2d therefore registers
this rule with autograd (`tg.tensor.autograd.custom_gradient`):

- weight gradient: dW[co, ci, k] = sum over (n, pixel) of g[n, co, pixel] * x_padded[n, ci, pixel * s + k * d]. The
  output gradient is first transposed to channels-last (N, *out, C_out), so C_out becomes the contiguous axis of
  both the operand and the result, as in a matmul's right operand: the kernel heuristics give it 16 vector lanes
  and broadcast one window value per lane row (an outer product per pixel). The sum over pixels is tagged: the
  scheduler's layout stage (tg.codegen.schedule.layout_conv) cuts it into chunks of output rows (or whole images)
  whose operands fit the device's L2 cache, each chunk a partial result, then the partials summed: one sweep over
  all of them would reread the whole input for every tile of the output.
- input gradient: a conv of the output gradient (padded by dilation * (kernel - 1) minus the forward's padding) with
  the weights flipped and their channel axes swapped, so it runs on the forward conv's kernel shape. A strided
  conv's input gradient is one such conv per phase of the input (the positions with the same index mod stride),
  with the taps that reach it, the phases then interleaved.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.codegen import UOp
from tg.codegen.schedule.layout_conv import WeightGradientTag
from tg.tensor.autograd import Gradients, custom_gradient
from tg.tensor.conv import ConvGeometry, WindowSpec, conv2d, windows
from tg.tensor.elementwise import broadcast
from tg.tensor.reduce import sum_accumulator
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

Pads = tuple[tuple[int, int], ...]


def pixel_chunks_tag(x_padded: Tensor, grad: Tensor, spec: WindowSpec, weight_size: int) -> WeightGradientTag:
    """What the scheduler's layout stage needs to choose the chunks for its device (tg.codegen.schedule.layout_conv):
    the bytes of windows and gradient per output row of one image, and the most elements partials may hold."""
    grad_shape, padded_shape = (
        tuple(concrete_size(size, "a conv's weight gradient") for size in t.shape) for t in (grad, x_padded)
    )
    out = grad_shape[2:]
    row_bytes = grad.dtype.itemsize * math.prod(out[1:]) * (grad_shape[1] + padded_shape[1] * spec.stride[0])
    limit = max(math.prod(padded_shape), math.prod(grad_shape))
    return WeightGradientTag(grad_shape[0], out[0], row_bytes, limit, weight_size, len(spec.kernel))


def window_rows(x_padded: Tensor, spec: WindowSpec, groups: int) -> Tensor:
    """The windows (N, C_in, *out, *kernel) as (1, 1, G, C_in / G, *kernel, N, out[0], *out[1:], 1): the left
    operand, one window value per output row of the weight gradient (the two leading axes are the chunks of images
    and of rows that the layout stage may split the pixels into)."""
    channels_in = x_padded.shape[1]
    spatial = len(spec.kernel)
    patches = windows(x_padded, spec)
    batch, out_rows = patches.shape[0], patches.shape[2]
    split = (1, batch, groups, channels_in // groups, 1, out_rows)
    patches = patches.reshape(split + patches.shape[3 : 2 + spatial] + spec.kernel)
    kernel_axes = tuple(range(5 + spatial, 5 + 2 * spatial))
    patches = patches.permute((0, 4, 2, 3) + kernel_axes + (1,) + tuple(range(5, 5 + spatial)))
    return patches.reshape(patches.shape + (1,))


def gradient_columns(grad: Tensor, groups: int) -> Tensor:
    """The output gradient (N, C_out, *out) copied channels-last, then viewed as (1, 1, G, 1, *(1,) * spatial, N,
    out[0], *out[1:], C_out / G): the right operand, C_out / G contiguous."""
    batch, channels_out, out = grad.shape[0], grad.shape[1], grad.shape[2:]
    spatial, per_group = len(out), channels_out // groups
    channels_last = (0, 1) + tuple(range(3, 3 + spatial)) + (2,)
    columns = grad.reshape((batch, groups, per_group) + out).permute(channels_last).contiguous()
    split = (1, batch, groups, 1, out[0])
    columns = columns.reshape(split + out[1:] + (per_group,))
    columns = columns.permute((0, 3, 2, 1) + tuple(range(4, 5 + spatial)))
    inner = (batch,) + out
    return columns.reshape((1, 1, groups, 1) + (1,) * spatial + inner + (per_group,))


def weight_gradient(x_padded: Tensor, grad: Tensor, spec: WindowSpec, groups: int, weight_shape: tuple) -> Tensor:
    """dL/dW of conv2d from its padded input (N, C_in, *padded) and the output gradient (N, C_out, *out): one sum
    over every pixel, tagged so that the layout stage may cut it into chunks that fit the device's cache."""
    spatial = len(spec.kernel)
    accumulator = sum_accumulator(grad.dtype)
    rows, columns = broadcast(window_rows(x_padded, spec, groups), gradient_columns(grad, groups))
    product = rows.cast(accumulator) * columns.cast(accumulator)
    pixel_axes = tuple(range(4 + spatial, 5 + 2 * spatial))  # images, rows, *out[1:]
    # (G, C_in / G, *kernel, C_out / G), stored in that order so the sum's lanes stay contiguous, then viewed as
    # torch's weight layout (C_out, C_in / G, *kernel)
    total = product.sum((0, 1) + pixel_axes)
    total.uop = total.uop.replace(tag=pixel_chunks_tag(x_padded, grad, spec, math.prod(weight_shape)))
    total = total.contiguous()
    per_group = total.permute((0, 2 + spatial, 1) + tuple(range(2, 2 + spatial)))
    return per_group.reshape(weight_shape)


def swapped_flipped(weight: Tensor, groups: int) -> Tensor:
    """(C_out, C_in / G, *kernel) -> (C_in, C_out / G, *kernel) flipped: the weights of the conv that carries the
    output gradient back to the input."""
    channels_out, per_group_in = weight.shape[:2]
    kernel = weight.shape[2:]
    swapped = weight.reshape((groups, channels_out // groups, per_group_in) + kernel).transpose(1, 2)
    swapped = swapped.reshape((groups * per_group_in, channels_out // groups) + kernel)
    return swapped.flip(tuple(range(2, 2 + len(kernel))))


def backward_conv(grad: Tensor, padding: Pads, weight: Tensor, groups: int, dilation: tuple[int, ...]) -> Tensor:
    """The output gradient padded (negative: cut) and materialized, as conv2d does with its padded input, then
    convolved with `weight` (already swapped and flipped). Its own kernel: fused into a consumer that reads it
    transposed (the channels-last copy of the next weight gradient) the conv lost its vectorized output axis
    (5-9 GFLOP/s against 75-150 as its own kernel)."""
    padded = grad.pad(((0, 0), (0, 0)) + padding).contiguous()
    return conv2d(padded, weight, groups=groups, dilation=dilation, dtype=grad.dtype).contiguous()


def input_gradient(grad: Tensor, weight: Tensor, spec: WindowSpec, groups: int, pads: Pads, in_shape: tuple) -> Tensor:
    """dL/dx of conv2d: every input position gathers the output gradient of the windows that read it, a conv of the
    padded output gradient with the flipped weights whose channel axes are swapped. A strided conv splits into one
    such conv per phase (input positions i with the same i mod stride, see `phase_gradient`)."""
    if any(stride > 1 for stride in spec.stride):
        return strided_input_gradient(grad, weight, spec, groups, pads, in_shape)
    spatial = len(spec.kernel)
    reach = [spec.dilation[i] * (spec.kernel[i] - 1) for i in range(spatial)]
    # before: the window reach minus the forward's padding; after: up to the input's size plus the reach
    padding = tuple((reach[i] - pads[i][0], in_shape[2 + i] + pads[i][0] - grad.shape[2 + i]) for i in range(spatial))
    return backward_conv(grad, padding, swapped_flipped(weight, groups), groups, spec.dilation)


@dataclass(frozen=True)
class PhaseTaps:
    """The kernel taps of one axis whose window offset k * dilation falls on padded input positions j = q * stride
    + phase: taps[m] reads the output gradient at q - offsets[m], offsets evenly `dilation` apart."""

    taps: range
    first_offset: int
    dilation: int


def phase_taps(kernel: int, stride: int, dilation: int, phase: int) -> PhaseTaps | None:
    """The taps of one axis that reach the positions of `phase` (None: no tap does). They are evenly spaced: k * d
    is congruent to the phase mod stride for every stride / gcd(d, stride)-th k."""
    taps = [k for k in range(kernel) if (k * dilation - phase) % stride == 0]
    if not taps:
        return None
    if len(taps) == 1:  # one tap: any dilation
        return PhaseTaps(range(taps[0], taps[0] + 1), (taps[0] * dilation - phase) // stride, 1)
    step = taps[1] - taps[0]
    return PhaseTaps(range(taps[0], kernel, step), (taps[0] * dilation - phase) // stride, step * dilation // stride)


def phase_gradient(grad: Tensor, weight: Tensor, groups: int, taps: tuple[PhaseTaps, ...], rows: tuple) -> Tensor:
    """dL/dx_padded at positions q * stride + phase (q < rows[i] on axis i): a stride-1 conv of the output gradient
    with the phase's taps, flipped, at their own dilation."""
    sub = weight[(slice(None), slice(None)) + tuple(slice(t.taps.start, t.taps.stop, t.taps.step) for t in taps)]
    padding = []
    for axis, (t, count) in enumerate(zip(taps, rows, strict=True)):
        last = t.first_offset + (len(t.taps) - 1) * t.dilation  # the largest offset: the left padding
        padding.append((last, count + (len(t.taps) - 1) * t.dilation - last - grad.shape[2 + axis]))
    return backward_conv(grad, tuple(padding), swapped_flipped(sub, groups), groups, tuple(t.dilation for t in taps))


def strided_input_gradient(
    grad: Tensor, weight: Tensor, spec: WindowSpec, groups: int, pads: Pads, in_shape: tuple
) -> Tensor:
    """Padded input positions j = q * stride + phase see the taps k with k * dilation = phase (mod stride) only, and
    those at q - (k * dilation - phase) / stride: per phase a stride-1 conv over the output gradient with those taps
    (spreading the gradient with zeros instead would multiply stride**2 times as often). The phases' results are
    interleaved, then the forward's padding is cut off."""
    spatial = len(spec.kernel)
    strides = spec.stride
    rows = tuple(-(-(pads[i][0] + in_shape[2 + i]) // strides[i]) for i in range(spatial))
    phases = []
    for phase in itertools.product(*(range(s) for s in strides)):
        found = [phase_taps(spec.kernel[i], strides[i], spec.dilation[i], phase[i]) for i in range(spatial)]
        taps = tuple(t for t in found if t is not None)
        if len(taps) != len(found):  # no tap reaches these positions (a strided 1x1 conv skips inputs)
            phases.append(type(grad).zeros(*in_shape[:2], *rows, dtype=grad.dtype, device=grad.device))
            continue
        phases.append(phase_gradient(grad, weight, groups, taps, rows))
    stacked = phases[0].stack(*phases[1:]) if len(phases) > 1 else phases[0].unsqueeze(0)
    interleaved = stacked.reshape(strides + (in_shape[0], in_shape[1]) + rows)
    order = (spatial, spatial + 1) + tuple(axis for i in range(spatial) for axis in (spatial + 2 + i, i))
    interleaved = interleaved.permute(order).reshape(
        in_shape[:2] + tuple(r * s for r, s in zip(rows, strides, strict=True))
    )
    return interleaved.shrink(
        ((0, in_shape[0]), (0, in_shape[1])) + tuple((pads[i][0], pads[i][0] + in_shape[2 + i]) for i in range(spatial))
    )


def differentiate_as_conv(result: Tensor, x: Tensor, x_padded: Tensor, weight: Tensor, geometry: ConvGeometry) -> None:
    """Give conv2d's result (before the bias) this module's gradients for x and weight. The rule keeps the nodes,
    not the Tensors: a Tensor's node changes when it is assigned to, the value the result was computed from not."""
    if type(x).no_grad or any(not isinstance(size, int) for size in (*x_padded.shape, *weight.shape)):
        return  # nothing to differentiate, or a symbolic size: the primitives' gradients apply
    tensor_type, device, in_shape = type(x), x.device, x.shape
    x_node, padded_node, weight_node = x.uop, x_padded.uop, weight.uop

    def rule(grad: UOp, wanted: tuple[bool, ...]) -> Gradients:
        g, w = tensor_type(grad, device=device), tensor_type(weight_node, device=device)
        dx = dw = None
        if wanted[0]:
            dx = input_gradient(g, w, geometry.window, geometry.groups, geometry.padding, in_shape).cast(x_node.dtype)
        if wanted[1]:
            padded = tensor_type(padded_node, device=device)
            dw = weight_gradient(padded, g, geometry.window, geometry.groups, w.shape).cast(weight_node.dtype)
        return (None if dx is None else dx.uop, None if dw is None else dw.uop)

    custom_gradient(result.uop, (x_node, weight_node), rule)
