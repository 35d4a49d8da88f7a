"""conv2d, conv_transpose2d, max_pool2d, avg_pool2d and interpolate against direct numpy loops (torch's formulas)."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def numpy_conv2d(x, w, stride, padding, dilation, groups):
    """Direct definition: out[n, o, i, j] = sum_{c, p, q} x_pad[n, g*C + c, i*s + p*d, j*s + q*d] * w[o, c, p, q]."""
    x = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    batch, _, height, width = x.shape
    out_channels, group_channels, kh, kw = w.shape
    oh = (height - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (width - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((batch, out_channels, oh, ow), dtype=np.float64)
    per_group = out_channels // groups
    for o in range(out_channels):
        first = (o // per_group) * group_channels
        for i in range(oh):
            for j in range(ow):
                rows = i * stride[0] + dilation[0] * np.arange(kh)
                cols = j * stride[1] + dilation[1] * np.arange(kw)
                patch = x[:, first : first + group_channels][:, :, rows][:, :, :, cols]
                out[:, o, i, j] = (patch * w[o]).sum((1, 2, 3))
    return out


def numpy_conv_transpose2d(x, w, stride, padding, dilation, groups, output_padding):
    """Scatter definition: every input element adds x * kernel at (i*s + p*d - pad, j*s + q*d - pad)."""
    batch, in_channels, height, width = x.shape
    _, per_group, kh, kw = w.shape
    oh = (height - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (width - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1
    full = np.zeros(
        (batch, per_group * groups, oh + 2 * padding[0] + kh * dilation[0], ow + 2 * padding[1] + kw * dilation[1])
    )
    group_in = in_channels // groups
    for c in range(in_channels):
        group = c // group_in
        for i in range(height):
            for j in range(width):
                for p in range(kh):
                    for q in range(kw):
                        r, s = i * stride[0] + p * dilation[0], j * stride[1] + q * dilation[1]
                        outs = slice(group * per_group, (group + 1) * per_group)
                        full[:, outs, r, s] += x[:, c, i, j][:, None] * w[c, :, p, q][None]
    return full[:, :, padding[0] : padding[0] + oh, padding[1] : padding[1] + ow]


CONV_CASES = [
    dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1),
    dict(stride=(2, 1), padding=(1, 2), dilation=(1, 1), groups=1),
    dict(stride=(1, 1), padding=(1, 1), dilation=(2, 1), groups=2),
    dict(stride=(3, 2), padding=(0, 1), dilation=(1, 2), groups=4),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv2d_matches_direct_definition(device, case):
    groups = case["groups"]
    x, w, bias = _random((2, 4, 7, 6), 1), _random((4, 4 // groups, 3, 2), 2), _random((4,), 3)
    expected = numpy_conv2d(x, w, case["stride"], case["padding"], case["dilation"], groups) + bias[None, :, None, None]
    t = Tensor(x, device=device).conv2d(
        Tensor(w, device=device),
        Tensor(bias, device=device),
        groups=groups,
        stride=case["stride"],
        dilation=case["dilation"],
        padding=case["padding"],
    )
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_conv2d_int_padding_and_int_dtype():
    x = np.random.default_rng(4).integers(-5, 5, (1, 2, 5, 5)).astype(np.int32)
    w = np.random.default_rng(5).integers(-5, 5, (3, 2, 3, 3)).astype(np.int32)
    result = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1)
    assert result.dtype is dtypes.int32
    np.testing.assert_array_equal(result.numpy(), numpy_conv2d(x, w, (1, 1), (1, 1), (1, 1), 1).astype(np.int32))


def test_conv1d_through_conv2d():
    x, w = _random((2, 3, 9), 6), _random((4, 3, 3), 7)
    expected = numpy_conv2d(x[..., None, :], w[..., None, :], (1, 2), (0, 0), (1, 1), 1)[:, :, 0]
    result = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), stride=2)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)


TRANSPOSE_CASES = [
    dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, output_padding=(0, 0)),
    dict(stride=(2, 2), padding=(1, 0), dilation=(1, 1), groups=1, output_padding=(1, 0)),
    dict(stride=(2, 3), padding=(0, 1), dilation=(2, 1), groups=2, output_padding=(0, 2)),
    # padding beyond dilation * (kernel - 1): the equivalent convolution's input padding is negative
    dict(stride=(2, 2), padding=(2, 2), dilation=(1, 1), groups=1, output_padding=(1, 0)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=str)
def test_conv_transpose2d_matches_scatter_definition(device, case):
    groups = case["groups"]
    x, w = _random((2, 4, 4, 3), 8), _random((4, 6 // groups, 3, 2), 9)
    expected = numpy_conv_transpose2d(
        x, w, case["stride"], case["padding"], case["dilation"], groups, case["output_padding"]
    )
    result = Tensor(x, device=device).conv_transpose2d(
        Tensor(w, device=device),
        groups=groups,
        **{k: case[k] for k in ("stride", "padding", "dilation", "output_padding")},
    )
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)


def numpy_pool(x, kernel, stride, padding, reduce, pad_value, ceil_mode=False, dilation=(1, 1)):
    """Windows of the padded input; out size per torch (ceil_mode: the last window must start inside)."""
    sizes = []
    for axis in range(2):
        n, k, s, p, d = x.shape[2 + axis], kernel[axis], stride[axis], padding[axis], dilation[axis]
        count = (n + 2 * p - d * (k - 1) - 1) / s
        count = (math.ceil(count) if ceil_mode else math.floor(count)) + 1
        if ceil_mode and (count - 1) * s >= n + p:
            count -= 1
        sizes.append(count)
    padded = np.pad(
        x,
        (
            (0, 0),
            (0, 0),
            (padding[0], padding[0] + kernel[0] * stride[0]),
            (padding[1], padding[1] + kernel[1] * stride[1]),
        ),
        constant_values=np.nan,
    )
    out = np.zeros(x.shape[:2] + tuple(sizes), dtype=np.float64)
    for i in range(sizes[0]):
        for j in range(sizes[1]):
            rows = i * stride[0] + dilation[0] * np.arange(kernel[0])
            cols = j * stride[1] + dilation[1] * np.arange(kernel[1])
            out[:, :, i, j] = reduce(padded[:, :, rows][:, :, :, cols], i, j)
    return out


POOL_CASES = [
    ((2, 2), None, (0, 0), False),
    ((3, 3), (2, 2), (1, 1), False),
    ((3, 2), (2, 1), (1, 0), True),
    ((2, 2), (2, 2), (0, 0), True),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d_matches_numpy(device, case):
    kernel, stride, padding, ceil_mode = case
    x = _random((1, 2, 7, 5), 10)
    expected = numpy_pool(x, kernel, stride or kernel, padding, lambda w, i, j: np.nanmax(w, (2, 3)), np.nan, ceil_mode)
    result = Tensor(x, device=device).max_pool2d(kernel, stride, padding=padding, ceil_mode=ceil_mode)
    np.testing.assert_array_equal(result.numpy(), expected.astype(np.float32))


def test_max_pool2d_with_dilation_and_ints():
    x = np.random.default_rng(11).integers(-100, 100, (1, 1, 8, 8)).astype(np.int32)
    expected = numpy_pool(
        x.astype(np.float64), (2, 2), (2, 2), (1, 1), lambda w, i, j: np.nanmax(w, (2, 3)), np.nan, dilation=(2, 2)
    )
    result = Tensor(x, device="CPU").max_pool2d(2, 2, dilation=2, padding=1)
    assert result.dtype is dtypes.int32
    np.testing.assert_array_equal(result.numpy(), expected.astype(np.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_matches_torch_divisor(device, case, count_include_pad):
    kernel, stride, padding, ceil_mode = case
    stride = stride or kernel
    x = _random((1, 2, 7, 5), 12)
    height, width = x.shape[2:]

    def average(window, i, j):
        total = np.nansum(window, (2, 3))
        if not count_include_pad:
            return total / np.sum(~np.isnan(window[0, 0]))
        # torch: the window clipped to the padded input (padding counts, ceil_mode's overhang does not)
        rows = min(i * stride[0] - padding[0] + kernel[0], height + padding[0]) - (i * stride[0] - padding[0])
        cols = min(j * stride[1] - padding[1] + kernel[1], width + padding[1]) - (j * stride[1] - padding[1])
        return total / (rows * cols)

    expected = numpy_pool(x, kernel, stride, padding, average, np.nan, ceil_mode)
    result = Tensor(x, device=device).avg_pool2d(
        kernel, stride, padding=padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad
    )
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-6)


def numpy_linear_resize(x, axis, size_out, align_corners):
    size_in = x.shape[axis]
    out = []
    for o in range(size_out):
        if align_corners:
            source = 0.0 if size_out == 1 else o * (size_in - 1) / (size_out - 1)
        else:
            source = max((o + 0.5) * size_in / size_out - 0.5, 0.0)
        below = min(int(np.floor(source)), size_in - 1)
        above = min(below + 1, size_in - 1)
        weight = source - below
        out.append(np.take(x, below, axis) * (1 - weight) + np.take(x, above, axis) * weight)
    return np.stack(out, axis)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [(29,), (1,), (4,), (11,)], ids=str)
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_linear_matches_torch_formula(device, size, align_corners):
    x = _random((2, 3, 7), 13)
    expected = numpy_linear_resize(x, 2, size[0], align_corners)
    result = Tensor(x, device=device).interpolate(size, mode="linear", align_corners=align_corners)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_interpolate_bilinear_and_nearest():
    x = _random((1, 2, 4, 5), 14)
    expected = numpy_linear_resize(numpy_linear_resize(x, 2, 7, False), 3, 3, False)
    np.testing.assert_allclose(Tensor(x, device="CPU").interpolate((7, 3)).numpy(), expected, rtol=1e-5, atol=1e-6)
    rows, cols = [int(np.floor(o * 4 / 6)) for o in range(6)], [int(np.floor(o * 5 / 2)) for o in range(2)]
    nearest = Tensor(x, device="CPU").interpolate((6, 2), mode="nearest")
    np.testing.assert_array_equal(nearest.numpy(), x[:, :, rows][:, :, :, cols])


def test_interpolate_nearest_exact():
    x = _random((1, 1, 5), 15)
    sources = [min(int(np.floor((o + 0.5) * 5 / 3)), 4) for o in range(3)]
    result = Tensor(x, device="CPU").interpolate((3,), mode="nearest-exact")
    np.testing.assert_array_equal(result.numpy(), x[:, :, sources])


def test_avg_pool2d_with_dilation_averages_the_dilated_window():
    x = _random((1, 1, 6, 6), 16)
    expected = numpy_pool(x, (2, 2), (2, 2), (0, 0), lambda w, i, j: np.mean(w, (2, 3)), np.nan, dilation=(2, 2))
    result = Tensor(x, device="CPU").avg_pool2d(2, 2, dilation=2)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_max_pool2d_propagates_nan_and_infinities(device):
    x = np.zeros((1, 1, 4, 4), dtype=np.float32)
    x[0, 0, 0, 1], x[0, 0, 2, 2], x[0, 0, 3, 0] = np.nan, np.inf, -np.inf
    result = Tensor(x, device=device).max_pool2d(2).numpy()[0, 0]
    np.testing.assert_array_equal(result, [[np.nan, 0.0], [0.0, np.inf]])  # torch: a NaN in the window wins


def scheduled_kernels(tensor: Tensor) -> list:
    from tg.codegen.schedule.schedule import KernelCall, create_schedule

    return [item for item in create_schedule((tensor.uop,)).items if isinstance(item, KernelCall)]


@pytest.mark.parametrize(
    "x_shape, w_shape, kwargs, weight_copied",
    [
        ((2, 16, 9, 7), (32, 16, 3, 3), dict(padding=1), True),  # 7-wide rows: 16 output channels make the vector
        ((1, 32, 9, 7), (32, 16, 3, 3), dict(groups=2, stride=(2, 1), padding=1), True),
        ((1, 16, 16, 16), (16, 16, 3, 3), dict(padding=1), False),  # 16-wide rows make full vectors themselves
        ((1, 16, 9, 7), (16, 1, 3, 3), dict(groups=16, padding=1), False),  # depthwise: one channel per group
        ((2, 16, 11), (32, 16, 3), dict(padding=2, dilation=2), True),  # conv1d
    ],
)
def test_weights_are_stored_output_channels_innermost_where_that_makes_vectors(
    x_shape, w_shape, kwargs, weight_copied
) -> None:
    """conv2d copies the weights with each group's output channels contiguous (tg.tensor.conv
    .output_channels_innermost) when a group has a multiple of 16 of them and the output rows do not: one more
    kernel before the conv, whose result is unchanged."""
    x, w = _random(x_shape, 1), _random(w_shape, 2)
    out = Tensor(x).conv2d(Tensor(w).realize(), **kwargs)
    copies = [k for k in scheduled_kernels(out) if not any(u.op.name == "REDUCE" for u in k.ast.toposort())]
    copies = [k for k in copies if k.buffers[0].arg.size == math.prod(w_shape)]
    assert len(copies) == (1 if weight_copied else 0)
    spatial = len(w_shape) - 2
    if spatial == 1:  # the oracle is 2-d: a conv1d is a conv2d over rows of height 1
        x4, w4 = x[:, :, None], w[:, :, None]
        expected = numpy_conv2d(x4, w4, (1, 1), (0, kwargs["padding"]), (1, kwargs["dilation"]), 1)[:, :, 0]
    else:
        stride = kwargs.get("stride", (1, 1))
        pad = (kwargs["padding"],) * 2
        expected = numpy_conv2d(x, w, stride, pad, (1, 1), kwargs.get("groups", 1))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_realized_weight_is_laid_out_once_while_it_is_unchanged() -> None:
    """The copy that puts each tap's output channels side by side (conv.output_channels_innermost) is a kept copy:
    the next conv with the same weight reuses it; writing the weight makes the next conv copy it again."""
    from tg.hcq.engine.counters import GlobalCounters

    x_values, w_values = _random((1, 4, 10, 10)), _random((16, 4, 3, 3), seed=1)  # 8 output columns: relaid
    x, w = Tensor(x_values).realize(), Tensor(w_values).realize()
    counts = []
    for _ in range(2):
        GlobalCounters.reset()
        got = x.conv2d(w).numpy()
        counts.append(GlobalCounters.kernel_count)
        expected = numpy_conv2d(x_values, w_values, (1, 1), (0, 0), (1, 1), 1)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert counts == [2, 1]  # relayout + conv, then the conv alone
    w.assign(Tensor(w_values * 2)).realize()
    GlobalCounters.reset()
    got = x.conv2d(w).numpy()
    assert GlobalCounters.kernel_count == 2
    expected = numpy_conv2d(x_values, w_values * 2, (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
