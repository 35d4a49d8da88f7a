"""RoPE scaling: Llama 3.x's `rope_freqs.weight` and linear scaling from the metadata, against the float64 reference
with frequencies computed the way Hugging Face computes them from the model's `rope_scaling` settings."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

import llm_reference as reference  # noqa: E402
from llm_fixtures import write_model  # noqa: E402

from tg.llm.config import UnsupportedModelError  # noqa: E402
from tg.llm.generate import Generator  # noqa: E402
from tg.llm.model import load_model  # noqa: E402

TOKENS = [5, 17, 200, 33, 99, 4, 150, 7, 64, 2, 11, 180, 45, 3, 77, 120]
THETA, HEAD_DIM = 10000.0, 16  # what write_model uses for dim=64 and 4 heads
# Llama 3.1's rope_scaling keys, with a short original context so the tiny model's pairs fall in all three bands
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def default_inv_freq() -> np.ndarray:
    return THETA ** (-np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)


def hugging_face_llama3_inv_freq() -> np.ndarray:
    """transformers' "llama3" rope type: long wavelengths slowed by `factor`, short ones kept, a linear blend of
    the two in between (in wavelength terms, as the model card's formula gives it)."""
    inv_freq = default_inv_freq()
    factor, low, high = LLAMA3["factor"], LLAMA3["low_freq_factor"], LLAMA3["high_freq_factor"]
    original = LLAMA3["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv_freq
    slowed = np.where(wavelength > original / low, inv_freq / factor, inv_freq)
    blend = (original / wavelength - low) / (high - low)
    blended = (1 - blend) * slowed / factor + blend * slowed
    in_between = (wavelength >= original / high) & (wavelength <= original / low)
    return np.where(in_between, blended, slowed)


def llama_cpp_rope_factors() -> np.ndarray:
    """What llama.cpp's converter writes as `rope_freqs.weight`: one divisor per frequency."""
    factor, low, high = LLAMA3["factor"], LLAMA3["low_freq_factor"], LLAMA3["high_freq_factor"]
    original = LLAMA3["original_max_position_embeddings"]
    factors = []
    for frequency in default_inv_freq():
        wavelength = 2 * math.pi / frequency
        if wavelength < original / high:
            factors.append(1.0)
        elif wavelength > original / low:
            factors.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors)


def tg_logits(path: Path) -> np.ndarray:
    """Every position's logits: a prefill of the first half in chunks, then one token at a time (the KV cache)."""
    model, _ = load_model(path, max_context=64)
    generator = Generator(model, chunk_size=4)
    half = len(TOKENS) // 2
    rows = [generator.prefill(TOKENS[:half])]
    rows += [generator._forward([TOKENS[position]], position) for position in range(half, len(TOKENS))]
    return np.stack(rows)


def check(path: Path, inv_freq: np.ndarray) -> None:
    metadata, weights = reference.load(path)
    expected = reference.forward(metadata, weights, TOKENS, inv_freq)[len(TOKENS) // 2 - 1 :]
    unscaled = reference.forward(metadata, weights, TOKENS)[len(TOKENS) // 2 - 1 :]
    scale = np.abs(expected).max()
    # the scaling must matter on this model, or the comparison below could not tell it was applied
    assert np.abs(expected - unscaled).max() > 0.05 * scale
    np.testing.assert_allclose(tg_logits(path), expected, atol=2e-3 * scale)


def test_the_two_llama3_formulas_agree() -> None:
    np.testing.assert_allclose(default_inv_freq() / llama_cpp_rope_factors(), hugging_face_llama3_inv_freq())


def test_llama3_rope_freqs_match_hugging_face_scaling(tmp_path: Path) -> None:
    path = write_model(tmp_path / "llama3.gguf", "llama", seed=3, rope_freqs=llama_cpp_rope_factors())
    check(path, hugging_face_llama3_inv_freq())


def test_linear_rope_scaling_divides_every_frequency(tmp_path: Path) -> None:
    path = write_model(tmp_path / "linear.gguf", "qwen2", seed=4, rope_scaling=("linear", 4.0))
    check(path, default_inv_freq() / 4.0)


def test_an_unsupported_rope_scaling_is_refused(tmp_path: Path) -> None:
    path = write_model(tmp_path / "yarn.gguf", "llama", seed=5, rope_scaling=("yarn", 4.0))
    with pytest.raises(UnsupportedModelError, match="RoPE scaling 'yarn' is not supported"):
        load_model(path, max_context=64)


def test_rope_freqs_of_the_wrong_length_are_refused(tmp_path: Path) -> None:
    path = write_model(tmp_path / "bad.gguf", "llama", seed=6, rope_freqs=np.ones(3))
    with pytest.raises(UnsupportedModelError, match="rope_freqs.weight has shape"):
        load_model(path, max_context=64)
