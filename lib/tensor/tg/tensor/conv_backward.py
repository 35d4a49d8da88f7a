"""A dedicated backward for conv2d: the weight gradient as a matmul-shaped reduction, the input gradient as a conv.

Differentiating conv2d's primitives (a window view, a broadcast multiply, a sum) gives correct but slow kernels
(issue 23, a ResNet training step 3.5x torch's time): the weight gradient reduces two operands that are
contiguous only along the reduced pixel axis, so its vector lanes became gathers, and the input gradient went
through a window gradient nine times the input's size. conv2d therefore registers this rule with autograd
(`tg.tensor.autograd.custom_gradient`):

- weight gradient: dW[co, ci, k] = sum over (n, pixel) of g[n, co, pixel] * x_padded[n, ci, pixel * s + k * d]. The
  output gradient is first transposed to channels-last (N, *out, C_out), so C_out becomes the contiguous axis of
  both the operand and the result, as in a matmul's right operand: the kernel heuristics give it 16 vector lanes
  and broadcast one window value per lane row (an outer product per pixel). The pixels are reduced in chunks of
  output rows whose operands fit the L2 cache, each chunk a partial result, then the partials summed: one sweep
  over all of them would reread the whole input for every tile of the output.
- input gradient: a conv of the output gradient (spread by the stride, padded by dilation * (kernel - 1) minus the
  forward's padding) with the weights flipped and their channel axes swapped, so it runs on the forward conv's
  kernel shape. With a stride s the spread puts zeros in, and s * s times the needed multiply-adds are done.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.codegen import UOp
from tg.tensor.autograd import Gradients, custom_gradient
from tg.tensor.conv import ConvGeometry, WindowSpec, conv2d, spread, windows
from tg.tensor.elementwise import broadcast
from tg.tensor.linalg import l2_bytes
from tg.tensor.reduce import sum_accumulator

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

Pads = tuple[tuple[int, int], ...]


def rows_per_chunk(out_rows: int, row_bytes: int, budget: int) -> int:
    """The most output rows (a divisor of `out_rows`, so every chunk is alike) whose operands take at most `budget`
    bytes; one row when even one does not fit."""
    fitting = [rows for rows in range(1, out_rows + 1) if out_rows % rows == 0 and rows * row_bytes <= budget]
    return max(fitting, default=1)


@dataclass(frozen=True)
class PixelChunks:
    """How the weight gradient's pixels are split: `chunks` chunks of `rows` rows of the first output axis per
    image, each reduced to a partial result, unless `one_sweep` (everything fits the cache: one reduction)."""

    rows: int
    chunks: int
    one_sweep: bool


def pixel_chunks(x_padded: Tensor, grad: Tensor, spec: WindowSpec) -> PixelChunks:
    """Chunks whose window rows and gradient rows sit in a quarter of L2 together."""
    out = grad.shape[2:]
    row_bytes = grad.dtype.itemsize * math.prod(out[1:]) * (grad.shape[1] + x_padded.shape[1] * spec.stride[0])
    budget = l2_bytes() // 4
    rows = rows_per_chunk(out[0], row_bytes, budget)
    return PixelChunks(rows, out[0] // rows, grad.shape[0] * out[0] * row_bytes <= budget)


def window_rows(x_padded: Tensor, spec: WindowSpec, groups: int, chunks: PixelChunks) -> Tensor:
    """The windows (N, C_in, *out, *kernel) as (N, chunks, G, C_in / G, *kernel, rows, *out[1:], 1): the left
    operand, one window value per output row of the weight gradient."""
    batch, channels_in = x_padded.shape[:2]
    spatial = len(spec.kernel)
    patches = windows(x_padded, spec)
    inner = (chunks.rows,) + patches.shape[3 : 2 + spatial]
    patches = patches.reshape((batch, groups, channels_in // groups, chunks.chunks) + inner + spec.kernel)
    kernel_axes = tuple(range(4 + spatial, 4 + 2 * spatial))
    patches = patches.permute((0, 3, 1, 2) + kernel_axes + tuple(range(4, 4 + spatial)))
    return patches.reshape(patches.shape + (1,))


def gradient_columns(grad: Tensor, groups: int, chunks: PixelChunks) -> Tensor:
    """The output gradient (N, C_out, *out) copied channels-last, then viewed as
    (N, chunks, G, 1, *(1,) * spatial, rows, *out[1:], C_out / G): the right operand, C_out / G contiguous."""
    batch, channels_out, out = grad.shape[0], grad.shape[1], grad.shape[2:]
    spatial, per_group = len(out), channels_out // groups
    channels_last = (0, 1) + tuple(range(3, 3 + spatial)) + (2,)
    columns = grad.reshape((batch, groups, per_group) + out).permute(channels_last).contiguous()
    inner = (chunks.rows,) + out[1:]
    columns = columns.reshape((batch, groups, chunks.chunks) + inner + (per_group,))
    columns = columns.permute((0, 2, 1) + tuple(range(3, 4 + spatial)))
    return columns.reshape((batch, chunks.chunks, groups, 1) + (1,) * spatial + inner + (per_group,))


def weight_gradient(x_padded: Tensor, grad: Tensor, spec: WindowSpec, groups: int, weight_shape: tuple) -> Tensor:
    """dL/dW of conv2d from its padded input (N, C_in, *padded) and the output gradient (N, C_out, *out)."""
    spatial = len(spec.kernel)
    chunks = pixel_chunks(x_padded, grad, spec)
    accumulator = sum_accumulator(grad.dtype)
    rows, columns = broadcast(window_rows(x_padded, spec, groups, chunks), gradient_columns(grad, groups, chunks))
    product = rows.cast(accumulator) * columns.cast(accumulator)
    pixel_axes = tuple(range(4 + spatial, 4 + 2 * spatial))
    # (G, C_in / G, *kernel, C_out / G), stored in that order so the sum's lanes stay contiguous, then viewed as
    # torch's weight layout (C_out, C_in / G, *kernel); partial sums (N, chunks, G, C_in / G, *kernel, C_out / G)
    # first unless the whole fits the cache
    total = product.sum((0, 1) + pixel_axes) if chunks.one_sweep else product.sum(pixel_axes).sum((0, 1))
    total = total.contiguous()
    per_group = total.permute((0, 2 + spatial, 1) + tuple(range(2, 2 + spatial)))
    return per_group.reshape(weight_shape)


def input_gradient(grad: Tensor, weight: Tensor, spec: WindowSpec, groups: int, pads: Pads, in_shape: tuple) -> Tensor:
    """dL/dx of conv2d: the output gradient spread by the stride, padded so that every input position sees the
    window positions that read it, convolved with the flipped weights whose channel axes are swapped."""
    spatial = len(spec.kernel)
    for i in range(spatial):
        grad = spread(grad, 2 + i, spec.stride[i])
    reach = [spec.dilation[i] * (spec.kernel[i] - 1) for i in range(spatial)]
    # before: the window reach minus the forward's padding; after: up to the input's size plus the reach
    padding = tuple((reach[i] - pads[i][0], in_shape[2 + i] + pads[i][0] - grad.shape[2 + i]) for i in range(spatial))
    grad = grad.pad(((0, 0), (0, 0)) + padding).contiguous()  # materialized, as conv2d does with its padded input
    channels_out, per_group_in = weight.shape[:2]
    per_group_out = channels_out // groups
    swapped = weight.reshape((groups, per_group_out, per_group_in) + spec.kernel).transpose(1, 2)
    flipped = swapped.reshape((groups * per_group_in, per_group_out) + spec.kernel).flip(tuple(range(2, 2 + spatial)))
    # its own kernel: fused into a consumer that reads it transposed (the channels-last copy of the next weight
    # gradient) the conv lost its vectorized output axis (5-9 GFLOP/s against 75-150 as its own kernel)
    return conv2d(grad, flipped, groups=groups, dilation=spec.dilation, dtype=grad.dtype).contiguous()


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
