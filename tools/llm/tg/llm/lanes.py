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
256 for the K-quants), each quant as constant shifts and masks of that block's words, and applies each scale once
per group of elements that share it (`ScaledGroup`). The fp16 scales are decoded once per block and lane from
their bits (`half_bits_to_float`). A decode step's RMSNorm runs in the matvec that follows it (`RMSNorm`: the
rsqrt scales the outputs), and the MLP's gate and up matvecs with silu(gate) * up in one kernel
(`lane_gated_matvec`). A prefill's float scratch matrix is decoded from the same words, transposed
(`lane_dequantize`): the 32-element types with their quants along axes, the K-quants through aligned byte blocks
and the byte-wise decoders of tg.llm.quants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tg.codegen import Ops, dtypes
from tg.hcq.engine.capture import is_capturing
from tg.llm.ops import activate
from tg.llm.quants import Blocks, e2m1_doubled, mxfp4_scale, type_name
from tg.tensor import Tensor
from tg.tensor.elementwise import alu, broadcast
from tg.tensor.gguf import GGML_TYPES
from tg.tensor.symbolic import concrete_size

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
    int8_activations: bool = False  # a decode step's matvec quantizes x to int8 (tg.llm.int8_matvec)
    _groups: list[ScaledGroup] | None = field(default=None, init=False, repr=False, compare=False)

    def nbytes(self) -> int:
        return self.words.nbytes()

    def groups(self) -> list[ScaledGroup]:
        """The decoded block (GROUPS). Kept for later calls outside a TinyJit capture: a K-quant's is thousands of
        lazy ops, which a plain (not captured) decode step would otherwise rebuild for every matvec (graphs are
        immutable, so sharing is safe). Not kept inside a capture, which builds each weight's matvec once: kept, the
        graphs of every weight would stay resident through the capture and after it (~60k UOps, ~25 MB on
        SmolLM2-135M), while its replays need none of them."""
        if self._groups is not None:
            return self._groups
        groups = GROUPS[self.type_name](Words(self.words))
        if not is_capturing():
            object.__setattr__(self, "_groups", groups)
        return groups


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
    rows = lanes.words.permute(0, 3, 1, 2).reshape(groups * LANES, n_blocks, n_words)
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

    def signed_byte(self, offset: int) -> Tensor:
        """Byte `offset` read as an int8, as float32: moved to the top of the word, then an arithmetic shift down
        (two vector ops, where `_signed_byte` of `byte` takes four)."""
        top = (self.word(offset // 4) << (24 - 8 * (offset % 4))).bitcast(dtypes.int32)
        return (top >> 24).float()

    def nibble_in_place(self, offset: int, high: int) -> tuple[Tensor, int]:
        """(q * 2**shift as float32, shift) for the nibble q at bit `shift` of its word, masked but not shifted
        down: one AND and a conversion per quant, exact (4 significant bits). The top nibble of a word is shifted
        down to bit 24 first, so that every value converts from an int32 (one vector instruction also without
        AVX-512)."""
        word, shift = self.word(offset // 4), 8 * (offset % 4) + 4 * high
        if shift == 28:
            word, shift = word >> 4, 24
        return _quant_float(word & (0xF << shift)), shift


def _quant_float(quant: Tensor) -> Tensor:
    """A small non-negative integer as float32: through int32, which converts in one vector instruction."""
    return quant.cast(dtypes.int32).float()


def _centered(quant: Tensor, zero: int) -> Tensor:
    """quant - zero as float32 (exact), subtracted in int32: the group's scale then multiplies a plain dot product."""
    return (quant.cast(dtypes.int32) - zero).float()


def _signed_byte(byte: Tensor) -> Tensor:
    """uint32 0..255 read as an int8, as float32."""
    return ((byte ^ 0x80).cast(dtypes.int32) - 128).float()


@dataclass(frozen=True)
class ScaledGroup:
    """Consecutive elements of a block decoded as `scale * quant + offset`: `quants` are exact small integers as
    float32 `(groups, n_blocks, 16)`; `offset` None is zero (then a dot product with x needs the scale once)."""

    scale: Tensor
    offset: Tensor | None
    quants: list[Tensor]
    # with an offset: element i's own scale, for quants that are the integers times a power of two (the scale
    # times its inverse, exact); None: `scale` for all
    element_scales: list[Tensor] | None = None


def _nibble_quants(w: Words, payload: int) -> list[Tensor]:
    """A 32-element block's 4-bit quants: element j < 16 in the low nibble of byte j, j + 16 in its high nibble."""
    return [w.nibble(payload + e % 16, e // 16) for e in range(32)]


def _groups_q4_0(w: Words) -> list[ScaledGroup]:
    return [ScaledGroup(w.half(0), None, [_centered(q, 8) for q in _nibble_quants(w, 4)])]


def _nibbles_in_place(w: Words, nibbles: list[tuple[int, int]], scale: Tensor, offset: Tensor) -> ScaledGroup:
    """scale * nibble + offset for the (byte offset, high) `nibbles`, masked in place (`Words.nibble_in_place`),
    each with the scale times 2**-shift: every value is the same float32 as with the nibble shifted down (the
    same exact product, rounded once by the FMA). The scaled scales are exact as long as scale * 2**-24 is a
    normal float32: a half's scale (at least 2**-24) or a K-quant's 6-bit multiple of one."""
    scales = {shift: scale * 2.0**-shift for shift in range(0, 28, 4)}
    quants, element_scales = [], []
    for byte, high in nibbles:
        quant, shift = w.nibble_in_place(byte, high)
        quants.append(quant)
        element_scales.append(scales[shift])
    return ScaledGroup(scale, offset, quants, element_scales)


def _groups_q4_1(w: Words) -> list[ScaledGroup]:
    return [_nibbles_in_place(w, [(4 + e % 16, e // 16) for e in range(32)], w.half(0), w.half(2))]


def _fifth_quants(w: Words) -> list[Tensor]:
    """Q5_0/Q5_1 (aligned): the fifth bits in the word at byte 4 (bit j for element j), the nibbles from byte 8."""
    high = w.word(1)
    return [q | (((high >> e) & 1) << 4) for e, q in enumerate(_nibble_quants(w, 8))]


def _groups_q5_0(w: Words) -> list[ScaledGroup]:
    return [ScaledGroup(w.half(0), None, [_centered(q, 16) for q in _fifth_quants(w)])]


def _groups_q5_1(w: Words) -> list[ScaledGroup]:
    return [ScaledGroup(w.half(0), w.half(2), [_quant_float(q) for q in _fifth_quants(w)])]


def _groups_q8_0(w: Words) -> list[ScaledGroup]:
    return [ScaledGroup(w.half(0), None, [w.signed_byte(4 + e) for e in range(32)])]


def _k_sub_scales(w: Words) -> tuple[list[Tensor], list[Tensor]]:
    """Q4_K/Q5_K: d * scale and dmin * min of the 8 sub-blocks (tg.llm.quants._k_scales, byte by byte)."""
    low, mid, top = ([w.byte(first + i) for i in range(4)] for first in (4, 8, 12))
    scales = [low[j] & 63 for j in range(4)] + [(top[j] & 15) | ((low[j] >> 2) & 48) for j in range(4)]
    mins = [mid[j] & 63 for j in range(4)] + [(top[j] >> 4) | ((mid[j] >> 2) & 48) for j in range(4)]
    d, dmin = w.half(0), w.half(2)
    return [d * _quant_float(s) for s in scales], [dmin * _quant_float(m) for m in mins]


def _groups_q4_k(w: Words) -> list[ScaledGroup]:
    """8 sub-blocks of 32; sub-block 2c + h is nibble h of bytes 16 + 32c .. 16 + 32c + 31."""
    scales, mins = _k_sub_scales(w)
    nibbles = [[(16 + (sub // 2) * 32 + i, sub % 2) for i in range(32)] for sub in range(8)]
    return [_nibbles_in_place(w, nibbles[sub], scales[sub], -mins[sub]) for sub in range(8)]


def _groups_q5_k(w: Words) -> list[ScaledGroup]:
    """As Q4_K, with the fifth bit of element i of sub-block j in bit j of byte 16 + i."""
    scales, mins = _k_sub_scales(w)
    groups = []
    for sub in range(8):
        quants = [w.nibble(48 + (sub // 2) * 32 + i, sub % 2) | (((w.byte(16 + i) >> sub) & 1) << 4) for i in range(32)]
        groups.append(ScaledGroup(scales[sub], -mins[sub], [_quant_float(q) for q in quants]))
    return groups


def _groups_q6_k(w: Words) -> list[ScaledGroup]:
    """16 groups of 16 with int8 scales; element 32g + i: low 4 bits from ql, high 2 bits from qh (see quants)."""
    d = w.half(208)
    groups = []
    for group in range(16):
        quants = []
        for e in range(group * 16, group * 16 + 16):
            half, r = divmod(e // 32, 4)
            i = e % 32
            low = w.nibble(half * 64 + (r % 2) * 32 + i, r // 2)
            high = (w.byte(128 + half * 32 + i) >> (2 * r)) & 3
            quants.append(_centered(low | (high << 4), 32))
        groups.append(ScaledGroup(d * _signed_byte(w.byte(192 + group)), None, quants))
    return groups


# twice the e2m1 magnitudes of codes 0..7 (0, 1, 2, 3, 4, 6, 8, 12), one per nibble of a word: a table lookup is
# one variable shift, where tg.llm.quants.e2m1_doubled's comparisons and selects cost several ops per element
E2M1_DOUBLED_NIBBLES = 0xC8643210


def e2m1_doubled_by_shift(nibble: Tensor) -> Tensor:
    """Twice the e2m1 value of a 4-bit code as float32, as tg.llm.quants.e2m1_doubled (code 8, -0, gives +0)."""
    magnitude = (E2M1_DOUBLED_NIBBLES >> ((nibble & 7) * 4)) & 0xF
    negative = (nibble >> 3).cast(dtypes.int32)
    return (magnitude.cast(dtypes.int32) * (1 - 2 * negative)).float()


def _groups_mxfp4(w: Words) -> list[ScaledGroup]:
    """Twice the e2m1 values (small integers), times half the block scale."""
    return [ScaledGroup(mxfp4_scale(w.byte(0)), None, [e2m1_doubled_by_shift(q) for q in _nibble_quants(w, 4)])]


GROUPS: dict[str, Callable[[Words], list[ScaledGroup]]] = {
    "Q4_0": _groups_q4_0,
    "Q4_1": _groups_q4_1,
    "Q5_0": _groups_q5_0,
    "Q5_1": _groups_q5_1,
    "Q8_0": _groups_q8_0,
    "Q4_K": _groups_q4_k,
    "Q5_K": _groups_q5_k,
    "Q6_K": _groups_q6_k,
    "MXFP4": _groups_mxfp4,
}


def pairwise_sum(terms: list[Tensor]) -> Tensor:
    """Sum as a balanced tree: independent adds, so the lanes' additions overlap instead of forming one chain."""
    while len(terms) > 1:
        terms = [a + b for a, b in zip(terms[::2], terms[1::2], strict=False)] + terms[len(terms) - len(terms) % 2 :]
    return terms[0]


@dataclass(frozen=True)
class RMSNorm:
    """x * rsqrt(mean(x * x) + eps) * weight over the last axis: the norm that comes before a block's matmuls."""

    weight: Tensor
    eps: float

    def __call__(self, x: Tensor) -> Tensor:
        return x * ((x * x).mean(-1, keepdim=True) + self.eps).rsqrt() * self.weight


def lane_matvec(x: Tensor, lanes: LaneBlocks, norm: RMSNorm | None = None) -> Tensor:
    """x @ W.T for one row of x `(1, cols)`: `(1, rows)`, W decoded inside the kernel (see the module doc).

    With `norm`, the product is norm(x) @ W.T computed in the same kernel, as rsqrt(mean(x * x) + eps) *
    ((x * weight) @ W.T): the rsqrt is one scalar per row of x, so it can scale the outputs instead of the input
    (see `_norm_scales`), and the normalized row needs no kernel of its own."""
    sums = _lane_sums(x, lanes, norm)
    if norm is not None:
        sums = sums * _norm_scales(x, lanes, norm)
    return sums.reshape(-1, sums.shape[1] * LANES)[..., : lanes.shape[0]]


def lane_gated_matvec(x: Tensor, lanes: LaneBlocks, norm: RMSNorm | None = None, activation: str = "silu") -> Tensor:
    """activation(gate) * up `(1, rows / 2)` (tg.llm.ops.activate) for a matrix `lanes` whose rows are gate's then
    up's (a fused gate_up projection of `rows / 2` a multiple of 16), in one kernel: output lane (g, l) sums row group
    g for the gate and row group g + groups / 2 for the up projection, two reductions over the same blocks side by
    side."""
    if lanes.shape[0] % (2 * LANES):
        raise ValueError(f"gate and up rows must each be a multiple of {LANES}, not {lanes.shape[0] // 2}")
    sums = _lane_sums(x, lanes, norm)
    half = sums.shape[1] // 2
    gate, up = sums[:, :half], sums[:, half:]
    if norm is not None:
        scales = _norm_scales(x, lanes, norm)[:, :half]  # one per output lane: the same for gate and up
        gate, up = gate * scales, up * scales
    return (activate(gate, activation) * up).reshape(-1, half * LANES)[..., : lanes.shape[0] // 2]


def _element_inputs(x: Tensor, lanes: LaneBlocks) -> list[Tensor]:
    """Element e of every block of x `(1, cols)`, broadcast to the words' `(1, groups, n_blocks, 16)`.

    Broadcast before any arithmetic on it: the scheduler gives a value computed under a broadcast into a reduction
    a kernel of its own when it would be recomputed for each of the many outputs (here groups * 16 of them), where
    in the matvec's loop a value the same in all 16 lanes costs one vector operation per group and element."""
    groups, n_blocks, _, _ = lanes.words.shape
    block_elements = lanes.shape[1] // concrete_size(n_blocks, "lane blocks")
    xs = x.reshape(1, 1, n_blocks, block_elements, 1)
    return [xs[..., e, :].expand(1, groups, n_blocks, LANES) for e in range(block_elements)]


# independent multiply-add chains per block of a matvec: each step waits for the previous one's FMA (~4 cycles),
# so one chain of 32 would leave the vector units idle; 4 chains of 8 keep them busy with the decoding around them
DOT_CHAINS = 4


def multiply_add(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """a * b + c rounded once: one FMA instruction (the C renderer compiles with -ffp-contract=off, so that
    a * b + c is two instructions and two roundings, as numpy computes it)."""
    return alu(Ops.MULACC, *broadcast(a, b, c))


def _lane_sums(x: Tensor, lanes: LaneBlocks, norm: RMSNorm | None) -> Tensor:
    """`(1, groups, 16)`: the dot products of (x * norm.weight, or x) with every row, summed over the blocks.

    A ScaledGroup without offset multiplies its scale once: scale * sum(x * quant). With an offset, each element
    is dequantized, sum(x * (scale * quant + offset)): the other spelling, offset * sum(x), needs sums of x that
    the scheduler computes in a kernel of its own (a value of x alone, broadcast to every row), and a launch costs
    more than the two ops per element it saves. Per element of Q4_1 and Q4_K that is a mask, a conversion (see
    `_nibbles_in_place`), the value's FMA and the sum's (with a norm, one multiply more).

    The norm's weight multiplies each product, (x * quant) * weight, not x first: both x and the weight then
    enter as broadcast vector operands (gcc folds such a load into the multiply), where x * weight, the same in
    every lane, was computed in scalar registers and broadcast: 4-5 instructions per element and group, about as
    many as the rest of the loop (the gated kernel pays it twice, once per reduction)."""
    decoded = lanes.groups()
    inputs = _element_inputs(x, lanes)
    weights = None if norm is None else _element_inputs(norm.weight.reshape(1, -1), lanes)

    def dot(first: int, values: list[Tensor]) -> Tensor:
        """sum(x * values) over one group of a block's elements (from element `first`), in DOT_CHAINS chains."""
        chains = []
        for chain in range(DOT_CHAINS):
            total: Tensor | None = None
            for e in range(chain, len(values), DOT_CHAINS):
                a, b = inputs[first + e], values[e]
                if weights is not None:
                    a, b = a * b, weights[first + e]
                total = a * b if total is None else multiply_add(a, b, total)
            if total is not None:
                chains.append(total)
        return pairwise_sum(chains)

    block_sums, first = [], 0
    for group in decoded:
        if group.offset is None:
            block_sums.append(group.scale * dot(first, group.quants))
        else:
            scales = group.element_scales or [group.scale] * len(group.quants)
            values = [multiply_add(s, q, group.offset) for s, q in zip(scales, group.quants, strict=True)]
            block_sums.append(dot(first, values))
        first += len(group.quants)
    return pairwise_sum(block_sums).sum(-2)


def _norm_scales(x: Tensor, lanes: LaneBlocks, norm: RMSNorm) -> Tensor:
    """rsqrt(mean(x * x) + eps) for every output lane `(1, groups, 16)`: a reduction over the blocks shaped like
    the matvec's, so it runs in the matvec's kernel (a scalar reduction read by every output would be a kernel of
    its own). Its value depends on no output index, so the kernel computes it once per call, before the loop over
    the rows (tg.codegen.lower.linearize, Linearizer.hoist_reductions)."""
    squares = pairwise_sum([a * a for a in _element_inputs(x, lanes)]).sum(-2)
    return (squares * (1.0 / lanes.shape[1]) + norm.eps).rsqrt()


def _shifts(values: list[list[int]], like: Tensor) -> Tensor:
    return Tensor(values, dtype=dtypes.uint32, device=like.device)


def _element_quants(lanes: LaneBlocks) -> Tensor:
    """The 32 quants of every block of a 32-element type as uint32 `(groups, n_blocks, 2, 4, 4, 16)`: element
    16h + 4w + k is nibble h (or, for Q8_0, byte 4w + k) of payload byte 4w + k. Spelled with axes and a small
    tensor of shift amounts instead of 32 separate values, so a float scratch matrix is one plain kernel."""
    words = lanes.words
    groups, n_blocks, _, _ = words.shape
    if lanes.type_name == "Q8_0":
        payload = words[:, :, 1:9, :].reshape(groups, n_blocks, 2, 4, 1, LANES)  # words 1..8: bytes 4..35
        shift = _shifts([[8 * k for k in range(4)]], words).reshape(1, 1, 1, 1, 4, 1)
        return (payload >> shift) & 0xFF
    first = 2 if lanes.type_name in ("Q5_0", "Q5_1") else 1
    payload = words[:, :, first : first + 4, :].reshape(groups, n_blocks, 1, 4, 1, LANES)
    shift = _shifts([[8 * k + 4 * h for k in range(4)] for h in range(2)], words).reshape(1, 1, 2, 1, 4, 1)
    quants = (payload >> shift) & 0xF
    if first == 2:  # the fifth bit of element e is bit e of word 1
        bit = _shifts([[16 * h + 4 * w + k for w in range(4) for k in range(4)] for h in range(2)], words)
        fifth = (words[:, :, 1, :].reshape(groups, n_blocks, 1, 1, 1, LANES) >> bit.reshape(1, 1, 2, 4, 4, 1)) & 1
        quants = quants | (fifth << 4)
    return quants


def _dequantize_32(lanes: LaneBlocks) -> Tensor:
    """`(n_blocks, 32, rows)`: the values of a 32-element type, rows last (the layout of the transposed scratch)."""
    words = lanes.words
    groups, n_blocks, _, _ = words.shape
    quants = _element_quants(lanes)
    first = words[:, :, 0, :].reshape(groups, n_blocks, 1, 1, 1, LANES)
    name = lanes.type_name
    if name == "MXFP4":
        values = mxfp4_scale(first & 0xFF) * e2m1_doubled(quants)
    else:
        scale = half_bits_to_float(first & 0xFFFF)
        if name == "Q8_0":
            values = scale * _signed_byte(quants)
        elif name in ("Q4_0", "Q5_0"):
            values = scale * (_quant_float(quants) - (8.0 if name == "Q4_0" else 16.0))
        else:
            values = scale * _quant_float(quants) + half_bits_to_float(first >> 16)
    return values.permute(1, 2, 3, 4, 0, 5).reshape(n_blocks * 32, groups * LANES)


def lane_dequantize(lanes: LaneBlocks, transposed: bool = False) -> Tensor:
    """The float32 matrix `(rows, cols)` (lazy; `transposed`: `(cols, rows)`), bit-identical to
    `gguf.quants.dequantize`. 32-element types decode from the words directly (`_dequantize_32`: each output row
    of the transposed matrix reads 16 consecutive words per group), the K-quants through their aligned blocks and
    tg.llm.quants' byte decoders (transposed: through a row-major buffer)."""
    from tg.llm.quants import DEQUANTIZERS

    rows = lanes.shape[0]
    if lanes.type_name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"):
        values = _dequantize_32(lanes)[:, :rows]
        return values if transposed else values.transpose(0, 1)
    values = DEQUANTIZERS[lanes.type_name](aligned_blocks(lanes))[:rows]
    # the byte decoders write rows fast and columns 50x slower: decode rows into a buffer, then transpose that
    return values.contiguous().transpose(0, 1) if transposed else values
