"""Decode-step matvecs of Q4_1 and Q8_0 weights with int8 activations: integer dot products (AVX-512 VNNI
`vpdpbusd`) instead of float ones.

Why: a decode step's matvecs read weights that sit in the caches, so their speed is the arithmetic per weight. The
float kernel (tg.llm.lanes.lane_matvec) spends four vector instructions per 16 Q4_1 weights (mask, convert, the
value's FMA, the sum's FMA); `vpdpbusd` multiplies 64 unsigned bytes by 64 signed bytes and adds each group of four
products into one of 16 int32 lanes, which is exactly one word of each of the 16 interleaved rows of a lane block
(tg.llm.lanes) against four activations. So the kernel first rounds the activation row as llama.cpp's q8_1 does:
per block of 32 an int8 code per element, rint(v * 127 / max|v|), a float scale max|v| / 127 and the codes' sum.
Then a Q4_1 block costs, for 16 rows, 4 loads, 8 masks/shifts and 8 `vpdpbusd`, and

    row . x  ~=  sum over blocks b of  d_b * xd_b * sum_i(q_i * c_i)  +  m_b * xd_b * sum_i(c_i)

(d_b, m_b the weight block's scale and min, q_i its 4-bit codes, c_i and xd_b the activation codes and scale; Q8_0
has no min and signed codes, see BLOCK_DOT). The result differs from the float kernel's by the activations'
rounding, as llama.cpp's does on such a CPU.

tg's C renderer writes a kernel as a scalar loop over the 16 lanes and leaves vectorizing to the compiler, and gcc
12 makes `vpdpbusd` only of a loop whose one reduction runs along the vector, never of four products per lane. So
this kernel is written by hand in C with the VNNI intrinsics (VNNI_SOURCE, one per matrix shape) and runs as a
compiled PROGRAM of a custom kernel (tg.tensor.custom_kernel); its AST (`reference_ast`) states the same
computation in tg's IR, which the C renderer compiles anywhere (the tests compare both). The MLP's fused gate_up
projection runs as one such kernel too (`int8_gated_matvec`): the gate's and the up projection's lane groups in the
same call, and silu(gate) * up computed there, a lane at a time. It is used with
`--matvec int8` (tg.llm.config.MATVEC_TYPES), where the device's Target says its C compiler emits VNNI
(Target.int8_dot).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.rounding import round_half_to_even
from tg.llm.lanes import LANES, LaneBlocks, RMSNorm
from tg.tensor import Tensor
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.llm.weights import Weight

BLOCK = 32  # elements per block, of the weights and of the quantized activations
INT8_MAX = 127
# per weight type: words per aligned block (tg.llm.lanes.ALIGNED_GAP) and the C that adds one block's share of the
# 16 rows' dot products to `total` (see VNNI_SOURCE for the names it may use)
BLOCK_WORDS = {"Q4_1": 5, "Q8_0": 9}
BLOCK_DOT = {
    # words 1..4: byte j of word 1 + k holds elements 4k + j (low nibble) and 16 + 4k + j (high nibble)
    "Q4_1": """
      __m512i low = _mm512_setzero_si512(), high = _mm512_setzero_si512();
      for (int k = 0; k < 4; k++) {
        __m512i quants = _mm512_loadu_si512(block + 16 * (k + 1));
        low = _mm512_dpbusd_epi32(low, _mm512_and_si512(quants, nibbles), _mm512_set1_epi32((int)x[k]));
        high = _mm512_dpbusd_epi32(high, _mm512_and_si512(_mm512_srli_epi32(quants, 4), nibbles),
                                   _mm512_set1_epi32((int)x[4 + k]));
      }
      __m512i head = _mm512_loadu_si512(block);
      __m512 scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
      __m512 minimum = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
      __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(low, high));
      __m512 scaled = _mm512_mul_ps(dot, _mm512_mul_ps(scale, _mm512_set1_ps(scales[b])));
      __m512 offset = _mm512_mul_ps(minimum, _mm512_set1_ps((float)sums[b] * scales[b]));
      total = _mm512_add_ps(total, _mm512_add_ps(scaled, offset));""",
    # words 1..8: byte j of word 1 + k is the int8 element 4k + j; vpdpbusd multiplies unsigned bytes, so each
    # quant is taken + 128 (its top bit flipped), and 128 * the codes' sum taken off again
    "Q8_0": """
      __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
      for (int k = 0; k < 8; k += 2) {
        __m512i first = _mm512_xor_si512(_mm512_loadu_si512(block + 16 * (k + 1)), top_bits);
        __m512i second = _mm512_xor_si512(_mm512_loadu_si512(block + 16 * (k + 2)), top_bits);
        even = _mm512_dpbusd_epi32(even, first, _mm512_set1_epi32((int)x[k]));
        odd = _mm512_dpbusd_epi32(odd, second, _mm512_set1_epi32((int)x[k + 1]));
      }
      __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(even, odd), _mm512_set1_epi32(128 * sums[b]));
      __m512 scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_loadu_si512(block)));
      __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(scale, _mm512_set1_ps(scales[b])));
      total = _mm512_add_ps(total, scaled);""",
}


def use_int8_activations(weights: Iterable[Weight]) -> None:
    """Mark the Q4_1 and Q8_0 lane-block matrices among `weights` for the int8 matvec (tg.llm.weights.linear then
    takes it); a ValueError where their device's Target does not say its C compiler emits VNNI (Target.int8_dot)."""
    from tg.hcq.device import Device

    for weight in weights:
        lanes = weight.data
        if not isinstance(lanes, LaneBlocks) or lanes.type_name not in BLOCK_WORDS:
            continue
        renderer = Device[lanes.words.device].renderer
        if renderer is None or not renderer.target.int8_dot:
            raise ValueError(f"--matvec int8 needs AVX-512 VNNI in the C kernels of {lanes.words.device} "
                             "(its Target's int8_dot)")  # fmt: skip
        weight.data = dataclasses.replace(lanes, int8_activations=True)


def int8_lane_matvec(x: Tensor, lanes: LaneBlocks, norm: RMSNorm | None = None) -> Tensor:
    """x @ W.T `(1, rows)` for one row of x and a Q4_1 or Q8_0 LaneBlocks W, with int8 activations (module doc),
    in one kernel. With `norm`, x * norm.weight is quantized and the outputs are scaled by rsqrt(mean(x * x) + eps)
    (as tg.llm.lanes.lane_matvec does)."""
    groups, n_blocks = (concrete_size(size, "int8 matvec") for size in lanes.words.shape[:2])
    kernel = Int8Matvec(lanes.type_name, groups, n_blocks, None if norm is None else norm.eps)
    program = vnni_program(kernel, x.device)
    # the tensors as they are, not reshaped: a view of a realized buffer is copied into a fresh one for the kernel
    inputs = [lanes.words, x] + ([] if norm is None else [norm.weight])
    sums = Tensor.empty(1, groups * LANES, device=x.device).custom_kernel(*inputs, fxn=lambda *_: program)[0]
    return sums if lanes.shape[0] == groups * LANES else sums[:, : lanes.shape[0]]


def int8_gated_matvec(x: Tensor, lanes: LaneBlocks, norm: RMSNorm | None = None) -> Tensor:
    """silu(gate) * up `(1, rows / 2)` for one row of x and a Q4_1 or Q8_0 LaneBlocks whose rows are gate's then
    up's (a fused gate_up projection, `rows / 2` a multiple of 16), with int8 activations, in one kernel: output lane
    (g, l) sums row group g for the gate and g + groups / 2 for the up projection (as tg.llm.lanes.lane_gated_matvec
    does), then multiplies silu(gate) by up."""
    groups, n_blocks = (concrete_size(size, "int8 matvec") for size in lanes.words.shape[:2])
    if lanes.shape[0] != groups * LANES or groups % 2:
        raise ValueError(f"gate and up rows must each be a multiple of {LANES}, not {lanes.shape[0] / 2}")
    kernel = Int8Matvec(lanes.type_name, groups, n_blocks, None if norm is None else norm.eps, gated=True)
    program = vnni_program(kernel, x.device)
    inputs = [lanes.words, x] + ([] if norm is None else [norm.weight])
    out = Tensor.empty(1, kernel.output_groups * LANES, device=x.device)
    return out.custom_kernel(*inputs, fxn=lambda *_: program)[0]


@dataclass(frozen=True)
class Int8Matvec:
    """What one int8 matvec kernel is compiled for: the weight type, its lane groups and blocks, the norm's eps
    (None: no norm), whether it is gated (the first half of the groups a gate, the second an up projection: out =
    silu(gate) * up)."""

    type_name: str
    groups: int
    n_blocks: int
    eps: float | None
    gated: bool = False

    @property
    def output_groups(self) -> int:
        return self.groups // 2 if self.gated else self.groups

    @property
    def cols(self) -> int:
        return self.n_blocks * BLOCK


VNNI_SOURCE = """#include <immintrin.h>
#include <math.h>
/* out = x @ W.T (with a norm: (x * weight) @ W.T * rsqrt(mean(x * x) + eps)) for GROUPS groups of 16 rows of
   BLOCKS blocks, x quantized to int8 per block of 32 (gated: silu of group g's sums times group g + GROUPS's) */
static inline __m512 group_dot(const unsigned int* restrict block, const unsigned int* restrict codes,
                               const float* restrict scales, const int* restrict sums) {
  const __m512i nibbles = _mm512_set1_epi32(0x0F0F0F0F), top_bits = _mm512_set1_epi32((int)0x80808080u);
  (void)nibbles; (void)top_bits;
  __m512 total = _mm512_setzero_ps();
  for (long b = 0; b < BLOCKS; b++, block += WORDS * 16) {
    const unsigned int* x = codes + b * 8;
BLOCK_DOT
  }
  return total;
}

void NAME(float* restrict out, const unsigned int* restrict words, const float* restrict row,NORM_WEIGHT int core_id) {
  unsigned int codes[BLOCKS * 8];
  float scales[BLOCKS];
  int sums[BLOCKS];
  float squares = 0.0f;
  for (long b = 0; b < BLOCKS; b++) {  /* q8_1: codes rint(v * 127 / max|v|), four to a word */
    float v[32], largest = 0.0f;
    for (int e = 0; e < 32; e++) {
      float x = row[b * 32 + e];
      squares = squares + x * x;
      v[e] = SCALED;
      largest = fmaxf(largest, fabsf(v[e]));
    }
    float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    int sum = 0;
    for (int k = 0; k < 8; k++) {
      unsigned int word = 0;
      for (int j = 0; j < 4; j++) {
        int code = (int)rintf(v[4 * k + j] * inverse);
        sum += code;
        word |= (unsigned int)(code & 0xFF) << (8 * j);
      }
      codes[b * 8 + k] = word;
    }
    scales[b] = largest * (1.0f / 127.0f);
    sums[b] = sum;
  }
  const __m512 norm = _mm512_set1_ps(NORM);
  (void)squares;
  const long first = (long)core_id * GROUPS / CALLS, last = (long)(core_id + 1) * GROUPS / CALLS;
  for (long g = first; g < last; g++) {
    __m512 total = _mm512_mul_ps(group_dot(words + g * BLOCKS * WORDS * 16, codes, scales, sums), norm);
STORE
  }
}
"""


STORE = "    _mm512_storeu_ps(out + g * 16, total);"
# silu(gate) * up, a lane at a time: 16 expf per group of outputs, against the group's 2 * BLOCKS * 16 dot products
GATED_STORE = """    const unsigned int* up_rows = words + (g + GROUPS) * BLOCKS * WORDS * 16;
    __m512 up = _mm512_mul_ps(group_dot(up_rows, codes, scales, sums), norm);
    float gates[16], ups[16];
    _mm512_storeu_ps(gates, total);
    _mm512_storeu_ps(ups, up);
    for (int l = 0; l < 16; l++) out[g * 16 + l] = gates[l] * (1.0f / (1.0f + expf(-gates[l]))) * ups[l];"""


def vnni_source(kernel: Int8Matvec, name: str, calls: int) -> str:
    norm = "1.0f" if kernel.eps is None else f"1.0f / sqrtf(squares * (1.0f / {kernel.cols}) + {kernel.eps!r}f)"
    replacements = {
        "NORM_WEIGHT": "" if kernel.eps is None else " const float* restrict weight,",
        "SCALED": "x" if kernel.eps is None else "x * weight[b * 32 + e]",
        "STORE": GATED_STORE if kernel.gated else STORE, "NAME": name, "GROUPS": str(kernel.output_groups),
        "BLOCKS": str(kernel.n_blocks), "CALLS": str(calls), "WORDS": str(BLOCK_WORDS[kernel.type_name]),
        "NORM": norm, "BLOCK_DOT": BLOCK_DOT[kernel.type_name],
    }  # fmt: skip
    src = VNNI_SOURCE
    for key, value in replacements.items():
        src = src.replace(key, value)
    return src


@functools.cache
def vnni_program(kernel: Int8Matvec, device: str) -> UOp:
    """The compiled VNNI kernel on `device` as a PROGRAM (its AST `reference_ast`), split across the Target's
    cores: one call per core, each a contiguous share of the lane groups."""
    from tg.codegen.pipeline import ProgramSource
    from tg.hcq.device import Device

    target = Device[device].renderer.target
    calls = min(target.cores, kernel.output_groups)
    name = f"{kernel.type_name.lower()}_int8_{'gated_' if kernel.gated else ''}matvec_{kernel.groups}_{kernel.n_blocks}"
    src = vnni_source(kernel, name, calls)
    weights = kernel.groups * LANES * kernel.cols
    weight_bytes = kernel.groups * kernel.n_blocks * BLOCK_WORDS[kernel.type_name] * LANES * 4
    source = ProgramSource(
        name,
        src,
        (calls, 1, 1),
        (),
        (kernel.output_groups, LANES, kernel.n_blocks),
        ops=2 * weights,
        mem=weight_bytes + 8 * kernel.cols + kernel.output_groups * LANES * 4,
    )
    binary = Device[device].compiler.compile(src)
    ast = reference_ast(kernel)
    return UOp(Ops.PROGRAM, src=(ast, UOp(Ops.SOURCE, arg=src), UOp(Ops.BINARY, arg=binary)), arg=source)


# ------------------------------------------------------------------------------------------- the IR reference


def reference_ast(kernel: Int8Matvec) -> UOp:
    """The int8 matvec as a kernel AST in tg's IR (placeholders: out, weight words, x, with a norm its weight): what
    VNNI_SOURCE computes, with the same integer codes and dot products (each output quantizes x again)."""
    words_per_block = BLOCK_WORDS[kernel.type_name]
    out = UOp.param(0, dtypes.float32, kernel.output_groups * LANES)
    words = UOp.param(1, dtypes.uint32, kernel.groups * kernel.n_blocks * words_per_block * LANES)
    row = UOp.param(2, dtypes.float32, kernel.cols)
    g, lane = UOp.range(kernel.output_groups, 0), UOp.range(LANES, 1)
    b, c = UOp.range(kernel.n_blocks, 2, AxisType.REDUCE), UOp.range(kernel.cols, 3, AxisType.REDUCE)

    values = [row.index(b * BLOCK + e).load() for e in range(BLOCK)]
    if kernel.eps is not None:
        weight = UOp.param(3, dtypes.float32, kernel.cols)
        values = [v * weight.index(b * BLOCK + e).load() for e, v in enumerate(values)]
    largest = values[0].maximum(-values[0])
    for v in values[1:]:
        largest = largest.maximum(v.maximum(-v))
    inverse = (largest > 0.0).where(INT8_MAX / largest, 0.0)
    codes = [round_half_to_even(v * inverse).cast(dtypes.int32) for v in values]
    scale = largest * (1.0 / INT8_MAX)

    def group_total(group: UOp) -> UOp:
        """The 16 rows of lane group `group` dotted with the quantized x, summed over the blocks."""

        def word(k: int) -> UOp:
            return words.index(((group * kernel.n_blocks + b) * words_per_block + k) * LANES + lane).load()

        quants = [_quant(kernel.type_name, word, e) for e in range(BLOCK)]
        dot, code_sum = _sum([q * code for q, code in zip(quants, codes, strict=True)]), _sum(codes)
        block_sum = dot.cast(dtypes.float32) * (_half_to_float(word(0) & 0xFFFF) * scale)
        if kernel.type_name == "Q4_1":
            block_sum = block_sum + _half_to_float(word(0) >> 16) * (code_sum.cast(dtypes.float32) * scale)
        return block_sum.reduce(b)

    total = group_total(g)
    if kernel.eps is not None:
        x = row.index(c).load()
        norm = ((x * x).reduce(c) * (1.0 / kernel.cols) + kernel.eps).sqrt().reciprocal()
    if kernel.gated:
        up = group_total(g + kernel.output_groups)
        if kernel.eps is not None:
            total, up = total * norm, up * norm
        total = total * (1.0 + (total * -math.log2(math.e)).exp2()).reciprocal() * up  # silu(gate) * up
    elif kernel.eps is not None:
        total = total * norm
    name = f"{kernel.type_name.lower()}_int8_{'gated_' if kernel.gated else ''}matvec"
    return out.index(g * LANES + lane).store(total).sink(arg=KernelInfo(name=name))


def _quant(type_name: str, word: Callable[[int], UOp], e: int) -> UOp:
    """Weight element e of the block as an int32: a Q4_1 nibble (0..15) or a Q8_0 byte (-128..127)."""
    if type_name == "Q4_1":
        return ((word(1 + (e % 16) // 4) >> (8 * (e % 4) + 4 * (e // 16))) & 0xF).cast(dtypes.int32)
    return (word(1 + e // 4) << (24 - 8 * (e % 4))).bitcast(dtypes.int32) >> 24


def _sum(terms: list[UOp]) -> UOp:
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _half_to_float(bits: UOp) -> UOp:
    return bits.cast(dtypes.uint16).bitcast(dtypes.float16).cast(dtypes.float32)
