"""SentencePiece-style tokenization (llama.cpp's `llama` tokenizer model): Llama 1/2, Mistral, TinyLlama, Gemma.

The vocabulary carries a score per piece instead of a merge list. Spaces become U+2581 ("▁"), optionally with one
put in front of the text (`tokenizer.ggml.add_space_prefix`); the text starts as single characters and the
adjacent pair whose joined piece has the highest score is merged, again and again (ties: the leftmost pair), until
no joined pair is in the vocabulary. A piece left over that is not in the vocabulary falls back to its UTF-8
bytes, the `<0xXX>` tokens. The merging keeps a heap of candidate pairs over a linked list of symbols, so a word
of n characters costs O(n log n), not O(n^2) (tg.llm.tokenizer.merge_pairs, shared with the byte-level BPE).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tg.llm.tokenizer import CONTROL, TokenBudgetError, Tokenizer, merge_pairs, vocabulary_settings

SPACE = "\u2581"
UNKNOWN, BYTE = 2, 6  # tokenizer.ggml.token_type values


class SentencePieceTokenizer(Tokenizer):
    def __init__(
        self,
        tokens: list[str],
        scores: list[float],
        token_types: list[int] | None = None,
        bos_id: int | None = None,
        eos_id: int = 0,
        eot_id: int | None = None,
        unknown_id: int | None = None,
        add_bos: bool = True,
        add_space_prefix: bool = True,
        extra_end_ids: tuple[int, ...] = (),
    ) -> None:
        types = self.token_types = token_types or [1] * len(tokens)  # token_bytes reads them during __init__
        super().__init__(tokens, [], token_types, "default", bos_id, eos_id, eot_id, add_bos, extra_end_ids)
        # pieces that merging may produce: not control tokens (those are only ever written whole) nor byte tokens
        self.piece_scores = {
            token: float(score)
            for token, score, kind in zip(tokens, scores, types, strict=True)
            if kind not in (CONTROL, BYTE)
        }
        self.byte_ids = {int(token[3:5], 16): index for index, token in enumerate(tokens) if types[index] == BYTE}
        self.unknown_id, self.add_space_prefix = unknown_id, add_space_prefix

    @classmethod
    def from_gguf_metadata(cls, metadata: dict[str, Any]) -> SentencePieceTokenizer:
        settings = vocabulary_settings(metadata)
        return cls(
            scores=metadata.get("tokenizer.ggml.scores") or [0.0] * len(settings["tokens"]),
            unknown_id=metadata.get("tokenizer.ggml.unknown_token_id"),
            add_space_prefix=bool(metadata.get("tokenizer.ggml.add_space_prefix", True)),
            **settings,
        )

    # ----------------------------------------------------------------------------------------------- encode

    def encode(
        self, text: str, allow_special: bool = True, plain_marker: str = "", max_tokens: int | None = None
    ) -> list[int]:
        """Token ids of `text` (the arguments as in Tokenizer.encode). The space prefix goes before the start of the
        text only, as SentencePiece puts it."""
        if self.add_space_prefix and text:
            text = " " + text
        return super().encode(text, allow_special, plain_marker, max_tokens)

    def _encode_ordinary(
        self, text: str, plain_marker: str = "", max_tokens: int | None = None, before: int = 0
    ) -> list[int]:
        if plain_marker:
            text = text.replace(plain_marker, "")
        if not text:
            return []
        ids: list[int] = []
        for piece in self._merged_pieces(text.replace(" ", SPACE)):
            ids += self._piece_ids(piece)
            if max_tokens is not None and before + len(ids) > max_tokens:
                raise TokenBudgetError(max_tokens)
        return ids

    def _merged_pieces(self, text: str) -> list[str]:
        """The highest-scoring joinable pair first (merge_pairs takes the lowest priority, so the score negated)."""

        def priority(left: str, right: str) -> float | None:
            score = self.piece_scores.get(left + right)
            return None if score is None else -score

        return merge_pairs(text, priority)

    def _piece_ids(self, piece: str) -> list[int]:
        if piece in self.ids and piece in self.piece_scores:
            return [self.ids[piece]]
        ids = [self.byte_ids.get(byte, self.unknown_id) for byte in piece.encode("utf-8")]
        return [token for token in ids if token is not None]

    # ----------------------------------------------------------------------------------------------- decode

    def token_bytes(self, token_id: int) -> bytes:
        token = self.tokens[token_id]
        if self.token_types[token_id] == BYTE:
            return bytes([int(token[3:5], 16)])
        return token.replace(SPACE, " ").encode("utf-8")

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`; the space the encoder put in front is taken off again."""
        text = super().decode(ids)
        return text[1:] if self.add_space_prefix and text.startswith(" ") else text
