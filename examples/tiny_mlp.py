"""A tiny two-layer MLP classifying a random batch: the small model whose kernels CI searches with tg-beam.

Run with `uv run python examples/tiny_mlp.py`; `.ci/beam examples/tiny_mlp.py` dumps its kernels and runs
`tg-beam --verify` on each. The forward pass is checked against numpy.
"""

import numpy as np

from tg.tensor import Tensor


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    w1, b1 = rng.standard_normal((64, 96)).astype(np.float32) * 0.1, np.zeros(96, np.float32)
    w2, b2 = rng.standard_normal((96, 10)).astype(np.float32) * 0.1, np.zeros(10, np.float32)

    hidden = (Tensor(x) @ Tensor(w1) + Tensor(b1)).relu()
    logits = hidden @ Tensor(w2) + Tensor(b2)
    probabilities = (logits - logits.max(axis=-1, keepdim=True)).exp()
    probabilities = probabilities / probabilities.sum(axis=-1, keepdim=True)
    got = probabilities.numpy()

    expected_logits = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    expected = np.exp(expected_logits - expected_logits.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    print(f"tiny MLP: {x.shape[0]} rows classified, max error vs numpy {float(np.abs(got - expected).max()):.1e}")


if __name__ == "__main__":
    main()
