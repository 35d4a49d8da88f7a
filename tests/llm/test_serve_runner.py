"""The server's batched decode against the numpy reference forward: several sequences at different positions, each
in its own KV-cache slot, one forward per step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

import llm_reference as reference  # noqa: E402
from llm_fixtures import write_model  # noqa: E402

from tg.llm.model import load_model  # noqa: E402
from tg.llm.serve.runner import ModelRunner  # noqa: E402

SEQUENCES = [[5, 17, 200, 33, 99], [7, 64], [150, 4, 2]]
NEXT = [[11, 12], [13, 14], [15, 16]]  # fed in two batched steps


@pytest.mark.parametrize(
    "arch", ["llama", pytest.param("qwen3", marks=pytest.mark.slow), pytest.param("olmoe", marks=pytest.mark.slow)]
)
def test_batched_decode_matches_the_reference(tmp_path: Path, arch: str) -> None:
    path = write_model(tmp_path / f"{arch}.gguf", arch, "F32", seed=1)
    metadata, weights = reference.load(path)
    model, _ = load_model(path, max_context=32)
    runner = ModelRunner(model, len(SEQUENCES))
    for slot, tokens in zip(runner.slots, SEQUENCES, strict=True):
        runner.prefill(slot, tokens)
    for step in range(2):
        logits = runner.decode([(slot, after[step]) for slot, after in zip(runner.slots, NEXT, strict=True)])
        for row, tokens, after in zip(logits, SEQUENCES, NEXT, strict=True):
            expected = reference.forward(metadata, weights, tokens + after[: step + 1])[-1]
            np.testing.assert_allclose(row, expected, atol=2e-3 * np.abs(expected).max())
    assert [slot.cached for slot in runner.slots] == [s + n for s, n in zip(SEQUENCES, NEXT, strict=True)]


def test_a_slot_reuses_only_its_own_prefix(tmp_path: Path) -> None:
    path = write_model(tmp_path / "llama.gguf", "llama", "F32", seed=1)
    metadata, weights = reference.load(path)
    model, _ = load_model(path, max_context=32)
    runner = ModelRunner(model, 2)
    first, second = runner.slots
    runner.prefill(first, [1, 2, 3, 4])
    runner.prefill(second, [9, 9, 9])
    assert runner.reusable_prefix(first, [1, 2, 3, 4, 5]) == 4 and runner.reusable_prefix(second, [1, 2, 3]) == 0
    logits = runner.prefill(first, [1, 2, 7, 8])  # diverges after two tokens: positions 2.. are recomputed
    expected = reference.forward(metadata, weights, [1, 2, 7, 8])[-1]
    np.testing.assert_allclose(logits, expected, atol=2e-3 * np.abs(expected).max())


def test_long_prefill_in_padded_chunks_matches_the_reference(tmp_path: Path) -> None:
    path = write_model(tmp_path / "llama.gguf", "llama", "F32", seed=1)
    metadata, weights = reference.load(path)
    model, _ = load_model(path, max_context=64)
    runner = ModelRunner(model, 1)
    tokens = [(7 * i + 3) % 250 for i in range(45)]  # chunks of 32 and 13 (padded to 32)
    logits = runner.prefill(runner.slots[0], tokens)
    expected = reference.forward(metadata, weights, tokens)[-1]
    np.testing.assert_allclose(logits, expected, atol=2e-3 * np.abs(expected).max())
    (after,) = runner.decode([(runner.slots[0], 5)])
    expected = reference.forward(metadata, weights, tokens + [5])[-1]
    np.testing.assert_allclose(after, expected, atol=2e-3 * np.abs(expected).max())
