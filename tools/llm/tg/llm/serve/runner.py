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
from tg.llm.model import (
    Block,
    ContextOverflowError,
    Transformer,
    attend,
    release_cached_memory,
    rms_norm,
    write_cache_rows,
)
from tg.llm.ops import concat, stack
from tg.llm.weights import SCRATCH_MATMUL_ROWS, linear
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

    Mirrors `Transformer._step`, with the rows of all feeds stacked for the projections and feed-forward, and
    attention done per feed over its own cache followed by its new keys and values (`attend` under a mask: the
    cached positions before the feed's start, then causal among the new rows). No shape depends on a position:
    attention covers the whole cache, so steps with the same row counts reuse their compiled kernels and schedule
    (slicing the cache at the position would compile new kernels at every position); the price is reading the
    whole cache, small next to reading the weights for contexts up to a few thousand tokens. After the forward,
    each feed's real (unpadded) keys and values are copied into its cache.
    """
    config, context = model.config, model.max_context
    tokens, positions, masks = [], [], []
    for feed in feeds:
        tokens += feed.tokens + [0] * (feed.rows - len(feed.tokens))
        # padding rows may run past the context; their RoPE rows are never used by a real row, any will do
        positions.append(np.minimum(feed.start + np.arange(feed.rows), context - 1))
        cached_visible = np.broadcast_to(np.arange(context)[None, :] < feed.start, (feed.rows, context))
        masks.append(Tensor(np.concatenate([cached_visible, np.tri(feed.rows, dtype=bool)], axis=1)))
    rope_rows = np.concatenate(positions)
    cos, sin = Tensor(model.rope_cos[rope_rows, None, :]), Tensor(model.rope_sin[rope_rows, None, :])
    x = model.embedding_table.decode(model.embedding_table.inputs(tokens))
    new_kvs = []
    for index, block in enumerate(model.blocks):
        normed = rms_norm(x, block.attn_norm, config.norm_eps)
        caches = [feed.caches[index] for feed in feeds]
        attended, new_kv = attention(model, block, feeds, caches, masks, normed, cos, sin)
        h = x + attended
        x = h + model._feed_forward(block, rms_norm(h, block.ffn_norm, config.norm_eps))
        x = x.contiguous()  # one realize per block, as in Transformer._step: small graphs, one shared schedule
        Tensor.realize(x, new_kv)
        new_kvs.append(new_kv)
    lasts, offset = [], 0
    for feed in feeds:  # each feed's last real row
        lasts.append(x[offset + len(feed.tokens) - 1 : offset + len(feed.tokens)])
        offset += feed.rows
    out = rms_norm(concat(lasts, dim=0), model.output_norm, config.norm_eps)
    logits = linear(out, model.output).reshape(len(feeds), -1).realize().numpy()
    store(feeds, new_kvs)
    if offset >= SCRATCH_MATMUL_ROWS:  # a prefill chunk's float scratch weights (see Transformer.forward)
        release_cached_memory(model.caches[0].device)
    return logits


def attention(
    model: Transformer,
    block: Block,
    feeds: list[Feed],
    caches: list[Tensor],
    masks: list[Tensor],
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
) -> tuple[Tensor, Tensor]:
    """(attention output, the new keys and values `(rows, 2, kv_heads, head_dim)` of all feeds): projections for
    all rows at once, then each feed's queries attend over its cache and its own new keys and values."""
    q, k, v = model.rotated_qkv(block, x, cos, sin)
    new_kv = stack([k, v], dim=1).contiguous()  # a buffer, as in Transformer._attention
    outputs, first = [], 0
    for feed, cache, mask in zip(feeds, caches, masks, strict=True):
        rows = slice(first, first + feed.rows)
        first += feed.rows
        keys_values = concat([cache, new_kv[rows]], dim=0)  # (context + rows, 2, kv_heads, head_dim)
        outputs.append(attend(q[rows], keys_values, mask, model.config.n_kv_heads))
    return linear(concat(outputs, dim=0), block.output), new_kv


def store(feeds: list[Feed], new_kvs: list[Tensor]) -> None:
    """Copy each feed's real rows of every block's new keys and values into its cache at its start position (the
    padding rows are dropped)."""
    for index, new_kv in enumerate(new_kvs):
        data = new_kv.data().cast("B")
        row_bytes = data.nbytes // new_kv.shape[0]
        first = 0
        for feed in feeds:
            rows = data[first * row_bytes : (first + len(feed.tokens)) * row_bytes]
            write_cache_rows(feed.caches[index], rows, feed.start)
            first += feed.rows
