"""The lane layout of quantized matrices (tg.llm.lanes): same bits as `gguf.quants.dequantize`, a matvec that agrees
with a float64 product of the reference values, and kernels made of 32-bit loads only."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.quants import dequantize as reference_dequantize  # noqa: E402
from llm_fixtures import HALF_OFFSETS  # noqa: E402

from tg.llm.lanes import (  # noqa: E402
    ALIGNED_GAP,
    DOT_CHAINS,
    LaneBlocks,
    RMSNorm,
    Words,
    e2m1_doubled_by_shift,
    half_bits_to_float,
)
from tg.llm.quants import e2m1_doubled  # noqa: E402
from tg.llm.weights import gated_linear, linear, quantized_weight  # noqa: E402
from tg.tensor import Context, Tensor  # noqa: E402


def random_matrix(name: str, rows: int, blocks: int, seed: int, scale_range: float = 2.0) -> np.ndarray:
    """Random blocks `(rows, blocks, block_bytes)` with finite fp16 fields (one subnormal) and, for MXFP4,
    exponents that keep the values finite."""
    _, block_bytes = gguf.GGML_QUANT_SIZES[QT[name]]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, blocks, block_bytes), dtype=np.uint8)
    for offset in HALF_OFFSETS[name]:
        scales = rng.uniform(-scale_range, scale_range, size=(rows, blocks)).astype(np.float16)
        scales[0, 0] = np.float16(6.0e-5)  # subnormal
        raw[..., offset : offset + 2] = scales.view(np.uint8).reshape(rows, blocks, 2)
    if name == "MXFP4":
        raw[..., 0] = rng.integers(110, 140, size=(rows, blocks))
    return raw


@pytest.mark.parametrize("name", sorted(ALIGNED_GAP))
def test_lane_weights_decode_to_the_reference_bits(name: str) -> None:
    """20 rows: one full group of 16 and one padded with zero rows, which must not show."""
    elements, _ = gguf.GGML_QUANT_SIZES[QT[name]]
    raw = random_matrix(name, rows=20, blocks=2, seed=len(name))
    expected = reference_dequantize(raw.reshape(20, -1), QT[name]).astype(np.float32)
    weight = quantized_weight(raw, int(QT[name]), (20, 2 * elements))
    assert isinstance(weight.data, LaneBlocks)
    actual = weight.float().numpy()
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual.view(np.uint32), expected.view(np.uint32))
    transposed = weight.transposed_float().numpy()  # the prefill's scratch matrix, decoded rows-last
    np.testing.assert_array_equal(transposed.view(np.uint32), expected.T.view(np.uint32))


@pytest.mark.parametrize("name", sorted(ALIGNED_GAP))
def test_lane_matvec_matches_a_float64_product(name: str) -> None:
    elements, _ = gguf.GGML_QUANT_SIZES[QT[name]]
    raw = random_matrix(name, rows=36, blocks=3, seed=5, scale_range=0.5)
    reference = reference_dequantize(raw.reshape(36, -1), QT[name]).astype(np.float64)
    x = np.random.default_rng(9).standard_normal((2, 3 * elements)).astype(np.float32)
    actual = linear(Tensor(x), quantized_weight(raw, int(QT[name]), (36, 3 * elements))).numpy()
    expected = x.astype(np.float64) @ reference.T
    assert actual.shape == (2, 36)
    # float32 sums of 96..768 products: within a few float32 ulps of the largest partial sum
    bound = 1e-5 * np.abs(x).astype(np.float64) @ np.abs(reference).T
    assert np.all(np.abs(actual - expected) <= bound + 1e-30)


def rms_normed(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """The float64 RMSNorm of the rows of x."""
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * weight.astype(np.float64)


@pytest.mark.parametrize("name", sorted(ALIGNED_GAP))
def test_lane_matvec_with_the_norm_inside_matches_a_float64_product(name: str) -> None:
    """norm(x) @ W.T in one kernel, the norm's rsqrt applied to the outputs: the float64 product of the normalized
    row, within float32 rounding of the sums."""
    elements, _ = gguf.GGML_QUANT_SIZES[QT[name]]
    raw = random_matrix(name, rows=36, blocks=3, seed=6, scale_range=0.5)
    reference = reference_dequantize(raw.reshape(36, -1), QT[name]).astype(np.float64)
    rng = np.random.default_rng(10)
    x = (3 * rng.standard_normal((1, 3 * elements))).astype(np.float32)
    norm_weight = rng.uniform(0.5, 2.0, 3 * elements).astype(np.float32)
    weight = quantized_weight(raw, int(QT[name]), (36, 3 * elements))
    actual = linear(Tensor(x), weight, norm=RMSNorm(Tensor(norm_weight), 1e-5)).numpy()
    normed = rms_normed(x, norm_weight, 1e-5)
    expected = normed @ reference.T
    bound = 1e-5 * np.abs(normed) @ np.abs(reference).T
    assert np.all(np.abs(actual - expected) <= bound + 1e-30)


@pytest.mark.parametrize("name", ["Q4_1", "Q6_K"])
def test_gated_matvec_is_silu_of_the_gate_times_the_up_projection(name: str) -> None:
    """A fused gate_up matrix (gate's rows then up's) with the norm: silu(gate) * up, against float64."""
    elements, _ = gguf.GGML_QUANT_SIZES[QT[name]]
    hidden = 32  # two lane groups per half
    raw = random_matrix(name, rows=2 * hidden, blocks=2, seed=7, scale_range=0.2)
    reference = reference_dequantize(raw.reshape(2 * hidden, -1), QT[name]).astype(np.float64)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 2 * elements)).astype(np.float32)
    norm_weight = rng.uniform(0.5, 2.0, 2 * elements).astype(np.float32)
    weight = quantized_weight(raw, int(QT[name]), (2 * hidden, 2 * elements))
    actual = gated_linear(Tensor(x), weight, RMSNorm(Tensor(norm_weight), 1e-5)).numpy()
    both = rms_normed(x, norm_weight, 1e-5) @ reference.T
    gate, up = both[:, :hidden], both[:, hidden:]
    expected = gate / (1 + np.exp(-gate)) * up
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("name", sorted(ALIGNED_GAP))
def test_lane_layout_stays_near_the_file_size(name: str) -> None:
    elements, block_bytes = gguf.GGML_QUANT_SIZES[QT[name]]
    raw = random_matrix(name, rows=32, blocks=4, seed=1)
    weight = quantized_weight(raw, int(QT[name]), (32, 4 * elements))
    assert weight.nbytes() == raw.nbytes * (block_bytes + ALIGNED_GAP[name][1]) // block_bytes
    assert weight.nbytes() <= 1.18 * raw.nbytes


def test_half_bits_decode_every_half_exactly() -> None:
    bits = np.arange(1 << 16, dtype=np.uint32)
    actual = half_bits_to_float(Tensor(bits | 0xABCD0000)).numpy()  # the high half of the word is ignored
    expected = bits.astype(np.uint16).view(np.float16).astype(np.float32)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(actual[finite].view(np.uint32), expected[finite].view(np.uint32))
    np.testing.assert_array_equal(actual[np.isinf(expected)], expected[np.isinf(expected)])
    assert np.isnan(actual[np.isnan(expected)]).all()


def test_words_read_signed_bytes_and_nibbles_in_place_exactly() -> None:
    """Every byte value at each of a word's 4 positions (word k holds it in byte k, the other bytes 0x5A):
    `signed_byte` is numpy's int8 of it, `nibble_in_place` each nibble times 2**shift (shift: the nibble's bit,
    24 for the top nibble), as float32."""
    values = np.arange(256, dtype=np.uint32)
    words = np.stack([(values << (8 * k)) | (0x5A5A5A5A & ~(0xFF << (8 * k))) for k in range(4)], axis=-1)
    w = Words(Tensor(words.reshape(1, 256, 4, 1).astype(np.uint32)))
    for k in range(4):
        offset = 4 * k + k  # byte k of word k
        expected_signed = values.astype(np.uint8).view(np.int8).astype(np.float32)
        np.testing.assert_array_equal(w.signed_byte(offset).numpy().reshape(256), expected_signed)
        for high, nibble in enumerate((values & 0xF, values >> 4)):
            quant, shift = w.nibble_in_place(offset, high)
            assert shift == min(8 * k + 4 * high, 24)
            expected = nibble.astype(np.float32) * np.float32(2.0**shift)
            np.testing.assert_array_equal(quant.numpy().reshape(256), expected)


def test_e2m1_table_lookup_equals_the_reference_decoder() -> None:
    codes = Tensor(np.arange(16, dtype=np.uint32))
    np.testing.assert_array_equal(e2m1_doubled_by_shift(codes).numpy(), e2m1_doubled(codes).numpy())


def test_lane_matvec_kernel_loads_only_32_bit_values() -> None:
    """The reason for the layout: a uint8 or _Float16 load in the lane loop stops gcc using full-width vectors."""
    raw = random_matrix("Q4_1", rows=32, blocks=2, seed=2)
    weight = quantized_weight(raw, int(QT.Q4_1), (32, 64))
    x = Tensor(np.ones((1, 64), np.float32)).realize()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), Context(DEBUG=4, JIT=0):
        linear(x, weight).realize()
    source = out.getvalue()
    assert "void r_" in source
    assert "unsigned char" not in source and "_Float16" not in source


def test_lane_matvec_dequantizes_and_accumulates_with_fused_multiply_adds() -> None:
    """Q4_1: each value scale * quant + offset is one FMA and each product joins its chain's sum by another (the
    C is compiled with -ffp-contract=off, so a * b + c written as two ops stays two instructions): the loop body,
    one block of 32 elements (NOOPT: not unrolled), has 32 value FMAs and 32 - DOT_CHAINS sum FMAs."""
    raw = random_matrix("Q4_1", rows=16, blocks=2, seed=3)
    weight = quantized_weight(raw, int(QT.Q4_1), (16, 64))
    x = Tensor(np.ones((1, 64), np.float32)).realize()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), Context(DEBUG=4, JIT=0, NOOPT=1):
        linear(x, weight).realize()
    assert out.getvalue().count("__builtin_fmaf(") >= 32 + 32 - DOT_CHAINS
