"""Issue 30 item 8: nn.ConvTranspose1d, nn.LayerNorm2d, BatchNorm's `sz` (tinygrad's signature) and
Tensor.const_like, against numpy references written here from torch's definitions."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor, nn

from .devices import DEVICES


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def conv_transpose1d_ref(x, w, b, stride=1, padding=0, output_padding=0, dilation=1, groups=1) -> np.ndarray:
    """torch's definition: input position i, tap k land at output i*stride + k*dilation - padding; weight (in,
    out/groups, k)."""
    batch, channels_in, length = x.shape
    _, per_group, kernel = w.shape
    full = (length - 1) * stride + dilation * (kernel - 1) + 1 + output_padding
    out = np.zeros((batch, per_group * groups, full), np.float64)
    group_in = channels_in // groups
    for ci in range(channels_in):
        g = ci // group_in
        for k in range(kernel):
            for i in range(length):
                position = i * stride + k * dilation
                out[:, g * per_group : (g + 1) * per_group, position] += x[:, ci, i, None] * w[ci, :, k]
    out = out[:, :, padding : full - padding]
    return out + b.reshape(1, -1, 1) if b is not None else out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"stride": 2}, {"stride": 2, "padding": 1, "output_padding": 1}, {"dilation": 2, "groups": 2}],
    ids=str,
)
def test_conv_transpose1d_matches_torchs_definition(device: str, kwargs: dict) -> None:
    layer = nn.ConvTranspose1d(4, 6, 3, **kwargs)
    assert layer.weight.shape == (4, 6 // kwargs.get("groups", 1), 3) and layer.bias.shape == (6,)
    x = _rand(2, 4, 5, seed=1)
    expected = conv_transpose1d_ref(x, layer.weight.numpy(), layer.bias.numpy(), **kwargs)
    layer.weight, layer.bias = layer.weight.to(device), layer.bias.to(device)
    result = layer(Tensor(x, device=device))
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_conv_transpose1d_without_bias_and_its_weight_gradient() -> None:
    layer = nn.ConvTranspose1d(2, 3, 2, stride=2, bias=False)
    assert layer.bias is None
    layer.weight = Tensor(layer.weight.numpy().astype(np.float64), requires_grad=True)
    x = _rand(1, 2, 3, seed=2).astype(np.float64)
    layer(Tensor(x)).sum().backward()
    # d sum(out) / d w[ci, co, k] = sum over i of x[ci, i] (every tap of every input lands in the output once)
    expected = np.broadcast_to(x[0].sum(-1)[:, None, None], (2, 3, 2))
    np.testing.assert_allclose(layer.weight.grad.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_layernorm2d_normalizes_the_channel_axis_of_nchw(device: str) -> None:
    x = _rand(2, 4, 3, 5, seed=3)
    norm = nn.LayerNorm2d(4, eps=1e-5)
    norm.weight, norm.bias = Tensor(_rand(4, seed=4), device=device), Tensor(_rand(4, seed=5), device=device)
    mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    weight, bias = norm.weight.numpy().reshape(1, 4, 1, 1), norm.bias.numpy().reshape(1, 4, 1, 1)
    expected = (x - mean) / np.sqrt(var + 1e-5) * weight + bias
    np.testing.assert_allclose(norm(Tensor(x, device=device)).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert nn.LayerNorm2d(4, elementwise_affine=False).weight is None


def test_batchnorm_takes_tinygrads_sz() -> None:
    bn = nn.BatchNorm(sz=3, eps=1e-3)
    assert bn.weight.shape == (3,) and bn.running_mean.shape == (3,) and bn.eps == 1e-3
    assert nn.BatchNorm(5).running_var.shape == (5,)
    x = _rand(4, 3, seed=6)
    with Tensor.train():
        out = bn(Tensor(x)).numpy()
    np.testing.assert_allclose(out, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_const_like_is_a_constant_of_this_shape_dtype_and_device(device: str) -> None:
    x = Tensor.ones(2, 3, dtype=dtypes.int16, device=device)
    c = x.const_like(7)
    assert c.shape == (2, 3) and c.dtype is dtypes.int16 and c.device == device
    np.testing.assert_array_equal(c.numpy(), np.full((2, 3), 7, np.int16))
    assert Tensor([1.0, 2.0], device=device).const_like(0.5).tolist() == [0.5, 0.5]
