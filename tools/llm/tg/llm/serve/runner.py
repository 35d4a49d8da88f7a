"""The adapter between the server and tg-llm's Transformer: per-slot KV caches, prefill, and batched decode.

Everything the server needs from the model goes through `ModelRunner`, so a change to the model or the Generator
touches this file only. Each slot (one conversation in flight) owns its own KV cache tensors and remembers which
tokens they hold, so a follow-up turn of the same conversation reuses its prefix and another conversation never
sees it. A decode step for several slots runs as one forward: the weight matmuls see all the slots' tokens as one
batch (so the weights are read, and the graph built, once per step) and only attention is done per slot, each
against its own cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tg.llm.generate import common_prefix
from tg.llm.model import Block, ContextOverflowError, Transformer, apply_rope, rms_norm, rope_tables
from tg.llm.ops import concat, stack
from tg.llm.weights import linear
from tg.tensor import Tensor

CHUNK_SIZE = 32  # prefill chunk: bounds one step's graph, as tg-llm's Generator does


@dataclass
class Slot:
    """One KV cache (a list of per-block tensors) and the tokens whose keys and values it holds."""

    index: int
    caches: list[Tensor]
    cached: list[int] = field(default_factory=list)


class ModelRunner:
    def __init__(self, model: Transformer, slots: int, batched: bool = True) -> None:
        self.model, self.batched = model, batched
        self.max_context = model.max_context
        shape = model.caches[0].shape
        self.slots = [Slot(0, model.caches)]
        for index in range(1, slots):
            caches = [Tensor.zeros(*shape).contiguous().realize() for _ in model.blocks]
            self.slots.append(Slot(index, caches))

    def prefill(self, slot: Slot, tokens: list[int]) -> np.ndarray:
        """The logits after `tokens`, fed into `slot` from the end of its reusable prefix (the last token is always
        recomputed: its logits are needed)."""
        if len(tokens) > self.max_context:
            raise ContextOverflowError(f"context overflow: {len(tokens)} tokens, the maximum is {self.max_context}")
        start = common_prefix(tokens[:-1], slot.cached)
        slot.cached = slot.cached[:start]  # if a chunk fails, the cache holds only what was written before it
        logits = None
        self.model.caches = slot.caches
        for chunk_start in range(start, len(tokens), CHUNK_SIZE):
            chunk = tokens[chunk_start : chunk_start + CHUNK_SIZE]
            logits = self.model.forward(chunk, chunk_start).numpy()
            slot.cached = tokens[: chunk_start + len(chunk)]
        assert logits is not None
        return logits

    def reusable_prefix(self, slot: Slot, tokens: list[int]) -> int:
        return common_prefix(tokens[:-1], slot.cached)

    def decode(self, steps: list[tuple[Slot, int]]) -> list[np.ndarray]:
        """Feed one token to each slot; the logits after it, per slot (one forward, or one per slot unbatched)."""
        for slot, _ in steps:
            if len(slot.cached) + 1 > self.max_context:
                raise ContextOverflowError(f"context overflow: the maximum context is {self.max_context}")
        groups = [steps] if self.batched else [[step] for step in steps]
        logits: list[np.ndarray] = []
        for group in groups:
            sequences = [(slot.caches, len(slot.cached)) for slot, _ in group]
            logits += list(batched_decode(self.model, sequences, [token for _, token in group]))
        for slot, token in steps:
            slot.cached.append(token)
        return logits


def batched_decode(model: Transformer, sequences: list[tuple[list[Tensor], int]], tokens: list[int]) -> np.ndarray:
    """One token for each of several sequences, `(caches, position)` each: logits `(len(tokens), vocab)`.

    Mirrors `Transformer.forward` for one token per sequence, with the tokens of all sequences stacked as the rows
    of the matmuls and attention done per sequence against its own cache. The graph's shapes do not depend on the
    positions: each cache is rewritten whole with the new key and value selected in at the position, and attention
    covers the whole cache under a mask. So every step with the same number of sequences reuses the compiled
    kernels and the schedule, where slicing the cache at the position would compile new kernels at every step.
    The price is a read and write of each cache per step, small next to the weights for contexts of a few thousand.
    """
    config, count, context = model.config, len(tokens), model.max_context
    positions = np.array([position for _, position in sequences])
    cos, sin = rope_tables(positions, config.rope_dim, config.rope_theta)
    keys = np.arange(context)
    at_position = [Tensor((keys == position).reshape(1, 1, context, 1)) for position in positions]
    visible = [Tensor((keys <= position).reshape(1, context)) for position in positions]
    x = model.embed(tokens)
    for index, block in enumerate(model.blocks):
        caches = [caches[index] for caches, _ in sequences]
        normed = rms_norm(x, block.attn_norm, config.norm_eps)
        attended, writes = batched_attention(model, block, caches, at_position, visible, normed, cos, sin)
        h = x + attended
        x = h + model._feed_forward(block, rms_norm(h, block.ffn_norm, config.norm_eps))
        x = x.contiguous().realize(*writes)
    out = rms_norm(x, model.output_norm, config.norm_eps)
    return linear(out, model.output).reshape(count, -1).realize().numpy()


def batched_attention(
    model: Transformer,
    block: Block,
    caches: list[Tensor],
    at_position: list[Tensor],
    visible: list[Tensor],
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
) -> tuple[Tensor, list[Tensor]]:
    """Projections for all rows at once; each row writes its key and value into its own cache and attends over it."""
    config, count = model.config, x.shape[0]
    heads, kv_heads, head_dim = config.n_heads, config.n_kv_heads, config.head_dim
    q, k, v = linear(x, block.q, block.q_bias), linear(x, block.k, block.k_bias), linear(x, block.v, block.v_bias)
    if block.q_norm is not None and block.q_norm.shape[-1] != head_dim:  # olmoe: over the projection
        q, k = rms_norm(q, block.q_norm, config.norm_eps), rms_norm(k, block.k_norm, config.norm_eps)
    q = q.reshape(count, heads, head_dim)
    k, v = k.reshape(count, kv_heads, head_dim), v.reshape(count, kv_heads, head_dim)
    if block.q_norm is not None and block.q_norm.shape[-1] == head_dim:  # qwen3: per head
        q, k = rms_norm(q, block.q_norm, config.norm_eps), rms_norm(k, block.k_norm, config.norm_eps)
    q = apply_rope(q, cos, sin, config.rope_dim, config.rope_interleaved)
    k = apply_rope(k, cos, sin, config.rope_dim, config.rope_interleaved)
    outputs, writes = [], []
    for row, cache in enumerate(caches):
        new_kv = stack([k[row : row + 1].transpose(0, 1), v[row : row + 1].transpose(0, 1)], dim=0)  # (2, kv, 1, d)
        updated = at_position[row].where(new_kv, cache)  # (2, kv, context, d)
        writes.append(cache.assign(updated))
        query = q[row : row + 1].transpose(0, 1)  # (heads, 1, head_dim)
        out = query.scaled_dot_product_attention(updated[0], updated[1], attn_mask=visible[row], enable_gqa=True)
        outputs.append(out.transpose(0, 1).reshape(1, heads * head_dim))
    return linear(concat(outputs, dim=0), block.output), writes
