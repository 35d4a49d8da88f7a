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

CHUNK_SIZES = (8, 32)  # a prefill chunk is padded up to one of these: few shapes, so few kernels to compile


@dataclass
class Slot:
    """One KV cache (a list of per-block tensors) and the tokens whose keys and values it holds."""

    index: int
    caches: list[Tensor]
    cached: list[int] = field(default_factory=list)


@dataclass
class Feed:
    """Tokens to run for one sequence: they sit at positions start.. and are padded to `rows` rows."""

    caches: list[Tensor]
    start: int
    tokens: list[int]
    rows: int


class ModelRunner:
    def __init__(self, model: Transformer, slots: int, batched: bool = True) -> None:
        self.model, self.batched = model, batched
        self.max_context = model.max_context
        shape = model.caches[0].shape
        self.slots = [Slot(0, model.caches)]
        for index in range(1, slots):
            caches = [Tensor.zeros(*shape).contiguous().realize() for _ in model.blocks]
            self.slots.append(Slot(index, caches))

    def reusable_prefix(self, slot: Slot, tokens: list[int]) -> int:
        return common_prefix(tokens[:-1], slot.cached)

    def prefill(self, slot: Slot, tokens: list[int]) -> np.ndarray:
        """The logits after `tokens`, fed into `slot` from the end of its reusable prefix (the last token is always
        recomputed: its logits are needed)."""
        if not tokens or len(tokens) > self.max_context:
            raise ContextOverflowError(f"context overflow: {len(tokens)} tokens, the maximum is {self.max_context}")
        start = self.reusable_prefix(slot, tokens)
        slot.cached = slot.cached[:start]  # if a chunk fails, the cache holds only what was written before it
        logits = None
        while start < len(tokens):
            chunk = tokens[start : start + CHUNK_SIZES[-1]]
            rows = next(size for size in CHUNK_SIZES if size >= len(chunk))
            (logits,) = forward_feeds(self.model, [Feed(slot.caches, start, chunk, rows)])
            start += len(chunk)
            slot.cached = tokens[:start]
        assert logits is not None
        return logits

    def decode(self, steps: list[tuple[Slot, int]]) -> list[np.ndarray]:
        """Feed one token to each slot; the logits after it, per slot (one forward, or one per slot unbatched)."""
        for slot, _ in steps:
            if len(slot.cached) + 1 > self.max_context:
                raise ContextOverflowError(f"context overflow: the maximum context is {self.max_context}")
        feeds = [Feed(slot.caches, len(slot.cached), [token], 1) for slot, token in steps]
        groups = [feeds] if self.batched else [[feed] for feed in feeds]
        logits = [row for group in groups for row in forward_feeds(self.model, group)]
        for slot, token in steps:
            slot.cached.append(token)
        return logits


def forward_feeds(model: Transformer, feeds: list[Feed]) -> np.ndarray:
    """Run every feed's tokens in one forward: logits `(len(feeds), vocab)` after each feed's last token.

    Mirrors `Transformer.forward`, with the rows of all feeds stacked for the matmuls and attention done per feed
    against its own cache. No shape depends on a position: a feed's keys and values are placed into its cache by a
    one-hot matrix and selected in over the whole cache, and attention covers the whole cache under a mask. So
    steps with the same row counts reuse their compiled kernels and schedule; slicing the cache at the position
    would compile new kernels at every new position. The price is a read and a write of each cache per step,
    small next to reading the weights for contexts up to a few thousand tokens.
    """
    config, context = model.config, model.max_context
    keys = np.arange(context)
    tokens, positions, layouts = [], [], []
    for feed in feeds:
        count = len(feed.tokens)
        tokens += feed.tokens + [0] * (feed.rows - count)
        rows = feed.start + np.arange(feed.rows)
        positions.append(rows)
        placement = np.zeros((context, feed.rows), dtype=np.float32)
        placement[rows[:count], np.arange(count)] = 1.0
        in_feed = (keys >= feed.start) & (keys < feed.start + count)
        layouts.append(
            (
                Tensor(placement.reshape(1, 1, context, feed.rows)),
                Tensor(in_feed.reshape(1, 1, context, 1)),
                Tensor(keys[None, :] <= rows[:, None]),  # causal: row i sees keys up to its own position
            )
        )
    cos, sin = rope_tables(np.concatenate(positions), config.rope_dim, config.rope_theta)
    x = model.embed(tokens)
    for index, block in enumerate(model.blocks):
        normed = rms_norm(x, block.attn_norm, config.norm_eps)
        caches = [feed.caches[index] for feed in feeds]
        attended, writes = attention(model, block, feeds, caches, layouts, normed, cos, sin)
        h = x + attended
        x = h + model._feed_forward(block, rms_norm(h, block.ffn_norm, config.norm_eps))
        x = x.contiguous().realize(*writes)
    lasts, offset = [], 0
    for feed in feeds:  # each feed's last real row
        lasts.append(x[offset + len(feed.tokens) - 1 : offset + len(feed.tokens)])
        offset += feed.rows
    last = concat(lasts, dim=0)
    out = rms_norm(last, model.output_norm, config.norm_eps)
    return linear(out, model.output).reshape(len(feeds), -1).realize().numpy()


def attention(
    model: Transformer,
    block: Block,
    feeds: list[Feed],
    caches: list[Tensor],
    layouts: list[tuple[Tensor, Tensor, Tensor]],
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
) -> tuple[Tensor, list[Tensor]]:
    """Projections for all rows at once; each feed writes its keys and values into its cache and attends over it."""
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
    outputs, writes, first = [], [], 0
    for feed, cache, (placement, in_feed, visible) in zip(feeds, caches, layouts, strict=True):
        rows = slice(first, first + feed.rows)
        first += feed.rows
        new_kv = stack([k[rows].transpose(0, 1), v[rows].transpose(0, 1)], dim=0)  # (2, kv_heads, rows, head_dim)
        placed = new_kv if feed.rows == 1 else placement.matmul(new_kv)  # one row broadcasts: no matmul needed
        updated = in_feed.where(placed, cache)  # (2, kv_heads, context, head_dim)
        writes.append(cache.assign(updated))
        query = q[rows].transpose(0, 1)  # (heads, rows, head_dim)
        out = query.scaled_dot_product_attention(updated[0], updated[1], attn_mask=visible, enable_gqa=True)
        outputs.append(out.transpose(0, 1).reshape(feed.rows, heads * head_dim))
    return linear(concat(outputs, dim=0), block.output), writes
