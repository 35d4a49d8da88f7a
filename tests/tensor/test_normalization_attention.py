"""layernorm, rms_norm and scaled_dot_product_attention against numpy on CPU and PYTHON."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES

RNG = np.random.default_rng(31)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [-1, (1, 2)])
def test_layernorm_matches_numpy(axis, device):
    x = RNG.uniform(-5, 5, (2, 3, 4)).astype(np.float32)
    x64 = x.astype(np.float64)
    expected = (x64 - x64.mean(axis, keepdims=True)) / np.sqrt(x64.var(axis, keepdims=True) + 1e-5)
    np.testing.assert_allclose(Tensor(x, device=device).layernorm(axis).numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_matches_numpy_with_default_and_given_eps(device):
    x = RNG.uniform(-5, 5, (3, 8)).astype(np.float32)
    x64 = x.astype(np.float64)
    eps32 = float(np.finfo(np.float32).eps)
    expected = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps32)
    np.testing.assert_allclose(Tensor(x, device=device).rms_norm().numpy(), expected, rtol=1e-5)
    expected = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 0.5)
    np.testing.assert_allclose(Tensor(x, device=device).rms_norm(eps=0.5).numpy(), expected, rtol=1e-5)


def test_normalization_of_float16_stays_float16():
    x = RNG.uniform(-5, 5, (2, 8)).astype(np.float16)
    assert Tensor(x).layernorm().dtype is dtypes.float16
    assert Tensor(x).rms_norm().dtype is dtypes.float16


def np_attention(q, k, v, mask=None, scale=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    scores = scores - scores.max(-1, keepdims=True)
    weights = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    return weights @ v


def qkv(batch=2, heads=2, queries=4, keys=5, width=3, key_heads=None):
    q = RNG.standard_normal((batch, heads, queries, width)).astype(np.float32)
    k = RNG.standard_normal((batch, key_heads or heads, keys, width)).astype(np.float32)
    v = RNG.standard_normal((batch, key_heads or heads, keys, width + 1)).astype(np.float32)
    return q, k, v


def on(device, *arrays):
    return [Tensor(a, device=device) for a in arrays]


@pytest.mark.parametrize("device", DEVICES)
def test_attention_matches_numpy(device):
    q, k, v = qkv()
    result = on(device, q)[0].scaled_dot_product_attention(*on(device, k, v))
    np.testing.assert_allclose(result.numpy(), np_attention(q, k, v), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("keys", [4, 6])
def test_causal_attention_masks_future_keys(keys, device):
    q, k, v = qkv(keys=keys)
    causal = np.tril(np.ones((4, keys), dtype=bool))
    result = on(device, q)[0].scaled_dot_product_attention(*on(device, k, v), is_causal=True)
    np.testing.assert_allclose(result.numpy(), np_attention(q, k, v, causal), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_attention_with_bool_and_float_masks_and_scale(device):
    q, k, v = qkv()
    bool_mask = RNG.random((4, 5)) < 0.7
    bool_mask[:, 0] = True  # every query sees at least one key
    float_mask = RNG.uniform(-1, 1, (2, 1, 4, 5)).astype(np.float32)
    query = on(device, q)[0]
    result = query.scaled_dot_product_attention(*on(device, k, v), attn_mask=Tensor(bool_mask, device=device))
    np.testing.assert_allclose(result.numpy(), np_attention(q, k, v, bool_mask), rtol=1e-5, atol=1e-6)
    result = query.scaled_dot_product_attention(
        *on(device, k, v), attn_mask=Tensor(float_mask, device=device), scale=0.3
    )
    np.testing.assert_allclose(result.numpy(), np_attention(q, k, v, float_mask, 0.3), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_query_attention_repeats_key_heads(device):
    q, k, v = qkv(heads=4, key_heads=2)
    result = on(device, q)[0].scaled_dot_product_attention(*on(device, k, v), is_causal=True, enable_gqa=True)
    k_rep, v_rep = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    causal = np.tril(np.ones((4, 5), dtype=bool))
    np.testing.assert_allclose(result.numpy(), np_attention(q, k_rep, v_rep, causal), rtol=1e-5, atol=1e-6)


def test_attention_dropout_acts_only_while_training():
    q, k, v = qkv()
    query, key, value = Tensor(q), Tensor(k), Tensor(v)
    no_dropout = query.scaled_dot_product_attention(key, value, dropout_p=0.5).numpy()
    np.testing.assert_allclose(no_dropout, np_attention(q, k, v), rtol=1e-5, atol=1e-6)
    Tensor.training = True
    try:
        dropped_all = query.scaled_dot_product_attention(key, value, dropout_p=1.0).numpy()
        dropped_half = query.scaled_dot_product_attention(key, value, dropout_p=0.5).numpy()
    finally:
        Tensor.training = False
    assert np.all(dropped_all == 0)
    assert not np.allclose(dropped_half, no_dropout)


def causal(queries: int, keys: int) -> np.ndarray:
    """torch's is_causal mask: key j is seen from query i when j <= i (aligned at the top-left)."""
    return np.tril(np.ones((queries, keys), dtype=bool))


@pytest.mark.parametrize("queries,keys", [(1030, 1030), (1100, 1300), (1200, 700)])
def test_long_causal_attention_in_query_blocks_matches_numpy(queries, keys):
    """From 2 * CAUSAL_BLOCK_ROWS query rows on, causal attention runs in blocks of rows (the last one shorter here),
    each over the keys it can see; more keys than queries and fewer both keep torch's top-left alignment."""
    q, k, v = qkv(batch=1, heads=2, queries=queries, keys=keys, width=4)
    query, key, value = on("CPU", q, k, v)  # (sizes the simulated GPU legs would take minutes over)
    result = query.scaled_dot_product_attention(key, value, is_causal=True)
    np.testing.assert_allclose(result.numpy(), np_attention(q, k, v, causal(queries, keys)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
def test_long_causal_attention_skips_the_scores_above_the_diagonal(dropout_p):
    """The blocked path does the work of 10 of 16 score tiles at 1024 rows (four blocks of 256 rows, the n-th over
    n * 256 keys): compared with the same attention given the causal mask as attn_mask (which computes every score),
    its kernels' estimated operations are at most 70% (two blocks of 512 would be 75%). A dropout probability changes
    nothing outside training, where dropout does not act."""
    from tg.tensor import GlobalCounters

    q, k, v = (t.realize() for t in on("CPU", *qkv(batch=1, heads=2, queries=1024, keys=1024, width=16)))
    mask = Tensor(causal(1024, 1024), device="CPU")
    ops = {}
    for name, run in (("blocks", lambda: q.scaled_dot_product_attention(k, v, dropout_p=dropout_p, is_causal=True)),
                      ("whole", lambda: q.scaled_dot_product_attention(k, v, attn_mask=mask))):  # fmt: skip
        run().realize()  # (compiled, the mask uploaded)
        GlobalCounters.reset()
        out = run().realize()
        ops[name] = GlobalCounters.global_ops
        np.testing.assert_allclose(out.numpy(), np_attention(q.numpy(), k.numpy(), v.numpy(), causal(1024, 1024)),
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
    assert ops["blocks"] <= 0.7 * ops["whole"], ops


def test_gradient_of_long_causal_attention_matches_finite_differences():
    """d(sum(attention * w))/d(q, k, v) through the query blocks, against central differences of the float64 numpy
    attention along a random direction."""
    rng = np.random.default_rng(7)
    q, k, v = qkv(batch=1, heads=1, queries=1024, keys=1024, width=2)
    w = rng.standard_normal((1, 1, 1024, 3))
    mask = causal(1024, 1024)
    tensors = [Tensor(a, requires_grad=True, device="CPU") for a in (q, k, v)]
    loss = (
        tensors[0].scaled_dot_product_attention(tensors[1], tensors[2], is_causal=True)
        * Tensor(w.astype(np.float32), device="CPU")
    ).sum()
    loss.backward()
    h = 1e-4
    for index, tensor in enumerate(tensors):
        direction = rng.standard_normal(tensor.shape)
        arrays = [a.astype(np.float64) for a in (q, k, v)]
        plus, minus = list(arrays), list(arrays)
        plus[index], minus[index] = arrays[index] + h * direction, arrays[index] - h * direction
        numeric = ((np_attention(*plus, mask) * w).sum() - (np_attention(*minus, mask) * w).sum()) / (2 * h)
        analytic = float((tensor.grad.numpy().astype(np.float64) * direction).sum())
        assert analytic == pytest.approx(numeric, rel=2e-3, abs=1e-3), (index, analytic, numeric)
