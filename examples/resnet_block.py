"""A ResNet basic block at inference: conv3x3-batchnorm-relu-conv3x3-batchnorm, plus the input, then relu.

Small sizes (a batch of 2, 16 channels, 16x16 images) so that `bench/bench_beam_cluster.py` can BEAM-search all its
kernels in minutes. Run with `uv run python examples/resnet_block.py`; the output is checked against numpy.
"""

import numpy as np

from tg.tensor import Tensor
from tg.tensor.nn import BatchNorm2d, Conv2d

BATCH, CHANNELS, SIZE = 2, 16, 16
EPS = 1e-5


def batch_norm(channels: int, rng: np.random.Generator) -> tuple[BatchNorm2d, dict[str, np.ndarray]]:
    """A BatchNorm2d with random running statistics and affine parameters (what a trained block holds)."""
    norm = BatchNorm2d(channels, eps=EPS)
    values = {
        "mean": rng.standard_normal(channels).astype(np.float32) * 0.1,
        "var": rng.uniform(0.5, 1.5, channels).astype(np.float32),
        "weight": rng.uniform(0.5, 1.5, channels).astype(np.float32),
        "bias": rng.standard_normal(channels).astype(np.float32) * 0.1,
    }
    norm.running_mean.assign(Tensor(values["mean"])).realize()
    norm.running_var.assign(Tensor(values["var"])).realize()
    norm.weight, norm.bias = Tensor(values["weight"]), Tensor(values["bias"])
    return norm, values


def numpy_conv3x3(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """A stride-1 3x3 convolution with padding 1, no bias: (N, C, H, W) * (O, C, 3, 3) -> (N, O, H, W)."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    height, width = x.shape[2:]
    out = np.zeros((x.shape[0], weight.shape[0], height, width), np.float64)
    for dy in range(3):
        for dx in range(3):
            window = padded[:, :, dy : dy + height, dx : dx + width]
            out += np.einsum("nchw,oc->nohw", window, weight[:, :, dy, dx])
    return out


def numpy_batch_norm(x: np.ndarray, values: dict[str, np.ndarray]) -> np.ndarray:
    def channel(name: str) -> np.ndarray:
        return values[name].reshape(1, -1, 1, 1)

    return (x - channel("mean")) / np.sqrt(channel("var") + EPS) * channel("weight") + channel("bias")


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, CHANNELS, SIZE, SIZE)).astype(np.float32)
    conv1 = Conv2d(CHANNELS, CHANNELS, 3, padding=1, bias=False)
    conv2 = Conv2d(CHANNELS, CHANNELS, 3, padding=1, bias=False)
    norm1, values1 = batch_norm(CHANNELS, rng)
    norm2, values2 = batch_norm(CHANNELS, rng)

    inputs = Tensor(x)
    hidden = norm1(conv1(inputs)).relu()
    got = (norm2(conv2(hidden)) + inputs).relu().numpy()

    w1, w2 = conv1.weight.numpy(), conv2.weight.numpy()
    expected_hidden = np.maximum(numpy_batch_norm(numpy_conv3x3(x, w1), values1), 0)
    expected = np.maximum(numpy_batch_norm(numpy_conv3x3(expected_hidden, w2), values2) + x, 0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    print(f"ResNet basic block: {x.shape} -> {got.shape}, max error vs numpy {float(np.abs(got - expected).max()):.1e}")


if __name__ == "__main__":
    main()
