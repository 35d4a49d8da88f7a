"""The server's batched decode against the numpy reference forward: several sequences at different positions, each
in its own KV-cache slot, one forward per step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

import llm_reference as reference  # noqa: E402
from llm_fixtures import write_model  # noqa: E402

from tg.codegen import DType, dtypes  # noqa: E402
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


@pytest.mark.parametrize(
    ("kv_cache", "dtype", "reference_kv"), [("f16", dtypes.float16, np.float16), ("q8", dtypes.int8, "q8")]
)
def test_batched_steps_on_f16_or_q8_kv_caches_match_a_reference_that_rounds_keys_and_values(
    tmp_path: Path, kv_cache: str, dtype: DType, reference_kv: object
) -> None:
    """Every slot's cache stores float16 (int8 rows); a step's own new keys and values are rounded as stored before
    it attends over them (the reference rounds keys and values the same way), so its logits equal what a later step
    reads back."""
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=1)
    metadata, weights = reference.load(path)
    runner = ModelRunner(load_model(path, max_context=32, kv_cache=kv_cache)[0], len(SEQUENCES))
    assert all(cache.dtype == dtype for slot in runner.slots for cache in slot.caches)
    for slot, tokens in zip(runner.slots, SEQUENCES, strict=True):
        runner.prefill(slot, tokens)
    for step in range(2):
        logits = runner.decode([(slot, after[step]) for slot, after in zip(runner.slots, NEXT, strict=True)])
        for row, tokens, after in zip(logits, SEQUENCES, NEXT, strict=True):
            sequence = tokens + after[: step + 1]
            expected = reference.forward(metadata, weights, sequence, kv_dtype=reference_kv)[-1]  # type: ignore[arg-type]
            unrounded = reference.forward(metadata, weights, sequence)[-1]
            atol = 3e-5 * np.abs(expected).max()  # see test_model's F16_CACHE_RTOL and Q8_CACHE_RTOL
            assert np.abs(expected - unrounded).max() > 3 * atol  # the rounding shows at this tolerance
            np.testing.assert_allclose(row, expected, atol=atol)


@pytest.mark.parametrize("arch", ["gemma3", "gemma2", "phi3"])
def test_sliding_window_batched_steps_match_the_reference(tmp_path: Path, arch: str) -> None:
    """Sliding-window blocks (window 4; gemma3's with their own RoPE base), post-norms, soft caps (gemma2) and fused
    projections (phi3) in the batched step: prompts of 11 and 3 tokens (prefill chunks of 8 rows, the second over a
    cached window), then 3 batched decode steps."""
    path = write_model(tmp_path / f"{arch}.gguf", arch, seed=2, sliding_window=4)
    metadata, weights = reference.load(path)
    forward = reference.forward if arch == "phi3" else reference.gemma_forward
    model, _ = load_model(path, max_context=32)
    sequences = [[5, 17, 200, 33, 99, 4, 150, 7, 64, 2, 45], [7, 64, 11]]
    runner = ModelRunner(model, len(sequences))
    for slot, tokens in zip(runner.slots, sequences, strict=True):
        expected = forward(metadata, weights, tokens)[-1]
        logits = runner.prefill(slot, tokens)
        np.testing.assert_allclose(logits, expected, atol=2e-3 * np.abs(expected).max())
    for step in range(3):
        logits = runner.decode([(slot, 20 + step) for slot in runner.slots])
        for row, slot in zip(logits, runner.slots, strict=True):
            expected = forward(metadata, weights, slot.cached)[-1]
            np.testing.assert_allclose(row, expected, atol=2e-3 * np.abs(expected).max())


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


def echo_and_pooled(
    runner: ModelRunner, slot: Slot, echo: list[int], loaded: tuple, dim: int
) -> tuple[np.ndarray, np.ndarray]:
    """`echo` prefilled from an empty cache as an echo step (every position's logits, checked against the reference)
    and as an embedding step (one pooled vector of `dim`); both results."""
    metadata, weights = loaded
    slot.cached = []
    rows = runner.prefill_step(slot, echo, 8, "all")
    want = reference.forward(metadata, weights, echo)
    np.testing.assert_allclose(rows, want, atol=2e-3 * np.abs(want).max())
    slot.cached = []
    pooled = runner.prefill_step(slot, echo, 8, "pooled")
    assert pooled is not None and pooled.shape == (dim,)
    return rows, pooled


@pytest.mark.slow
def test_steps_past_the_warmed_windows_never_wait_for_a_capture(tmp_path: Path) -> None:
    """Warmed up to 64 positions of 256: a prompt into the 128 window, decode steps there, and an echo (ALL) and an
    embedding (POOLED) prefill run through the widest window's captures, none captured on the way, all matching
    the reference; their own captures are queued, and once made (as the idle scheduler makes them) replace the
    wider ones with the same results."""
    path = write_model(tmp_path / "llama.gguf", "llama", "F32", seed=1)
    metadata, weights = reference.load(path)
    model, _ = load_model(path, max_context=256)
    runner = ModelRunner(model, 2, defer_captures=True)
    runner.warm_up(lambda done, total: None, context=64)
    warmed = set(runner.steps)
    assert ((8,), 256, "all") in warmed and ((8,), 256, "pooled") in warmed and ((1, 1), 256, "last") in warmed
    assert ((8,), 128, "last") not in warmed
    first, second = runner.slots
    prompt = [(13 * i + 5) % 250 for i in range(100)]  # its last chunks start in the 128 window
    logits = runner.prefill(first, prompt)
    want = reference.forward(metadata, weights, prompt)[-1]
    np.testing.assert_allclose(logits, want, atol=2e-3 * np.abs(want).max())
    runner.prefill(second, [1, 2, 3])
    for token in (7, 8):
        rows = runner.decode([(first, token), (second, token + 1)])
        for row, slot in zip(rows, (first, second), strict=True):
            want = reference.forward(metadata, weights, slot.cached)[-1]
            np.testing.assert_allclose(row, want, atol=2e-3 * np.abs(want).max())
    echo = [4, 9, 16, 25, 36]
    rows, pooled = echo_and_pooled(runner, second, echo, (metadata, weights), model.config.dim)
    assert runner.inline_captures == 0 and runner.covered_steps > 0
    assert set(runner.steps) == warmed  # nothing was captured on the way
    queued = {((8,), 128, "last"), ((1, 1), 128, "last"), ((8,), 0, "all"), ((8,), 0, "pooled")}
    assert queued <= set(runner.wanted)
    while runner.capture_wanted():
        pass
    assert queued <= set(runner.deferred_made) and not runner.wanted and not runner.failed
    covered = runner.covered_steps
    rows = runner.decode([(first, 9), (second, 10)])
    want = reference.forward(metadata, weights, first.cached)[-1]
    np.testing.assert_allclose(rows[0], want, atol=2e-3 * np.abs(want).max())
    second.cached = []
    own = runner.prefill_step(second, echo, 8, "pooled")  # its own window's capture: the same sum
    np.testing.assert_allclose(own, pooled, atol=1e-4 * np.abs(pooled).max())
    assert runner.covered_steps == covered and runner.inline_captures == 0  # their own captures now


def test_a_stream_near_its_next_window_gets_it_queued_for_capture(tmp_path: Path) -> None:
    """A prefill chunk (positions 0..7, KV window 0) that ends within 64 positions of the 128 window (from position
    65) queues that window's step before any step reaches it."""
    path = write_model(tmp_path / "llama.gguf", "llama", "F32", seed=1)
    model, _ = load_model(path, max_context=256)
    runner = ModelRunner(model, 1, defer_captures=True)
    runner.capture(((8,), 0, "last"))  # (without it the chunk would run through its kind's widest capture)
    (slot,) = runner.slots
    runner.prefill_step(slot, list(range(1, 40)), 8)
    assert list(runner.wanted) == [((8,), 128, "last")] and len(slot.cached) == 8
    assert list(runner.steps) == [((8,), 0, "last")]  # the only step run so far
    assert runner.capture_wanted() and not runner.capture_wanted()
    assert ((8,), 128, "last") in runner.steps and runner.deferred_made == [((8,), 128, "last")]


def test_without_a_warm_up_only_the_first_step_of_each_kind_waits_for_a_capture(tmp_path: Path) -> None:
    """No warm-up, context 256 (KV windows 0, 64, 128, 256): the first prompt chunk is captured for the widest window,
    and every later prompt chunk and decode step runs through it (a decode step's one row padded to a chunk's 8, a
    batch of two slots slot by slot), the first echo (ALL) and embedding (POOLED) chunk each capture their kind's
    widest window; 3 captures in all, every answer the reference's. Once the idle scheduler has made the queued
    steps, a batched decode replays its own capture."""
    path = write_model(tmp_path / "llama.gguf", "llama", "F32", seed=1)
    metadata, weights = reference.load(path)
    model, _ = load_model(path, max_context=256)
    runner = ModelRunner(model, 2, defer_captures=True)
    first, second = runner.slots

    def check(rows: np.ndarray, sequences: list[list[int]]) -> None:
        for row, tokens in zip(rows, sequences, strict=True):
            want = reference.forward(metadata, weights, tokens)[-1]
            np.testing.assert_allclose(row, want, atol=2e-3 * np.abs(want).max())

    check([runner.prefill(first, [5, 17, 200])], [[5, 17, 200]])
    assert list(runner.steps) == [((8,), 256, "last")] and runner.inline_captures == 1
    long_prompt = [(13 * i + 5) % 250 for i in range(100)]  # chunks in the 0, 64 and 128 windows
    check([runner.prefill(second, long_prompt)], [long_prompt])
    for token in (7, 8):
        rows = runner.decode([(first, token), (second, token + 1)])  # (it appends the tokens to `cached`)
        check(rows, [first.cached, second.cached])
    assert runner.split_steps == 2
    echo = [4, 9, 16, 25, 36]
    rows, pooled = echo_and_pooled(runner, second, echo, (metadata, weights), model.config.dim)
    second.cached = []
    np.testing.assert_allclose(runner.prefill_step(second, echo, 8, "all"), rows, atol=1e-4 * np.abs(rows).max())
    assert runner.inline_captures == 3 and runner.covers("all") and runner.covers("pooled")
    assert set(runner.steps) == {((8,), 256, "last"), ((8,), 256, "all"), ((8,), 256, "pooled")}
    assert {((1, 1), 128, "last"), ((8,), 0, "last"), ((8,), 128, "last"), ((8,), 0, "all")} <= set(runner.wanted)
    while runner.capture_wanted():
        pass
    covered, split = runner.covered_steps, runner.split_steps
    second.cached = []
    runner.prefill(second, long_prompt)
    check(runner.decode([(first, 9), (second, 10)]), [first.cached, second.cached])
    assert (runner.covered_steps, runner.split_steps, runner.inline_captures) == (covered, split, 3)
