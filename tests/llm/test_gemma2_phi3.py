"""The gemma2 and phi3 architectures on tiny random models, against the float64 references of llm_reference:
Gemma 2's soft caps and alternating sliding window, Phi-3's fused q/k/v and gate/up projections and its sliding
window on every block. Positions run far past the window (8) through prefill chunks and decode steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

import llm_reference as reference  # noqa: E402
from llm_fixtures import chunked_logits, write_model  # noqa: E402

from tg.llm.config import TransformerConfig, UnsupportedModelError  # noqa: E402
from tg.llm.generate import Generator  # noqa: E402
from tg.llm.model import load_model, write_cache_rows  # noqa: E402
from tg.llm.template import chat_template  # noqa: E402

WINDOW = 8
TOKENS = [(53 * i + 7) % 256 for i in range(40)]
CHUNKS = (20, 36)  # two captured chunk forwards, the second at position 20, then 4 decode steps


def check(path: Path, expected: np.ndarray, ablated: list[np.ndarray]) -> None:
    """tg's logits equal `expected` (every position), and each reference with a feature left out differs by 10 times
    the tolerance or more (so the comparison tells whether tg applies it)."""
    scale = np.abs(expected).max()
    for other in ablated:
        assert np.abs(expected - other)[WINDOW:].max() > 0.02 * scale
    positions, logits = chunked_logits(path, TOKENS, CHUNKS)
    np.testing.assert_allclose(logits, expected[positions], atol=2e-3 * scale)


@pytest.mark.parametrize("weight_type", ["F32", "Q8_0"])
def test_gemma2_matches_the_reference(tmp_path: Path, weight_type: str) -> None:
    path = write_model(tmp_path / "gemma2.gguf", "gemma2", weight_type, seed=8, sliding_window=WINDOW)
    metadata, weights = reference.load(path)
    expected = reference.gemma_forward(metadata, weights, TOKENS)
    no_caps = reference.gemma_forward(metadata, weights, TOKENS, softcaps=False)
    no_window = reference.gemma_forward(metadata, weights, TOKENS, sliding_window=len(TOKENS))
    check(path, expected, [no_caps, no_window])


@pytest.mark.parametrize("weight_type", ["F32", "Q8_0"])
def test_phi3_matches_the_reference(tmp_path: Path, weight_type: str) -> None:
    path = write_model(tmp_path / "phi3.gguf", "phi3", weight_type, seed=9, sliding_window=WINDOW)
    metadata, weights = reference.load(path)
    expected = reference.forward(metadata, weights, TOKENS)
    metadata_without_window = {**metadata, "phi3.attention.sliding_window": len(TOKENS)}
    check(path, expected, [reference.forward(metadata_without_window, weights, TOKENS)])


def test_token_by_token_decoding_moves_to_the_window_step_at_the_windows_end(tmp_path: Path) -> None:
    """Decode steps from position 0: the positions before WINDOW - 1 run the step that reads the cache from row 0,
    the later ones the step that reads the window's key tiles only (tg.llm.model.SlidingWindow); both match the
    reference, at every position across key tiles."""
    path = write_model(tmp_path / "phi3.gguf", "phi3", seed=3, sliding_window=WINDOW)
    metadata, weights = reference.load(path)
    expected = reference.forward(metadata, weights, TOKENS[:24])
    model, _ = load_model(path, max_context=64)
    logits = [model.forward([token], position).numpy() for position, token in enumerate(TOKENS[:24])]
    assert sorted(model.decode_steps) == ["decode", "decode window"]
    np.testing.assert_allclose(np.array(logits), expected, atol=2e-3 * np.abs(expected).max())


def test_a_prefill_chunk_far_past_the_window_reads_only_the_windows_tiles(tmp_path: Path) -> None:
    """A 32-row chunk at position 160 attends over a 256-row window of the cache; Phi-3's blocks (all sliding) read
    its key tiles from the one of row 80 on (tg.llm.model.Transformer.chunk_window_start; the chunks that share its
    capture start at 97 or later): with the cache rows before 80 filled with NaN, its logits are unchanged and match
    the reference. (The rows it reads but no row sees are masked; a value row is then multiplied by a zero weight,
    so the chunk path, unlike the decode steps, does not tolerate NaN there.)"""
    path = write_model(tmp_path / "phi3.gguf", "phi3", seed=3, sliding_window=WINDOW)
    tokens = [(53 * i + 7) % 256 for i in range(192)]
    metadata, weights = reference.load(path)
    expected = reference.forward(metadata, weights, tokens)[-1]
    logits = []
    for poison in (False, True):
        model, _ = load_model(path, max_context=256)
        assert model.chunk_window_start(32, 256) == 5
        generator = Generator(model, chunk_size=32)
        generator.prefill(tokens[:160])
        if poison:
            for cache in model.caches:
                _, kv_heads, _, head_dim = cache.shape
                unseen = np.full((80, 2, kv_heads, head_dim), np.nan, np.float32)
                write_cache_rows(cache, memoryview(unseen).cast("B"), 0)
        logits.append(generator._forward(tokens[160:], 160))
    np.testing.assert_array_equal(logits[1], logits[0])
    np.testing.assert_allclose(logits[0], expected, atol=2e-3 * np.abs(expected).max())


def test_gemma2_alternates_sliding_and_global_blocks() -> None:
    """transformers' Gemma 2 layer types: block i slides when i is even; both kinds rotate with rope.freq_base."""
    keys = {"embedding_length": 2304, "attention.head_count": 8, "attention.key_length": 256, "block_count": 26,
            "feed_forward_length": 9216, "attention.sliding_window": 4096, "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0}  # fmt: skip
    config = TransformerConfig.from_metadata(
        {"general.architecture": "gemma2", **{f"gemma2.{key}": value for key, value in keys.items()}}, 256000
    )
    assert config.local_blocks == tuple(range(0, 26, 2)) and config.local_rope_theta == 0.0
    assert (config.attention_softcap, config.final_softcap) == (50.0, 30.0)


def test_phi3_longrope_is_refused(tmp_path: Path) -> None:
    """Phi-3 128k's LongRoPE factors change the angles with the context length; such a file is refused."""
    factors = {"rope_factors_long.weight": np.ones(8), "rope_factors_short.weight": np.ones(8)}
    path = write_model(tmp_path / "phi3.gguf", "phi3", seed=9, extra_tensors=factors)
    with pytest.raises(UnsupportedModelError, match="LongRoPE"):
        load_model(path, max_context=64)


def test_phi3_chat_turns_without_a_template_in_the_file() -> None:
    """Phi-3's turn format (its model card): `<|user|>` ... `<|end|>`, then `<|assistant|>`."""
    tokens = {"<s>": 1, "<|assistant|>": 32001, "<|end|>": 32007, "<|user|>": 32010}
    template = chat_template({}, "<s>", "</s>", tokens)
    assert template.render([{"role": "user", "content": "Hi"}]) == "<s><|user|>\nHi<|end|>\n<|assistant|>\n"
