"""tg-llm's transformer against the float64 numpy reference on random-weight GGUF fixtures of every architecture
and GGML type: prefill logits, KV-cached decoding, chunked prefill, prefix reuse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

import llm_reference as reference  # noqa: E402
from llm_fixtures import write_model  # noqa: E402

from tg.codegen import dtypes  # noqa: E402
from tg.hcq.engine import program_cache_stats  # noqa: E402
from tg.llm.config import UnsupportedModelError  # noqa: E402
from tg.llm.generate import Generator  # noqa: E402
from tg.llm.lanes import LaneBlocks  # noqa: E402
from tg.llm.model import (  # noqa: E402
    KEPT_CHUNK_CAPTURE_BYTES,
    ContextOverflowError,
    block_tensor,
    cache_memory,
    kv_window,
    load_model,
    top_k_mask,
    write_cache_rows,
)
from tg.llm.weights import SCRATCH_MATMUL_ROWS, Weight  # noqa: E402
from tg.tensor import Context, Tensor  # noqa: E402

TOKENS = [5, 17, 200, 33, 99, 4, 150, 7, 64, 2]


# the reference's rounding of keys and values (llm_reference.rounded_kv) for each KV cache type
REFERENCE_KV = {"f32": None, "f16": np.float16, "q8": "q8"}


def check_against_reference(path: Path, rtol: float = 2e-3, kv_cache: str = "f32") -> None:
    """Prefill and decode logits within rtol of the reference's largest; a float16 or int8 KV cache (`kv_cache`
    "f16", "q8") against the reference that rounds the keys and values as the cache stores them, where it does."""
    metadata, weights = reference.load(path)
    expected = reference.forward(metadata, weights, TOKENS, kv_dtype=REFERENCE_KV[kv_cache])
    model, _ = load_model(path, max_context=64, kv_cache=kv_cache)
    generator = Generator(model, chunk_size=4)
    prefill = generator.prefill(TOKENS[:6])  # chunks of 4 and 2
    scale = np.abs(expected).max()
    np.testing.assert_allclose(prefill, expected[5], atol=rtol * scale)
    for position in range(6, len(TOKENS)):  # then one token at a time through the KV cache
        logits = generator._forward([TOKENS[position]], position)
        np.testing.assert_allclose(logits, expected[position], atol=rtol * scale)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "qwen3moe", "olmoe"])
def test_architectures_match_the_reference(tmp_path: Path, arch: str) -> None:
    check_against_reference(write_model(tmp_path / f"{arch}.gguf", arch, "F32", seed=1, tied=arch != "qwen2"))


# rounding the keys and values to float16 moves the logits by 1e-4 to 2e-4 of the largest; the model's float16 cache
# against the reference that rounds them too stays within 2e-7 of it, or 1.3e-5 where a float32 key and its float64
# reference fall on either side of a float16 rounding boundary: this tolerance tells an f16 cache from an f32 one
F16_CACHE_RTOL = 3e-5


@pytest.mark.parametrize(("arch", "weight_type"), [("llama", "F32"), ("qwen3", "F32"), ("llama", "Q8_0")])
def test_an_f16_kv_cache_matches_a_reference_that_rounds_keys_and_values_to_f16(
    tmp_path: Path, arch: str, weight_type: str
) -> None:
    path = write_model(tmp_path / f"{arch}.gguf", arch, weight_type, seed=1, tied=True)
    metadata, weights = reference.load(path)
    rounded = reference.forward(metadata, weights, TOKENS, kv_dtype=np.float16)
    unrounded = reference.forward(metadata, weights, TOKENS)
    # the rounding is visible at this tolerance in the logits compared (from the prefill's on): an f32 cache fails
    assert np.abs(rounded - unrounded)[5:].max() > 3 * F16_CACHE_RTOL * np.abs(unrounded).max()
    check_against_reference(path, rtol=F16_CACHE_RTOL, kv_cache="f16")


def test_an_f16_kv_cache_holds_half_the_bytes_of_an_f32_one(tmp_path: Path) -> None:
    path = write_model(tmp_path / "m.gguf")
    single, half = load_model(path, max_context=64)[0], load_model(path, max_context=64, kv_cache="f16")[0]
    assert single.kv_cache == "f32" and half.kv_cache == "f16"  # f32 is the default
    for wide, narrow in zip(single.caches, half.caches, strict=True):
        assert wide.dtype == dtypes.float32 and narrow.dtype == dtypes.float16 and narrow.shape == wide.shape
        assert cache_memory(narrow).nbytes * 2 == cache_memory(wide).nbytes == wide.numel() * 4


# int8 blocks (see tg.llm.kv_quant) move these models' logits by 2e-4 to 2e-2 of the largest; the model's int8
# cache against the reference that quantizes the same blocks stays within 6e-7 of it
Q8_CACHE_RTOL = 3e-5


@pytest.mark.parametrize(
    ("arch", "weight_type", "dim"),
    [("llama", "F32", 64), ("qwen3", "F32", 64), ("llama", "Q4_0", 64), ("llama", "F32", 256), ("qwen3", "F32", 256)],
)
def test_a_q8_kv_cache_matches_a_reference_that_quantizes_keys_and_values_in_blocks(
    tmp_path: Path, arch: str, weight_type: str, dim: int
) -> None:
    """head_dim 16 (dim 64): one block per row; head_dim 64 (dim 256): two blocks of 32."""
    path = write_model(tmp_path / f"{arch}.gguf", arch, weight_type, seed=1, tied=True, dim=dim)
    metadata, weights = reference.load(path)
    rounded = reference.forward(metadata, weights, TOKENS, kv_dtype="q8")
    unrounded = reference.forward(metadata, weights, TOKENS)
    # the quantization is visible at this tolerance in the logits compared: an f32 (or f16) cache fails
    assert np.abs(rounded - unrounded)[5:].max() > 3 * Q8_CACHE_RTOL * np.abs(unrounded).max()
    check_against_reference(path, rtol=Q8_CACHE_RTOL, kv_cache="q8")


@pytest.mark.parametrize(("dim", "scales"), [(64, 1), (256, 2)])
def test_a_q8_kv_cache_holds_int8_codes_and_a_float32_scale_per_block(tmp_path: Path, dim: int, scales: int) -> None:
    """Per (position, KV head) row of keys and of values: head_dim int8 codes and 4 bytes per block of 32 features
    (one block for head_dim 16, two for 64): (head_dim + 4 * blocks) / (4 * head_dim) of an f32 cache's bytes."""
    path = write_model(tmp_path / "m.gguf", dim=dim)
    single, quarter = load_model(path, max_context=64)[0], load_model(path, max_context=64, kv_cache="q8")[0]
    head_dim = single.config.head_dim
    assert head_dim == dim // 4
    for wide, narrow in zip(single.caches, quarter.caches, strict=True):
        two, kv_heads, rows, _ = wide.shape
        assert narrow.dtype == dtypes.int8 and narrow.shape == (two, kv_heads, rows, head_dim + 4 * scales)
        assert cache_memory(narrow).nbytes == 2 * kv_heads * rows * (head_dim + 4 * scales)
        assert cache_memory(wide).nbytes == 2 * kv_heads * rows * head_dim * 4


def test_an_unknown_kv_cache_type_is_refused_with_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown KV cache type 'q4' \(--kv-cache\): choose one of f32, f16, q8"):
        load_model(tmp_path / "never-read.gguf", kv_cache="q4")


@pytest.mark.slow
@pytest.mark.parametrize(
    "weight_type",
    [
        "F16",
        "Q8_0",
        "Q4_0",
        "Q4_1",
        "Q5_0",
        "Q5_1",
        "Q4_K",
        "Q5_K",
        "Q6_K",
        "MXFP4",
        "Q2_K",
        "Q3_K",
        "IQ4_NL",
        "IQ4_XS",
    ],
)
def test_weight_types_match_the_reference(tmp_path: Path, weight_type: str) -> None:
    check_against_reference(write_model(tmp_path / "m.gguf", "llama", weight_type, seed=2, tied=False))


def test_prefix_reuse_feeds_only_the_new_tokens(tmp_path: Path) -> None:
    model, _ = load_model(write_model(tmp_path / "m.gguf"), max_context=64)
    generator = Generator(model, chunk_size=32)
    first = generator.prefill([1, 2, 3, 4, 5])
    second = generator.prefill([1, 2, 3, 4, 5, 42, 42, 10, 11, 12])
    assert generator.forward_calls == [(5, 0), (5, 5)]
    fresh = Generator(load_model(tmp_path / "m.gguf", max_context=64)[0]).prefill([1, 2, 3, 4, 5, 42, 42, 10, 11, 12])
    np.testing.assert_allclose(second, fresh, rtol=1e-4, atol=1e-4)
    generator.prefill([1, 2, 9])  # diverges at the third token: only it is recomputed
    assert generator.forward_calls[-1] == (1, 2)
    assert first.shape == (model.config.vocab_size,)


def test_context_overflow_is_an_error(tmp_path: Path) -> None:
    model, _ = load_model(write_model(tmp_path / "m.gguf"), max_context=8)
    with pytest.raises(ContextOverflowError, match="context"):
        Generator(model).prefill(list(range(9)))


def test_a_block_tensor_the_computation_needs_is_refused_by_name_when_missing(tmp_path: Path) -> None:
    """A block that lacks a tensor its path needs (here the MLP's down projection) names it instead of failing
    later on None; a present one is passed through."""
    model, _ = load_model(write_model(tmp_path / "m.gguf"), max_context=8)
    block = model.blocks[0]
    assert block.down is not None and block_tensor(block.down, "ffn_down.weight") is block.down
    block.down = None
    x = Tensor(np.ones((1, model.config.dim), np.float32))
    with pytest.raises(UnsupportedModelError, match=r"blk\.\*\.ffn_down\.weight"):
        model.feed_forward(block, x)
    with pytest.raises(UnsupportedModelError, match=r"blk\.3\.attn_norm\.weight"):
        block_tensor(None, "attn_norm.weight", 3)


def test_top_k_ties_go_to_the_lower_index() -> None:
    scores = Tensor(np.array([[0.5, 0.2, 0.5, 0.5], [0.1, 0.3, 0.3, 0.0]], dtype=np.float32))
    assert top_k_mask(scores, 2).numpy().tolist() == [[True, False, True, False], [False, True, True, False]]


def greedy_decode(path: Path, steps: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy tokens and each step's logits, from a fresh model (prefill of 6, then one token at a time)."""
    model, _ = load_model(path, max_context=96)
    generator = Generator(model, chunk_size=4)
    logits = generator.prefill(TOKENS[:6])
    tokens, all_logits = [], [logits]
    for _ in range(steps):
        tokens.append(int(np.argmax(logits)))
        logits = generator._forward([tokens[-1]], len(generator.cached))
        generator.cached.append(tokens[-1])
        all_logits.append(logits)
    return tokens, all_logits


@pytest.mark.parametrize("weight_type", ["Q4_1", "Q6_K"])  # a fused matvec, and the generic decode + matmul
def test_jitted_decode_equals_the_plain_one(tmp_path: Path, weight_type: str) -> None:
    """TinyJit replays of the one decode capture (the position is a kernel argument) give the plain path's logits
    bit for bit, at every position from 6 to 67."""
    path = write_model(tmp_path / "m.gguf", "llama", weight_type, seed=3, tied=True)
    with Context(JIT=0):
        plain_tokens, plain_logits = greedy_decode(path, 62)
    jit_tokens, jit_logits = greedy_decode(path, 62)
    assert jit_tokens == plain_tokens
    for plain, jitted in zip(plain_logits, jit_logits, strict=True):
        np.testing.assert_array_equal(jitted, plain)


def test_one_decode_capture_serves_every_position(tmp_path: Path) -> None:
    """After the first decode step nothing is compiled, scheduled or captured again, up to the end of the context;
    a chunk shorter than BLOCK_ROWS[0] goes through the same capture token by token."""
    model, _ = load_model(write_model(tmp_path / "m.gguf"), max_context=96)
    generator = Generator(model, chunk_size=4)
    generator.prefill(TOKENS[:6])  # chunks of 4 and 2: six replays of the decode step
    compiled, step = program_cache_stats.misses, model.decode_step
    assert step is not None and step.calls == 6
    graph = step.graph
    for position in range(6, 96):
        generator._forward([1], position)
    assert program_cache_stats.misses == compiled
    assert model.decode_step is step and step.graph is graph and step.calls == 96


def test_decode_reads_only_the_filled_cache_rows(tmp_path: Path) -> None:
    """Cache rows past the current position are never read: filling them with NaN leaves the logits unchanged."""
    path = write_model(tmp_path / "m.gguf")
    logits = []
    for poison in (False, True):
        model, _ = load_model(path, max_context=64)
        generator = Generator(model, chunk_size=4)
        generator.prefill(TOKENS[:6])
        if poison:
            for cache in model.caches:
                _, kv_heads, rows, head_dim = cache.shape
                rows = np.full((rows - 6, 2, kv_heads, head_dim), np.nan, np.float32)
                write_cache_rows(cache, memoryview(rows).cast("B"), 6)
        logits.append([generator._forward([token], 6 + i) for i, token in enumerate([3, 9, 27])])
    np.testing.assert_array_equal(np.array(logits[1]), np.array(logits[0]))


@pytest.mark.parametrize("arch", ["phi3", "gemma3"])
def test_a_sliding_window_decode_reads_only_the_window_and_the_filled_rows(tmp_path: Path, arch: str) -> None:
    """The decode step of a sliding-window block reads the key tiles of its window only (SlidingWindow): with the
    cache rows before the window (phi3: every block slides) and past the position (every block) filled with NaN,
    the logits are unchanged (window 4: the steps at positions 22..24 see rows 19..24)."""
    path = write_model(tmp_path / f"{arch}.gguf", arch, seed=3, sliding_window=4)
    prompt = [(7 * i + 3) % 250 for i in range(22)]
    logits = []
    for poison in (False, True):
        model, _ = load_model(path, max_context=64)
        generator = Generator(model, chunk_size=8)
        generator.prefill(prompt)
        if poison:
            for cache in model.caches:
                _, kv_heads, rows, head_dim = cache.shape
                after = np.full((rows - len(prompt), 2, kv_heads, head_dim), np.nan, np.float32)
                write_cache_rows(cache, memoryview(after).cast("B"), len(prompt))
                if arch == "phi3":  # the rows no query from position 22 on sees: all but the last 3
                    before = np.full((len(prompt) - 3, 2, kv_heads, head_dim), np.nan, np.float32)
                    write_cache_rows(cache, memoryview(before).cast("B"), 0)
        logits.append([generator._forward([token], len(prompt) + i) for i, token in enumerate([3, 9, 27])])
    assert np.isfinite(np.array(logits[1])).all()
    np.testing.assert_array_equal(np.array(logits[1]), np.array(logits[0]))


def test_kv_window_rounds_up_to_64_then_multiples_of_128() -> None:
    """(The server's batched steps attend over these windows of the cache.)"""
    assert kv_window(6, 96) == kv_window(11, 96) == kv_window(64, 96) == 64 and kv_window(65, 96) == 96
    assert kv_window(129, 4096) == kv_window(256, 4096) == 256 and kv_window(257, 4096) == 384
    assert kv_window(90, 100) == 112  # at most the context rounded up to whole key tiles (16 rows)


@pytest.mark.parametrize(
    ("arch", "weight_type"),
    [("llama", "F32"), ("llama", "Q4_1"), ("llama", "Q6_K"), ("qwen2", "F32"), ("qwen3", "F32"), ("olmoe", "F32")],
)
def test_long_prefill_chunks_match_the_reference(tmp_path: Path, arch: str, weight_type: str) -> None:
    """A chunk of >= SCRATCH_MATMUL_ROWS tokens multiplies through a decoded float scratch matrix, not the matvec,
    in a block forward captured once and replayed per block (biases, q/k norms and experts are inputs too)."""
    path = write_model(tmp_path / "m.gguf", arch, weight_type, seed=4, tied=False)
    tokens = [(7 * i + 3) % 250 for i in range(SCRATCH_MATMUL_ROWS + 4)]
    metadata, weights = reference.load(path)
    expected = reference.forward(metadata, weights, tokens)
    logits = Generator(load_model(path, max_context=64)[0], chunk_size=32).prefill(tokens)
    np.testing.assert_allclose(logits, expected[-1], atol=2e-3 * np.abs(expected).max())


@pytest.mark.parametrize(("kv_cache", "rtol"), [("f16", F16_CACHE_RTOL), ("q8", Q8_CACHE_RTOL)])
def test_long_prefill_chunks_and_the_decode_after_them_round_to_the_kv_cache_type(
    tmp_path: Path, kv_cache: str, rtol: float
) -> None:
    """A long chunk's block capture stores its keys and values as float16 (int8 rows) and attends over them so
    stored, as do the decode steps after it (which read the chunk's rows back)."""
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=4, tied=False)
    tokens = [(7 * i + 3) % 250 for i in range(SCRATCH_MATMUL_ROWS + 6)]
    metadata, weights = reference.load(path)
    expected = reference.forward(metadata, weights, tokens, kv_dtype=REFERENCE_KV[kv_cache])
    unrounded = reference.forward(metadata, weights, tokens)
    scale = np.abs(expected).max()
    assert np.abs(expected - unrounded)[-3:].max() > 3 * rtol * scale  # the rounding shows at this tolerance
    generator = Generator(load_model(path, max_context=64, kv_cache=kv_cache)[0], chunk_size=32)
    np.testing.assert_allclose(generator.prefill(tokens[:-2]), expected[-3], atol=rtol * scale)
    for position in (len(tokens) - 2, len(tokens) - 1):
        logits = generator._forward([tokens[position]], position)
        np.testing.assert_allclose(logits, expected[position], atol=rtol * scale)


@pytest.mark.parametrize("weight_type", ["F32", "Q4_1"])
def test_a_long_chunk_replays_one_block_capture_for_every_block(tmp_path: Path, weight_type: str) -> None:
    """A chunk of SCRATCH_MATMUL_ROWS+ tokens (padded to 32 rows) captures one block's forward and replays it with
    each block's weights and cache: the logits and the cache equal the plain path's bit for bit, and the next chunk
    (another position in the same KV window) replays the same capture, until decoding starts."""
    path = write_model(tmp_path / "m.gguf", "llama", weight_type, seed=5, tied=True)
    tokens = [(11 * i + 3) % 250 for i in range(40)]
    results = []
    for jit in (0, 1):
        model, _ = load_model(path, max_context=64)
        with Context(JIT=jit):
            first, second = model.forward(tokens[:20], 0).numpy(), model.forward(tokens[20:], 20).numpy()
        results.append((first, second, [cache.numpy()[:40] for cache in model.caches]))
    (plain_first, plain_second, plain_caches), (first, second, caches) = results
    np.testing.assert_array_equal(first, plain_first)
    np.testing.assert_array_equal(second, plain_second)
    for plain, jitted in zip(plain_caches, caches, strict=True):
        np.testing.assert_array_equal(jitted, plain)
    (step,) = model.block_steps.values()
    assert step.graph is not None and step.calls == 2 * len(model.blocks)
    model.block_float_bytes = KEPT_CHUNK_CAPTURE_BYTES + 1  # as a model too big to keep a short prompt's capture
    model.forward([1], 40)  # the first decode step frees the chunk captures (their float scratch weights)
    assert not model.block_steps


def test_a_chunk_over_a_wider_window_frees_the_captures_of_narrower_ones(tmp_path: Path) -> None:
    """A long prompt's chunks attend over growing KV windows; each window's block capture holds a block's float
    scratch weights, and a prompt held all of them until decoding (SmolLM2's 1,024 tokens: a 361 MB peak against
    243 MB fed a chunk at a time). A chunk that needs a wider window now frees the narrower captures, and the logits
    stay the plain path's."""
    path = write_model(tmp_path / "m.gguf", "llama", "Q4_1", seed=7, tied=True)
    tokens = [(7 * i + 2) % 250 for i in range(140)]
    chunks = [(0, 20), (120, 140)]  # KV windows of 128 and 256 rows
    results = []
    for jit in (0, 1):
        model, _ = load_model(path, max_context=256)
        model.block_float_bytes = KEPT_CHUNK_CAPTURE_BYTES + 1  # (no short prompt's capture is kept)
        model.forward(tokens[:120], 0)  # the cache rows the later chunks attend over
        windows, logits = [], []
        with Context(JIT=jit):
            for start, end in chunks:
                logits.append(model.forward(tokens[start:end], start).numpy())
                windows.append(sorted({key[1] for key in model.block_steps}))
        results.append((windows, logits))
    (_, plain), (windows, jitted) = results
    assert windows == [[128], [256]]
    for plain_logits, jitted_logits in zip(plain, jitted, strict=True):
        np.testing.assert_array_equal(jitted_logits, plain_logits)


def test_a_43_token_prompt_runs_in_48_rows_and_keeps_its_capture_for_the_next_conversation(tmp_path: Path) -> None:
    """A short chat prompt of 43 tokens is one chunk padded to 48 rows (not 64): its logits and KV cache rows equal
    the plain path's bit for bit and the reference's logits. A short prompt's first chunk capture stays through
    decoding, so a new conversation's prompt replays it (no second capture, no load from the capture store), as it
    replays the capture of the chunk's logits."""
    path = write_model(tmp_path / "m.gguf", "llama", "Q4_1", seed=6, tied=True)
    tokens = [(13 * i + 5) % 250 for i in range(43)]
    metadata, weights = reference.load(path)
    expected = reference.forward(metadata, weights, tokens)
    results = []
    for jit in (0, 1):
        model, _ = load_model(path, max_context=64)
        generator = Generator(model)
        with Context(JIT=jit):
            logits = generator.prefill(tokens)
        results.append((logits, [cache.numpy()[:, :, :48] for cache in model.caches]))  # whole key tiles
    (plain_logits, plain_caches), (logits, caches) = results
    np.testing.assert_array_equal(logits, plain_logits)
    for plain, jitted in zip(plain_caches, caches, strict=True):
        np.testing.assert_array_equal(jitted, plain)
    np.testing.assert_allclose(logits, expected[-1], atol=2e-3 * np.abs(expected).max())
    (((rows, *_), step),) = model.block_steps.items()
    assert rows == 48 and step.calls == len(model.blocks)
    list(generator.generate(tokens, 3))  # decode steps after the prompt
    model.capture_store = None  # the next prompt must not load its capture again
    generator.cached = []  # a new conversation
    again = generator.prefill([(3 * i + 1) % 250 for i in range(40)])
    assert list(model.block_steps.values()) == [step] and step.calls == 2 * len(model.blocks)
    assert model.chunk_logits_steps[48].calls == 2  # the last row's logits are a capture too, replayed
    again_expected = reference.forward(metadata, weights, [(3 * i + 1) % 250 for i in range(40)])
    np.testing.assert_allclose(again, again_expected[-1], atol=2e-3 * np.abs(again_expected).max())


def test_a_decode_step_reads_each_quantized_matrix_in_one_kernel(tmp_path: Path) -> None:
    """Regression: a matvec fused into its consumers (the qkv projection into both the queries' RoPE and the cache
    assign) decoded the weight once per consumer, in kernels that ran unvectorized; each matrix's words are read by
    exactly one kernel of the captured step."""
    from tg.codegen.schedule.realize import whole_buffer
    from tg.hcq.engine.buffers import buffer_of
    from tg.hcq.engine.capture import KernelLaunch
    from tg.llm.lanes import LaneBlocks

    model, _ = load_model(write_model(tmp_path / "m.gguf", "llama", "Q4_1"), max_context=32)
    Generator(model, chunk_size=4).prefill(TOKENS[:3])
    assert model.decode_step is not None and model.decode_step.graph is not None
    launches = [launch for launch in model.decode_step.graph.launches if isinstance(launch, KernelLaunch)]
    matrices = [w.data.words for w in model.weights.values() if isinstance(w.data, LaneBlocks)]
    assert matrices
    for words in matrices:
        memory = buffer_of(whole_buffer(words.uop))
        readers = [launch for launch in launches if any(buffer is memory for buffer in launch.buffers)]
        assert len(readers) == 1, (words.shape, [launch.program for launch in readers])


def launch_reading(launches: list, tensor: Tensor) -> int:
    """The position in `launches` of the one kernel that reads `tensor`'s buffer."""
    from tg.codegen.schedule.realize import whole_buffer
    from tg.hcq.engine.buffers import buffer_of

    memory = buffer_of(whole_buffer(tensor.uop))
    (position,) = [i for i, launch in enumerate(launches) if any(buffer is memory for buffer in launch.buffers)]
    return position


def test_every_kernel_of_the_captured_decode_step_is_compiled_for_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decode step's kernels are compiled inside its capture, for replay (CodegenFlags.replayed: split across
    cores from fewer iterations, as a replay runs them in one C call per core thread); its logits are those of the
    plain run, bit for bit (a split cuts output loops, never a sum)."""
    import tg.hcq.engine.programs as programs
    from tg.hcq.engine.capture import KernelLaunch

    compiled_with: dict[int, bool] = {}  # id of each program compiled here -> whether it was compiled for replay
    compile_program = programs.compile_program

    def recording(device_name, ast, flags):  # type: ignore[no-untyped-def]
        program = compile_program(device_name, ast, flags)
        compiled_with[id(program)] = flags.replayed
        return program

    programs.clear_program_cache()
    monkeypatch.setattr(programs, "compile_program", recording)
    path = write_model(tmp_path / "m.gguf", "llama", "Q4_1", tied=False)
    model, _ = load_model(path, max_context=32)
    replayed = [Generator(model, chunk_size=4).prefill(TOKENS[:3])]
    replayed += [model.forward([token], position).numpy() for position, token in enumerate(TOKENS[3:6], start=3)]
    assert model.decode_step is not None and model.decode_step.graph is not None
    launches = [launch for launch in model.decode_step.graph.launches if isinstance(launch, KernelLaunch)]
    assert launches and all(compiled_with[id(launch.program)] for launch in launches)
    with Context(JIT=0):
        plain_model, _ = load_model(path, max_context=32)
        plain = [Generator(plain_model, chunk_size=4).prefill(TOKENS[:3])]
        plain += [plain_model.forward([token], position).numpy() for position, token in enumerate(TOKENS[3:6], start=3)]
    for replayed_logits, plain_logits in zip(replayed, plain, strict=True):
        np.testing.assert_array_equal(replayed_logits, plain_logits)


def test_a_decode_block_runs_its_norms_matvecs_and_mlp_in_four_kernels(tmp_path: Path) -> None:
    """Each RMSNorm runs inside the matvec after it, silu(gate) * up inside the gate_up matvec, and each residual
    add inside the matvec before it: from the attention output's matvec on, a block is the attention output, the
    gate_up and the down matvecs, then the next block's qkv matvec (or the logits' matvec) right after. A fusion
    undone puts a kernel between two of them. The whole block: at most 13 kernels (17 before these fusions; the
    key-tile cache writes keys and values in two kernels)."""
    from tg.hcq.engine.capture import KernelLaunch

    model, _ = load_model(write_model(tmp_path / "m.gguf", "llama", "Q4_1", tied=False), max_context=32)
    Generator(model, chunk_size=4).prefill(TOKENS[:3])
    assert model.decode_step is not None and model.decode_step.graph is not None
    launches = [launch for launch in model.decode_step.graph.launches if isinstance(launch, KernelLaunch)]

    def reader(weight: Weight | None) -> int:
        assert weight is not None and isinstance(weight.data, LaneBlocks)
        return launch_reading(launches, weight.data.words)

    starts, next_starts = [], []
    for block in model.blocks:
        qkv, output, gate_up, down = (reader(w) for w in (block.qkv, block.output, block.gate_up, block.down))
        assert qkv < output and (gate_up, down) == (output + 1, output + 2)
        assert launches[gate_up].buffers[0].size == model.config.hidden_dim  # it writes silu(gate) * up
        starts.append(qkv)
        next_starts.append(down + 1)
    assert next_starts == [*starts[1:], reader(model.output)]
    assert all(end - start <= 13 for start, end in zip(starts, next_starts, strict=True))


def decode_step_ops(path: Path) -> int:
    """Estimated ALU operations of one plain (not replayed) decode step."""
    from tg.tensor import GlobalCounters

    model, _ = load_model(path, max_context=16)
    model.forward([1, 2, 3], 0)
    GlobalCounters.reset()
    with Context(JIT=0):
        model.forward([4], 3)
    return GlobalCounters.global_ops


def test_a_decode_step_runs_only_the_chosen_experts(tmp_path: Path) -> None:
    """Two of 4 or two of 16 experts per token: the decode step's work barely changes (the router grows by a few
    rows), where running every expert would make the expert part four times larger."""
    few = decode_step_ops(write_model(tmp_path / "e4.gguf", "olmoe", "F32", seed=3, experts=4))
    many = decode_step_ops(write_model(tmp_path / "e16.gguf", "olmoe", "F32", seed=3, experts=16))
    assert many < 1.1 * few


@pytest.mark.parametrize("weight_type", ["F32", "Q8_0"])
def test_many_experts_match_the_reference_in_prefill_and_decode(tmp_path: Path, weight_type: str) -> None:
    """Prefill chunks run every expert (T * k >= E), decode steps gather the chosen experts' (quantized) weights."""
    check_against_reference(write_model(tmp_path / "m.gguf", "qwen3moe", weight_type, seed=4, experts=8))
