"""nn layers and state dicts against numpy references written here (torch's definitions)."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor, nn

RTOL, ATOL = 1e-4, 1e-5


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def conv2d_ref(x, w, b=None, stride=(1, 1), dilation=(1, 1), padding=((0, 0), (0, 0)), groups=1):
    """Direct convolution (cross-correlation, as torch) by summing one shifted, strided slice per kernel tap."""
    x = np.pad(x, ((0, 0), (0, 0), *padding)).astype(np.float64)
    n, c_in, h, wd = x.shape
    c_out, per_group, kh, kw = w.shape
    out_h = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, c_out, out_h, out_w))
    outs_per_group = c_out // groups
    for o in range(c_out):
        g = o // outs_per_group
        for i in range(per_group):
            for p in range(kh):
                for q in range(kw):
                    rows = slice(p * dilation[0], p * dilation[0] + stride[0] * (out_h - 1) + 1, stride[0])
                    cols = slice(q * dilation[1], q * dilation[1] + stride[1] * (out_w - 1) + 1, stride[1])
                    out[:, o] += w[o, i, p, q] * x[:, g * per_group + i, rows, cols]
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def conv_transpose2d_ref(x, w, b, stride):
    """Each input pixel scatters weight * value into a stride-spaced output window."""
    n, c_in, h, wd = x.shape
    _, c_out, kh, kw = w.shape
    out = np.zeros((n, c_out, (h - 1) * stride + kh, (wd - 1) * stride + kw))
    for i in range(h):
        for j in range(wd):
            out[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw] += np.einsum(
                "nc,cokl->nokl", x[:, :, i, j], w
            )
    return out + b.reshape(1, -1, 1, 1)


def test_linear():
    layer = nn.Linear(5, 3)
    x = _rand(4, 5)
    expected = x @ layer.weight.numpy().T + layer.bias.numpy()
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)
    bound = 1 / np.sqrt(5)
    assert layer.weight.shape == (3, 5) and np.abs(layer.weight.numpy()).max() <= bound
    assert nn.Linear(5, 3, bias=False).bias is None


@pytest.mark.parametrize(("stride", "padding", "groups"), [(1, 1, 1), (2, 0, 1), (1, 0, 2)])
def test_conv2d(stride, padding, groups):
    layer = nn.Conv2d(4, 6, 3, stride=stride, padding=padding, groups=groups)
    x = _rand(2, 4, 7, 6)
    expected = conv2d_ref(
        x, layer.weight.numpy(), layer.bias.numpy(), (stride,) * 2, padding=((padding,) * 2,) * 2, groups=groups
    )
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_conv2d_same_padding_with_tuple_kernel_and_dilation():
    """spec 1.11: padding='same' with K=(3,5), D=(2,3) on 28x31 keeps the spatial size and matches torch."""
    layer = nn.Conv2d(2, 3, (3, 5), padding="same", dilation=(2, 3))
    x = _rand(1, 2, 28, 31)
    # torch's 'same': total = d * (k - 1) per axis, total // 2 before, the rest after
    expected = conv2d_ref(x, layer.weight.numpy(), layer.bias.numpy(), dilation=(2, 3), padding=((2, 2), (6, 6)))
    out = layer(Tensor(x)).numpy()
    assert out.shape == (1, 3, 28, 31)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def test_conv2d_same_padding_with_even_kernel_pads_more_after():
    layer = nn.Conv2d(1, 1, 2, padding="same", bias=False)
    x = _rand(1, 1, 4, 4)
    expected = conv2d_ref(x, layer.weight.numpy(), padding=((0, 1), (0, 1)))
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)


def test_conv2d_same_padding_with_stride_raises():
    with pytest.raises(ValueError, match="same"):
        nn.Conv2d(1, 1, 3, stride=2, padding="same")


def test_conv1d():
    layer = nn.Conv1d(3, 2, 3, padding=1)
    x = _rand(2, 3, 8)
    w = layer.weight.numpy()[..., None]  # (out, in, k) -> (out, in, k, 1): a 2-D conv with width 1
    expected = conv2d_ref(x[..., None], w, layer.bias.numpy(), padding=((1, 1), (0, 0)))[..., 0]
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)


def test_conv_transpose2d():
    layer = nn.ConvTranspose2d(3, 2, 3, stride=2)
    x = _rand(2, 3, 4, 3)
    expected = conv_transpose2d_ref(x, layer.weight.numpy(), layer.bias.numpy(), 2)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)


def test_batchnorm_training_updates_running_stats_and_eval_uses_them():
    bn = nn.BatchNorm(3, momentum=0.1)
    bn.weight, bn.bias = Tensor([1.0, 2.0, 0.5]), Tensor([0.0, -1.0, 1.0])
    batches = [_rand(4, 3, 2, 2, seed=s) * (s + 1) + s for s in range(2)]
    running_mean, running_var = np.zeros(3), np.ones(3)
    with Tensor.train():
        for x in batches:
            out = bn(Tensor(x)).numpy()
            mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
            normalized = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
            np.testing.assert_allclose(
                out,
                normalized * bn.weight.numpy().reshape(1, 3, 1, 1) + bn.bias.numpy().reshape(1, 3, 1, 1),
                rtol=RTOL,
                atol=ATOL,
            )
            running_mean = 0.9 * running_mean + 0.1 * mean
            running_var = 0.9 * running_var + 0.1 * x.var((0, 2, 3), ddof=1)
    Tensor.realize(bn.running_mean, bn.running_var, bn.num_batches_tracked)
    np.testing.assert_allclose(bn.running_mean.numpy(), running_mean, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(bn.running_var.numpy(), running_var, rtol=RTOL, atol=ATOL)
    assert bn.num_batches_tracked.numpy().tolist() == [2.0]
    x = batches[0]
    expected = (x - running_mean.reshape(1, 3, 1, 1)) / np.sqrt(running_var.reshape(1, 3, 1, 1) + 1e-5)
    expected = expected * np.array([1.0, 2.0, 0.5]).reshape(1, 3, 1, 1) + np.array([0.0, -1.0, 1.0]).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)
    assert bn.running_mean.requires_grad is False


def test_batchnorm_stats_are_buffers_the_optimizer_realizes():
    bn = nn.BatchNorm(2)
    opt = nn.optim.SGD(nn.get_parameters(bn), lr=0.1)
    assert len(opt.params) == 2 and len(opt.buffers) == 3
    x = _rand(3, 2, seed=5)
    with Tensor.train():
        opt.zero_grad()
        (bn(Tensor(x)) * Tensor([[1.0, 2.0]])).sum().backward()
        opt.step()
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), rtol=RTOL, atol=ATOL)


def test_layernorm_rmsnorm_groupnorm_instancenorm():
    x = _rand(2, 4, 3, 3)
    ln = nn.LayerNorm((3, 3))
    ln.weight = Tensor(_rand(3, 3, seed=1))
    mean, var = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    np.testing.assert_allclose(
        ln(Tensor(x)).numpy(), (x - mean) / np.sqrt(var + 1e-5) * ln.weight.numpy(), rtol=RTOL, atol=ATOL
    )
    rms = nn.RMSNorm(3, eps=1e-6)
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(rms(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)
    gn = nn.GroupNorm(2, 4)
    grouped = x.reshape(2, 2, -1)
    expected = ((grouped - grouped.mean(-1, keepdims=True)) / np.sqrt(grouped.var(-1, keepdims=True) + 1e-5)).reshape(
        x.shape
    )
    np.testing.assert_allclose(gn(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)
    inorm = nn.InstanceNorm(4)
    expected = (x - x.mean((2, 3), keepdims=True)) / np.sqrt(x.var((2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(inorm(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError):
        nn.GroupNorm(3, 4)


def test_embedding_and_its_gradient():
    emb = nn.Embedding(6, 3)
    idx = np.array([[1, 5], [1, 0]])
    out = emb(Tensor(idx))
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[idx])
    (grad,) = out.sum().gradient(emb.weight)
    np.testing.assert_array_equal(grad.numpy()[:, 0], [1, 2, 0, 0, 0, 1])  # row 1 picked twice


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def test_lstm_cell():
    cell = nn.LSTMCell(3, 4)
    x, h, c = _rand(2, 3), _rand(2, 4, seed=1), _rand(2, 4, seed=2)
    w_ih, w_hh = cell.weight_ih.numpy(), cell.weight_hh.numpy()
    gates = x @ w_ih.T + cell.bias_ih.numpy() + h @ w_hh.T + cell.bias_hh.numpy()
    i, f, g, o = np.split(gates, 4, axis=1)
    c_next = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    h_next = _sigmoid(o) * np.tanh(c_next)
    h_out, c_out = cell(Tensor(x), (Tensor(h), Tensor(c)))
    np.testing.assert_allclose(h_out.numpy(), h_next, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(c_out.numpy(), c_next, rtol=RTOL, atol=ATOL)
    assert cell(Tensor(x))[0].shape == (2, 4)


class _Net:
    def __init__(self):
        self.layers = [nn.Linear(2, 3), nn.Linear(3, 1)]
        self.norm = nn.BatchNorm(3)


def test_state_dict_keys_and_parameters():
    net = _Net()
    keys = list(nn.get_state_dict(net))
    assert keys == [
        "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
        "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var", "norm.num_batches_tracked",
    ]  # fmt: skip
    assert len(nn.get_parameters(net)) == 9
    assert nn.state.get_state_dict({"a": [Tensor([1.0])]}).keys() == {"a.0"}


def test_load_state_dict_round_trip_casts_to_the_model_dtype():
    source, target = _Net(), _Net()
    state = {k: v.cast(dtypes.float16) if k.endswith("bias") else v for k, v in nn.get_state_dict(source).items()}
    nn.load_state_dict(target, state)
    for key, value in nn.get_state_dict(target).items():
        assert value.dtype is dtypes.float32
        np.testing.assert_allclose(value.numpy(), state[key].float().numpy())


def test_load_state_dict_names_every_problem_and_writes_nothing():
    net = _Net()
    before = net.layers[0].weight.numpy()
    state = dict(nn.get_state_dict(_Net()))
    del state["norm.bias"]
    state["extra.weight"] = Tensor([1.0])
    state["layers.1.weight"] = Tensor.zeros(3, 1)
    state["layers.0.weight"] = Tensor.ones(3, 2)
    with pytest.raises(nn.StateDictError) as error:
        nn.load_state_dict(net, state)
    message = str(error.value)
    assert "missing keys: norm.bias" in message
    assert "unexpected keys: extra.weight" in message
    assert "layers.1.weight: model (1, 3), state dict (3, 1)" in message
    np.testing.assert_array_equal(net.layers[0].weight.numpy(), before)
    with pytest.raises(KeyError):
        nn.load_state_dict(net, state)
    del state["layers.1.weight"]
    nn.load_state_dict(net, state, strict=False)  # missing and unexpected keys are fine when not strict
    np.testing.assert_array_equal(net.layers[0].weight.numpy(), np.ones((3, 2)))
