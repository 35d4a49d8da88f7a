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
from tg.llm.serve.runner import ModelRunner, Slot  # noqa: E402

SEQUENCES = [[5, 17, 200, 33, 99], [7, 64], [150, 4, 2]]
NEXT = [[11, 12], [13, 14], [15, 16]]  # fed in two batched steps


@pytest.mark.parametrize(
    ("arch", "weight_type"),
    [
        ("llama", "F32"),
        ("llama", "Q4_0"),  # quantized token rows (EmbeddingTable) and the half-block matvec of weights.linear
        pytest.param("qwen2", "F32", marks=pytest.mark.slow),  # q/k/v biases on the stacked attn_qkv
        pytest.param("qwen3", "F32", marks=pytest.mark.slow),
        pytest.param("olmoe", "F32", marks=pytest.mark.slow),
    ],
)
def test_batched_decode_matches_the_reference(tmp_path: Path, arch: str, weight_type: str) -> None:
    path = write_model(tmp_path / f"{arch}.gguf", arch, weight_type, seed=1)
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
    tokens = [(7 * i + 3) % 250 for i in range(45)]  # 5 chunks of 8 and one of 5 (padded to 8), over KV windows
    logits = runner.prefill(runner.slots[0], tokens)
    expected = reference.forward(metadata, weights, tokens)[-1]
    np.testing.assert_allclose(logits, expected, atol=2e-3 * np.abs(expected).max())
    (after,) = runner.decode([(runner.slots[0], 5)])
    expected = reference.forward(metadata, weights, tokens + [5])[-1]
    np.testing.assert_allclose(after, expected, atol=2e-3 * np.abs(expected).max())


def test_a_reused_slot_never_sees_its_previous_conversation(tmp_path: Path) -> None:
    """A slot that held a longer, unrelated sequence: the new one overwrites only its own positions, and the stale
    keys and values after them must stay invisible, in prefill and in a batched decode beside another slot."""
    path = write_model(tmp_path / "llama.gguf", "llama", "F32", seed=1)
    metadata, weights = reference.load(path)
    model, _ = load_model(path, max_context=32)
    runner = ModelRunner(model, 2)
    reused, other = runner.slots
    runner.prefill(reused, [(11 * i + 5) % 250 for i in range(20)])
    runner.prefill(other, [3, 1, 4, 1, 5])
    logits = runner.prefill(reused, [42, 43, 44])
    expected = reference.forward(metadata, weights, [42, 43, 44])[-1]
    np.testing.assert_allclose(logits, expected, atol=2e-3 * np.abs(expected).max())
    first, second = runner.decode([(reused, 45), (other, 9)])
    expected = reference.forward(metadata, weights, [42, 43, 44, 45])[-1]
    np.testing.assert_allclose(first, expected, atol=2e-3 * np.abs(expected).max())
    expected = reference.forward(metadata, weights, [3, 1, 4, 1, 5, 9])[-1]
    np.testing.assert_allclose(second, expected, atol=2e-3 * np.abs(expected).max())


def test_steps_replay_one_capture_per_row_counts_and_window(tmp_path: Path) -> None:
    """A prefill chunk or decode step is captured once (TinyJit) per row counts and KV window, and replayed for any
    slots: prompts of other lengths, later positions, the slots in the other order, a slot refilled with another
    conversation, and one slot then the other alone (the replay swaps in each one's cache) all match the
    reference."""
    path = write_model(tmp_path / "llama.gguf", "llama", "F32", seed=1)
    metadata, weights = reference.load(path)
    model, _ = load_model(path, max_context=128)  # the first KV window (64) below the context
    runner = ModelRunner(model, 2)
    first, second = runner.slots
    runner.prefill(first, [1, 2, 3])
    runner.prefill(second, [4, 5])

    def decode_and_check(steps: list[tuple[Slot, int]]) -> None:
        expected = [reference.forward(metadata, weights, slot.cached + [token])[-1] for slot, token in steps]
        for row, want in zip(runner.decode(steps), expected, strict=True):
            np.testing.assert_allclose(row, want, atol=2e-3 * np.abs(want).max())

    for token in (6, 7, 8):
        decode_and_check([(first, token), (second, token + 10)])
    decode_and_check([(second, 20), (first, 21)])
    logits = runner.prefill(first, [9, 9])  # a replayed prefill; the slot's old keys and values stay, masked
    expected = reference.forward(metadata, weights, [9, 9])[-1]
    np.testing.assert_allclose(logits, expected, atol=2e-3 * np.abs(expected).max())
    decode_and_check([(first, 22), (second, 23)])
    decode_and_check([(second, 24)])
    decode_and_check([(first, 25)])
    # (rows per feed, KV window), least recently used first: the three prefills (3, 2 and 2 tokens, each one padded
    # chunk from position 0) share one capture, the decodes one per slot count
    assert list(runner.steps) == [((8,), 0, "last"), ((1, 1), 64, "last"), ((1,), 64, "last")]
    assert [(step.graph is not None, step.calls) for step in runner.steps.values()] == [(True, 3), (True, 5), (True, 2)]
