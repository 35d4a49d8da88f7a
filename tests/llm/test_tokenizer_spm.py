"""The SentencePiece tokenizer (GGUF `tokenizer.ggml.model = llama`) against the `sentencepiece` library: a small
BPE model with byte fallback is trained here, its pieces, scores and types become GGUF-style metadata, and both
tokenizers must cut the same texts into the same ids and decode them back."""

from __future__ import annotations

import io

import numpy as np
import pytest

spm = pytest.importorskip("sentencepiece")

from tg.llm.tokenizer import Tokenizer  # noqa: E402
from tg.llm.tokenizer_spm import SentencePieceTokenizer  # noqa: E402

WORDS = (
    "the quick brown fox jumps over lazy dog rooster hen chicken farm morning sun rises early cat sleeps "
    "tokenizer merges pieces scores bytes fallback model vocabulary sentence words letters numbers 12 345 6789"
).split()
TEXTS = [
    "the quick brown fox",
    "Hello World",  # capitals never seen in training: single characters or bytes
    "rooster and hen at the farm",
    "  two leading spaces and  double  spaces ",
    "digits 123456 and 42",
    "unicode: héllo wörld — 日本語 🐓",
    "tokenizertokenizer mergesmerges",
    "a",
    "",
]


@pytest.fixture(scope="module")
def trained() -> spm.SentencePieceProcessor:
    rng = np.random.default_rng(0)
    sentences = [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) for _ in range(3000)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="bpe",
        vocab_size=400,
        byte_fallback=True,
        normalization_rule_name="identity",  # llama.cpp does not normalize; neither may the oracle
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        num_threads=1,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def gguf_metadata(processor: spm.SentencePieceProcessor) -> dict:
    def token_type(index: int) -> int:  # llama.cpp's token type numbers
        if processor.is_unknown(index):
            return 2
        if processor.is_control(index):
            return 3
        if processor.is_byte(index):
            return 6
        return 5 if processor.is_unused(index) else 1

    size = processor.get_piece_size()
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [processor.id_to_piece(index) for index in range(size)],
        "tokenizer.ggml.scores": [processor.get_score(index) for index in range(size)],
        "tokenizer.ggml.token_type": [token_type(index) for index in range(size)],
        "tokenizer.ggml.bos_token_id": processor.bos_id(),
        "tokenizer.ggml.eos_token_id": processor.eos_id(),
        "tokenizer.ggml.unknown_token_id": processor.unk_id(),
        "tokenizer.ggml.add_space_prefix": True,
    }


@pytest.mark.parametrize("text", TEXTS)
def test_encoding_matches_sentencepiece(trained: spm.SentencePieceProcessor, text: str) -> None:
    ours = Tokenizer.from_gguf_metadata(gguf_metadata(trained))
    assert isinstance(ours, SentencePieceTokenizer)
    assert ours.encode(text) == trained.encode(text)


@pytest.mark.parametrize("text", TEXTS)
def test_decoding_matches_sentencepiece(trained: spm.SentencePieceProcessor, text: str) -> None:
    ours = Tokenizer.from_gguf_metadata(gguf_metadata(trained))
    ids = trained.encode(text)
    assert ours.decode(ids) == trained.decode(ids) == text


def test_a_long_word_is_encoded_like_sentencepiece(trained: spm.SentencePieceProcessor) -> None:
    text = "rooster" * 2000 + "hen" * 1000  # one 17,000-character word: the heap keeps this fast
    ours = Tokenizer.from_gguf_metadata(gguf_metadata(trained))
    assert ours.encode(text) == trained.encode(text)


def test_unseen_characters_fall_back_to_their_utf8_bytes(trained: spm.SentencePieceProcessor) -> None:
    ours = Tokenizer.from_gguf_metadata(gguf_metadata(trained))
    ids = ours.encode("🐓")
    pieces = [trained.id_to_piece(index) for index in ids]
    assert pieces[-4:] == ["<0xF0>", "<0x9F>", "<0x90>", "<0x93>"]  # the rooster's four UTF-8 bytes


def test_stream_decoding_joins_the_bytes_of_one_character(trained: spm.SentencePieceProcessor) -> None:
    ours = Tokenizer.from_gguf_metadata(gguf_metadata(trained))
    decoder = ours.stream_decoder()
    text = "".join(decoder.add(index) for index in ours.encode("hen 🐓 rooster")) + decoder.flush()
    assert text == " hen 🐓 rooster"  # the stream keeps the prefix space; decode() takes it off
