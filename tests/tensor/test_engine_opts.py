"""Kernel optimizations through the realize engine: a matmul and a padded convolution built from tensor-graph nodes
get the heuristics' opts, compute what numpy computes with and without them (NOOPT=1), and DEBUG=3 shows the
opts applied."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.flags import Context
from tg.codegen.schedule import schedule as scheduler
from tg.codegen.schedule.graph import ReduceArg, shape_of
from tg.hcq.engine import buffer_from_bytes, clear_program_cache, read_bytes


def tensor(array: np.ndarray) -> UOp:
    buf = buffer_from_bytes(np.ascontiguousarray(array).tobytes(), dtypes.float32, "CPU")
    return UOp(Ops.RESHAPE, dtypes.float32, (buf,), array.shape)


def move(op: Ops, x: UOp, arg: object) -> UOp:
    return UOp(op, x.dtype, (x,), arg)


def matmul(a: UOp, b: UOp) -> UOp:
    (n, k), (_, m) = shape_of(a), shape_of(b)
    left = move(Ops.EXPAND, move(Ops.RESHAPE, a, (n, 1, k)), (n, m, k))
    right = move(Ops.EXPAND, move(Ops.RESHAPE, move(Ops.PERMUTE, b, (1, 0)), (1, m, k)), (n, m, k))
    product = UOp(Ops.MUL, dtypes.float32, (left, right))
    return move(Ops.RESHAPE, UOp(Ops.REDUCE_AXIS, dtypes.float32, (product,), ReduceArg(Ops.ADD, (2,))), (n, m))


def conv1d_padded(x: UOp, w: UOp) -> UOp:
    """out[b, o, t] = sum_{c, s} xpad[b, c, t + s] * w[o, c, s] with one element of zero padding each side."""
    (batch, channels, length), (outs, _, window) = shape_of(x), shape_of(w)
    padded = move(Ops.PAD, x, ((0, 0), (0, 0), (1, 1)))
    size = length + 2
    y = move(Ops.EXPAND, move(Ops.RESHAPE, padded, (batch, channels, 1, size)), (batch, channels, window + 1, size))
    y = move(Ops.RESHAPE, y, (batch, channels, (window + 1) * size))
    y = move(Ops.SHRINK, y, ((0, batch), (0, channels), (0, window * (size + 1))))
    y = move(Ops.RESHAPE, y, (batch, channels, window, size + 1))
    out_len = size - window + 1
    y = move(Ops.SHRINK, y, ((0, batch), (0, channels), (0, window), (0, out_len)))  # [b, c, s, t] = xpad[t + s]
    y = move(Ops.PERMUTE, y, (0, 3, 1, 2))  # b, t, c, s
    full = (batch, outs, out_len, channels, window)
    patches = move(Ops.EXPAND, move(Ops.RESHAPE, y, (batch, 1, out_len, channels, window)), full)
    weights = move(Ops.EXPAND, move(Ops.RESHAPE, w, (1, outs, 1, channels, window)), full)
    product = UOp(Ops.MUL, dtypes.float32, (patches, weights))
    total = UOp(Ops.REDUCE_AXIS, dtypes.float32, (product,), ReduceArg(Ops.ADD, (3, 4)))
    return move(Ops.RESHAPE, total, (batch, outs, out_len))


def values(node: UOp) -> np.ndarray:
    return np.frombuffer(read_bytes(node), np.float32).reshape(shape_of(node))


def fresh_caches() -> None:
    scheduler._schedule_cache.clear()
    clear_program_cache()


@pytest.mark.parametrize("noopt", [0, 1])
def test_matmul_with_and_without_opts_matches_numpy(noopt: int) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((48, 40), np.float32), rng.standard_normal((40, 64), np.float32)
    fresh_caches()
    with Context(NOOPT=noopt):
        np.testing.assert_allclose(values(matmul(tensor(a), tensor(b))), a @ b, rtol=1e-4, atol=1e-4)


def test_padded_convolution_with_opts_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 3, 20), np.float32), rng.standard_normal((8, 3, 3), np.float32)
    xpad = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    expected = np.zeros((4, 8, 20), np.float32)
    for s in range(3):
        expected += np.einsum("bct,oc->bot", xpad[:, :, s : s + 20], w[:, :, s])
    fresh_caches()
    np.testing.assert_allclose(values(conv1d_padded(tensor(x), tensor(w))), expected, rtol=1e-4, atol=1e-4)


def test_noopt_is_part_of_the_compiled_kernel_cache_key(capsys: pytest.CaptureFixture[str]) -> None:
    a = np.ones((32, 32), np.float32)
    fresh_caches()
    values(matmul(tensor(a), tensor(a)))  # compiled with the heuristics' opts
    scheduler._schedule_cache.clear()
    with Context(NOOPT=1, DEBUG=3):
        values(matmul(tensor(a), tensor(a)))
    assert "opts []" in capsys.readouterr().out


def test_debug_3_prints_the_opts_each_kernel_got(capsys: pytest.CaptureFixture[str]) -> None:
    a = np.ones((32, 32), np.float32)
    fresh_caches()
    with Context(DEBUG=3):
        values(matmul(tensor(a), tensor(a)))
    printed = capsys.readouterr().out
    assert "opts [Opt(op=OptOps.SWAP" in printed and "OptOps.UPCAST" in printed
