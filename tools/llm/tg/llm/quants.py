"""Dequantization of GGML block formats, written as tg Tensor ops on the raw uint8 blocks.

Every decoder takes a uint8 Tensor `(*rows, n_blocks, bytes_per_block)` (what `gguf_load` returns for a quantized
type) and returns the float32 values `(*rows, n_blocks * elements_per_block)`. The results are lazy: used as a
matmul weight, the decode fuses into the matmul kernel, so the float weights never exist in memory.

Each decoder follows the llama.cpp block layout, and does its float operations in the same order as the reference
(`gguf.quants`), so results are bit-identical.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tg.codegen import dtypes
from tg.tensor import Tensor
from tg.tensor.gguf import GGML_TYPES, half_to_float, pow2


@dataclass(frozen=True)
class Blocks:
    """Quantized blocks `(*rows, n_blocks, ...)`: the payload bytes `start..` of each block, plus the fp16 fields.

    Straight from the file, `payload` is the whole block (start 0) and `halves` is empty: every fp16 field is
    decoded from its bytes. `pack` prepares weights for the model: the fp16 fields move to float16 tensors and the
    payload keeps only the other bytes, so the matmul kernels do not redo the fp16 decode for every element and the
    memory stays the file's size.
    """

    payload: Tensor
    start: int = 0
    halves: dict[int, Tensor] = field(default_factory=dict)
    gap: tuple[int, int] = (0, 0)  # (file offset, bytes): padding the payload holds before that byte (tg.llm.lanes)

    def bytes(self, first: int, last: int) -> Tensor:
        at, size = self.gap
        shift = size if first >= at and size else 0
        return self.payload[..., first - self.start + shift : last - self.start + shift]

    def half(self, offset: int) -> Tensor:
        """The fp16 field at byte `offset` of each block as float32 `(..., n_blocks, 1)`."""
        if offset in self.halves:
            return self.halves[offset].float()
        low, high = self.bytes(offset, offset + 1).cast(dtypes.uint32), self.bytes(offset + 1, offset + 2)
        return half_to_float(low | (high.cast(dtypes.uint32) << 8))


def _signed8(values: Tensor) -> Tensor:
    """uint8 bytes read as int8 (two's complement), as float32 (exact)."""
    values = values.float()
    return values - (values >= 128.0).where(256.0, 0.0)


def _nibbles(packed: Tensor) -> Tensor:
    """`(..., n)` bytes -> `(..., 2n)`: all low nibbles first, then all high nibbles (the GGML order)."""
    packed = packed.cast(dtypes.uint32)
    return (packed & 15).cat(packed >> 4, dim=-1)


def _bits(packed: Tensor, shifts: list[int], mask: int) -> Tensor:
    """`(..., g, n)` -> `(..., g, len(shifts), n)`: each byte shifted right by each shift, masked."""
    packed = packed.cast(dtypes.uint32).unsqueeze(-2)
    shift = Tensor(shifts, dtype=dtypes.uint32, device=packed.device).reshape(len(shifts), 1)
    return (packed >> shift) & mask


def _fifth_bits(raw: Blocks, start: int) -> Tensor:
    """Q5_0/Q5_1: the 32 high bits at bytes start..start+4, bit i for element i, as `(..., 32)` uint32."""
    high = _bits(raw.bytes(start, start + 4), list(range(8)), 1)  # (..., 8 bits, 4 bytes)
    return high.transpose(-1, -2).flatten(-2)  # byte-major: bit i of the uint32 is element i


def _flat(values: Tensor) -> Tensor:
    """`(*rows, n_blocks, block_elements)` -> `(*rows, n_blocks * block_elements)`."""
    return values.flatten(-2)


def dequant_q4_0(raw: Blocks) -> Tensor:
    scale = raw.half(0)
    return _flat(scale * (_nibbles(raw.bytes(2, 18)).float() - 8.0))


def dequant_q4_1(raw: Blocks) -> Tensor:
    scale, minimum = raw.half(0), raw.half(2)
    return _flat(scale * _nibbles(raw.bytes(4, 20)).float() + minimum)


def dequant_q5_0(raw: Blocks) -> Tensor:
    scale = raw.half(0)
    quant = _nibbles(raw.bytes(6, 22)) | (_fifth_bits(raw, 2) << 4)
    return _flat(scale * (quant.float() - 16.0))


def dequant_q5_1(raw: Blocks) -> Tensor:
    scale, minimum = raw.half(0), raw.half(2)
    quant = _nibbles(raw.bytes(8, 24)) | (_fifth_bits(raw, 4) << 4)
    return _flat(scale * quant.float() + minimum)


def dequant_q8_0(raw: Blocks) -> Tensor:
    return _flat(raw.half(0) * _signed8(raw.bytes(2, 34)))


def _k_scales(scales: Tensor) -> tuple[Tensor, Tensor]:
    """Q4_K/Q5_K: the 12 packed bytes -> 8 six-bit scales and 8 six-bit mins, as `(..., 8)` uint32 each."""
    scales = scales.cast(dtypes.uint32)
    low, mid, top = scales[..., 0:4], scales[..., 4:8], scales[..., 8:12]
    scale = (low & 63).cat((top & 15) | ((low >> 2) & 48), dim=-1)
    minimum = (mid & 63).cat((top >> 4) | ((mid >> 2) & 48), dim=-1)
    return scale, minimum


def _k_block(raw: Blocks, quant: Tensor) -> Tensor:
    """Q4_K/Q5_K: (d * scale) * q - dmin * min over 8 sub-blocks of 32; `quant` is `(..., 8, 32)`."""
    scale, minimum = _k_scales(raw.bytes(4, 16))
    sub_scale = (raw.half(0) * scale.float()).unsqueeze(-1)
    sub_min = (raw.half(2) * minimum.float()).unsqueeze(-1)
    return (sub_scale * quant.float() - sub_min).flatten(-2)


def _k_nibbles(packed: Tensor) -> Tensor:
    """`(..., 128)` bytes -> `(..., 8, 32)`: per 32-byte group, the low nibbles then the high nibbles."""
    groups = packed.unflatten(-1, (4, 32))
    return _bits(groups, [0, 4], 15).flatten(-3, -2)


def dequant_q4_k(raw: Blocks) -> Tensor:
    return _flat(_k_block(raw, _k_nibbles(raw.bytes(16, 144))))


def dequant_q5_k(raw: Blocks) -> Tensor:
    high = _bits(raw.bytes(16, 48), list(range(8)), 1)  # (..., 8, 32): bit j of each byte feeds sub-block j
    return _flat(_k_block(raw, _k_nibbles(raw.bytes(48, 176)) | (high << 4)))


def dequant_q6_k(raw: Blocks) -> Tensor:
    scale = (raw.half(208) * _signed8(raw.bytes(192, 208))).unsqueeze(-1)  # (..., 16, 1)
    low = _bits(raw.bytes(0, 128).unflatten(-1, (2, 64)), [0, 4], 15)  # (..., 2, 2, 64)
    low = low.unflatten(-1, (2, 32)).flatten(-3, -2).flatten(-3, -2)  # (..., 8, 32)
    high = _bits(raw.bytes(128, 192).unflatten(-1, (2, 32)), [0, 2, 4, 6], 3).flatten(-3, -2)  # (..., 8, 32)
    quant = ((low | (high << 4)).float() - 32.0).flatten(-2).unflatten(-1, (16, 16))
    return _flat((scale * quant).flatten(-2))


def dequant_q2_k(raw: Blocks) -> Tensor:
    """16 sub-blocks of 16 two-bit quants: (d * scale) * q - dmin * min, scale and min the nibbles of one byte.
    Each 32-byte half of the quants holds 8 sub-blocks: 2-bit planes 0..3, each plane split in two runs of 16."""
    scales = raw.bytes(0, 16).cast(dtypes.uint32)
    sub_scale = (raw.half(80) * (scales & 15).float()).unsqueeze(-1)  # (..., 16, 1)
    sub_min = (raw.half(82) * (scales >> 4).float()).unsqueeze(-1)
    planes = _bits(raw.bytes(16, 80).unflatten(-1, (2, 32)), [0, 2, 4, 6], 3)  # (..., 2 halves, 4 planes, 32)
    quant = planes.unflatten(-1, (2, 16)).flatten(-4, -2).float()  # (..., 16 sub-blocks, 16)
    return _flat((sub_scale * quant - sub_min).flatten(-2))


def _q3_k_scales(packed: Tensor) -> Tensor:
    """Q3_K's 12 bytes -> 16 signed six-bit scales as float32: low nibbles from bytes 0..7 (low halves first), the
    two high bits from bytes 8..11 (bit pairs 0, 2, 4, 6 of all four bytes in turn), minus 32."""
    packed = packed.cast(dtypes.uint32)
    low = _bits(packed[..., 0:8], [0, 4], 15).flatten(-2)  # (..., 16)
    high = _bits(packed[..., 8:12], [0, 2, 4, 6], 3).flatten(-2)  # (..., 16)
    return (low | (high << 4)).float() - 32.0


def dequant_q3_k(raw: Blocks) -> Tensor:
    """16 sub-blocks of 16 three-bit quants: two low bits from the 2-bit planes (as in Q2_K) and a high bit from
    the 32-byte mask (bit j for sub-block pair j); a clear high bit means the quant is 4 less."""
    sub_scale = (raw.half(108) * _q3_k_scales(raw.bytes(96, 108))).unsqueeze(-1)  # (..., 16, 1)
    planes = _bits(raw.bytes(32, 96).unflatten(-1, (2, 32)), [0, 2, 4, 6], 3)  # (..., 2, 4, 32)
    low = planes.unflatten(-1, (2, 16)).flatten(-4, -2)  # (..., 16, 16)
    high = _bits(raw.bytes(0, 32), list(range(8)), 1).unflatten(-1, (2, 16)).flatten(-3, -2)  # (..., 16, 16)
    quant = low.float() - (high == 0).where(4.0, 0.0)
    return _flat((sub_scale * quant).flatten(-2))


# the 16 non-linear levels of IQ4_NL and IQ4_XS, indexed by the 4-bit code
IQ4_LEVELS = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)


def _iq4_level(code: Tensor) -> Tensor:
    """4-bit codes (uint32) -> IQ4_LEVELS as float32: a binary tree of selects on the code's bits."""
    levels = [Tensor(float(level), device=code.device) for level in IQ4_LEVELS]
    for bit in range(4):
        chosen = ((code >> bit) & 1) == 1
        levels = [chosen.where(high, low) for low, high in zip(levels[0::2], levels[1::2], strict=True)]
    return levels[0]


def dequant_iq4_nl(raw: Blocks) -> Tensor:
    """32 codes per block (low nibbles, then high nibbles) mapped to IQ4_LEVELS, times the block's fp16 scale."""
    return _flat(raw.half(0) * _iq4_level(_nibbles(raw.bytes(2, 18))))


def dequant_iq4_xs(raw: Blocks) -> Tensor:
    """8 sub-blocks of 32 IQ4 codes; sub-block j's six-bit scale is nibble j of bytes 4..7 (low nibble first) with
    bits 2j..2j+1 of the little-endian uint16 at byte 2 on top, minus 32, times the block's fp16 scale."""
    low = _bits(raw.bytes(4, 8), [0, 4], 15).transpose(-1, -2).flatten(-2)  # (..., 8): byte-major nibbles
    high_word = raw.bytes(2, 3).cast(dtypes.uint32) | (raw.bytes(3, 4).cast(dtypes.uint32) << 8)  # (..., 1)
    high = _bits(high_word, [0, 2, 4, 6, 8, 10, 12, 14], 3).flatten(-2)  # (..., 8)
    sub_scale = (raw.half(0) * ((low | (high << 4)).float() - 32.0)).unsqueeze(-1)  # (..., 8, 1)
    codes = _nibbles(raw.bytes(8, 136).unflatten(-1, (8, 16)))  # (..., 8, 32): per sub-block low then high nibbles
    return _flat((sub_scale * _iq4_level(codes)).flatten(-2))


def e2m1_doubled(nibble: Tensor) -> Tensor:
    """MXFP4 element codes -> twice their e2m1 value (0,1,2,3,4,6,8,12 and negatives) as float32.

    Code 8 is "-0" in e2m1 but the reference table holds the integer 0, so it decodes to +0.0.
    """
    magnitude_code = nibble & 7
    magnitude = (
        (magnitude_code < 4)
        .where(magnitude_code, (magnitude_code < 6).where(magnitude_code * 2 - 4, magnitude_code * 4 - 16))
        .float()
    )
    return (nibble >= 9).where(-magnitude, magnitude)


def mxfp4_scale(exponent: Tensor) -> Tensor:
    """The E8M0 exponent byte (as uint32) -> 2**(e-128) as float32: the stored values are doubled, so this is half
    the block's scale. pow2 takes exponents below 128: 2**e is built from four parts, each step exact."""
    quarter = exponent >> 2
    return (pow2(quarter) * 2.0**-64) * (pow2(quarter) * 2.0**-64) * pow2(quarter) * pow2(exponent - quarter * 3)


def dequant_mxfp4(raw: Blocks) -> Tensor:
    scale = mxfp4_scale(raw.bytes(0, 1).cast(dtypes.uint32))
    return _flat(scale * e2m1_doubled(_nibbles(raw.bytes(1, 17))))


DEQUANTIZERS: dict[str, Callable[[Blocks], Tensor]] = {
    "Q4_0": dequant_q4_0,
    "Q4_1": dequant_q4_1,
    "Q5_0": dequant_q5_0,
    "Q5_1": dequant_q5_1,
    "Q8_0": dequant_q8_0,
    "Q4_K": dequant_q4_k,
    "Q5_K": dequant_q5_k,
    "Q6_K": dequant_q6_k,
    "MXFP4": dequant_mxfp4,
    "Q2_K": dequant_q2_k,
    "Q3_K": dequant_q3_k,
    "IQ4_NL": dequant_iq4_nl,
    "IQ4_XS": dequant_iq4_xs,
}
# per type: the byte offsets of the fp16 fields, and the payload byte range that `pack` keeps
HALF_FIELDS: dict[str, tuple[list[int], tuple[int, int]]] = {
    "Q4_0": ([0], (2, 18)),
    "Q4_1": ([0, 2], (4, 20)),
    "Q5_0": ([0], (2, 22)),
    "Q5_1": ([0, 2], (4, 24)),
    "Q8_0": ([0], (2, 34)),
    "Q4_K": ([0, 2], (4, 144)),
    "Q5_K": ([0, 2], (4, 176)),
    "Q6_K": ([208], (0, 208)),
    "MXFP4": ([], (0, 17)),
    "Q2_K": ([80, 82], (0, 80)),
    "Q3_K": ([108], (0, 108)),
    "IQ4_NL": ([0], (2, 18)),
    "IQ4_XS": ([0], (2, 136)),
}


class UnsupportedQuantError(ValueError):
    """A GGML type tg-llm cannot decode."""


def type_name(ggml_type: int) -> str:
    name = GGML_TYPES[ggml_type][0] if ggml_type in GGML_TYPES else str(ggml_type)
    if name not in DEQUANTIZERS:
        raise UnsupportedQuantError(f"GGML type {name} is not supported by tg-llm")
    return name


def dequantize(raw: Tensor | Blocks, ggml_type: int) -> Tensor:
    """Lazy float32 values of quantized blocks (raw uint8 `(*rows, n_blocks, block_bytes)` or packed Blocks)."""
    return DEQUANTIZERS[type_name(ggml_type)](raw if isinstance(raw, Blocks) else Blocks(raw))


def pack(raw: Any, ggml_type: int, device: str | None = None) -> Blocks:
    """Blocks for the model from the file's bytes (a numpy uint8 `(*rows, n_blocks, block_bytes)` view).

    This is load-time reshuffling of bytes, not decoding: the fp16 fields are reinterpreted as float16 arrays
    and the remaining bytes copied, so memory stays the size of the file.
    """
    import numpy as np

    offsets, (first, last) = HALF_FIELDS[type_name(ggml_type)]
    halves = {
        offset: Tensor(np.ascontiguousarray(raw[..., offset : offset + 2]).view(np.float16), device=device)
        for offset in offsets
    }
    return Blocks(Tensor(np.ascontiguousarray(raw[..., first:last]), device=device), first, halves)
