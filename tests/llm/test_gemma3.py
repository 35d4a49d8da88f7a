"""The gemma3 architecture on a tiny random model, against the float64 reference of llm_reference.gemma_forward
(transformers' Gemma 3 computation): sliding-window and global blocks with their own RoPE bases, norms after the
attention and the MLP, q/k norms, GELU(tanh), embeddings scaled by sqrt(dim), head_dim from key_length."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

import llm_reference as reference  # noqa: E402
from llm_fixtures import chunked_logits, write_model  # noqa: E402

from tg.llm.config import TransformerConfig  # noqa: E402
from tg.llm.template import chat_template  # noqa: E402

WINDOW = 8
# 44 positions, far past the window: a 20-token chunk, a 16-token chunk at position 20 (both captured block
# forwards), then 8 decode steps
TOKENS = [(37 * i + 11) % 256 for i in range(44)]
CHUNKS = (20, 36)


@pytest.mark.parametrize("weight_type", ["F32", "Q8_0"])
def test_gemma3_matches_the_reference(tmp_path: Path, weight_type: str) -> None:
    """Q8_0 runs the decode steps' quantized matvecs (the MLP's gate, GELU and up in one kernel); F32 plain ones."""
    path = write_model(tmp_path / "gemma3.gguf", "gemma3", weight_type, seed=7, sliding_window=WINDOW)
    metadata, weights = reference.load(path)
    expected = reference.gemma_forward(metadata, weights, TOKENS)
    positions, logits = chunked_logits(path, TOKENS, CHUNKS)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(logits, expected[positions], atol=2e-3 * scale)


def test_the_tiny_gemma3_depends_on_the_window_and_the_local_rope(tmp_path: Path) -> None:
    """The reference with the window or the local RoPE base left out differs by 10 times the tolerance above or
    more, so the comparison there tells whether tg applies them."""
    path = write_model(tmp_path / "gemma3.gguf", "gemma3", seed=7, sliding_window=WINDOW)
    metadata, weights = reference.load(path)
    expected = reference.gemma_forward(metadata, weights, TOKENS)[WINDOW:]
    scale = np.abs(expected).max()
    without_window = reference.gemma_forward(metadata, weights, TOKENS, sliding_window=len(TOKENS))[WINDOW:]
    global_rope = reference.gemma_forward(metadata, weights, TOKENS, local_theta=1e6)[WINDOW:]
    assert np.abs(expected - without_window).max() > 0.02 * scale
    assert np.abs(expected - global_rope).max() > 0.02 * scale


def gemma3_metadata(blocks: int, **extra: object) -> dict:
    keys = {"embedding_length": 640, "attention.head_count": 4, "attention.key_length": 256,
            "attention.head_count_kv": 1, "block_count": blocks, "feed_forward_length": 2048,
            "attention.sliding_window": 512, "rope.freq_base": 1e6, **extra}  # fmt: skip
    return {"general.architecture": "gemma3", **{f"gemma3.{key}": value for key, value in keys.items()}}


def test_gemma3_slides_on_five_of_every_six_blocks_by_default() -> None:
    """transformers' Gemma 3 layer types: block i is global when (i + 1) is a multiple of 6."""
    config = TransformerConfig.from_metadata(gemma3_metadata(18), 262144)
    assert config.local_blocks == tuple(i for i in range(18) if (i + 1) % 6 != 0)
    assert config.sliding_window == 512 and config.local_rope_theta == 10000.0 and config.rope_theta == 1e6
    assert config.embedding_scale == pytest.approx(math.sqrt(640))
    assert config.attention_factor() == pytest.approx(1 / 16)  # query_pre_attn_scalar 256 = key_length


def test_gemma3_27b_scales_attention_by_dim_over_heads() -> None:
    """Gemma 3 27B's query_pre_attn_scalar is hidden_size / num_attention_heads (5376 / 32 = 168)."""
    metadata = gemma3_metadata(62, embedding_length=5376, **{"attention.head_count": 32, "attention.key_length": 128})
    assert TransformerConfig.from_metadata(metadata, 262144).attention_factor() == pytest.approx(168**-0.5)


def test_a_sliding_window_pattern_list_names_the_sliding_blocks() -> None:
    metadata = gemma3_metadata(4, **{"attention.sliding_window_pattern": [True, False, False, True]})
    assert TransformerConfig.from_metadata(metadata, 262144).local_blocks == (0, 3)


def test_gemma_chat_turns_without_a_template_in_the_file() -> None:
    """Gemma's turn format (its model card): `model` for the assistant, the system text opening the first user
    turn, messages stripped."""
    tokens = {"<bos>": 2, "<start_of_turn>": 105, "<end_of_turn>": 106}
    template = chat_template({}, "<bos>", "<eos>", tokens)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": " Hi \n"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Name a colour."},
    ]
    assert template.render(messages) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n"
    )
