"""The decoder-only transformer of llama, qwen2, qwen3, qwen3moe and olmoe GGUF models, on tg Tensors.

One `Transformer.forward(tokens, start_pos)` call runs a chunk of tokens through every block, writes their keys
and values into the per-block KV cache at `start_pos`, and returns the logits of the last token. Weights stay in
their GGUF encoding (see weights.py); activations and the KV cache are float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tg.codegen import dtypes
from tg.llm.config import TransformerConfig, UnsupportedModelError
from tg.llm.ops import concat, stack
from tg.llm.quants import DEQUANTIZERS, pack
from tg.llm.weights import Weight, linear
from tg.tensor import Tensor
from tg.tensor.gguf import FLOAT_TYPES, GGML_TYPES, GGUFFile, GGUFTensorInfo, gguf_read, load_tensor, mapped_tensors


class ContextOverflowError(ValueError):
    """More tokens than the KV cache holds."""


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * ((x * x).mean(-1, keepdim=True) + eps).rsqrt() * weight


def rope_tables(positions: np.ndarray, rope_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin `(T, 1, rope_dim / 2)` for the given absolute positions (computed in float64 on the host)."""
    frequencies = theta ** (-np.arange(0, rope_dim, 2, dtype=np.float64) / rope_dim)
    angles = positions.astype(np.float64)[:, None] * frequencies[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    return Tensor(cos[:, None, :]), Tensor(sin[:, None, :])


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, rope_dim: int, interleaved: bool) -> Tensor:
    """Rotate the first `rope_dim` features of x `(T, heads, head_dim)`.

    `interleaved` rotates adjacent pairs (2i, 2i+1): llama.cpp's converter permutes llama's q/k rows so that this
    equals Hugging Face's rotate-half on the original weights. Otherwise the halves (i, i + rope_dim/2) rotate
    (the NEOX layout qwen models keep).
    """
    rotated, rest = x[..., :rope_dim], x[..., rope_dim:]
    if interleaved:
        pairs = rotated.unflatten(-1, (rope_dim // 2, 2))
        first, second = pairs[..., 0], pairs[..., 1]
        out = stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)
    else:
        first, second = rotated[..., : rope_dim // 2], rotated[..., rope_dim // 2 :]
        out = concat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return out if rest.shape[-1] == 0 else concat([out, rest], dim=-1)


def top_k_mask(scores: Tensor, k: int) -> Tensor:
    """True for the k largest of each row `(T, E)`; ties go to the lower index (rank by pairwise comparison)."""
    experts = scores.shape[-1]
    mine, theirs = scores.unsqueeze(-1), scores.unsqueeze(-2)  # (T, E, 1) vs (T, 1, E)
    index = Tensor.arange(experts, dtype=dtypes.int32)
    lower = index.reshape(1, experts) < index.reshape(experts, 1)  # [i, j]: j < i
    beats_me = (theirs > mine) | ((theirs == mine) & lower)
    rank = beats_me.cast(dtypes.int32).sum(-1)
    return rank < k


@dataclass
class Block:
    attn_norm: Tensor
    q: Weight
    k: Weight
    v: Weight
    output: Weight
    ffn_norm: Tensor
    q_bias: Tensor | None = None
    k_bias: Tensor | None = None
    v_bias: Tensor | None = None
    q_norm: Tensor | None = None
    k_norm: Tensor | None = None
    gate: Weight | None = None
    up: Weight | None = None
    down: Weight | None = None
    router: Weight | None = None
    gate_experts: Weight | None = None
    up_experts: Weight | None = None
    down_experts: Weight | None = None


class Transformer:
    """A GGUF decoder model with its KV cache (one sequence, batch 1)."""

    def __init__(self, config: TransformerConfig, weights: dict[str, Weight], max_context: int) -> None:
        self.config, self.weights = config, weights
        self.max_context = min(max_context, config.context_length)
        self.embedding = weights["token_embd.weight"]
        self.output_norm = weights["output_norm.weight"].float()
        self.output = weights.get("output.weight", self.embedding)  # tied embeddings when there is no output
        self.blocks = [self._block(index) for index in range(config.num_blocks)]
        cache_shape = (2, config.n_kv_heads, self.max_context, config.head_dim)
        self.caches = [Tensor.zeros(*cache_shape).contiguous().realize() for _ in self.blocks]

    def _block(self, index: int) -> Block:
        def get(name: str) -> Weight | None:
            return self.weights.get(f"blk.{index}.{name}")

        def floats(name: str) -> Tensor | None:
            weight = get(name)
            return None if weight is None else weight.float().realize()

        required = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"]
        missing = [name for name in required + ["ffn_norm.weight"] if get(name) is None]
        if missing:
            raise UnsupportedModelError(f"block {index} lacks tensors {', '.join(missing)}")
        block = Block(
            attn_norm=floats("attn_norm.weight"),
            q=get("attn_q.weight"),
            k=get("attn_k.weight"),
            v=get("attn_v.weight"),
            output=get("attn_output.weight"),
            ffn_norm=floats("ffn_norm.weight"),
            q_bias=floats("attn_q.bias"),
            k_bias=floats("attn_k.bias"),
            v_bias=floats("attn_v.bias"),
            q_norm=floats("attn_q_norm.weight"),
            k_norm=floats("attn_k_norm.weight"),
        )
        if self.config.num_experts:
            block.router, block.gate_experts = get("ffn_gate_inp.weight"), get("ffn_gate_exps.weight")
            block.up_experts, block.down_experts = get("ffn_up_exps.weight"), get("ffn_down_exps.weight")
        else:
            block.gate, block.up, block.down = get("ffn_gate.weight"), get("ffn_up.weight"), get("ffn_down.weight")
        return block

    # ------------------------------------------------------------------------------------------- the forward

    def embed(self, tokens: list[int]) -> Tensor:
        for token in tokens:
            if not 0 <= token < self.embedding.shape[0]:
                raise ValueError(f"token id {token} is outside the vocabulary of {self.embedding.shape[0]}")
        rows = [self.embedding.rows(token, token + 1) for token in tokens]
        return concat(rows, dim=0)

    def forward(self, tokens: list[int], start_pos: int) -> Tensor:
        """Logits `(vocab,)` of the last of `tokens`, which sit at positions start_pos.. of the sequence."""
        count = len(tokens)
        if start_pos + count > self.max_context:
            raise ContextOverflowError(
                f"context overflow: {start_pos + count} tokens do not fit the maximum context of {self.max_context}"
            )
        config = self.config
        cos, sin = rope_tables(np.arange(start_pos, start_pos + count), config.rope_dim, config.rope_theta)
        mask = None
        if count > 1:  # causal, aligned at the lower right: query i sees keys up to start_pos + i
            keys = np.arange(start_pos + count)[None, :]
            mask = Tensor(keys <= (start_pos + np.arange(count))[:, None])
        x = self.embed(tokens)
        for block, cache in zip(self.blocks, self.caches, strict=True):
            attended, write = self._attention(
                block, cache, rms_norm(x, block.attn_norm, config.norm_eps), start_pos, cos, sin, mask
            )
            h = x + attended
            x = h + self._feed_forward(block, rms_norm(h, block.ffn_norm, config.norm_eps))
            # one realize per block keeps each graph small, and every block's graph has the same structure, so
            # the scheduler's cache serves blocks 2..N from block 1's schedule
            x = x.contiguous().realize(write)
        last = rms_norm(x[count - 1 :], self.output_norm, config.norm_eps)
        return linear(last, self.output).reshape(-1).realize()

    def _attention(
        self, block: Block, cache: Tensor, x: Tensor, start_pos: int, cos: Tensor, sin: Tensor, mask: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        config, count = self.config, x.shape[0]
        q, k, v = linear(x, block.q, block.q_bias), linear(x, block.k, block.k_bias), linear(x, block.v, block.v_bias)
        if block.q_norm is not None and block.q_norm.shape[-1] != config.head_dim:  # olmoe: over the projection
            q, k = rms_norm(q, block.q_norm, config.norm_eps), rms_norm(k, block.k_norm, config.norm_eps)
        q = q.reshape(count, config.n_heads, config.head_dim)
        k = k.reshape(count, config.n_kv_heads, config.head_dim)
        v = v.reshape(count, config.n_kv_heads, config.head_dim)
        if block.q_norm is not None and block.q_norm.shape[-1] == config.head_dim:  # qwen3: per head
            q, k = rms_norm(q, block.q_norm, config.norm_eps), rms_norm(k, block.k_norm, config.norm_eps)
        q = apply_rope(q, cos, sin, config.rope_dim, config.rope_interleaved).transpose(0, 1)
        k = apply_rope(k, cos, sin, config.rope_dim, config.rope_interleaved).transpose(0, 1)
        v = v.transpose(0, 1)
        new_kv = stack([k, v], dim=0)  # (2, kv_heads, T, head_dim)
        write = cache[:, :, start_pos : start_pos + count].assign(new_kv)
        all_kv = new_kv if start_pos == 0 else concat([cache[:, :, :start_pos], new_kv], dim=2)
        out = q.scaled_dot_product_attention(all_kv[0], all_kv[1], attn_mask=mask, enable_gqa=True)
        out = out.transpose(0, 1).reshape(count, config.n_heads * config.head_dim)
        return linear(out, block.output), write

    def _feed_forward(self, block: Block, x: Tensor) -> Tensor:
        if not self.config.num_experts:
            return linear(linear(x, block.gate).silu() * linear(x, block.up), block.down)
        config = self.config
        probabilities = linear(x, block.router).softmax(-1)  # (T, experts)
        chosen = top_k_mask(probabilities, config.num_experts_per_tok)
        weights = chosen.where(probabilities, 0.0)
        if config.normalize_top_k:
            weights = weights / weights.sum(-1, keepdim=True)
        # every expert runs on every token and unchosen ones get weight 0 (exact, but E/k times the work)
        inputs = x.unsqueeze(0)  # (1, T, dim)
        gate = inputs.matmul(block.gate_experts.float().transpose(-1, -2))  # (E, T, hidden)
        up = inputs.matmul(block.up_experts.float().transpose(-1, -2))
        expert_out = (gate.silu() * up).matmul(block.down_experts.float().transpose(-1, -2))  # (E, T, dim)
        return (expert_out * weights.transpose(0, 1).unsqueeze(-1)).sum(0)


# ----------------------------------------------------------------------------------------------- loading


def load_weights(gguf: GGUFFile) -> dict[str, Weight]:
    """Every tensor of the file as a Weight, read once into device memory (quantized ones stay packed)."""
    return {info.name: _load_weight(info, view) for info, view in mapped_tensors(gguf)}


def _load_weight(info: GGUFTensorInfo, view: memoryview) -> Weight:
    if info.type_name in FLOAT_TYPES or info.type_name == "BF16":
        return Weight(load_tensor(info, view).realize(), info.ggml_type, info.shape)
    _, block_elements, block_bytes = GGML_TYPES[info.ggml_type]
    raw = np.frombuffer(view, dtype=np.uint8, count=info.nbytes, offset=info.offset)
    raw = raw.reshape(*info.shape[:-1], info.shape[-1] // block_elements, block_bytes)
    return Weight(pack(raw, info.ggml_type), info.ggml_type, info.shape)


def load_model(path: str | Path, max_context: int = 4096) -> tuple[Transformer, GGUFFile]:
    """Read a GGUF file and build its Transformer (raises UnsupportedModelError for unknown architectures)."""
    gguf = gguf_read(path)
    vocab = len(gguf.metadata.get("tokenizer.ggml.tokens", []))
    config = TransformerConfig.from_metadata(gguf.metadata, vocab)
    for info in gguf.tensors.values():
        if info.type_name not in FLOAT_TYPES and info.type_name not in ("BF16", *DEQUANTIZERS):
            raise UnsupportedModelError(f"tensor {info.name!r} has GGML type {info.type_name}, which is not supported")
    return Transformer(config, load_weights(gguf), max_context), gguf


def parameter_count(gguf: GGUFFile) -> int:
    return sum(math.prod(info.shape) for info in gguf.tensors.values())
