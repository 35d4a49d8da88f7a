"""Math op benchmark against numpy, measured in the same run: softmax, logsumexp, gelu, layernorm, cumsum,
logcumsumexp, cross_entropy and attention on the CPU device.

    uv run python bench/bench_math_ops.py [--repeats 7] [--libm]

Each op is realized fresh every repeat (its kernels are cached after the warm-up). Prints medians of the repeats
and numpy_time / tg_time (above 1: tg is faster). The machine is shared, so timings are noisy: compare medians.
numpy runs the same stable formulas (shift by the max, tanh-approximated gelu) so the work compared is alike.
The 4M-element gelu and tanh rows run at input scales 1 and 30 (issue 23: a transcendental that wanders into
subnormals is several times slower at scale 30). `--libm` also times every row with TRANSCENDENTAL=0 (exp2/log2 as
libm's double-precision calls, the path before tg.codegen.lower.transcendental) and prints libm_time / tg_time.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from timing import median_seconds, realized

from tg.codegen.flags import Context
from tg.tensor import Tensor


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(-1, keepdims=True)
    return np.log(np.exp(x - m).sum(-1)) + m[..., 0]


def np_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def np_layernorm(x: np.ndarray) -> np.ndarray:
    centered = x - x.mean(-1, keepdims=True)
    return centered / np.sqrt((centered * centered).mean(-1, keepdims=True) + 1e-5)


def np_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.floating:
    shifted = logits - logits.max(1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    return -log_probabilities[np.arange(len(labels)), labels].mean()


def np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
    return np_softmax(scores) @ v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--libm", action="store_true", help="also time each row with TRANSCENDENTAL=0")
    args = parser.parse_args()
    repeats = args.repeats
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 1024), dtype=np.float32)
    rows = rng.standard_normal((64, 256), dtype=np.float32)
    logits, labels = rng.standard_normal((1024, 100), dtype=np.float32), rng.integers(0, 100, 1024).astype(np.int32)
    q, k, v = (rng.standard_normal((2, 4, 64, 32), dtype=np.float32) for _ in range(3))
    big = rng.standard_normal(1 << 22, dtype=np.float32)
    big30 = big * np.float32(30)
    tx, trows, tlogits, tlabels, tq, tk, tv, tbig, tbig30 = (
        Tensor(a, device="CPU").realize() for a in (x, rows, logits, labels, q, k, v, big, big30)
    )
    cases = [
        ("softmax 512x1024", realized(lambda: tx.softmax(-1)), lambda: np_softmax(x)),
        ("logsumexp 512x1024", realized(lambda: tx.logsumexp(-1)), lambda: np_logsumexp(x)),
        ("gelu 512x1024", realized(lambda: tx.gelu()), lambda: np_gelu(x)),
        ("layernorm 512x1024", realized(lambda: tx.layernorm()), lambda: np_layernorm(x)),
        ("cumsum 64x256", realized(lambda: trows.cumsum(1)), lambda: np.cumsum(rows, 1)),
        ("logcumsumexp 64x256", realized(lambda: trows.logcumsumexp(1)),
         lambda: np.logaddexp.accumulate(rows, 1)),
        ("cross_entropy 1024x100", realized(lambda: tlogits.cross_entropy(tlabels)),
         lambda: np_cross_entropy(logits, labels)),
        ("sdpa causal 2x4x64x32", realized(lambda: tq.scaled_dot_product_attention(tk, tv, is_causal=True)),
         lambda: np_attention(q, k, v)),
        ("gelu 4M scale 1", realized(lambda: tbig.gelu()), lambda: np_gelu(big)),
        ("gelu 4M scale 30", realized(lambda: tbig30.gelu()), lambda: np_gelu(big30)),
        ("tanh 4M scale 1", realized(lambda: tbig.tanh()), lambda: np.tanh(big)),
        ("tanh 4M scale 30", realized(lambda: tbig30.tanh()), lambda: np.tanh(big30)),
        ("exp 4M", realized(lambda: tbig.exp()), lambda: np.exp(big)),
        ("log 4M", realized(lambda: tbig30.abs().log()), lambda: np.log(np.abs(big30))),
    ]  # fmt: skip
    libm_header = f"{'libm ms':>10}{'libm/tg':>10}" if args.libm else ""
    print(f"{'case':<26}{'tg ms':>10}{'numpy ms':>10}{'numpy/tg':>10}{libm_header}   (medians of {repeats}, CPU)")
    for name, ours, theirs in cases:
        tg_time, numpy_time = median_seconds(ours, repeats), median_seconds(theirs, repeats)
        line = f"{name:<26}{tg_time * 1e3:>10.2f}{numpy_time * 1e3:>10.2f}{numpy_time / tg_time:>10.2f}"
        if args.libm:
            with Context(TRANSCENDENTAL=0):
                libm_time = median_seconds(ours, repeats)
            line += f"{libm_time * 1e3:>10.2f}{libm_time / tg_time:>10.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
