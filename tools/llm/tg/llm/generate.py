"""Text generation over a Transformer: prefix reuse across calls, chunked prefill, sampling, stop strings."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tg.llm.model import ContextOverflowError, Transformer
from tg.llm.sampling import Sampler, SamplingOptions


def common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


@dataclass
class Generator:
    """Runs one conversation: `cached` holds the tokens whose keys and values are in the model's KV cache."""

    model: Transformer
    chunk_size: int = 256  # the largest of BLOCK_ROWS: a chunk decodes each weight into float once, so longer is faster
    cached: list[int] = field(default_factory=list)
    forward_calls: list[tuple[int, int]] = field(default_factory=list)  # (token count, start_pos), for tests

    def prefill(self, tokens: list[int]):
        """Feed `tokens`, reusing the cached prefix; returns the logits after the last one.

        The last token is always recomputed (its logits are needed), so the reusable prefix is that of
        `tokens[:-1]`. Tokens are fed in chunks of `chunk_size` to bound the size of one step's graph.
        """
        if not tokens:
            raise ValueError("nothing to generate from: the prompt has no tokens")
        if len(tokens) > self.model.max_context:
            raise ContextOverflowError(
                f"context overflow: the prompt has {len(tokens)} tokens, the maximum context is "
                f"{self.model.max_context}"
            )
        start = common_prefix(tokens[:-1], self.cached)
        logits = None
        for chunk_start in range(start, len(tokens), self.chunk_size):
            chunk = tokens[chunk_start : chunk_start + self.chunk_size]
            logits = self._forward(chunk, chunk_start)
        self.model.drop_chunk_captures()
        self.cached = list(tokens)
        return logits

    def _forward(self, tokens: list[int], start_pos: int):
        self.forward_calls.append((len(tokens), start_pos))
        return self.model.forward(tokens, start_pos).numpy()

    def generate(
        self, tokens: list[int], max_tokens: int, options: SamplingOptions | None = None, is_end=lambda t: False
    ) -> Iterator[int]:
        """Yield up to `max_tokens` new token ids after `tokens` (stops after yielding an end token)."""
        sampler = Sampler(options or SamplingOptions())
        logits = self.prefill(tokens)
        for _ in range(max_tokens):
            token = sampler(logits)
            yield token
            if is_end(token) or len(self.cached) >= self.model.max_context:
                return
            logits = self._forward([token], len(self.cached))
            self.cached.append(token)


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """(text up to the first stop string, whether one was found)."""
    positions = [text.find(stop) for stop in stops if stop and stop in text]
    if not positions:
        return text, False
    return text[: min(positions)], True
