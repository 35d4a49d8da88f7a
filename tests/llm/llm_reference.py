"""A float64 numpy forward of the GGUF models in fixtures.py: the independent oracle for tg-llm's model.

Weights come from the reference `gguf` reader and dequantizer. Attention follows Hugging Face: llama q/k rows are
un-permuted back to the half-split layout and rotated with rotate-half; every position is computed at once with
a plain causal softmax (no KV cache), so cache and chunking bugs in tg-llm show up as differences.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def load(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    reader = gguf.GGUFReader(str(path))
    metadata = {}
    for key, field in reader.fields.items():
        try:
            metadata[key] = field.contents()
        except Exception:  # noqa: BLE001  (fields the reference cannot render are not needed here)
            continue
    weights = {}
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        weights[tensor.name] = values.reshape(tuple(reversed([int(d) for d in tensor.shape]))).astype(np.float64)
    return metadata, weights


def unpermute(weights: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k permutation: interleaved pairs back to half-split, per head."""
    return (
        weights.reshape(heads, weights.shape[0] // heads // 2, 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def rotate_half_rope(x: np.ndarray, theta: float, inv_freq: np.ndarray | None = None) -> np.ndarray:
    """x (T, heads, head_dim): Hugging Face's RoPE (halves rotate together); `inv_freq` replaces the default
    theta^(-2i/d) frequencies (Hugging Face's scaled RoPE variants compute their own)."""
    count, _, head_dim = x.shape
    frequencies = theta ** (-np.arange(0, head_dim, 2) / head_dim) if inv_freq is None else inv_freq
    angles = np.arange(count)[:, None] * frequencies[None, :]
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, None, :]
    rotated = np.concatenate([-x[..., head_dim // 2 :], x[..., : head_dim // 2]], -1)
    return x * cos + rotated * sin


def q8_rows(x: np.ndarray) -> np.ndarray:
    """x `(..., head_dim)` as an int8 KV cache (`--kv-cache q8`) gives it back, in float64: per block of 32 features
    (of the whole row when head_dim is not a multiple of 32) a float32 scale s = max|x| / 127 and codes round(x / s)
    (half to even), computed in float32 as the cache does; s * codes."""
    head_dim = x.shape[-1]
    block = 32 if head_dim % 32 == 0 else head_dim
    blocks = x.astype(np.float32).reshape(*x.shape[:-1], head_dim // block, block)
    scale = np.abs(blocks).max(-1, keepdims=True) / np.float32(127)
    codes = np.rint(blocks / np.where(scale > 0, scale, np.float32(1)))
    assert np.abs(codes).max() <= 127
    return (codes.astype(np.float64) * scale.astype(np.float64)).reshape(x.shape)


def rounded_kv(x: np.ndarray, kv_dtype: type[np.floating] | str | None, interleaved: bool = False) -> np.ndarray:
    """x `(..., head_dim)` as a KV cache of kv_dtype (np.float16, or "q8": see q8_rows; None: float64, unrounded)
    gives it back. `interleaved`: x is in the half-split order of `unpermute`, and the cache holds the features in
    the file's interleaved order (llama: tg, as llama.cpp, computes in the file's order), which decides the features
    that share a q8 block."""
    if kv_dtype is None:
        return x
    if kv_dtype == "q8":
        if not interleaved:
            return q8_rows(x)
        halves = x.shape[-1] // 2
        in_file_order = x.reshape(*x.shape[:-1], 2, halves).swapaxes(-1, -2).reshape(x.shape)
        rounded = q8_rows(in_file_order)
        return rounded.reshape(*x.shape[:-1], halves, 2).swapaxes(-1, -2).reshape(x.shape)
    return x.astype(kv_dtype).astype(np.float64)


def forward(
    metadata: dict,
    w: dict[str, np.ndarray],
    tokens: list[int],
    inv_freq: np.ndarray | None = None,
    hidden: bool = False,
    kv_dtype: type[np.floating] | str | None = None,
) -> np.ndarray:
    """Logits (T, vocab) for every position of `tokens` (`hidden`: the final normalized hidden states (T, dim)
    instead); `inv_freq` as in rotate_half_rope (the reference does not read RoPE scaling from the file: a test that
    uses scaling computes the frequencies itself). `kv_dtype` (np.float16, or "q8"): the keys, after RoPE, and the
    values are rounded to it before attention reads them, as a KV cache of that type stores them (see rounded_kv)."""
    arch = metadata["general.architecture"]
    heads, kv_heads = metadata[f"{arch}.attention.head_count"], metadata[f"{arch}.attention.head_count_kv"]
    eps, theta = metadata[f"{arch}.attention.layer_norm_rms_epsilon"], metadata[f"{arch}.rope.freq_base"]
    x = w["token_embd.weight"][tokens]
    count, dim = x.shape
    head_dim = dim // heads
    causal = np.tril(np.ones((count, count), dtype=bool))
    if arch == "phi3":  # transformers' Phi-3 attends over its sliding window in every layer
        causal &= np.subtract.outer(np.arange(count), np.arange(count)) < metadata["phi3.attention.sliding_window"]
    for block in range(metadata[f"{arch}.block_count"]):
        p = f"blk.{block}."
        h = rms_norm(x, w[p + "attn_norm.weight"], eps)
        if arch == "phi3":  # one matrix: q's rows, k's, v's
            sizes = np.cumsum([heads * head_dim, kv_heads * head_dim])
            wq, wk, wv = np.split(w[p + "attn_qkv.weight"], sizes)
        else:
            wq, wk, wv = w[p + "attn_q.weight"], w[p + "attn_k.weight"], w[p + "attn_v.weight"]
        if arch == "llama":
            wq, wk = unpermute(wq, heads), unpermute(wk, kv_heads)
        q, k, v = h @ wq.T, h @ wk.T, h @ wv.T
        if p + "attn_q.bias" in w:
            q, k, v = q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"], v + w[p + "attn_v.bias"]
        if arch == "olmoe":
            q, k = rms_norm(q, w[p + "attn_q_norm.weight"], eps), rms_norm(k, w[p + "attn_k_norm.weight"], eps)
        q, k, v = (t.reshape(count, -1, head_dim) for t in (q, k, v))
        if arch in ("qwen3", "qwen3moe"):
            q, k = rms_norm(q, w[p + "attn_q_norm.weight"], eps), rms_norm(k, w[p + "attn_k_norm.weight"], eps)
        q, k = rotate_half_rope(q, theta, inv_freq), rotate_half_rope(k, theta, inv_freq)
        k, v = rounded_kv(k, kv_dtype, interleaved=arch == "llama"), rounded_kv(v, kv_dtype)
        k, v = np.repeat(k, heads // kv_heads, axis=1), np.repeat(v, heads // kv_heads, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(head_dim)
        scores = np.where(causal, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attended = np.einsum("hqk,khd->qhd", probs, v).reshape(count, dim)
        x = x + attended @ w[p + "attn_output.weight"].T
        h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        x = x + (moe(metadata, w, p, h) if p + "ffn_gate_inp.weight" in w else dense_ffn(w, p, h))
    x = rms_norm(x, w["output_norm.weight"], eps)
    if hidden:
        return x
    return x @ w.get("output.weight", w["token_embd.weight"]).T


def dense_ffn(w: dict, p: str, h: np.ndarray) -> np.ndarray:
    """silu(gate) * up, then down; without ffn_gate (phi3), ffn_up holds the gate's rows and then the up's."""
    if p + "ffn_gate.weight" in w:
        gate, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
    else:
        gate, up = np.split(h @ w[p + "ffn_up.weight"].T, 2, axis=-1)
    return (silu(gate) * up) @ w[p + "ffn_down.weight"].T


def moe(metadata: dict, w: dict, p: str, h: np.ndarray) -> np.ndarray:
    """Softmax router, top-k with ties to the lower index, weights renormalized for qwen3moe, not for olmoe."""
    arch = metadata["general.architecture"]
    k = metadata[f"{arch}.expert_used_count"]
    logits = h @ w[p + "ffn_gate_inp.weight"].T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = sorted(range(probs.shape[1]), key=lambda e: (-probs[t, e], e))[:k]
        weights = probs[t, chosen]
        if arch == "qwen3moe":
            weights = weights / weights.sum()
        for e, weight in zip(chosen, weights, strict=True):
            gate, up = w[p + "ffn_gate_exps.weight"][e], w[p + "ffn_up_exps.weight"][e]
            out[t] += weight * ((silu(gate @ h[t]) * (up @ h[t])) @ w[p + "ffn_down_exps.weight"][e].T)
    return out


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation (PyTorch's gelu(approximate="tanh"), Gemma's hidden activation)."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


# transformers' default layer types: block i slides unless (i + 1) is a multiple of this
GEMMA_PATTERNS = {"gemma2": 2, "gemma3": 6}


def gemma_forward(
    metadata: dict,
    w: dict[str, np.ndarray],
    tokens: list[int],
    sliding_window: int | None = None,
    local_theta: float | None = None,
    softcaps: bool = True,
) -> np.ndarray:
    """Logits (T, vocab) of a gemma2 or gemma3 model, as transformers' Gemma2/Gemma3ForCausalLM compute them:
    embeddings times sqrt(dim); per block a norm before and after the attention and the MLP, q/k norms per head
    (gemma3), scores scaled by the file's `attention.scale` (else 1/sqrt(head_dim): query_pre_attn_scalar is
    key_length in these files) and soft-capped (gemma2); block i attends over a sliding window unless (i + 1) is a
    multiple of the file's `sliding_window_pattern` (else transformers' default), then globally; gemma3's sliding
    blocks rotate with RoPE base 10,000 (`local_theta`), the rest with `rope.freq_base`; tied output, soft-capped
    (gemma2). `sliding_window`, `local_theta` and `softcaps` (False: none) override the file (tests that show what
    matters).

    transformers' Gemma norm multiplies by (1 + w) for its own w; llama.cpp's converter stores 1 + w in the file
    (and transformers subtracts the 1 again when it reads a GGUF file), so the file's weights multiply here."""
    arch = metadata["general.architecture"]
    heads, kv_heads = metadata[f"{arch}.attention.head_count"], metadata[f"{arch}.attention.head_count_kv"]
    eps, theta = metadata[f"{arch}.attention.layer_norm_rms_epsilon"], metadata[f"{arch}.rope.freq_base"]
    head_dim = metadata[f"{arch}.attention.key_length"]
    pattern = metadata.get(f"{arch}.attention.sliding_window_pattern", GEMMA_PATTERNS[arch])
    window = metadata[f"{arch}.attention.sliding_window"] if sliding_window is None else sliding_window
    if local_theta is None:
        local_theta = 10000.0 if arch == "gemma3" else theta
    attention_cap = metadata.get(f"{arch}.attn_logit_softcapping", 0.0) if softcaps else 0.0
    final_cap = metadata.get(f"{arch}.final_logit_softcapping", 0.0) if softcaps else 0.0
    x = w["token_embd.weight"][tokens] * np.sqrt(w["token_embd.weight"].shape[1])
    count = x.shape[0]
    query, key = np.arange(count)[:, None], np.arange(count)[None, :]
    for block in range(metadata[f"{arch}.block_count"]):
        p = f"blk.{block}."
        local = (block + 1) % pattern != 0
        visible = (key <= query) & ((query - key < window) if local else True)
        h = rms_norm(x, w[p + "attn_norm.weight"], eps)
        q, k, v = (h @ w[p + f"attn_{name}.weight"].T for name in "qkv")
        q, k, v = (t.reshape(count, -1, head_dim) for t in (q, k, v))
        if p + "attn_q_norm.weight" in w:
            q, k = rms_norm(q, w[p + "attn_q_norm.weight"], eps), rms_norm(k, w[p + "attn_k_norm.weight"], eps)
        base = local_theta if local else theta
        q, k = rotate_half_rope(q, base), rotate_half_rope(k, base)
        k, v = np.repeat(k, heads // kv_heads, axis=1), np.repeat(v, heads // kv_heads, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) * metadata.get(f"{arch}.attention.scale", head_dim**-0.5)
        scores = np.where(visible, soft_cap(scores, attention_cap), -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attended = np.einsum("hqk,khd->qhd", probs, v).reshape(count, heads * head_dim)
        x = x + rms_norm(attended @ w[p + "attn_output.weight"].T, w[p + "post_attention_norm.weight"], eps)
        h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        hidden = gelu_tanh(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)
        x = x + rms_norm(hidden @ w[p + "ffn_down.weight"].T, w[p + "post_ffw_norm.weight"], eps)
    return soft_cap(rms_norm(x, w["output_norm.weight"], eps) @ w["token_embd.weight"].T, final_cap)


def soft_cap(x: np.ndarray, cap: float) -> np.ndarray:
    return np.tanh(x / cap) * cap if cap else x
