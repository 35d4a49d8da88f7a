"""Quick start: build a lazy Tensor expression, let tg fuse it into kernels, run them and check against numpy.

Run with `uv run python examples/quickstart.py`; add DEBUG=2 to see one line per kernel, DEBUG=4 for its C source,
or DEV=PYTHON to run the same kernels in the pure-Python reference emulator.
"""

import numpy as np

from tg.tensor import Device, GlobalCounters, Tensor


def softmax(x: Tensor) -> Tensor:
    """Softmax over the last axis, written with the primitive ops: the scheduler fuses it into at most 3 kernels."""
    shifted = x - x.max(axis=-1, keepdim=True)
    exponentials = shifted.exp()
    return exponentials / exponentials.sum(axis=-1, keepdim=True)


def main() -> None:
    rng = np.random.default_rng(0)
    data = rng.standard_normal((256, 1000)).astype(np.float32)

    GlobalCounters.reset()
    probabilities = softmax(Tensor(data))  # nothing has run yet: this only builds a graph
    result = probabilities.numpy()  # schedule, compile (cached on disk), run

    expected = np.exp(data - data.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    error = float(np.abs(result - expected).max())
    print(f"device {Device.DEFAULT}: softmax of {data.shape} in {GlobalCounters.kernel_count} kernels")
    print(f"rows sum to 1: {bool(np.allclose(result.sum(axis=-1), 1.0, atol=1e-5))}, max error vs numpy: {error:.2e}")

    fused = ((Tensor(data) * 2 + 1).maximum(0)).sum()
    GlobalCounters.reset()
    print(f"((x*2+1).maximum(0)).sum() = {fused.item():.3f} in {GlobalCounters.kernel_count} kernel(s)")


if __name__ == "__main__":
    main()
