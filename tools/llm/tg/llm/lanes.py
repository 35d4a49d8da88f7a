"""Quantized matrices in a matvec-friendly layout: 16 rows interleaved word by word ("lane blocks").

Why: a matvec kernel is fast when its innermost loop runs over 16 independent float accumulators that gcc and
clang keep in one AVX-512 register (or two AVX2 ones). The 16 accumulators here are 16 output rows; each lane
decodes its own row's block. Compilers vectorize such a loop only when every value in it is 32 bits wide: a uint8
load makes gcc 12 pick 16-byte vectors for the whole loop (4 floats per register), and a `_Float16` load stops it
vectorizing at all. So at load time every block is padded to a multiple of 4 bytes (`ALIGNED_GAP`: the padding
goes right after the fp16 fields, so the payload words start on a word boundary) and stored as uint32 words,
`words[group, block, word, lane]` = word `word` of block `block` of row `group * 16 + lane`. Memory stays within
1.18x of the file (Q4_1, Q5_1, Q4_K and Q5_K need no padding at all).

The matvec (`lane_matvec`) reduces over the blocks only: the loop body spells out all elements of a block (32, or
256 for the K-quants), each as constant shifts and masks of that block's words, its dequantized value
`scale * quant + offset` computed in the reference's float order (so it equals `gguf.quants.dequantize` bit for
bit) times its x, summed pairwise. The fp16 scales are decoded once per block and lane from their bits
(`half_bits_to_float`). A prefill's float matrix comes from the same words, rearranged back into aligned blocks
(`aligned_blocks`) for the byte-wise decoders of tg.llm.quants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tg.codegen import dtypes
from tg.llm.quants import Blocks, e2m1_doubled, mxfp4_scale, type_name
from tg.tensor import Tensor
from tg.tensor.gguf import GGML_TYPES

LANES = 16
# per type: (byte offset where padding goes, padding bytes) so that the block is a whole number of uint32 words
# and its payload starts on a word boundary
ALIGNED_GAP: dict[str, tuple[int, int]] = {
    "Q4_0": (2, 2),
    "Q4_1": (20, 0),
    "Q5_0": (2, 2),
    "Q5_1": (24, 0),
    "Q8_0": (2, 2),
    "Q4_K": (144, 0),
    "Q5_K": (176, 0),
    "Q6_K": (210, 2),
    "MXFP4": (1, 3),
}


@dataclass(frozen=True)
class LaneBlocks:
    """A quantized `(rows, cols)` matrix as uint32 `words (ceil(rows / 16), n_blocks, words_per_block, 16)`."""

    words: Tensor
    type_name: str
    shape: tuple[int, int]

    def nbytes(self) -> int:
        return self.words.nbytes()


def pack_lanes(raw: Any, ggml_type: int, device: str | None = None) -> LaneBlocks:
    """LaneBlocks from the file's bytes, a numpy uint8 `(rows, n_blocks, block_bytes)` view (load-time reshuffle).
    Rows are padded with zero blocks to a multiple of 16 (their outputs are computed and dropped)."""
    import numpy as np

    name = type_name(ggml_type)
    rows, n_blocks, block_bytes = raw.shape
    at, gap = ALIGNED_GAP[name]
    groups = -(-rows // LANES)
    aligned = np.zeros((groups * LANES, n_blocks, block_bytes + gap), dtype=np.uint8)
    aligned[:rows, :, :at] = raw[..., :at]
    aligned[:rows, :, at + gap :] = raw[..., at:]
    words = aligned.view("<u4").reshape(groups, LANES, n_blocks, -1).transpose(0, 2, 3, 1)
    _, block_elements, _ = GGML_TYPES[ggml_type]
    shape = (rows, n_blocks * block_elements)
    return LaneBlocks(Tensor(np.ascontiguousarray(words), device=device), name, shape)


def aligned_blocks(lanes: LaneBlocks) -> Blocks:
    """The same matrix as byte Blocks `(rows, n_blocks, aligned block bytes)` for tg.llm.quants' decoders."""
    groups, n_blocks, n_words, _ = lanes.words.shape
    rows = lanes.words.permute(0, 3, 1, 2).reshape(groups * LANES, n_blocks, n_words).contiguous()
    return Blocks(rows.bitcast(dtypes.uint8), gap=ALIGNED_GAP[lanes.type_name])


def half_bits_to_float(bits: Tensor) -> Tensor:
    """float32 of the IEEE half in the low 16 bits of uint32 `bits`, exact, in 32-bit integer ops a loop vectorizes.

    The half's exponent and mantissa moved 13 bits up are a float32 2**112 times too small (the exponent biases
    are 15 and 127); multiplying by 2**112 is exact for normal and subnormal halves alike. Infinities and NaNs
    (exponent 31) get the float32 all-ones exponent instead."""
    magnitude = (bits & 0x7FFF) << 13
    sign = (bits & 0x8000) << 16
    finite = (magnitude | sign).bitcast(dtypes.float32) * 2.0**112
    special = (magnitude | sign | 0x7F800000).bitcast(dtypes.float32)
    return ((bits & 0x7C00) == 0x7C00).where(special, finite)


class Words:
    """The words of one block position across groups, blocks and lanes: `word(i)` is `(groups, n_blocks, 16)`."""

    def __init__(self, words: Tensor) -> None:
        self.words = words

    def word(self, index: int) -> Tensor:
        return self.words[:, :, index, :]

    def byte(self, offset: int) -> Tensor:
        """Byte `offset` of the aligned block as uint32."""
        return (self.word(offset // 4) >> (8 * (offset % 4))) & 0xFF

    def nibble(self, offset: int, high: int) -> Tensor:
        return (self.word(offset // 4) >> (8 * (offset % 4) + 4 * high)) & 0xF

    def half(self, offset: int) -> Tensor:
        return half_bits_to_float((self.word(offset // 4) >> (8 * (offset % 4))) & 0xFFFF)


def _quant_float(quant: Tensor) -> Tensor:
    """A small non-negative integer as float32: through int32, which converts in one vector instruction."""
    return quant.cast(dtypes.int32).float()


def _signed_byte(byte: Tensor) -> Tensor:
    """uint32 0..255 read as an int8, as float32."""
    return ((byte ^ 0x80).cast(dtypes.int32) - 128).float()


# Each element function returns the block's dequantized values in element order, each `(groups, n_blocks, 16)`,
# computed with the same float operations in the same order as tg.llm.quants (and the reference).


def _elements_q4_0(w: Words) -> list[Tensor]:
    scale = w.half(0)
    return [scale * (_quant_float(w.nibble(4 + e % 16, e // 16)) - 8.0) for e in range(32)]


def _elements_q4_1(w: Words) -> list[Tensor]:
    scale, minimum = w.half(0), w.half(2)
    return [scale * _quant_float(w.nibble(4 + e % 16, e // 16)) + minimum for e in range(32)]


def _fifth_quants(w: Words, high_bits: int, payload: int) -> list[Tensor]:
    high = w.word(high_bits // 4)
    return [w.nibble(payload + e % 16, e // 16) | (((high >> e) & 1) << 4) for e in range(32)]


def _elements_q5_0(w: Words) -> list[Tensor]:
    scale = w.half(0)
    return [scale * (_quant_float(quant) - 16.0) for quant in _fifth_quants(w, 4, 8)]


def _elements_q5_1(w: Words) -> list[Tensor]:
    scale, minimum = w.half(0), w.half(2)
    return [scale * _quant_float(quant) + minimum for quant in _fifth_quants(w, 4, 8)]


def _elements_q8_0(w: Words) -> list[Tensor]:
    scale = w.half(0)
    return [scale * _signed_byte(w.byte(4 + e)) for e in range(32)]


def _k_sub_scales(w: Words) -> tuple[list[Tensor], list[Tensor]]:
    """Q4_K/Q5_K: d * scale and dmin * min of the 8 sub-blocks (tg.llm.quants._k_scales, byte by byte)."""
    low, mid, top = ([w.byte(first + i) for i in range(4)] for first in (4, 8, 12))
    scales = [low[j] & 63 for j in range(4)] + [(top[j] & 15) | ((low[j] >> 2) & 48) for j in range(4)]
    mins = [mid[j] & 63 for j in range(4)] + [(top[j] >> 4) | ((mid[j] >> 2) & 48) for j in range(4)]
    d, dmin = w.half(0), w.half(2)
    return [d * _quant_float(s) for s in scales], [dmin * _quant_float(m) for m in mins]


def _elements_q4_k(w: Words) -> list[Tensor]:
    scales, mins = _k_sub_scales(w)
    out = []
    for e in range(256):
        sub, i = divmod(e, 32)
        quant = w.nibble(16 + (sub // 2) * 32 + i, sub % 2)
        out.append(scales[sub] * _quant_float(quant) - mins[sub])
    return out


def _elements_q5_k(w: Words) -> list[Tensor]:
    scales, mins = _k_sub_scales(w)
    out = []
    for e in range(256):
        sub, i = divmod(e, 32)
        high = (w.byte(16 + i) >> sub) & 1
        quant = w.nibble(48 + (sub // 2) * 32 + i, sub % 2) | (high << 4)
        out.append(scales[sub] * _quant_float(quant) - mins[sub])
    return out


def _elements_q6_k(w: Words) -> list[Tensor]:
    d = w.half(208)
    scales = [d * _signed_byte(w.byte(192 + s)) for s in range(16)]
    out = []
    for e in range(256):
        group, i = divmod(e, 32)
        half, r = divmod(group, 4)
        low = w.nibble(half * 64 + (r % 2) * 32 + i, r // 2)
        high = (w.byte(128 + half * 32 + i) >> (2 * r)) & 3
        out.append(scales[e // 16] * (_quant_float(low | (high << 4)) - 32.0))
    return out


def _elements_mxfp4(w: Words) -> list[Tensor]:
    scale = mxfp4_scale(w.byte(0))
    return [scale * e2m1_doubled(w.nibble(4 + e % 16, e // 16)) for e in range(32)]


ELEMENTS: dict[str, Callable[[Words], list[Tensor]]] = {
    "Q4_0": _elements_q4_0,
    "Q4_1": _elements_q4_1,
    "Q5_0": _elements_q5_0,
    "Q5_1": _elements_q5_1,
    "Q8_0": _elements_q8_0,
    "Q4_K": _elements_q4_k,
    "Q5_K": _elements_q5_k,
    "Q6_K": _elements_q6_k,
    "MXFP4": _elements_mxfp4,
}


def pairwise_sum(terms: list[Tensor]) -> Tensor:
    """Sum as a balanced tree: independent adds, so the lanes' additions overlap instead of forming one chain."""
    while len(terms) > 1:
        terms = [a + b for a, b in zip(terms[::2], terms[1::2], strict=False)] + terms[len(terms) - len(terms) % 2 :]
    return terms[0]


def lane_matvec(x: Tensor, lanes: LaneBlocks) -> Tensor:
    """x @ W.T for few rows of x `(*lead, cols)`: `(*lead, rows)`, W decoded inside the kernel (see module doc)."""
    *lead, cols = x.shape
    groups, n_blocks, _, _ = lanes.words.shape
    values = ELEMENTS[lanes.type_name](Words(lanes.words))
    block_elements = len(values)
    xs = x.reshape(*lead, 1, n_blocks, block_elements, 1)
    products = pairwise_sum([xs[..., e, :] * value for e, value in enumerate(values)])  # (*lead, groups, blocks, 16)
    return products.sum(-2).reshape(*lead, groups * LANES)[..., : lanes.shape[0]]


def lane_dequantize(lanes: LaneBlocks) -> Tensor:
    """The float32 matrix `(rows, cols)` (lazy), bit-identical to `gguf.quants.dequantize`."""
    from tg.llm.quants import DEQUANTIZERS

    return DEQUANTIZERS[lanes.type_name](aligned_blocks(lanes))[: lanes.shape[0]]


