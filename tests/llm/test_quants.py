"""Every GGML block format decodes bit-exactly like the reference `gguf.quants.dequantize` on random blocks."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.quants import dequantize as reference_dequantize  # noqa: E402
from llm_fixtures import HALF_OFFSETS  # noqa: E402  (fp16 scale offsets, forced finite in random blocks)

from tg.llm.quants import DEQUANTIZERS, UnsupportedQuantError, dequantize, pack  # noqa: E402
from tg.tensor import Tensor  # noqa: E402


def random_blocks(name: str, rows: int, blocks_per_row: int, seed: int) -> np.ndarray:
    _, block_bytes = gguf.GGML_QUANT_SIZES[QT[name]]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, blocks_per_row, block_bytes), dtype=np.uint8)
    for offset in HALF_OFFSETS[name]:
        scales = rng.uniform(-2.0, 2.0, size=(rows, blocks_per_row)).astype(np.float16)
        scales[0, 0] = np.float16(6.0e-5)  # a subnormal half too
        raw[..., offset : offset + 2] = scales.view(np.uint8).reshape(rows, blocks_per_row, 2)
    return raw


@pytest.mark.parametrize("name", sorted(DEQUANTIZERS))
def test_dequantize_matches_gguf_reference_bit_exactly(name: str) -> None:
    raw = random_blocks(name, rows=3, blocks_per_row=2, seed=len(name))
    expected = reference_dequantize(raw.reshape(3, -1), QT[name])
    actual = dequantize(Tensor(raw), int(QT[name])).numpy()
    assert actual.shape == expected.shape
    assert actual.dtype == np.float32
    np.testing.assert_array_equal(actual.view(np.uint32), expected.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("name", sorted(DEQUANTIZERS))
def test_packed_blocks_decode_to_the_same_bits(name: str) -> None:
    raw = random_blocks(name, rows=2, blocks_per_row=3, seed=11)
    expected = reference_dequantize(raw.reshape(2, -1), QT[name])
    packed = pack(raw, int(QT[name]))
    assert sum(t.nbytes() for t in (packed.payload, *packed.halves.values())) == raw.nbytes  # no growth
    np.testing.assert_array_equal(dequantize(packed, int(QT[name])).numpy(), expected)


def test_mxfp4_covers_every_exponent() -> None:
    raw = random_blocks("MXFP4", rows=1, blocks_per_row=256, seed=7)
    raw[0, :, 0] = np.arange(256, dtype=np.uint8)
    expected = reference_dequantize(raw.reshape(1, -1), QT.MXFP4)
    np.testing.assert_array_equal(dequantize(Tensor(raw), int(QT.MXFP4)).numpy(), expected)


def test_unsupported_type_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedQuantError, match="IQ2_XXS"):  # no decoder yet
        dequantize(Tensor(np.zeros((1, 66), np.uint8)), int(QT.IQ2_XXS))
