"""Byte-level BPE (GPT-2 style) built from a GGUF file's vocabulary and merges.

Text is split into special tokens (matched whole) and ordinary runs; each run is cut into words by the preset's
pre-tokenizer regexes (`tokenizer.ggml.pre`), each word's UTF-8 bytes are mapped to printable characters, and the
merges are applied lowest rank first. Decoding maps back to bytes; `StreamDecoder` holds back incomplete UTF-8.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable
from typing import Any

import regex

# The GPT-2 family's word regex and the llama3 one (llama.cpp's llama-vocab.cpp lists them per preset).
GPT2_WORDS = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"""
LLAMA3_WORDS = (
    r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_WORDS = LLAMA3_WORDS.replace(r"\p{N}{1,3}", r"\p{N}")
SINGLE_DIGITS = r"\p{N}"

# preset -> the regexes applied in turn (each splits the pieces the previous one produced)
PRESETS: dict[str, list[str]] = {
    "llama3": [LLAMA3_WORDS],
    "llama-v3": [LLAMA3_WORDS],
    "llama-bpe": [LLAMA3_WORDS],
    "qwen2": [QWEN2_WORDS],
    "qwen35": [QWEN2_WORDS],
    "qwen35moe": [QWEN2_WORDS],
    "gpt2": [GPT2_WORDS],
    "olmo": [GPT2_WORDS],
    "smollm": [SINGLE_DIGITS, GPT2_WORDS],  # SmolLM: every digit is its own word
    "starcoder": [SINGLE_DIGITS, GPT2_WORDS],
    "refact": [SINGLE_DIGITS, GPT2_WORDS],
    "default": [GPT2_WORDS],
}
CONTROL, USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values of tokens matched whole
CACHED_WORD_LENGTH = 256  # words up to this many characters are remembered (see Tokenizer._encode_word)


class TokenizerError(ValueError):
    """The GGUF tokenizer cannot be built (unknown preset or model type)."""


class TokenBudgetError(ValueError):
    """The text encodes to more tokens than the caller allowed."""

    def __init__(self, max_tokens: int) -> None:
        super().__init__(f"the text is longer than {max_tokens} tokens")
        self.max_tokens = max_tokens


@functools.cache
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (printable Latin-1 stays, the rest shifts up)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + shifted)
            shifted += 1
    return mapping


def split_words(text: str, patterns: list[regex.Pattern]) -> list[str]:
    """Apply each pre-tokenizer regex in turn; text between matches is kept as its own piece."""
    pieces = [text]
    for pattern in patterns:
        next_pieces = []
        for piece in pieces:
            position = 0
            for match in pattern.finditer(piece):
                if match.start() > position:
                    next_pieces.append(piece[position : match.start()])
                if match.end() > match.start():
                    next_pieces.append(match.group())
                position = match.end()
            if position < len(piece):
                next_pieces.append(piece[position:])
        pieces = next_pieces
    return pieces


# special tokens that end generation wherever a model emits them (chat turn ends and end-of-text markers)
END_OF_GENERATION_TEXTS = frozenset(
    ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>", "</s>")
)


def merge_ranks_of(merges: list[str]) -> dict[tuple[str, str], int]:
    """Each "left right" merge's pair and its rank (its index). A line without a space names no pair, so no pair of
    parts can ever match it: it is left out."""
    pairs = (merge.partition(" ") for merge in merges)
    return {(left, right): rank for rank, (left, space, right) in enumerate(pairs) if space}


def bpe_merge(word: str, merge_ranks: dict[tuple[str, str], int]) -> list[str]:
    """The parts `word` ends as when merges are applied lowest rank first (leftmost first among equal ranks)."""
    return merge_pairs(word, lambda left, right: merge_ranks.get((left, right)))


def merge_pairs(word: str, priority: Callable[[str, str], float | None]) -> list[str]:
    """The parts `word` ends as when adjacent parts are joined, the pair of lowest `priority` first (leftmost first
    among equals; None: never joined), until no pair can be.

    In O(n log n): the parts are a linked list (each part is named by the index of its first character), and a
    heap holds every candidate pair as (priority, left index, left length, right length). A pair goes stale when
    either part merges with another; parts only grow, so comparing the lengths it was pushed with spots that.
    Each merge pushes at most two new pairs, its new neighbours.
    """
    parts = list(word)
    following = list(range(1, len(word) + 1))  # index of the next part (len(word): none)
    preceding = list(range(-1, len(word) - 1))
    heap: list[tuple[float, int, int, int]] = []

    def push(left: int) -> None:
        right = following[left]
        if right < len(word):
            rank = priority(parts[left], parts[right])
            if rank is not None:
                heapq.heappush(heap, (rank, left, len(parts[left]), len(parts[right])))

    for index in range(len(word) - 1):
        push(index)
    while heap:
        _, left, left_length, right_length = heapq.heappop(heap)
        right = following[left]
        if len(parts[left]) != left_length or right >= len(word) or len(parts[right]) != right_length:
            continue  # stale: one of its parts has merged since (or was merged away)
        parts[left] += parts[right]
        parts[right] = ""  # merged away: never a valid left or right of a pair again
        following[left] = following[right]
        if following[left] < len(word):
            preceding[following[left]] = left
        if preceding[left] >= 0:
            push(preceding[left])
        push(left)
    result, index = [], 0
    while index < len(word):
        result.append(parts[index])
        index = following[index]
    return result


def vocabulary_settings(metadata: dict[str, Any]) -> dict[str, Any]:
    """The GGUF tokenizer keys every tokenizer kind reads: tokens, their types and the special ids."""
    return {
        "tokens": metadata["tokenizer.ggml.tokens"],
        "token_types": metadata.get("tokenizer.ggml.token_type"),
        "bos_id": metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_id": metadata.get("tokenizer.ggml.eos_token_id", 0),
        "eot_id": metadata.get("tokenizer.ggml.eot_token_id"),
        "add_bos": bool(metadata.get("tokenizer.ggml.add_bos_token", True)),
        "extra_end_ids": tuple(
            int(metadata[key]) for key in ("tokenizer.ggml.eom_token_id",) if metadata.get(key) is not None
        ),
    }


class Tokenizer:
    def __init__(
        self,
        tokens: list[str],
        merges: list[str],
        token_types: list[int] | None = None,
        preset: str = "default",
        bos_id: int | None = None,
        eos_id: int = 0,
        eot_id: int | None = None,
        add_bos: bool = False,
        extra_end_ids: tuple[int, ...] = (),
    ) -> None:
        if preset not in PRESETS:
            raise TokenizerError(f"invalid tokenizer preset {preset!r} (known: {', '.join(sorted(PRESETS))})")
        self.tokens, self.preset = tokens, preset
        self.ids = {token: index for index, token in enumerate(tokens)}
        self.merge_ranks = merge_ranks_of(merges)
        self.patterns = [regex.compile(pattern) for pattern in PRESETS[preset]]
        types = token_types or [1] * len(tokens)
        self.special_ids = {index for index, kind in enumerate(types) if kind in (CONTROL, USER_DEFINED)}
        specials = sorted((tokens[i] for i in self.special_ids if tokens[i]), key=len, reverse=True)
        self.special_pattern = regex.compile("|".join(regex.escape(s) for s in specials)) if specials else None
        self.bos_id, self.eos_id, self.add_bos = bos_id, eos_id, add_bos
        if eot_id is None:
            eot_id = next(
                (self.ids[name] for name in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>") if name in self.ids), None
            )
        self.eot_id = eot_id
        # every end-of-generation token: eos, eot, and the special tokens models end turns with (SmolLM2's chat
        # ends with <|im_end|> but may also emit <|endoftext|>, id 0), as llama.cpp's end-of-generation set does
        named_ends = {index for index in self.special_ids if tokens[index] in END_OF_GENERATION_TEXTS}
        self.end_ids = {eos_id, *([] if eot_id is None else [eot_id]), *extra_end_ids, *named_ends}
        self.byte_map = byte_to_unicode()
        self.char_to_byte = {char: byte for byte, char in self.byte_map.items()}
        self.max_token_bytes = max((len(self.token_bytes(i)) for i in range(len(tokens))), default=1) or 1
        self.every_byte_has_token = all(char in self.ids for char in self.byte_map.values())

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on how many tokens `text` encodes to, without encoding it: no token stands for more than
        max_token_bytes bytes, and when every byte has a token no byte is dropped (0 when some byte has none)."""
        if not self.every_byte_has_token:
            return 0
        return -(-len(text.encode("utf-8", errors="replace")) // self.max_token_bytes)

    @classmethod
    def from_gguf_metadata(cls, metadata: dict[str, Any]) -> Tokenizer:
        model = metadata.get("tokenizer.ggml.model", "gpt2")
        if model == "llama":  # SentencePiece: scores and byte fallback instead of merges
            from tg.llm.tokenizer_spm import SentencePieceTokenizer

            return SentencePieceTokenizer.from_gguf_metadata(metadata)
        if model != "gpt2":
            raise TokenizerError(
                f"tokenizer model {model!r} is not supported (byte-level BPE 'gpt2' and SentencePiece 'llama' are)"
            )
        return cls(
            merges=metadata.get("tokenizer.ggml.merges", []),
            preset=metadata.get("tokenizer.ggml.pre", "default"),
            **vocabulary_settings(metadata),
        )

    # ----------------------------------------------------------------------------------------------- encode

    def encode(
        self, text: str, allow_special: bool = True, plain_marker: str = "", max_tokens: int | None = None
    ) -> list[int]:
        """Token ids of `text`; special tokens (<|im_start|> ...) written in it become their single id.

        `plain_marker`: a character placed inside special-token text that must stay plain text (a user's message
        quoting `<|im_end|>`); it stops the match there and is removed before the text is encoded.
        `max_tokens`: raise TokenBudgetError as soon as the ids outgrow it (a prompt too long for the context).
        """
        ids: list[int] = []
        position = 0
        if allow_special and self.special_pattern is not None:
            for match in self.special_pattern.finditer(text):
                ids += self._encode_ordinary(text[position : match.start()], plain_marker, max_tokens, len(ids))
                ids.append(self.ids[match.group()])
                position = match.end()
        return ids + self._encode_ordinary(text[position:], plain_marker, max_tokens, len(ids))

    def _encode_ordinary(
        self, text: str, plain_marker: str = "", max_tokens: int | None = None, before: int = 0
    ) -> list[int]:
        if plain_marker:
            text = text.replace(plain_marker, "")
        ids: list[int] = []
        for word in split_words(text, self.patterns):
            ids += self._encode_word("".join(self.byte_map[b] for b in word.encode("utf-8")))
            if max_tokens is not None and before + len(ids) > max_tokens:
                raise TokenBudgetError(max_tokens)
        return ids

    def _encode_word(self, word: str) -> list[int]:
        if len(word) > CACHED_WORD_LENGTH:  # long words are rare: caching them would only hold memory
            return self._merge_word(word)
        return self._cached_word(word)

    @functools.lru_cache(maxsize=65536)  # noqa: B019  (one tokenizer per process; words repeat a lot)
    def _cached_word(self, word: str) -> list[int]:
        return self._merge_word(word)

    def _merge_word(self, word: str) -> list[int]:
        if word in self.ids:
            return [self.ids[word]]
        ids = []
        for part in bpe_merge(word, self.merge_ranks):
            if part in self.ids:
                ids.append(self.ids[part])
            else:  # not in the vocabulary: fall back to its single characters (bytes)
                ids += [self.ids[char] for char in part if char in self.ids]
        return ids

    # ----------------------------------------------------------------------------------------------- decode

    def token_bytes(self, token_id: int) -> bytes:
        token = self.tokens[token_id]
        if token_id in self.special_ids:
            return token.encode("utf-8")
        return bytes(self.char_to_byte[char] for char in token if char in self.char_to_byte)

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def is_end(self, token_id: int) -> bool:
        return token_id in self.end_ids

    def stream_decoder(self) -> StreamDecoder:
        return StreamDecoder(self)


class StreamDecoder:
    """Turns token ids into text as they arrive, holding back bytes of a character split across tokens."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer, self.pending = tokenizer, b""

    def add(self, token_id: int) -> str:
        self.pending += self.tokenizer.token_bytes(token_id)
        for cut in range(len(self.pending), max(len(self.pending) - 4, -1), -1):
            try:
                text = self.pending[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
            self.pending = self.pending[cut:]
            return text
        text, self.pending = self.pending.decode("utf-8", errors="replace"), b""  # invalid, not just incomplete
        return text

    def flush(self) -> str:
        text, self.pending = self.pending.decode("utf-8", errors="replace"), b""
        return text
