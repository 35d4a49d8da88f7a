"""conv2d's dedicated backward (tg.tensor.conv_backward): exact gradients against a numpy oracle, and the shape of
its kernels (issue 23: a ResNet training step)."""

from __future__ import annotations

import math
import weakref
from dataclasses import replace

import numpy as np
import pytest

from tg.codegen.opt import KernelOptimizer, OptOps, hand_coded_optimizations
from tg.codegen.opt.heuristics import MIN_REGISTER_LANES, WIDE_MAX_LANES, axis_reuse, stride_along
from tg.codegen.opt.optimizer import range_size
from tg.codegen.schedule.layout_conv import PixelChunks, choose_chunks, chunks_for
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import Ops
from tg.hcq import Device
from tg.tensor import Tensor
from tg.tensor.conv import WindowSpec
from tg.tensor.conv_backward import pixel_chunks_tag

# -------------------------------------------------------------------------------- a numpy oracle


def pairs(value, count: int = 2) -> tuple:
    return (value,) * count if isinstance(value, int) else tuple(value)


def numpy_conv_and_gradients(x, w, up, stride, padding, dilation, groups):
    """out, dL/dx, dL/dw, dL/db of a 2-d conv for L = sum(out * up), in float64, by one slice per kernel offset:
    out[.., p] += x_padded[.., p * s + k * d] w[k], and each such product sends up[.., p] back to both factors."""
    stride, dilation = pairs(stride), pairs(dilation)
    pads = (
        padding
        if isinstance(padding, tuple) and isinstance(padding[0], tuple)
        else tuple((p, p) for p in pairs(padding))
    )
    x, w, up = (a.astype(np.float64) for a in (x, w, up))
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    c_out, c_group, kh, kw = w.shape
    out_h, out_w = up.shape[2:]
    per_group = c_out // groups
    out = np.zeros(up.shape)
    dxp, dw = np.zeros(xp.shape), np.zeros(w.shape)
    for g in range(groups):
        outs, ins = slice(g * per_group, (g + 1) * per_group), slice(g * c_group, (g + 1) * c_group)
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dilation[0], i * dilation[0] + (out_h - 1) * stride[0] + 1, stride[0])
                cols = slice(j * dilation[1], j * dilation[1] + (out_w - 1) * stride[1] + 1, stride[1])
                patch = xp[:, ins, rows, cols]  # (n, c_group, out_h, out_w)
                out[:, outs] += np.einsum("nchw,oc->nohw", patch, w[outs, :, i, j])
                dw[outs, :, i, j] += np.einsum("nohw,nchw->oc", up[:, outs], patch)
                dxp[:, ins, rows, cols] += np.einsum("nohw,oc->nchw", up[:, outs], w[outs, :, i, j])
    h, wd = x.shape[2:]
    dx = dxp[:, :, pads[0][0] : pads[0][0] + h, pads[1][0] : pads[1][0] + wd]  # the padding cropped back off
    return out, dx, dw, up.sum((0, 2, 3))


CASES = [
    # (x shape, weight shape, stride, padding, dilation, groups)
    ((2, 3, 7, 7), (4, 3, 3, 3), 1, 1, 1, 1),
    ((2, 4, 9, 8), (6, 4, 3, 2), 2, 1, 1, 1),
    ((2, 4, 9, 8), (6, 2, 3, 3), (2, 3), (2, 0), (1, 2), 2),
    ((1, 6, 10, 10), (6, 2, 3, 3), 3, 4, 2, 3),  # padding wider than the window's reach: the gradient shrinks
    ((1, 2, 5, 5), (2, 2, 1, 1), 2, 0, 1, 1),  # a strided 1x1 conv skips inputs: their gradient is 0
    ((1, 2, 6, 7), (4, 2, 2, 2), 1, ((2, 1), (1, 0)), 1, 1),  # asymmetric padding (torch's flat pairs)
    ((2, 4, 6, 6), (4, 1, 3, 3), 1, 1, 1, 4),  # depthwise
    # 16 output channels per group: the forward and input-gradient convs read weights stored output channels innermost
    ((1, 32, 7, 5), (32, 16, 3, 3), (2, 1), 1, 1, 2),
    ((2, 16, 6, 9), (16, 16, 3, 3), 1, 1, 1, 1),
]


def torch_padding(padding):
    """conv2d's padding argument: torch's flat (left, right, top, bottom) form for per-side pairs."""
    if isinstance(padding, tuple) and isinstance(padding[0], tuple):
        (top, bottom), (left, right) = padding
        return (left, right, top, bottom)
    return padding


@pytest.mark.parametrize("x_shape, w_shape, stride, padding, dilation, groups", CASES)
def test_gradients_match_the_numpy_oracle(x_shape, w_shape, stride, padding, dilation, groups) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    tx, tw, tb = (Tensor(a, requires_grad=True) for a in (x, w, b))
    out = tx.conv2d(tw, tb, groups=groups, stride=stride, dilation=dilation, padding=torch_padding(padding))
    up = rng.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(up)).sum().backward()
    want_out, dx, dw, db = numpy_conv_and_gradients(x, w, up, stride, padding, dilation, groups)
    np.testing.assert_allclose(out.numpy(), want_out + b.reshape(1, -1, 1, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tx.grad.numpy(), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tb.grad.numpy(), db, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "l2, images, rows", [(1 << 12, 1, 2), (1 << 15, 1, 12), (1 << 16, 2, 12)], ids=["rows", "image", "images"]
)
def test_weight_gradients_summed_from_partial_chunks_match_the_oracle(monkeypatch, l2, images, rows) -> None:
    """A small L2 in the CPU device's Target makes the layout stage reduce the weight gradient in chunks of rows,
    whole images, or several images to partial results first (as the 8x64x56x56 benchmark conv does); the sum of the
    partials is the gradient."""
    device = Device["CPU"]
    target = replace(device.target, l2_bytes=l2)
    monkeypatch.setattr(device, "renderer", type(device.renderer)(target))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 4, 12, 10)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    padded = tx.pad(((0, 0), (0, 0), (1, 1), (1, 1)))
    tag = pixel_chunks_tag(padded, Tensor.empty(4, 6, 12, 10), WindowSpec((3, 3), (1, 1), (1, 1)), w.size)
    chosen = chunks_for(tag, target)
    assert (chosen.images, chosen.rows) == (images, rows) and chosen.partials > 1
    out = tx.conv2d(tw, groups=2, padding=1)
    up = rng.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(up)).sum().backward()
    _, dx, dw, _ = numpy_conv_and_gradients(x, w, up, 1, 1, 1, 2)
    np.testing.assert_allclose(tw.grad.numpy(), dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tx.grad.numpy(), dx, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "x_shape, w_shape, stride, padding, dilation, groups",
    [((2, 4, 11), (6, 2, 3), 2, 2, 2, 2), ((1, 2, 5, 6, 4), (4, 2, 3, 2, 2), (1, 2, 1), 1, (2, 1, 1), 1)],
    ids=["conv1d", "conv3d"],
)
def test_other_spatial_ranks_match_the_gradients_of_the_primitives(
    monkeypatch, x_shape, w_shape, stride, padding, dilation, groups
) -> None:
    """conv1d and conv3d take the same backward; the oracle is autograd through conv2d's primitives (each rule
    checked by finite differences in test_gradients)."""
    import tg.tensor.autograd as autograd
    import tg.tensor.conv_backward as conv_backward

    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)

    def gradients() -> list[np.ndarray]:
        tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
        out = tx.conv2d(tw, groups=groups, stride=stride, dilation=dilation, padding=padding)
        (out * out).sum().backward()
        return [tx.grad.numpy(), tw.grad.numpy()]

    dedicated = gradients()
    # no rule registered, none remembered (the same graph is the same nodes, maybe still alive in a cache)
    monkeypatch.setattr(conv_backward, "custom_gradient", lambda *args: None)
    monkeypatch.setattr(autograd, "_custom_gradients", weakref.WeakKeyDictionary())
    for got, want in zip(dedicated, gradients(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_input_used_outside_the_conv_too_gets_both_gradients() -> None:
    """The conv's own rule covers only the gradient that flows through the conv; x * x adds its own."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 2, 5, 5)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    loss = tx.conv2d(tw, padding=1).sum() + (tx * tx).sum()
    loss.realize()  # the forward is realized first: backward differentiates the graph that computed it
    loss.backward()
    _, dx, dw, _ = numpy_conv_and_gradients(x, w, np.ones((1, 3, 5, 5)), 1, 1, 1, 1)
    np.testing.assert_allclose(tx.grad.numpy(), dx + 2 * x, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), dw, rtol=1e-4, atol=1e-4)


def test_a_half_precision_conv_gets_gradients_in_its_own_dtype() -> None:
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((1, 2, 6, 6)).astype(np.float16), rng.standard_normal((2, 2, 3, 3)).astype(np.float16)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    tx.conv2d(tw, padding=1).sum().backward()
    _, dx, dw, _ = numpy_conv_and_gradients(x, w, np.ones((1, 2, 6, 6)), 1, 1, 1, 1)
    assert tx.grad.dtype == tx.dtype and tw.grad.dtype == tw.dtype
    np.testing.assert_allclose(tx.grad.numpy(), dx, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(tw.grad.numpy(), dw, rtol=2e-2, atol=5e-2)


# -------------------------------------------------------------------------------- the kernels


def resnet_step_kernels(batch: int = 2, channels: int = 16, size: int = 16) -> tuple[list[KernelCall], int]:
    """The kernels of a ResNet basic block's weight gradients (conv3x3-relu-conv3x3-relu + x), and x's size."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((batch, channels, size, size)).astype(np.float32)).realize()
    w1, w2 = (
        Tensor(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32), requires_grad=True).realize()
        for _ in range(2)
    )
    loss = (x.conv2d(w1, padding=1).relu().conv2d(w2, padding=1).relu() + x).sum()
    grads = loss.gradient(w1, w2)
    items = create_schedule((loss.uop, *(g.uop for g in grads))).items
    return [item for item in items if isinstance(item, KernelCall)], math.prod(x.shape)


def reduce_count(kernel: KernelCall) -> int:
    return sum(node.op is Ops.REDUCE for node in kernel.ast.toposort())


def test_no_kernel_of_the_training_step_stores_a_window_sized_gradient() -> None:
    """The gradient of conv2d's primitives went through the gradient of its window view, several times the
    input's size; the dedicated backward stores nothing larger than the padded input (18x18 for a 16x16 image)."""
    kernels, input_size = resnet_step_kernels()
    padded = input_size * (18 * 18) // (16 * 16)
    assert max(kernel.buffers[0].arg.size for kernel in kernels) <= padded


def test_each_conv_is_computed_once() -> None:
    """Three conv kernels: the two forward convs and the input gradient of the second. The relu masks read the
    forward convs' stored results (the scheduler gives a reduction that two kernels read its own buffer); conv1
    was computed a second time for its mask inside the backward."""
    kernels, input_size = resnet_step_kernels()
    convs = [kernel for kernel in kernels if reduce_count(kernel) and kernel.buffers[0].arg.size == input_size]
    assert len(convs) == 3
    assert all(reduce_count(kernel) <= 1 for kernel in kernels)


def test_the_weight_gradient_is_a_matmul_shaped_reduction_over_contiguous_lanes() -> None:
    """The weight gradient kernel (its output is the weight's size) gets an outer-product register tile: 16 lanes
    along an output axis where the store and the gradient's load move by one element and the window value is
    loaded once for all lanes, times a second upcast axis. Differentiating conv2d's primitives gave a kernel
    whose only contiguous output axis was the 3-wide kernel column, its lanes gathers."""
    kernels, _ = resnet_step_kernels()
    weight_size = 16 * 16 * 3 * 3
    (weight_kernel, *_) = [k for k in kernels if k.buffers[0].arg.size == weight_size and reduce_count(k) == 1]
    optimizer = KernelOptimizer(weight_kernel.ast)
    (lanes, *_) = [axis for axis in axis_reuse(optimizer) if axis.contiguous and axis.size % 16 == 0]
    ranges = [u for u in weight_kernel.ast.toposort() if u.op is Ops.RANGE]
    loads = [u.src[0].src[1] for u in weight_kernel.ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    assert sorted(stride_along(address, optimizer.rngs[lanes.axis], ranges) for address in loads) == [0, 1]
    upcasts = [opt.arg for opt in hand_coded_optimizations(optimizer) if opt.op is OptOps.UPCAST]
    assert upcasts[0] == 16 and len(upcasts) >= 2


def test_the_weight_gradient_has_enough_accumulators_per_vector_lane_to_keep_the_fma_units_busy() -> None:
    """Next to its 16 vector lanes, the weight gradient's second upcast is the window's 3 columns: 3 fma chains per
    lane, where 8 are needed to cover an fma's latency. A third upcast (input channels) brings them to 12 on AVX-512
    (as many lanes as 32 zmm registers allow); the values stay the oracle's (test_gradients_match_the_numpy_oracle)."""
    kernels, _ = resnet_step_kernels()
    weight_size = 16 * 16 * 3 * 3
    (weight_kernel, *_) = [k for k in kernels if k.buffers[0].arg.size == weight_size and reduce_count(k) == 1]
    opts = hand_coded_optimizations(KernelOptimizer(weight_kernel.ast), max_lanes=WIDE_MAX_LANES)
    vector, *registers = [opt.arg for opt in opts if opt.op is OptOps.UPCAST]
    assert vector == 16 and math.prod(registers) >= MIN_REGISTER_LANES
    assert vector * math.prod(registers) <= WIDE_MAX_LANES


def test_pixels_are_reduced_in_chunks_that_fit_the_budget_with_partials_no_larger_than_the_operands() -> None:
    # the benchmark's 8x64x56x56 conv: 14 of 56 rows (28 KiB each) fit 512 KiB; 32 partial weights < the input
    assert choose_chunks(8, 56, 28672, 1 << 19, 36864, 1722368) == PixelChunks(8, 56, 1, 14)
    assert choose_chunks(7, 7, 1000, 500, 10, 10**6) == PixelChunks(7, 7, 1, 1)  # not even one row fits
    assert choose_chunks(8, 4, 100, 1000, 10, 10**6) == PixelChunks(8, 4, 2, 4)  # two whole images per chunk
    assert choose_chunks(4, 8, 100, 10_000, 10, 10**6).partials == 1  # all fits: one reduction, no partials
    # a deep layer (512 channels, 7x7): per-image partials of its 2.4M-element weight would take 300 MB
    assert choose_chunks(32, 7, 28672, 1 << 19, 512 * 512 * 9, 32 * 512 * 81).partials == 1


def multiply_adds(kernel: KernelCall) -> int:
    """Output elements times the iterations of the reduce loops of a kernel (its multiply-adds, for a conv)."""
    reduce_ranges = [u for u in kernel.ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.REDUCE]
    return kernel.buffers[0].arg.size * math.prod(range_size(rng) for rng in reduce_ranges)


def test_a_strided_input_gradient_does_not_multiply_spread_zeros() -> None:
    """A stride-2 3x3 conv's input gradient: one conv per phase of the input with the taps that reach it (2x2,
    2x1, 1x2, 1x1), about the forward's multiply-adds; a gradient spread with zeros convolved with all 9 taps did
    4 times as many."""
    rng = np.random.default_rng(5)
    x = Tensor(rng.standard_normal((1, 4, 16, 16)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    out = x.conv2d(w, stride=2, padding=1)
    (dx,) = out.gradient(x, gradient=Tensor(rng.standard_normal(out.shape).astype(np.float32)))
    kernels = [item for item in create_schedule((dx.uop,)).items if isinstance(item, KernelCall)]
    forward = math.prod(out.shape) * 4 * 9
    backward = sum(multiply_adds(kernel) for kernel in kernels if reduce_count(kernel))
    assert forward <= backward < 1.5 * forward
