"""Tensor op surface benchmark against numpy, measured in the same run: matmul, conv2d, max_pool2d, sort and rand
on the CPU device.

    uv run python bench/bench_shape_ops.py [--repeats 5]

Every op is built from movement, elementwise and reduce ops and realized fresh each repeat (its kernels are cached
after the warm-up). Prints medians of several repeats and the ratio numpy_time / tg_time (above 1: tg is faster).
The machine is shared, so timings are noisy; the medians are what to compare. This measures the un-optimized
lowering as the heuristics of the kernel optimizer (tg.codegen.opt) leave it.
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import median_seconds, realized

from tg.tensor import Tensor


def numpy_conv2d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))  # (N, C, OH, OW, KH, KW)
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)


def numpy_max_pool(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max((3, 5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    x, w = rng.standard_normal((4, 16, 32, 32), dtype=np.float32), rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
    keys = rng.standard_normal((64, 64), dtype=np.float32)
    ta, tb, tx, tw, tk = (Tensor(v, device="CPU").realize() for v in (a, b, x, w, keys))
    cases = [
        ("matmul 256x256x256", realized(lambda: ta @ tb), lambda: a @ b),
        ("conv2d 4x16x32x32 k3", realized(lambda: tx.conv2d(tw)), lambda: numpy_conv2d(x, w)),
        ("max_pool2d 2x2", realized(lambda: tx.max_pool2d(2)), lambda: numpy_max_pool(x)),
        ("sort 64 rows of 64", realized(lambda: tk.sort().values), lambda: np.sort(keys, -1)),
        ("rand 1M", realized(lambda: Tensor.rand(1 << 20, device="CPU")), lambda: np.random.random(1 << 20)),
    ]
    print(f"{'case':<24}{'tg ms':>10}{'numpy ms':>10}{'numpy/tg':>10}   (medians of {repeats}, CPU, shared machine)")
    for name, ours, theirs in cases:
        tg_time, numpy_time = median_seconds(ours, repeats), median_seconds(theirs, repeats)
        print(f"{name:<24}{tg_time * 1e3:>10.2f}{numpy_time * 1e3:>10.2f}{numpy_time / tg_time:>10.2f}")


if __name__ == "__main__":
    main()
