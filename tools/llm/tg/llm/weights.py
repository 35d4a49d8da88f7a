"""Model weights as tg Tensors that stay in their GGUF encoding: quantized matrices are decoded inside the kernels
that use them (the decode is a lazy expression the scheduler fuses into the matmul's reduce)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tg.codegen import to_numpy
from tg.llm import int8_matvec
from tg.llm.lanes import (
    ALIGNED_GAP,
    LANES,
    LaneBlocks,
    RMSNorm,
    lane_dequantize,
    lane_gated_matvec,
    lane_matvec,
    pack_lanes,
)
from tg.llm.ops import activate, concat
from tg.llm.quants import HALF_FIELDS, Blocks, dequantize, pack, type_name
from tg.tensor import Tensor
from tg.tensor.gguf import FLOAT_TYPES, GGML_TYPES, GGUFTensorInfo, bf16_to_float
from tg.tensor.symbolic import concrete_size

FLOAT_TYPES_AND_BF16 = (*FLOAT_TYPES, "BF16")


@dataclass
class Weight:
    """A GGUF tensor: `data` is a float Tensor, a quantized matrix in `LaneBlocks` (tg.llm.lanes), or other
    quantized tensors (expert stacks) as packed `Blocks` `(*rows, n_blocks, ...)`."""

    data: Tensor | Blocks | LaneBlocks
    ggml_type: int
    shape: tuple[int, ...]
    _float: Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def quantized(self) -> bool:
        return isinstance(self.data, (Blocks, LaneBlocks))

    def float(self) -> Tensor:
        """The values as a lazy float32 Tensor of `shape` (decoded in whatever kernel consumes them).

        The lazy expression is built once and reused: graphs are immutable, so every step's matmul can share it,
        which saves rebuilding the decode graph for every weight on every token."""
        if self._float is None:
            if isinstance(self.data, LaneBlocks):
                self._float = lane_dequantize(self.data)
            elif isinstance(self.data, Blocks):
                self._float = dequantize(self.data, self.ggml_type)
            else:
                self._float = self.data.float()
        return self._float

    def transposed_float(self) -> Tensor:
        """float().T `(in, out)` (lazy): for LaneBlocks decoded in that order, so its kernel writes rows of outputs."""
        if isinstance(self.data, LaneBlocks):
            return lane_dequantize(self.data, transposed=True)
        return self.float().transpose(-1, -2)

    def nbytes(self) -> int:
        if isinstance(self.data, LaneBlocks):
            return self.data.nbytes()
        if isinstance(self.data, Blocks):
            return self.data.payload.nbytes() + sum(half.nbytes() for half in self.data.halves.values())
        return self.data.nbytes()

    def numel(self) -> int:
        return math.prod(self.shape)


def quantized_weight(raw: Any, ggml_type: int, shape: tuple[int, ...], device: str | None = None) -> Weight:
    """A Weight from a quantized tensor's file bytes, a numpy uint8 `(*rows, n_blocks, block_bytes)` view: a matrix
    as LaneBlocks (the fast matvec layout), anything else (an expert stack) as packed Blocks."""
    if len(shape) == 2 and type_name(ggml_type) in ALIGNED_GAP:
        return Weight(pack_lanes(raw, ggml_type, device), ggml_type, shape)
    return Weight(pack(raw, ggml_type, device), ggml_type, shape)


# from this many rows of x on (a prefill chunk), linear() decodes the weight once into a transposed float scratch
# buffer and runs a float matmul, instead of decoding every weight again for every row
SCRATCH_MATMUL_ROWS = 16


def linear(x: Tensor, weight: Weight, bias: Tensor | None = None, norm: RMSNorm | None = None) -> Tensor:
    """norm(x) @ weight.T (+ bias), or x @ weight.T without `norm`: weight is `(out, in)` as GGUF stores it; a
    quantized one is decoded in the kernel.

    Many rows (a prefill chunk): the weight is first decoded into a `(in, out)` float32 buffer that lives only
    for this matmul (one matrix at a time, so memory grows by the largest matrix at most, not by the model), then
    multiplied; tg's matmul runs about 5x faster on a weight contiguous along the output axis than along the
    reduction. Few rows (decoding): the weight stays encoded and is decoded inside the matvec kernel
    (tg.llm.lanes.lane_matvec), one kernel per row of x, with the norm in it: with several rows in one kernel,
    the scheduler's fusion policy sees each decoded weight value reused by every row and gives the values (dozens
    of them per block) buffers and kernels of their own."""
    rows, lanes = math.prod(x.shape[:-1]), weight.data
    if rows < SCRATCH_MATMUL_ROWS and isinstance(lanes, LaneBlocks):
        matvec = int8_matvec.int8_lane_matvec if lanes.int8_activations else lane_matvec
        out = _rowwise(x, lambda row: matvec(row, lanes, norm), weight.shape[0])
        return out if bias is None else out + bias
    if norm is not None:
        x = norm(x)
    if rows >= SCRATCH_MATMUL_ROWS:
        out = x.matmul(weight.transposed_float().contiguous())
    else:
        out = x.matmul(weight.float().transpose(-1, -2))
    return out if bias is None else out + bias


def gated_linear(x: Tensor, gate_up: Weight, norm: RMSNorm | None = None, activation: str = "silu") -> Tensor:
    """activation(gate) * up (tg.llm.ops.activate) of the projections norm(x) @ gate.T and norm(x) @ up.T, where
    `gate_up` stacks gate's rows on up's (a fused ffn_gate_up, see tg.llm.model.FUSED_PROJECTIONS): the MLP's hidden
    activations. Decoding (few rows, LaneBlocks whose halves split at a lane group), norm, both matvecs and the
    product are one kernel."""
    hidden = gate_up.shape[0] // 2
    lanes = gate_up.data
    few_rows = math.prod(x.shape[:-1]) < SCRATCH_MATMUL_ROWS
    if few_rows and isinstance(lanes, LaneBlocks) and lanes.int8_activations:
        if activation == "silu" and hidden % LANES == 0:  # (the C kernel computes silu only)
            return _rowwise(x, lambda row: int8_matvec.int8_gated_matvec(row, lanes, norm), hidden)
        both = _rowwise(x, lambda row: int8_matvec.int8_lane_matvec(row, lanes, norm), gate_up.shape[0])
        return activate(both[..., :hidden], activation) * both[..., hidden:]
    if few_rows and isinstance(lanes, LaneBlocks) and hidden % LANES == 0:
        # a buffer of its own from the start: the down projection reads every hidden value once per output row, so
        # the scheduler would store it anyway, but only after it has given the two matvecs under it kernels of
        # their own (a reduction read by another reduction is stored), three kernels instead of one
        return _rowwise(x, lambda row: lane_gated_matvec(row, lanes, norm, activation), hidden).contiguous()
    both = linear(x, gate_up, norm=norm)
    return activate(both[..., :hidden], activation) * both[..., hidden:]


def _rowwise(x: Tensor, matvec: Callable[[Tensor], Tensor], outputs: int) -> Tensor:
    """`matvec` `(1, in) -> (1, outputs)` applied to every row of x `(..., in)`: `(..., outputs)`."""
    *lead, features = x.shape
    flat = x.reshape(-1, features)
    if flat.shape[0] == 1:
        return matvec(flat).reshape(*lead, outputs)
    rows = [matvec(flat[row : row + 1]).contiguous() for row in range(concrete_size(flat.shape[0], "row-wise matvec"))]
    return concat(rows, dim=0).reshape(*lead, outputs)


class EmbeddingTable:
    """Token embedding rows read from the memory-mapped GGUF file on the host, for a lookup without a gather.

    tg has no data-dependent loads, so a lookup inside a kernel would compare every vocabulary row with the token
    (a pass over the whole table per step). Instead the rows' bytes are copied from the file (a few hundred bytes
    per token) into small Tensors, `inputs(tokens)`, and `decode(inputs)` turns them into float rows inside the
    step's kernels. The inputs are plain Tensors, so a TinyJit capture takes them as arguments.
    """

    def __init__(self, info: GGUFTensorInfo) -> None:
        import numpy as np

        self.info = info
        self.rows = info.shape[0]
        raw = np.memmap(info.path, dtype=np.uint8, mode="r", offset=info.offset, shape=(info.nbytes,))
        _, block_elements, block_bytes = GGML_TYPES[info.ggml_type]
        self.raw = raw.reshape(self.rows, -1, block_bytes) if info.type_name not in FLOAT_TYPES_AND_BF16 else raw
        self.half_offsets = [] if info.type_name in FLOAT_TYPES_AND_BF16 else HALF_FIELDS[info.type_name][0]

    def inputs(self, tokens: list[int]) -> list[Tensor]:
        """The encoded rows of `tokens` as Tensors: the float rows, or the packed payload and its fp16 fields."""
        import numpy as np

        for token in tokens:
            if not 0 <= token < self.rows:
                raise ValueError(f"token id {token} is outside the vocabulary of {self.rows}")
        name, index = self.info.type_name, np.asarray(tokens, dtype=np.int64)
        if name in FLOAT_TYPES:
            rows = self.raw.view(to_numpy(FLOAT_TYPES[name])).reshape(self.rows, -1)[index]
            return [Tensor(np.ascontiguousarray(rows))]
        if name == "BF16":
            return [Tensor(np.ascontiguousarray(self.raw.view(np.uint16).reshape(self.rows, -1)[index]))]
        blocks = pack(self.raw[index], self.info.ggml_type)
        return [blocks.payload, *(blocks.halves[offset] for offset in self.half_offsets)]

    def decode(self, inputs: list[Tensor]) -> Tensor:
        """Float32 rows `(tokens, dim)` from what `inputs` returned (a lazy expression)."""
        name = self.info.type_name
        if name in FLOAT_TYPES:
            return inputs[0].float()
        if name == "BF16":
            return bf16_to_float(inputs[0])
        first = HALF_FIELDS[name][1][0]
        blocks = Blocks(inputs[0], first, dict(zip(self.half_offsets, inputs[1:], strict=True)))
        return dequantize(blocks, self.info.ggml_type)
