"""The adapter between the server and tg-llm's Transformer: per-slot KV caches, prefill, and batched decode.

Everything the server needs from the model goes through `ModelRunner`, so a change to the model or the Generator
touches this file only. Each slot (one conversation in flight) owns its own KV cache tensors and remembers which
tokens they hold, so a follow-up turn of the same conversation reuses its prefix and another conversation never
sees it. A decode step for several slots runs as one forward: the weight matmuls see all the slots' tokens as one
batch (so the weights are read once per step) and only attention is done per slot, each against its own cache.
Decode steps and prefill chunks (8 padded rows) are TinyJit captures, one per row counts and KV window, replayed for
any slots (the caches are inputs), so a step costs no per-kernel Python: building and scheduling the graph cost more
than the kernels on small models.

A capture takes seconds (its kernels are compiled), and whoever waits for one stalls every stream. So the server's
runner (`defer_captures`) runs a step whose own capture is missing through a capture that covers it: one of a wider
KV window (the extra cached positions are masked) and as many or more rows per feed (a feed padded to more rows:
the padding rows come after its real ones, which never see them), the narrowest such; a batch of several slots that
nothing covers runs slot by slot. Its own capture is queued (`wanted`), as is the next window of a stream nearing
it, and the scheduler captures what is queued when no request is running (`capture_wanted`). Not on a thread beside
the scheduler: the device's timeline (tg.hcq) takes submissions from one thread at a time. A step nothing covers is
the first of its kind (the first prompt chunk, echo's first, an embedding's first: a decode step is covered by any
prompt chunk's capture): whatever path it took, its kernels would have to be compiled then (a plain run compiles
the same kernels as a capture), so it is captured for the widest window, which covers every later step of its kind.
The warm-up makes those and the widest window of every batch size; without it (`--no-warmup`) the first request
and the first echo and embedding request wait for one capture each, and the scheduler holds an echo or embedding
prompt that would wait for one until no stream is decoding (`covers`).
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tg.llm.config import DEFAULT_KV_CACHE
from tg.llm.generate import common_prefix
from tg.llm.kv_quant import stored_rows
from tg.llm.lanes import RMSNorm
from tg.llm.model import (
    KEY_TILE,
    Block,
    ContextOverflowError,
    Transformer,
    attend,
    cache_keys,
    key_tiles,
    kv_cache_dtype,
    kv_window,
    post_norm,
    write_cache_rows,
)
from tg.llm.ops import concat, stack
from tg.llm.weights import SCRATCH_MATMUL_ROWS, linear
from tg.tensor import Tensor
from tg.tensor.jit import TinyJit
from tg.tensor.symbolic import concrete_size

# a prefill chunk is padded to this many rows: below SCRATCH_MATMUL_ROWS, so the weights stay encoded and a capture
# holds no float copy of them (on SmolLM2-135M, 8-row replays prefill ~1.7x faster per token than plain 32-row chunks)
PREFILL_ROWS = 8
assert PREFILL_ROWS < SCRATCH_MATMUL_ROWS
# captures kept (least recently used dropped first): each holds its own intermediate buffers, small for a few rows;
# a warm-up raises the limit to keep all it captured
MAX_CAPTURES = 48
# a stream this many positions before its next KV window gets that window's step queued for capture
CAPTURE_LOOKAHEAD = 64
# what a forward returns (see `forward_feeds`): the logits after each feed's last token, after every token (the
# prompt's logprobs that `echo` shows), or the sum of the final hidden states (embeddings)
LAST, ALL, POOLED = "last", "all", "pooled"
# a step's capture: (rows of each feed, KV window, output)
StepKey = tuple[tuple[int, ...], int, str]
log = logging.getLogger("tg.llm.serve")


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
    def __init__(self, model: Transformer, slots: int, batched: bool = True, defer_captures: bool = False) -> None:
        """`defer_captures` (the server's): a step covered by a wider window's capture runs through it and its own
        capture is queued for `capture_wanted`; without it every missing step is captured at its first call."""
        self.model, self.batched = model, batched
        self.max_context = model.max_context
        self.widest = kv_window(self.max_context - 1, self.max_context)  # the KV window of the last position
        shape, dtype = model.caches[0].shape, model.caches[0].dtype
        # the captured steps (see `_run`), least recently used first; the warm-up's are pinned (never dropped)
        self.steps: OrderedDict[StepKey, TinyJit] = OrderedDict()
        self.pinned: set[StepKey] = set()
        self.max_captures = MAX_CAPTURES
        self.inline_captures = 0  # captures a caller waited for (none once warmed up): for tests and /health
        self.covered_steps = 0  # steps run through another step's capture while their own was missing
        self.split_steps = 0  # batches that nothing covered, run slot by slot
        self.slots = [Slot(0, model.caches)]
        for index in range(1, slots):
            caches = [Tensor.zeros(*shape, dtype=dtype).contiguous().realize() for _ in model.blocks]
            self.slots.append(Slot(index, caches))
        self.defer_captures = defer_captures
        self.wanted: OrderedDict[StepKey, None] = OrderedDict()  # captures queued, oldest first
        self.deferred_made: list[StepKey] = []  # what capture_wanted captured, in order (for tests and the bench)
        self.failed: dict[StepKey, str] = {}  # not retried: such a step stays on the wider window's capture
        self.before_capture: Callable[[StepKey], None] | None = None  # tests: called before each capture

    def reusable_prefix(self, slot: Slot, tokens: list[int]) -> int:
        return common_prefix(tokens[:-1], slot.cached)

    def prefill(self, slot: Slot, tokens: list[int]) -> np.ndarray:
        """The logits after `tokens`, fed into `slot` from the end of its reusable prefix (the last token is always
        recomputed: its logits are needed)."""
        while True:
            logits = self.prefill_step(slot, tokens, self.max_context)
            if logits is not None:
                return logits

    def prefill_step(self, slot: Slot, tokens: list[int], limit: int, output: str = LAST) -> np.ndarray | None:
        """Feed at most `limit` more of `tokens` into `slot` (from the end of its reusable prefix: after a step
        `slot.cached` is what was fed, so the next call goes on from there). With `output` LAST: the logits after
        the last token once it is in, else None. ALL: the logits after every token fed `(fed, vocab)`; POOLED: the
        sum of the final (normalized) hidden states of the tokens fed `(dim,)` (both from the first token on: the
        caller empties `slot.cached` first)."""
        if not tokens or len(tokens) > self.max_context:
            raise ContextOverflowError(f"context overflow: {len(tokens)} tokens, the maximum is {self.max_context}")
        start = self.reusable_prefix(slot, tokens) if output == LAST else len(slot.cached)
        slot.cached = slot.cached[:start]  # if a chunk fails, the cache holds only what was written before it
        stop = min(len(tokens), start + max(limit, 1))
        rows = []
        while start < stop:
            chunk = tokens[start : min(stop, start + PREFILL_ROWS)]
            (result,) = self._run([Feed(slot.caches, start, chunk, PREFILL_ROWS)], output)
            rows.append(result[: len(chunk)] if output == ALL else result)
            start += len(chunk)
            slot.cached = tokens[:start]
        if output == ALL:
            return np.concatenate(rows)
        if output == POOLED:
            return np.sum(rows, axis=0)
        return rows[-1] if start == len(tokens) else None

    def warm_up_plan(self, context: int | None = None) -> list[tuple[int, list[int], str]]:
        """What `warm_up` runs, as (start position, rows per feed, output): per KV window of the first `context`
        positions (all: None), a prefill chunk then a decode step of 1, 2, .. every slot (one slot each
        unbatched); then the same for the widest window if `context` stops short of it, and a prefill chunk of
        every other output (echo's ALL, embeddings' POOLED) in the widest window. Every step a request can need
        is then captured or covered by a capture of a wider window (see `_run`)."""
        limit = self.max_context if context is None else min(context, self.max_context)
        windows: dict[int, list[int]] = {}
        for position in range(limit):
            windows.setdefault(kv_window(position, self.max_context), []).append(position)
        widest = [p for p in range(self.max_context - 1, -1, -1) if kv_window(p, self.max_context) == self.widest]
        windows.setdefault(self.widest, sorted(widest[: 2 * KEY_TILE]))  # (a few positions are enough to pick one)
        plan = []
        for positions in windows.values():
            plan.append((self._prefill_start(positions), [PREFILL_ROWS], LAST))
            if positions[-1] > 0:  # a decode step feeds a token after the prompt: never at position 0
                counts = range(1, len(self.slots) + 1) if self.batched else [1]
                plan += [(positions[-1], [1] * count, LAST) for count in counts]
        plan += [(self._prefill_start(windows[self.widest]), [PREFILL_ROWS], output) for output in (ALL, POOLED)]
        return plan

    def _prefill_start(self, positions: list[int]) -> int:
        """A start for a prefill chunk in the window of `positions`: one whose padded rows fit in the context."""
        fits = [p for p in positions if p + PREFILL_ROWS <= self.max_context]
        return max(fits) if fits else min(positions)

    def warm_up(self, report: Callable[[int, int], None], context: int | None = None) -> None:
        """Capture every step `warm_up_plan` lists (each run once on the idle slots' caches, with token 0) so that
        requests replay them instead of waiting for a capture; `report(done, total)` after each. Call it before
        any request: the slots are left empty. The captures are pinned: never dropped to make room."""
        plan = self.warm_up_plan(context)
        # pinned, the warm-up's captures leave MAX_CAPTURES of room for the windows captured later: fewer, and a
        # long prompt's prefill, which visits every window in turn, would drop each one before its next use
        self.max_captures = len(plan) + MAX_CAPTURES
        report(0, len(plan))
        for done, (start, rows, output) in enumerate(plan, 1):
            feeds = [
                Feed(slot.caches, start, [0] * min(count, self.max_context - start), count)
                for slot, count in zip(self.slots, rows, strict=False)
            ]
            key = (tuple(rows), cache_window(self.model, feeds), output)
            self.pinned.add(key)
            if key not in self.steps:  # its own capture, never a wider one's (and nothing queued)
                self._keep(key, self.new_step(key))
            forward_feeds(self.model, feeds, self.steps[key], output)
            report(done, len(plan))
        for slot in self.slots:
            slot.cached = []

    def decode(self, steps: list[tuple[Slot, int]]) -> list[np.ndarray]:
        """Feed one token to each slot; the logits after it, per slot (one forward, or one per slot unbatched)."""
        for slot, _ in steps:
            if len(slot.cached) + 1 > self.max_context:
                raise ContextOverflowError(f"context overflow: the maximum context is {self.max_context}")
        groups = [steps] if self.batched else [[step] for step in steps]
        logits = []
        for group in groups:
            logits += list(self._run([Feed(slot.caches, len(slot.cached), [token], 1) for slot, token in group]))
        for slot, token in steps:
            slot.cached.append(token)
        return logits

    def _run(self, feeds: list[Feed], output: str = LAST) -> np.ndarray:
        """`forward_feeds` of the feeds through a capture (TinyJit) of their row counts and KV window. The caches
        are inputs like the masks, last-row selectors, RoPE rows and token rows (a replay swaps in the buffers of
        the slots it runs), and every position in a KV window runs the same kernels, so any slots share the capture
        of their row counts and window. Without its own capture, a step runs as the module docstring says (covered,
        slot by slot, or through its kind's widest capture, made here); only with `defer_captures` off is its own
        capture made at its first call."""
        key = step_key(self.model, feeds, output)
        self._look_ahead(feeds, key)
        if key in self.steps:
            self.steps.move_to_end(key)
            return forward_feeds(self.model, feeds, self.steps[key], output, key[1])
        if not self.defer_captures:
            self.inline_captures += 1
            step = self.new_step(key)
            self._keep(key, step)
            return forward_feeds(self.model, feeds, step, output, key[1])
        self._want(key)
        cover = self._cover(key)
        if cover is None and len(feeds) > 1:
            self.split_steps += 1
            return np.concatenate([self._run([feed], output) for feed in feeds])
        if cover is None:  # the first step of its kind: its kernels are compiled now whatever runs it
            cover = (key[0], self.widest, output)
            self.inline_captures += 1
            self.pinned.add(cover)  # it is what covers the later steps of its kind
            self.capture(cover)
        self.covered_steps += 1
        self.steps.move_to_end(cover)
        padded = [Feed(feed.caches, feed.start, feed.tokens, rows) for feed, rows in zip(feeds, cover[0], strict=True)]
        return forward_feeds(self.model, padded, self.steps[cover], output, cover[1])

    def _cover(self, key: StepKey) -> StepKey | None:
        """The narrowest captured step that can run the step `key`: the same output and number of feeds, a KV
        window at least as wide and as many or more rows per feed (None if there is none)."""
        rows, window, output = key
        covering = [
            other
            for other in self.steps
            if other[2] == output
            and len(other[0]) == len(rows)
            and other[1] >= window
            and all(mine <= theirs for mine, theirs in zip(rows, other[0], strict=True))
        ]
        return min(covering, key=lambda other: (other[1], sum(other[0])), default=None)

    def covers(self, output: str) -> bool:
        """Whether every prompt chunk of `output` runs without waiting for a capture (see the module docstring)."""
        return not self.defer_captures or self._cover(((PREFILL_ROWS,), self.widest, output)) is not None

    def _look_ahead(self, feeds: list[Feed], key: StepKey) -> None:
        """Queue the capture of the window the feeds reach within CAPTURE_LOOKAHEAD positions, if not made."""
        if not self.defer_captures:
            return
        last = min(max(feed.start + len(feed.tokens) for feed in feeds) + CAPTURE_LOOKAHEAD, self.max_context - 1)
        upcoming = (key[0], kv_window(last, self.max_context), key[2])
        if upcoming[1] != key[1]:
            self._want(upcoming)

    def _want(self, key: StepKey) -> None:
        if key not in self.steps and key not in self.failed:
            self.wanted[key] = None

    def capture_wanted(self) -> bool:
        """Capture the oldest queued step (the scheduler calls it when no request runs: it takes seconds); False
        when none was queued. A capture that fails is logged and not retried."""
        while self.wanted:
            key, _ = self.wanted.popitem(last=False)
            if key in self.steps:
                continue
            try:
                self.capture(key)
                self.deferred_made.append(key)
            except Exception as error:  # noqa: BLE001  (the step stays on the wider window's capture)
                log.exception("capturing a queued step failed: %s", key)
                self.failed[key] = f"{type(error).__name__}: {error}"
            return True
        return False

    def new_step(self, key: StepKey) -> TinyJit:
        """A TinyJit of the step `key`: the step does the same work every call (weights and caches are realized),
        so its first call is captured."""
        rows, window, output = key
        layout = FeedLayout(rows, window, output, self.model.kv_cache)
        store = self.model.capture_store  # a capture a process stored before (tg.llm.capture_store)
        step = functools.partial(feeds_step, self.model, layout)
        stored = None if store is None else store.load(stored_step_name(layout), self.model, step)
        if stored is not None:
            return stored
        return TinyJit(step, plain_calls=0)

    def _keep(self, key: StepKey, step: TinyJit) -> None:
        """Add a step to the captures, dropping the least recently used unpinned one past `max_captures`."""
        self.steps[key] = step
        while len(self.steps) > self.max_captures:
            unpinned = next((other for other in self.steps if other not in self.pinned and other != key), None)
            if unpinned is None:
                break
            del self.steps[unpinned]

    def capture(self, key: StepKey) -> None:
        """Capture the step `key` with placeholder inputs (token 0 at a position in its window, on the slots'
        caches, which a step only reads: nothing is stored) and add it to the captures."""
        if self.before_capture is not None:
            self.before_capture(key)
        rows, window, output = key
        start = min(window, self.max_context - 1)  # a position whose window is `window` (kv_window(w) == w)
        feeds = [
            Feed(self.slots[index % len(self.slots)].caches, start, [0] * min(count, self.max_context - start), count)
            for index, count in enumerate(rows)
        ]
        step = self.new_step(key)
        forward_feeds(self.model, feeds, step, output, window, store_rows=False)
        self._keep(key, step)


def forward_feeds(
    model: Transformer,
    feeds: list[Feed],
    step: TinyJit,
    output: str = LAST,
    window: int | None = None,
    store_rows: bool = True,
) -> np.ndarray:
    """Run every feed's tokens in one forward: logits `(len(feeds), vocab)` after each feed's last token (`output`
    ALL: `(len(feeds), rows, vocab)` after every row; POOLED: `(len(feeds), dim)`, the sum of each feed's real
    rows' final normalized hidden states).

    The inputs (per feed a mask, a last-row selector and its caches; then the RoPE and token rows) are built here
    as Tensors and the forward itself is `feeds_step`, a function of those Tensors only, so `step` (see
    `ModelRunner._run`) replays a captured launch graph instead of building and scheduling every kernel again. No
    shape depends on a position: attention covers a window of the cache (`cache_window`, at or past every feed's
    start) under a mask (the cached positions before the feed's start, then causal among the new rows), so one
    capture serves every position in the window. After the forward, each feed's real (unpadded) keys and values
    are copied into its cache (unless `store_rows` is False: a placeholder run that captures a step).

    `window` is the KV window `step` was captured for: the feeds' own (`cache_window`, None) or a wider one.
    """
    context, config = model.max_context, model.config
    window = cache_window(model, feeds) if window is None else window
    tokens, positions, masks, local_masks, lasts = [], [], [], [], []
    for feed in feeds:
        tokens += feed.tokens + [0] * (feed.rows - len(feed.tokens))
        # padding rows may run past the context; their RoPE rows are never used by a real row, any will do
        positions.append(np.minimum(feed.start + np.arange(feed.rows), context - 1))
        cached_visible = np.broadcast_to(np.arange(window)[None, :] < feed.start, (feed.rows, window))
        # the feed's own rows fill key tiles of their own after the window's, padded with masked keys
        own_visible = np.tri(feed.rows, key_tiles(feed.rows) * KEY_TILE, dtype=bool)
        mask = np.concatenate([cached_visible, own_visible], axis=1)
        masks.append(Tensor(mask.reshape(feed.rows, -1, KEY_TILE)))
        if config.local_blocks:  # the sliding-window blocks see only the keys of the last sliding_window positions
            key_positions = np.concatenate([np.arange(window), feed.start + np.arange(own_visible.shape[1])])
            recent = key_positions[None, :] > (feed.start + np.arange(feed.rows))[:, None] - config.sliding_window
            local_masks.append(Tensor((mask & recent).reshape(feed.rows, -1, KEY_TILE)))
        selected = (
            np.arange(feed.rows) < len(feed.tokens)
            if output == POOLED
            else np.arange(feed.rows) == len(feed.tokens) - 1
        )
        lasts.append(Tensor(selected[:, None]))
    rope_rows = np.concatenate(positions)
    ropes = [Tensor(model.rope_cos[rope_rows, None, :]), Tensor(model.rope_sin[rope_rows, None, :])]
    if config.local_blocks:
        ropes += [Tensor(model.local_rope_cos[rope_rows, None, :]), Tensor(model.local_rope_sin[rope_rows, None, :])]
    caches = [cache for feed in feeds for cache in feed.caches]
    capturing = not step.captured
    logits, *new_kvs = step(*ropes, *masks, *local_masks, *lasts, *caches, *model.embedding_table.inputs(tokens))
    if capturing and step.captured and model.capture_store is not None and isinstance(step.fn, functools.partial):
        model.capture_store.save(stored_step_name(step.fn.args[1]), model, step)  # (new_step's partial)
    result = logits.numpy()  # a copy: a replay overwrites the captured output buffers
    if store_rows:
        store(feeds, new_kvs)
    return result


def step_key(model: Transformer, feeds: list[Feed], output: str) -> StepKey:
    return tuple(feed.rows for feed in feeds), cache_window(model, feeds), output


def stored_step_name(layout: FeedLayout) -> str:
    """The name of a server step's capture in the capture store."""
    return f"serve {layout!r}"


def cache_window(model: Transformer, feeds: list[Feed]) -> int:
    """How many cached positions the feeds' attention reads: the KV window (see `kv_window`) of the latest start,
    so a short conversation does not read the whole cache and a window's steps share one capture."""
    return kv_window(max(feed.start for feed in feeds), model.max_context)


@dataclass(frozen=True)
class FeedLayout:
    """What `feeds_step` bakes in (a TinyJit capture is made for one layout): each feed's padded row count, the
    cached positions attention reads, what comes out (LAST, ALL or POOLED, see `forward_feeds`) and the KV cache
    type the new keys and values are rounded to (the model's, see tg.llm.config.KV_CACHE_TYPES)."""

    rows: tuple[int, ...]
    window: int
    output: str = LAST
    kv_cache: str = DEFAULT_KV_CACHE


def feeds_step(model: Transformer, layout: FeedLayout, *inputs: Tensor) -> list[Tensor]:
    """[logits `(feeds, vocab)`, then each block's new keys and values `(rows, 2, kv_heads, head_dim)`]: the
    forward of `forward_feeds` as a function of Tensors, for TinyJit. `inputs` are the RoPE rows cos, sin `(rows,
    1, rope_dim / 2)` (then the sliding-window blocks' own, where the model has such blocks), per feed its mask
    `(rows, tiles, KEY_TILE)` over the window's key tiles and its own (see `attention`) (then per feed its
    sliding-window mask, where the model has such blocks), then per feed its last-row selector `(rows, 1)` (True at
    its last real token), then per feed its per-block caches, then the token rows of all feeds.

    Mirrors `Transformer._step`, with the rows of all feeds stacked for the projections and feed-forward, and
    attention done per feed over its own cache followed by its new keys and values."""
    config = model.config
    feeds, blocks = len(layout.rows), len(model.blocks)
    kinds = 2 if config.local_blocks else 1  # [global] or [global, sliding-window] RoPE rows and masks
    ropes = [inputs[2 * kind : 2 * kind + 2] for kind in range(kinds)]
    first_mask = 2 * kinds
    masks = [list(inputs[first_mask + kind * feeds : first_mask + (kind + 1) * feeds]) for kind in range(kinds)]
    first_last = first_mask + kinds * feeds
    lasts, first_cache = inputs[first_last : first_last + feeds], first_last + feeds
    feed_caches = [inputs[first_cache + f * blocks : first_cache + (f + 1) * blocks] for f in range(feeds)]
    x = model.embedded(list(inputs[first_cache + feeds * blocks :]))
    new_kvs = []
    for index, block in enumerate(model.blocks):
        attn_norm = RMSNorm(block.attn_norm, config.norm_eps)
        caches = [own_caches[index] for own_caches in feed_caches]
        cos, sin = ropes[block.local]
        attended, new_kv = attention(model, block, layout, caches, masks[block.local], x, attn_norm, cos, sin)
        h = x + post_norm(attended, block.post_attention_norm, config.norm_eps)
        ffn = model.feed_forward(block, h, RMSNorm(block.ffn_norm, config.norm_eps))
        x = h + post_norm(ffn, block.post_ffw_norm, config.norm_eps)
        x = x.contiguous()  # one realize per block, as in Transformer._step: small graphs, one shared schedule
        Tensor.realize(x, new_kv)
        new_kvs.append(new_kv)
    output_norm = RMSNorm(model.output_norm, config.norm_eps)
    if layout.output == ALL:
        logits = model.logits(x)
        return [logits.reshape(feeds, layout.rows[0], -1).realize(), *new_kvs]
    if layout.output == POOLED:  # the sum of each feed's real rows, normalized one by one (padding rows: exact 0)
        pooled = [
            last.where(output_norm(x[offset : offset + count]), 0.0).sum(0, keepdim=True)
            for count, last, offset in zip(layout.rows, lasts, row_offsets(layout.rows), strict=True)
        ]
        return [concat(pooled, dim=0).realize(), *new_kvs]
    rows = []
    for count, last, offset in zip(layout.rows, lasts, row_offsets(layout.rows), strict=True):
        rows.append(last.where(x[offset : offset + count], 0.0).sum(0, keepdim=True))  # each feed's last real row
    logits = model.logits(concat(rows, dim=0))
    return [logits.reshape(feeds, -1).realize(), *new_kvs]


def row_offsets(rows: tuple[int, ...]) -> list[int]:
    """Where each feed's rows start among all rows."""
    return [sum(rows[:index]) for index in range(len(rows))]


def attention(
    model: Transformer,
    block: Block,
    layout: FeedLayout,
    caches: list[Tensor],
    masks: list[Tensor],
    x: Tensor,
    norm: RMSNorm,
    cos: Tensor,
    sin: Tensor,
) -> tuple[Tensor, Tensor]:
    """(attention output, the new keys and values `(rows, 2, kv_heads, head_dim)` of all feeds, in the KV cache's
    dtype): projections for all rows at once, then each feed's queries attend over the first `layout.window` rows
    of its cache followed by its own new keys and values (those in key tiles of their own, see KEY_TILE), as the
    cache will hold them (rounded to its dtype), so a step sees what a later step reads back."""
    q, k, v = model.rotated_qkv(block, x, cos, sin, norm)
    # a buffer, as in Transformer._attention
    new_kv = stored_rows(stack([k, v], dim=1), kv_cache_dtype(layout.kv_cache)).contiguous()
    window, outputs, first = layout.window, [], 0
    for count, cache, mask in zip(layout.rows, caches, masks, strict=True):
        rows = slice(first, first + count)
        first += count
        own_keys, own_values = new_kv[rows, 0], new_kv[rows, 1]  # (count, kv_heads, head_dim)
        padding = key_tiles(count) * KEY_TILE - count
        own_tiles = own_keys.pad(((0, padding), None, None)).reshape(-1, KEY_TILE, *own_keys.shape[1:])
        keys, values = own_tiles.permute(2, 0, 3, 1), own_values.transpose(0, 1)
        if window:  # a prefill from position 0 has no cached window
            keys = concat([cache_keys(cache)[:, : window // KEY_TILE], keys], dim=1)
            values = concat([cache[1, :, :window], values], dim=1)
        config = model.config
        outputs.append(attend(q[rows], keys, values, mask, config.attention_factor(), config.attention_softcap))
    return linear(concat(outputs, dim=0), block.output), new_kv


def store(feeds: list[Feed], new_kvs: list[Tensor]) -> None:
    """Copy each feed's real rows of every block's new keys and values into its cache at its start position (the
    padding rows are dropped)."""
    for index, new_kv in enumerate(new_kvs):
        data = new_kv.data().cast("B")
        row_bytes = data.nbytes // concrete_size(new_kv.shape[0], "storing new keys and values")
        first = 0
        for feed in feeds:
            rows = data[first * row_bytes : (first + len(feed.tokens)) * row_bytes]
            write_cache_rows(feed.caches[index], rows, feed.start)
            first += feed.rows
