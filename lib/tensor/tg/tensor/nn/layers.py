"""nn layers: plain classes holding weight tensors, called on an input (`Linear(3, 4)(x)`), as tinygrad's.

Initialization follows torch's defaults (uniform in +-1/sqrt(fan_in) for Linear, convolutions and LSTMCell, ones and
zeros for norms). BatchNorm normalizes with batch statistics and updates its running statistics while
`Tensor.training` is set, with the running statistics otherwise; the running statistics are tensors with
requires_grad=False, which an optimizer realizes with its step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tg.codegen.schedule.graph import Shape
from tg.tensor.tensor import Tensor

IntOrPair = int | tuple[int, ...]


def _uniform(*shape: int, bound: float) -> Tensor:
    return Tensor.uniform(*shape, low=-bound, high=bound)


def _tuple(value: IntOrPair, count: int) -> tuple[int, ...]:
    return (value,) * count if isinstance(value, int) else tuple(value)


class Linear:
    """y = x @ weight.T + bias, weight of shape (out_features, in_features) as torch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        bound = 1 / math.sqrt(in_features)
        self.weight = _uniform(out_features, in_features, bound=bound)
        self.bias = _uniform(out_features, bound=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight.T, self.bias)


class _ConvNd:
    """Shared by Conv1d and Conv2d: weight (out, in / groups, *kernel); padding an int, per axis, or "same"."""

    spatial = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrPair,
        stride: IntOrPair = 1,
        padding: IntOrPair | str = 0,
        dilation: IntOrPair = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        self.kernel_size = _tuple(kernel_size, self.spatial)
        self.stride, self.dilation, self.groups = stride, dilation, groups
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', not {padding!r}")
            if padding == "same" and any(s != 1 for s in _tuple(stride, self.spatial)):
                raise ValueError("padding='same' is not supported for strided convolutions")
            padding = self._same_padding() if padding == "same" else 0
        self.padding = padding
        fan_in = in_channels // groups * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in)
        self.weight = _uniform(out_channels, in_channels // groups, *self.kernel_size, bound=bound)
        self.bias = _uniform(out_channels, bound=bound) if bias else None

    def _same_padding(self) -> tuple[int, ...]:
        """torch's 'same': total dilation * (k - 1) per axis, the odd element after; flat pairs from the last axis."""
        pairs = []
        for kernel, dilation in zip(self.kernel_size, _tuple(self.dilation, self.spatial), strict=True):
            total = dilation * (kernel - 1)
            pairs.append((total // 2, total - total // 2))
        return tuple(p for pair in reversed(pairs) for p in pair)

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


class Conv1d(_ConvNd):
    """A 1-D convolution over (N, C, L) inputs."""

    spatial = 1


class Conv2d(_ConvNd):
    """A 2-D convolution over (N, C, H, W) inputs."""

    spatial = 2


class _ConvTransposeNd:
    """Shared by ConvTranspose1d and ConvTranspose2d (torch's): weight (in, out / groups, *kernel)."""

    spatial = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrPair,
        stride: IntOrPair = 1,
        padding: IntOrPair = 0,
        output_padding: IntOrPair = 0,
        dilation: IntOrPair = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        self.kernel_size = _tuple(kernel_size, self.spatial)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.dilation, self.groups = dilation, groups
        bound = 1 / math.sqrt(out_channels // groups * math.prod(self.kernel_size))
        self.weight = _uniform(in_channels, out_channels // groups, *self.kernel_size, bound=bound)
        self.bias = _uniform(out_channels, bound=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(
            self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding, self.output_padding
        )


class ConvTranspose1d(_ConvTransposeNd):
    """A 1-D transposed convolution over (N, C, L) inputs."""

    spatial = 1


class ConvTranspose2d(_ConvTransposeNd):
    """A 2-D transposed convolution over (N, C, H, W) inputs."""

    spatial = 2


def _statistic(initial: Tensor) -> Tensor:
    """A realized tensor that is state, not a parameter: requires_grad=False keeps it out of the gradients."""
    return initial.contiguous().realize().requires_grad_(False)


def _channel_shape(x: Tensor) -> Shape:
    """Per-channel parameters (C,) seen against x (N, C, *rest)."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


class BatchNorm:
    """Normalize each channel (axis 1) by its batch mean and variance in training, by the running statistics
    otherwise; running_var tracks the unbiased batch variance (torch), normalization uses the biased one."""

    def __init__(
        self,
        sz: int,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        momentum: float = 0.1,
    ) -> None:
        """`sz`: the number of channels (tinygrad's name; torch's num_features)."""
        self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats
        self.weight = Tensor.ones(sz) if affine else None
        self.bias = Tensor.zeros(sz) if affine else None
        if track_running_stats:
            self.running_mean = _statistic(Tensor.zeros(sz))
            self.running_var = _statistic(Tensor.ones(sz))
            self.num_batches_tracked = _statistic(Tensor.zeros(1))

    def __call__(self, x: Tensor) -> Tensor:
        axes = (0, *range(2, x.ndim))
        shape = _channel_shape(x)
        if Tensor.training or not self.track_running_stats:
            mean = x.mean(axes)
            centered = x - mean.reshape(shape)
            variance = (centered * centered).mean(axes)
            if Tensor.training and self.track_running_stats:
                count = x.numel() // x.shape[1]
                unbiased = variance.detach() * (count / max(count - 1, 1))
                self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * mean.detach())
                self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * unbiased)
                self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        else:
            mean, variance = self.running_mean, self.running_var
            centered = x - mean.reshape(shape)
        scale = (variance + self.eps).rsqrt()
        if self.weight is not None:
            scale = scale * self.weight
        out = centered * scale.reshape(shape)
        return out if self.bias is None else out + self.bias.reshape(shape)


BatchNorm1d = BatchNorm2d = BatchNorm


class LayerNorm:
    """Normalize over the last len(normalized_shape) axes, then scale and shift elementwise."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True):
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = Tensor.ones(*self.normalized_shape) if elementwise_affine else None
        self.bias = Tensor.zeros(*self.normalized_shape) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.shape[-len(self.normalized_shape) :] != self.normalized_shape:
            raise ValueError(f"LayerNorm over {self.normalized_shape} got an input of shape {x.shape}")
        out = x.layernorm(tuple(range(-len(self.normalized_shape), 0)), self.eps)
        return out if self.weight is None else out * self.weight + self.bias


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channel axis of (N, C, H, W) inputs (tinygrad's): each pixel's C values are normalized."""

    def __init__(self, channels: int, eps: float = 1e-5, elementwise_affine: bool = True) -> None:
        super().__init__(channels, eps, elementwise_affine)

    def __call__(self, x: Tensor) -> Tensor:
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class RMSNorm:
    """x / sqrt(mean(x^2) + eps) over the last axis, times a learned scale."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        self.eps = eps
        self.weight = Tensor.ones(dim) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        out = x.rms_norm(-1, self.eps)
        return out if self.weight is None else out * self.weight


class GroupNorm:
    """Normalize each group of num_channels / num_groups channels (with all spatial positions) per sample."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_channels % num_groups:
            raise ValueError(f"{num_channels} channels do not split into {num_groups} groups")
        self.num_groups, self.eps = num_groups, eps
        self.weight = Tensor.ones(num_channels) if affine else None
        self.bias = Tensor.zeros(num_channels) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        grouped = x.reshape(x.shape[0], self.num_groups, -1).layernorm(-1, self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None:  # (both are None, or neither: affine)
            return grouped
        return grouped * self.weight.reshape(_channel_shape(x)) + self.bias.reshape(_channel_shape(x))


class InstanceNorm(GroupNorm):
    """GroupNorm with one channel per group."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__(num_features, num_features, eps, affine)


class Embedding:
    """Rows of a (vocab_size, embed_size) table picked by integer indices."""

    def __init__(self, vocab_size: int, embed_size: int) -> None:
        self.vocab_size, self.embed_size = vocab_size, embed_size
        self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

    def __call__(self, indices: Tensor) -> Tensor:
        return self.weight[indices]


class LSTMCell:
    """One LSTM step (torch's gate order i, f, g, o): returns (h, c); hc defaults to zeros."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        bound = 1 / math.sqrt(hidden_size)
        self.hidden_size = hidden_size
        self.weight_ih = _uniform(4 * hidden_size, input_size, bound=bound)
        self.weight_hh = _uniform(4 * hidden_size, hidden_size, bound=bound)
        self.bias_ih = _uniform(4 * hidden_size, bound=bound) if bias else None
        self.bias_hh = _uniform(4 * hidden_size, bound=bound) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if hc is None:
            zeros = Tensor.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            hc = (zeros, zeros)
        h, c = hc
        gates = x.linear(self.weight_ih.T, self.bias_ih) + h.linear(self.weight_hh.T, self.bias_hh)
        i, f, g, o = gates.chunk(4, dim=1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        return h, c
