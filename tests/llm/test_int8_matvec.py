"""The int8-activation matvec (tg.llm.int8_matvec) against a float64 reference that quantizes the activations the
same way, on weights decoded by the gguf package; its VNNI code; and `--matvec int8` end to end."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from tg.hcq.device import Device
from tg.llm import registry
from tg.llm.int8_matvec import (
    Int8Matvec,
    int8_gated_matvec,
    int8_lane_matvec,
    reference_ast,
    use_int8_activations,
    vnni_program,
)
from tg.llm.lanes import RMSNorm
from tg.llm.model import load_model
from tg.llm.sampling import SamplingOptions
from tg.llm.session import Session
from tg.llm.weights import Weight, gated_linear, linear, quantized_weight
from tg.tensor import GlobalCounters, Tensor

TYPES = {"Q4_1": GGMLQuantizationType.Q4_1, "Q8_0": GGMLQuantizationType.Q8_0}
BLOCK_BYTES = {"Q4_1": 20, "Q8_0": 34}
ROWS, COLS = 40, 256  # rows: not a multiple of 16 (a padded lane group); 8 blocks
GATED_ROWS = 64  # a gate_up projection: 32 gate rows, then 32 up rows

needs_vnni = pytest.mark.skipif(
    not Device[Device.DEFAULT].renderer.target.int8_dot, reason="the CPU's Target has no int8_dot (AVX-512 VNNI)"
)


def random_blocks(type_name: str, seed: int = 0, rows: int = ROWS) -> np.ndarray:
    """Random `(rows, blocks, block bytes)` blocks with small fp16 scales (and Q4_1 mins)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, COLS // 32, BLOCK_BYTES[type_name]), dtype=np.uint8)
    for offset in (0, 2) if type_name == "Q4_1" else (0,):
        halves = rng.uniform(-0.05, 0.05, size=raw.shape[:-1]).astype(np.float16)
        raw[..., offset : offset + 2] = halves.view(np.uint8).reshape(*raw.shape[:-1], 2)
    return raw


def q8_1(v: np.ndarray) -> np.ndarray:
    """The activations as the kernel rounds them, in float64: codes rint(v * 127 / max|v|) per block of 32 (the
    products in float32, as the kernel forms them), times the block's scale max|v| / 127."""
    blocks = v.astype(np.float32).reshape(-1, 32)
    largest = np.abs(blocks).max(-1, keepdims=True)
    inverse = np.where(largest > 0, np.float32(127) / np.where(largest > 0, largest, 1), np.float32(0))
    codes = np.rint(blocks * inverse.astype(np.float32))
    assert np.abs(codes).max() <= 127
    return (codes * (largest.astype(np.float64) * np.float32(1 / 127))).reshape(-1)


def reference(raw: np.ndarray, type_name: str, x: np.ndarray, norm: np.ndarray | None, eps: float) -> np.ndarray:
    """float64 (W @ quantized(x * norm)) * rsqrt(mean(x^2) + eps), W decoded by the gguf package."""
    weights = dequantize(raw.reshape(raw.shape[0], -1), TYPES[type_name]).astype(np.float64)
    scaled = x if norm is None else (x.astype(np.float32) * norm.astype(np.float32))
    out = weights @ q8_1(scaled)
    if norm is not None:
        out = out / np.sqrt(np.mean(x.astype(np.float64) ** 2) + eps)
    return out


def float_reference(raw: np.ndarray, type_name: str, x: np.ndarray) -> np.ndarray:
    return dequantize(raw.reshape(raw.shape[0], -1), TYPES[type_name]).astype(np.float64) @ x.astype(np.float64)


@needs_vnni
@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("with_norm", [False, True])
def test_int8_matvec_matches_a_float64_reference_with_the_same_activation_codes(type_name, with_norm) -> None:
    raw, rng = random_blocks(type_name), np.random.default_rng(1)
    x = rng.standard_normal(COLS).astype(np.float32)
    x[32:64] = 0.0  # a block of zeros: scale 0, no division by zero
    norm_weight = rng.uniform(0.5, 1.5, COLS).astype(np.float32) if with_norm else None
    weight = quantized_weight(raw, TYPES[type_name], (ROWS, COLS))
    norm = None if norm_weight is None else RMSNorm(Tensor(norm_weight), 1e-5)
    got = int8_lane_matvec(Tensor(x.reshape(1, -1)), weight.data, norm).numpy().reshape(-1)
    expected = reference(raw, type_name, x, norm_weight, 1e-5)
    tolerance = 2e-5 * np.abs(expected).max()  # float32 sums of exact products
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)
    # the activations' rounding moves the result by far more than the tolerance: float math would fail above
    unrounded = float_reference(raw, type_name, x if norm_weight is None else x * norm_weight)
    if norm_weight is not None:
        unrounded = unrounded / np.sqrt(np.mean(x.astype(np.float64) ** 2) + 1e-5)
    assert np.abs(unrounded - expected).max() > 20 * tolerance


@needs_vnni
@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("with_norm", [False, True])
def test_the_ir_reference_kernel_computes_what_the_vnni_kernel_does(type_name, with_norm) -> None:
    """The PROGRAM's AST, compiled by tg's C renderer (scalar code, no VNNI), gives the VNNI kernel's results."""
    from tg.hcq.engine.programs import to_program

    raw = random_blocks(type_name, seed=2)
    weight = quantized_weight(raw, TYPES[type_name], (ROWS, COLS))
    x = Tensor(np.random.default_rng(3).standard_normal((1, COLS)).astype(np.float32))
    norm = RMSNorm(Tensor(np.linspace(0.5, 1.5, COLS, dtype=np.float32)), 1e-6) if with_norm else None
    vnni = int8_lane_matvec(x, weight.data, norm).numpy().reshape(-1)
    groups, n_blocks = weight.data.words.shape[:2]
    kernel = Int8Matvec(type_name, groups, n_blocks, None if norm is None else norm.eps)
    program = to_program(reference_ast(kernel), Device.DEFAULT)
    inputs = (weight.data.words, x.reshape(-1), *([] if norm is None else [norm.weight]))
    (out, *_) = Tensor.empty(groups * 16).custom_kernel(*inputs, fxn=lambda *_: program)
    np.testing.assert_allclose(out.numpy()[:ROWS], vnni, rtol=0, atol=1e-5 * np.abs(vnni).max())


def silu(v: np.ndarray) -> np.ndarray:
    return v / (1 + np.exp(-v))


@needs_vnni
@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("with_norm", [False, True])
def test_the_gated_int8_matvec_is_silu_of_the_gate_times_the_up_projection(type_name, with_norm) -> None:
    raw, rng = random_blocks(type_name, seed=5, rows=GATED_ROWS), np.random.default_rng(6)
    x = rng.standard_normal(COLS).astype(np.float32)
    norm_weight = rng.uniform(0.5, 1.5, COLS).astype(np.float32) if with_norm else None
    weight = quantized_weight(raw, TYPES[type_name], (GATED_ROWS, COLS))
    norm = None if norm_weight is None else RMSNorm(Tensor(norm_weight), 1e-5)
    got = int8_gated_matvec(Tensor(x.reshape(1, -1)), weight.data, norm).numpy().reshape(-1)
    both = reference(raw, type_name, x, norm_weight, 1e-5)
    gate, up = both[: GATED_ROWS // 2], both[GATED_ROWS // 2 :]
    expected = silu(gate) * up
    tolerance = 4e-5 * np.abs(gate).max() * np.abs(up).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)
    assert np.abs(gate * up - expected).max() > 20 * tolerance  # the activation is applied (not the bare product)


@needs_vnni
@pytest.mark.parametrize("with_norm", [False, True])
def test_the_gated_ir_reference_kernel_computes_what_the_vnni_kernel_does(with_norm) -> None:
    from tg.hcq.engine.programs import to_program

    raw = random_blocks("Q4_1", seed=7, rows=GATED_ROWS)
    weight = quantized_weight(raw, TYPES["Q4_1"], (GATED_ROWS, COLS))
    x = Tensor(np.random.default_rng(8).standard_normal((1, COLS)).astype(np.float32))
    norm = RMSNorm(Tensor(np.linspace(0.5, 1.5, COLS, dtype=np.float32)), 1e-6) if with_norm else None
    vnni = int8_gated_matvec(x, weight.data, norm).numpy().reshape(-1)
    groups, n_blocks = weight.data.words.shape[:2]
    kernel = Int8Matvec("Q4_1", groups, n_blocks, None if norm is None else norm.eps, gated=True)
    program = to_program(reference_ast(kernel), Device.DEFAULT)
    inputs = (weight.data.words, x.reshape(-1), *([] if norm is None else [norm.weight]))
    (out, *_) = Tensor.empty(GATED_ROWS // 2).custom_kernel(*inputs, fxn=lambda *_: program)
    np.testing.assert_allclose(out.numpy(), vnni, rtol=0, atol=1e-5 * np.abs(vnni).max())


@needs_vnni
def test_gated_linear_with_int8_activations_is_one_kernel() -> None:
    raw = random_blocks("Q8_0", seed=9, rows=GATED_ROWS)
    weight = quantized_weight(raw, TYPES["Q8_0"], (GATED_ROWS, COLS))
    use_int8_activations([weight])
    x = Tensor(np.random.default_rng(10).standard_normal((1, COLS)).astype(np.float32)).realize()
    norm = RMSNorm(Tensor(np.linspace(0.5, 1.5, COLS, dtype=np.float32)).realize(), 1e-5)
    GlobalCounters.reset()
    hidden = gated_linear(x, weight, norm).realize()
    assert GlobalCounters.kernel_count == 1
    both = reference(raw, "Q8_0", x.numpy().reshape(-1), norm.weight.numpy(), 1e-5)
    expected = silu(both[: GATED_ROWS // 2]) * both[GATED_ROWS // 2 :]
    np.testing.assert_allclose(hidden.numpy().reshape(-1), expected, rtol=0, atol=1e-4 * np.abs(expected).max())


@needs_vnni
@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
@pytest.mark.parametrize("type_name", TYPES)
def test_the_compiled_kernel_multiplies_with_vpdpbusd(type_name) -> None:
    program = vnni_program(Int8Matvec(type_name, 3, 8, None), Device.DEFAULT)
    with tempfile.TemporaryDirectory() as folder:
        library = Path(folder) / "kernel.so"
        library.write_bytes(program.src[2].arg)
        listing = subprocess.run(["objdump", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "vpdpbusd" in listing


def test_int8_activations_are_refused_where_the_target_has_no_vnni(monkeypatch) -> None:
    renderer = Device[Device.DEFAULT].renderer
    monkeypatch.setattr(renderer, "target", dataclasses.replace(renderer.target, int8_dot=False))
    weight = quantized_weight(random_blocks("Q4_1"), TYPES["Q4_1"], (ROWS, COLS))
    with pytest.raises(ValueError, match="needs AVX-512 VNNI"):
        use_int8_activations([weight])


def test_an_unknown_matvec_type_is_refused_before_the_file_is_read() -> None:
    with pytest.raises(ValueError, match="unknown matvec 'int4'.*float, int8"):
        load_model("/nonexistent.gguf", matvec="int4")


@needs_vnni
def test_linear_takes_the_int8_matvec_only_for_marked_weights() -> None:
    raw = random_blocks("Q4_1")
    x = np.random.default_rng(4).standard_normal(COLS).astype(np.float32)
    plain, marked = (quantized_weight(raw, TYPES["Q4_1"], (ROWS, COLS)) for _ in range(2))
    use_int8_activations([marked])
    expected = reference(raw, "Q4_1", x, None, 0.0)
    tolerance = 2e-5 * np.abs(expected).max()
    np.testing.assert_allclose(run_linear(marked, x), expected, rtol=0, atol=tolerance)
    assert np.abs(run_linear(plain, x) - expected).max() > 20 * tolerance  # the float kernel: unrounded x


def run_linear(weight: Weight, x: np.ndarray) -> np.ndarray:
    return linear(Tensor(x.reshape(1, -1)), weight).numpy().reshape(-1)


@needs_vnni
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_smollm2_answers_the_week_question_alike_with_int8_activations() -> None:
    """The embedded model's greedy answer (tests/llm/test_embedded.py) holds with `--matvec int8`."""
    session = Session.load(registry.resolve(registry.EMBEDDED_NAME), max_context=256, matvec="int8")
    assert session.model.output.data.int8_activations  # (the Q8_0 output head takes it too)
    tokens = session.prompt_tokens("How many days are in a week?")
    generated = list(session.generator.generate(tokens, 20, SamplingOptions(), session.tokenizer.is_end))
    assert session.tokenizer.decode(generated[:-1]) == "A week is approximately 7 days."
    assert session.tokenizer.tokens[generated[-1]] == "<|im_end|>"
