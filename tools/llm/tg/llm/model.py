"""The decoder-only transformer of llama, qwen2, qwen3, qwen3moe, olmoe, gemma2, gemma3 and phi3 GGUF models, on tg
Tensors.

One `Transformer.forward(tokens, start_pos)` call runs a chunk of tokens through every block, writes their keys
and values into the per-block KV cache at `start_pos`, and returns the logits of the last token. Weights stay in
their GGUF encoding (see weights.py); activations are float32, the KV cache float32, float16 or int8
(see tg.llm.config.KV_CACHE_TYPES).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, overload

import numpy as np

from tg.codegen import UOp, dtypes
from tg.codegen.dtype import DType, to_numpy
from tg.codegen.schedule.realize import whole_buffer
from tg.hcq import Device
from tg.hcq.engine.buffers import Buffer, buffer_of
from tg.llm.capture_store import CaptureStore
from tg.llm.config import (
    DEFAULT_KV_CACHE,
    DEFAULT_MATVEC,
    KV_CACHE_TYPES,
    TransformerConfig,
    UnsupportedModelError,
    check_kv_cache,
    check_matvec,
)
from tg.llm.int8_matvec import use_int8_activations
from tg.llm.kv_quant import cache_row_width, dequantized, stored_rows
from tg.llm.lanes import LaneBlocks, RMSNorm
from tg.llm.ops import activate, concat, stack
from tg.llm.quants import DEQUANTIZERS, Blocks
from tg.llm.weights import SCRATCH_MATMUL_ROWS, EmbeddingTable, Weight, gated_linear, linear, quantized_weight
from tg.tensor import Tensor, Variable
from tg.tensor.flags import JIT
from tg.tensor.gguf import FLOAT_TYPES, GGML_TYPES, GGUFFile, GGUFTensorInfo, gguf_read, load_tensor, mapped_tensors
from tg.tensor.jit import TinyJit
from tg.tensor.promotion import dtype_argument
from tg.tensor.symbolic import concrete_size, known_le


class ContextOverflowError(ValueError):
    """More tokens than the KV cache holds."""


def kv_cache_dtype(name: str) -> DType:
    """The dtype of the KV cache type `name` (see tg.llm.config.KV_CACHE_TYPES); another name is a ValueError."""
    return dtype_argument(KV_CACHE_TYPES[check_kv_cache(name)])


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * ((x * x).mean(-1, keepdim=True) + eps).rsqrt() * weight


def post_norm(x: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    """x normalized by `weight` where the block has such a norm after its attention or MLP (Gemma), else x."""
    return x if weight is None else rms_norm(x, weight, eps)


def soft_cap(x: Tensor, cap: float) -> Tensor:
    """cap * tanh(x / cap): Gemma 2 bounds its attention scores and logits so; a cap of 0 is none."""
    return x if not cap else (x * (1.0 / cap)).tanh() * cap


def rope_frequencies(config: TransformerConfig, freq_factors: np.ndarray | None, local: bool = False) -> np.ndarray:
    """The angle per position of each rotated pair, `(rope_dim / 2,)` in float64.

    The base is theta^(-2i/d). Llama 3.x ships its frequency-dependent scaling as `rope_freqs.weight`, one divisor
    per pair (llama.cpp's converter computes it from the model's `rope_scaling`); linear scaling from the metadata
    divides every frequency (that is, every position) by the factor. The sliding-window blocks of a model that has
    them (`local`) rotate with their own base and no scaling."""
    exponents = -np.arange(0, config.rope_dim, 2, dtype=np.float64) / config.rope_dim
    if local:
        return config.local_rope_theta**exponents
    frequencies = config.rope_theta**exponents
    if freq_factors is not None:
        if freq_factors.shape != frequencies.shape:
            raise UnsupportedModelError(
                f"rope_freqs.weight has shape {freq_factors.shape}, expected ({config.rope_dim // 2},)"
            )
        frequencies = frequencies / freq_factors.astype(np.float64)
    if config.rope_scaling == "linear":
        frequencies = frequencies / config.rope_scaling_factor
    return frequencies


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, rope_dim: int, interleaved: bool) -> Tensor:
    """Rotate the first `rope_dim` features of x `(T, heads, head_dim)`.

    `interleaved` rotates adjacent pairs (2i, 2i+1): llama.cpp's converter permutes llama's q/k rows so that this
    equals Hugging Face's rotate-half on the original weights. Otherwise the halves (i, i + rope_dim/2) rotate
    (the NEOX layout qwen models keep).
    """
    rotated, rest = x[..., :rope_dim], x[..., rope_dim:]
    if interleaved:
        pairs = rotated.unflatten(-1, (rope_dim // 2, 2))
        first, second = pairs[..., 0], pairs[..., 1]
        out = stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)
    else:
        first, second = rotated[..., : rope_dim // 2], rotated[..., rope_dim // 2 :]
        out = concat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return out if rest.shape[-1] == 0 else concat([out, rest], dim=-1)


def attend(
    q: Tensor, keys: Tensor, values: Tensor, mask: Tensor, scale: float | None = None, softcap: float = 0.0
) -> Tensor:
    """Grouped-query attention of q `(T, heads, head_dim)` over S cached rows: keys `(kv_heads, tiles, head_dim,
    KEY_TILE)` in the cache's tiled layout (row KEY_TILE * t + i at [:, t, :, i], see cache_keys) and values
    `(kv_heads, S, head_dim)`, S <= KEY_TILE * tiles, where `mask` `(T, tiles, KEY_TILE)` is True (key rows from S
    on must be masked out); query head h reads key/value head h // (heads / kv_heads). Returns
    `(T, heads * head_dim)`. Keys and values of another float type (a float16 cache) are read as float32, those of
    an int8 cache as their codes times their blocks' scales (see tg.llm.kv_quant).

    A score sums over head_dim with its lanes along KEY_TILE cached rows (one query scalar times a vector of keys per
    feature, no horizontal sum). The values are read up to row S only, so whatever the masked rows hold (NaN past the
    position) never meets a weight. The softmax's division comes after the weighted sum of the values (a kernel
    fewer than normalizing the weights first). The scores are scaled by `scale`, by default 1/sqrt(head_dim), and
    soft-capped by `softcap` (see soft_cap) before the mask."""
    count, heads, head_dim = q.shape
    features = concrete_size(head_dim, "attention's head_dim")
    keys, values = dequantized(keys, 2, features), dequantized(values, 2, features)
    keys, values = keys.float(), values.float()
    kv_heads, tiles = keys.shape[:2]
    group = heads // kv_heads
    q = q.reshape(count, kv_heads, group, head_dim).permute(1, 2, 0, 3).reshape(kv_heads, group * count, 1, head_dim, 1)
    if scale is None:
        scale = 1.0 / math.sqrt(concrete_size(head_dim, "attention's head_dim"))
    scores = soft_cap((q * keys.unsqueeze(1)).sum(3) * scale, softcap)
    scores = mask.reshape(1, 1, *mask.shape).where(scores.reshape(kv_heads, group, count, tiles, KEY_TILE), -math.inf)
    exp = (scores - scores.max((-2, -1), keepdim=True)).exp()
    weights = exp.reshape(kv_heads, group * count, tiles * KEY_TILE)[..., : values.shape[1]]
    # the denominator in a kernel of its own: a column of ones after the values would give it in the same sum, but
    # that output, 65 wide, has no vector-wide divisor and ran scalar (3x slower at a decode position of 1000)
    denominator = exp.sum((-2, -1)).reshape(kv_heads, group, count, 1)
    out = weights.matmul(values).reshape(kv_heads, group, count, head_dim) / denominator
    return out.permute(2, 0, 1, 3).reshape(count, heads * head_dim)


def expert_ranks(scores: Tensor) -> Tensor:
    """Each element's rank in its row `(T, E)`, 0 for the largest; ties go to the lower index (pairwise comparison)."""
    experts = scores.shape[-1]
    mine, theirs = scores.unsqueeze(-1), scores.unsqueeze(-2)  # (T, E, 1) vs (T, 1, E)
    index = Tensor.arange(experts, dtype=dtypes.int32)
    lower = index.reshape(1, experts) < index.reshape(experts, 1)  # [i, j]: j < i
    beats_me = (theirs > mine) | ((theirs == mine) & lower)
    return beats_me.cast(dtypes.int32).sum(-1)


def top_k_mask(scores: Tensor, k: int) -> Tensor:
    """True for the k largest of each row `(T, E)`; ties go to the lower index."""
    return expert_ranks(scores) < k


@dataclass
class Block:
    attn_norm: Tensor
    q: Weight | None  # None when the file's q, k, v are fused into `qkv` (see FUSED_PROJECTIONS)
    k: Weight | None
    v: Weight | None
    output: Weight
    ffn_norm: Tensor
    q_bias: Tensor | None = None
    k_bias: Tensor | None = None
    v_bias: Tensor | None = None
    q_norm: Tensor | None = None
    k_norm: Tensor | None = None
    gate: Weight | None = None
    up: Weight | None = None
    down: Weight | None = None
    router: Weight | None = None
    gate_experts: Weight | None = None
    up_experts: Weight | None = None
    down_experts: Weight | None = None
    qkv: Weight | None = None
    qkv_bias: Tensor | None = None
    gate_up: Weight | None = None
    post_attention_norm: Tensor | None = None  # Gemma: normalizes the attention output before the residual add
    post_ffw_norm: Tensor | None = None  # Gemma: the same for the MLP's output
    local: bool = False  # attends over the last config.sliding_window positions only, with the local RoPE


BlockTensor = TypeVar("BlockTensor", Weight, Tensor)


def block_tensor(tensor: BlockTensor | None, name: str, index: int | None = None) -> BlockTensor:
    """A block's tensor `blk.N.name` (N = index, or any block) that the computation at hand needs; a model whose file
    lacks it is refused by name (the tensors a block may lack are None in Block)."""
    if tensor is None:
        block = "*" if index is None else index
        raise UnsupportedModelError(f"the model lacks the tensor blk.{block}.{name}, which its blocks need")
    return tensor


# A block's KV cache is one Tensor `(2, kv_heads, rows, head_dim)`. [1] holds the values row-major. [0] holds the
# keys in tiles of KEY_TILE rows stored feature-major, `(kv_heads, rows / KEY_TILE, head_dim, KEY_TILE)` in memory:
# a decode step's scores then put their vector lanes along KEY_TILE cached rows, each feature one multiply-add of a
# query scalar by a vector of keys, where the row-major keys ended every dot product in 16 partial sums added in
# sequence (SmolLM2-135M at position 288: 10 ms of a 33 ms step). A tile is contiguous (4 KiB at head_dim 64), so a
# kernel streams them.
KEY_TILE = 16


def cache_keys(cache: Tensor) -> Tensor:
    """The key tiles of `cache` (see KEY_TILE): `(kv_heads, rows / KEY_TILE, head_dim, KEY_TILE)`."""
    kv_heads, rows, head_dim = cache.shape[1:]
    return cache[0].reshape(kv_heads, rows // KEY_TILE, head_dim, KEY_TILE)


def key_rows(cache: Tensor) -> Tensor:
    """The keys of `cache` as rows `(kv_heads, rows, head_dim)`: a strided view of the tiles, to assign rows into."""
    kv_heads, rows, head_dim = cache.shape[1:]
    return cache_keys(cache).permute(0, 1, 3, 2).reshape(kv_heads, rows, head_dim)


@overload
def key_tiles(rows: int) -> int: ...
@overload
def key_tiles(rows: UOp) -> UOp: ...
@overload
def key_tiles(rows: int | UOp) -> int | UOp: ...
def key_tiles(rows: int | UOp) -> int | UOp:
    """How many key tiles hold the first `rows` rows."""
    return (rows + KEY_TILE - 1) // KEY_TILE


@dataclass(frozen=True)
class SlidingWindow:
    """The key tiles that rows at positions position..position + rows - 1 of a sliding-window block attend over:
    `count` tiles from the one holding the first row the first query sees (position - sliding_window + 1), the same
    number at every position, so that a decode step at a long position reads the window, not the whole cache, and
    one capture serves every position from sliding_window - 1 on (see Transformer._decode). The value rows read
    outside the window's rows are zeros. (A prefill chunk's window has a concrete first row instead, see
    Transformer.chunk_window_start.)"""

    first_row: UOp | int
    count: int

    @staticmethod
    def of(position: UOp | int, rows: int, sliding_window: int) -> SlidingWindow:
        """The window of rows at `position`, which must be at least sliding_window - 1 for every value of its
        variables (so the window starts at row 0 or later)."""
        assert known_le(sliding_window - 1, position), "a sliding window that would start before row 0"
        count = (sliding_window + rows - 2) // KEY_TILE + 2  # tiles of the rows from the window's start to the last
        return SlidingWindow(position - sliding_window + 1, count)

    @property
    def tiles(self) -> slice:
        """The window's key tiles."""
        first = self.first_row // KEY_TILE
        return slice(first, first + self.count)

    def rows(self, cached: Tensor, visible: UOp | int) -> Tensor:
        """The window's tiles' rows of `cached` `(kv_heads, rows, width)`, zeros before its first row and from row
        `visible` on (a cache row outside the window may hold anything, NaN included, which a zero softmax weight
        would not cancel)."""
        first = self.first_row // KEY_TILE * KEY_TILE
        read = cached[:, first : first + self.count * KEY_TILE]
        row = Tensor.arange(self.count * KEY_TILE, dtype=dtypes.int32) + first
        return ((row >= self.first_row) & (row < visible)).reshape(1, -1, 1).where(read, 0)


def kv_window(start_pos: int, max_context: int) -> int:
    """How many cached positions a batched server step (tg.llm.serve.runner) starting at `start_pos` attends over
    (the model's own steps read the key tiles of the filled rows, see Transformer): 0, 64, 128, then the multiple of 128
    at or above start_pos (at most max_context rounded up to whole key tiles, see KEY_TILE). Steps in one window
    run identical kernels, so one TinyJit capture per window serves every position in it; the positions from
    start_pos on are masked. Windows of 128 keep the keys and values read in vain below 128 positions, while a new
    window (one step scheduled and captured) comes at most every 128 tokens."""
    if start_pos == 0:
        return 0
    window = 64 if start_pos <= 64 else -(-start_pos // 128) * 128
    return min(-(-max_context // KEY_TILE) * KEY_TILE, window)


# The decode step runs the whole forward as one TinyJit capture at a symbolic position; a chunk shorter than
# BLOCK_ROWS[0] is fed through it token by token (a matvec of n rows costs about n one-row matvecs, so padded
# multi-row captures saved nothing and cost a capture each). Longer chunks, padded to the next of BLOCK_ROWS,
# capture one block's forward per (padded rows, KV window, block layout) and replay it for every block with that
# block's weights and cache as inputs: one block is scheduled instead of all, and a capture holds one block's float
# scratch weights. Chunks longer still run plainly.
BLOCK_ROWS = (16, 32, 48, 64, 128, 256)
assert SCRATCH_MATMUL_ROWS <= BLOCK_ROWS[0]
# a chunk's attention reads the cache up to the next multiple of this past its last row (the rest masked), so
# chunks at nearby positions share a capture; its rows are position-independent kernels with concrete sizes
CHUNK_WINDOW = 128
# a short prompt's chunk capture stays across prompts (see Transformer.keeps_chunk_capture) up to this many rows,
# where one block's weights as float32 (what the capture's scratch holds) take at most this many bytes:
# SmolLM2-135M's take 14 MB (the kept capture 25 MB of RSS), Qwen2.5-0.5B's 60 MB, Llama 3.2 1B's 240 MB
SHORT_PROMPT_ROWS = 64
KEPT_CHUNK_CAPTURE_BYTES = 64 * 1024 * 1024


def padded_rows(count: int) -> int:
    """The row count a chunk of BLOCK_ROWS[0] or more tokens runs with: the next of BLOCK_ROWS, or count."""
    return next((rows for rows in BLOCK_ROWS if rows >= count), count)


def block_tensors(block: Block) -> list[Tensor]:
    """Every Tensor of a block (norms, biases, each weight's words, or payload and fp16 fields), in field order."""
    found: list[Tensor] = []
    for item in dataclasses.fields(block):
        value = getattr(block, item.name)
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, Weight):
            data = value.data
            if isinstance(data, LaneBlocks):
                found.append(data.words)
            else:
                found += [data.payload, *data.halves.values()] if isinstance(data, Blocks) else [data]
    return found


def block_float_bytes(block: Block) -> int:
    """The bytes of a block's weights as float32: the scratch that a prefill chunk's block capture holds."""
    weights = [getattr(block, item.name) for item in dataclasses.fields(block)]
    return 4 * sum(weight.numel() for weight in weights if isinstance(weight, Weight))


def rebuilt_block(template: Block, tensors: list[Tensor]) -> Block:
    """`template` with its Tensors replaced, in `block_tensors` order, by `tensors` (a captured block's inputs)."""
    supply = iter(tensors)
    values: dict[str, object] = {}
    for item in dataclasses.fields(template):
        value = getattr(template, item.name)
        if isinstance(value, Tensor):
            value = next(supply)
        elif isinstance(value, Weight):
            data = value.data
            if isinstance(data, LaneBlocks):
                data = LaneBlocks(next(supply), data.type_name, data.shape)
            elif isinstance(data, Blocks):
                data = Blocks(next(supply), data.start, {offset: next(supply) for offset in data.halves}, data.gap)
            else:
                data = next(supply)
            value = Weight(data, value.ggml_type, value.shape)
        values[item.name] = value
    return Block(**values)  # type: ignore[arg-type]


def block_layout(block: Block) -> tuple:
    """What a captured block forward bakes in besides its inputs' shapes: which fields it has, of which types, and
    its settings (`local`: which RoPE table it reads)."""
    return tuple((item.name, _field_layout(getattr(block, item.name))) for item in dataclasses.fields(block))


def _field_layout(value: object) -> object:
    if isinstance(value, Weight):
        return value.ggml_type
    return value is None if value is None or isinstance(value, Tensor) else value


def write_cache_rows(cache: Tensor, rows: memoryview, start_pos: int) -> None:
    """Copy `rows`, the bytes of whole rows `(count, 2, kv_heads, head_dim)` (keys then values), into the realized KV
    cache `cache` (see KEY_TILE) from position start_pos on. Host-visible memory is written in place; otherwise the
    key tiles and value rows the rows fall in are copied out per KV head, updated and copied back."""
    shape = tuple(concrete_size(size, "a KV cache row write") for size in cache.shape)
    _, kv_heads, cache_rows, head_dim = shape
    dtype = np.dtype(to_numpy(cache.dtype))
    new = np.frombuffer(rows, dtype=dtype).reshape(-1, 2, kv_heads, head_dim)
    memory = cache_memory(cache)
    live = memory.host_view()
    if live is not None:
        store_rows(np.frombuffer(live, dtype).reshape(shape), new, start_pos)
        return
    first = start_pos // KEY_TILE * KEY_TILE  # the rows of whole key tiles, copied out and back per part and head
    count = key_tiles(start_pos + new.shape[0]) * KEY_TILE - first
    region = np.empty((2, kv_heads, count, head_dim), dtype)
    parts = [(part, head, memory.view(count * head_dim, cache.dtype,
                                      ((part * kv_heads + head) * cache_rows + first) * head_dim * dtype.itemsize))
             for part in range(2) for head in range(kv_heads)]  # fmt: skip
    for part, head, view in parts:
        view.copyout(memoryview(region[part, head]).cast("B"))
    store_rows(region, new, start_pos - first)
    for part, head, view in parts:
        view.copyin(memoryview(region[part, head]).cast("B"))


def cache_memory(cache: Tensor) -> Buffer:
    """The memory of the realized KV cache `cache`, which rows are written into directly."""
    node = whole_buffer(cache.uop)
    if node is None:
        raise ValueError("a KV cache must be realized into a whole buffer of its own before rows are written into it")
    return buffer_of(node)


def store_rows(cache: np.ndarray, new: np.ndarray, start_pos: int) -> None:
    """Write rows `new` `(count, 2, kv_heads, head_dim)` into the host array `cache` `(2, kv_heads, rows, head_dim)`,
    memory laid out as a KV cache (see KEY_TILE; rows a whole number of key tiles), from row start_pos on."""
    kv_heads, rows, head_dim = cache.shape[1:]
    positions = start_pos + np.arange(new.shape[0])
    cache[1, :, positions] = new[:, 1]
    tiles = cache[0].reshape(kv_heads, rows // KEY_TILE, head_dim, KEY_TILE)
    tiles[:, positions // KEY_TILE, :, positions % KEY_TILE] = new[:, 0]


def release_cached_memory(device: str) -> None:
    """Give the memory of freed buffers back to the system: the allocator keeps freed blocks for reuse, and
    glibc keeps freed heap pages. After a prefill chunk those are its float scratch weights (tens of MB, see
    weights.linear), which the decode steps that follow never reuse."""
    allocator = Device[device].allocator
    if hasattr(allocator, "free_cache"):
        allocator.free_cache()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only
    if trim is not None:
        trim(0)


def rope_table(frequencies: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin `(rows, rope_dim / 2)` float32 of the angles of positions 0..rows-1 (computed in float64)."""
    angles = np.arange(rows, dtype=np.float64)[:, None] * frequencies[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class Transformer:
    """A GGUF decoder model with its KV cache (one sequence, batch 1).

    The cache of a block is `(2, kv_heads, rows, head_dim)` with the keys in tiles (see KEY_TILE), `rows` = max_context
    plus room for one padded prefill chunk, of the dtype of `kv_cache` (see tg.llm.config.KV_CACHE_TYPES). A step is a
    function of Tensors and the bound position Variable `start_pos`: it writes its keys and values into the caches
    (assigns inside the step) and attends over the filled rows only (the key tiles that hold them, the rows past
    start_pos + count masked). Kernels take the position as an argument, so TinyJit captures the one-token step once and
    replays it for every position (see BLOCK_ROWS for chunks).
    """

    def __init__(
        self,
        config: TransformerConfig,
        weights: dict[str, Weight],
        max_context: int,
        embedding: EmbeddingTable,
        kv_cache: str = DEFAULT_KV_CACHE,
        matvec: str = DEFAULT_MATVEC,
    ) -> None:
        self.config, self.weights, self.embedding_table = config, weights, embedding
        self.kv_cache, self.kv_dtype = kv_cache, kv_cache_dtype(kv_cache)
        self.matvec = check_matvec(matvec)
        if matvec == "int8":
            use_int8_activations(weights.values())
        self.max_context = min(max_context, config.context_length)
        self.embedding = weights["token_embd.weight"]
        self.output_norm = weights["output_norm.weight"].float()
        self.output = weights.get("output.weight", self.embedding)  # tied embeddings when there is no output
        self.blocks = [self._block(index) for index in range(config.num_blocks)]
        self.block_float_bytes = max(map(block_float_bytes, self.blocks))  # the largest chunk capture's scratch
        # a padded chunk's extra rows may run past the context; whole key tiles
        rows = key_tiles(self.max_context + BLOCK_ROWS[-1] - 1) * KEY_TILE
        cache_shape = (2, config.n_kv_heads, rows, cache_row_width(config.head_dim, self.kv_dtype))
        self.caches = [Tensor.zeros(*cache_shape, dtype=self.kv_dtype).contiguous().realize() for _ in self.blocks]
        if "rope_factors_long.weight" in weights or "rope_factors_short.weight" in weights:
            raise UnsupportedModelError("LongRoPE (rope_factors_long/short, Phi-3 128k) is not supported")
        freq_factors = weights.get("rope_freqs.weight")
        frequencies = rope_frequencies(config, None if freq_factors is None else freq_factors.float().numpy())
        self.rope_cos, self.rope_sin = rope_table(frequencies, rows)
        # the same tables on the device, `(rows, 1, rope_dim / 2)`: a step slices its rows at the symbolic position
        self.rope_tables = (Tensor(self.rope_cos[:, None, :]).realize(), Tensor(self.rope_sin[:, None, :]).realize())
        # the sliding-window blocks' own (the global ones' where the model has none)
        self.local_rope_cos, self.local_rope_sin = self.rope_cos, self.rope_sin
        self.local_rope_tables = self.rope_tables
        if config.local_blocks and config.local_rope_theta:
            self.local_rope_cos, self.local_rope_sin = rope_table(rope_frequencies(config, None, local=True), rows)
            self.local_rope_tables = (
                Tensor(self.local_rope_cos[:, None, :]).realize(),
                Tensor(self.local_rope_sin[:, None, :]).realize(),
            )
        self.positions = Tensor(np.arange(rows, dtype=np.int32)).realize()  # for the causal masks
        self.position = Variable("start_pos", 0, self.max_context - 1)
        # the position of the decode steps past the first sliding window (see SlidingWindow), where there are some
        self.window_position: UOp | None = None
        if config.local_blocks and config.sliding_window <= self.max_context:
            self.window_position = Variable("start_pos", config.sliding_window - 1, self.max_context - 1)
        self.decode_steps: dict[str, TinyJit] = {}  # by name in the capture store (see _decode)
        self.block_steps: dict[tuple, TinyJit] = {}  # see BLOCK_ROWS; dropped by drop_chunk_captures
        self.chunk_logits_steps: dict[int, TinyJit] = {}  # a chunk's last logits, by its padded rows (see _chunk)
        self.capture_store: CaptureStore | None = None  # captures kept on disk (set by load_model)
        # entered around each capture (a cold one compiles for seconds): the CLI shows progress there
        self.on_capture: Callable[[str], AbstractContextManager] = lambda what: contextlib.nullcontext()

    def _block(self, index: int) -> Block:
        def get(name: str) -> Weight | None:
            return self.weights.get(f"blk.{index}.{name}")

        def floats(name: str) -> Tensor | None:
            weight = get(name)
            return None if weight is None else weight.float().realize()

        def present(name: str) -> Weight:  # called after the check for missing tensors below
            return block_tensor(get(name), name, index)

        projections = [] if get("attn_qkv.weight") else ["attn_q.weight", "attn_k.weight", "attn_v.weight"]
        required = ["attn_norm.weight", *projections, "attn_output.weight", "ffn_norm.weight"]
        missing = [name for name in required if get(name) is None]
        if missing:
            raise UnsupportedModelError(f"block {index} lacks tensors {', '.join(missing)}")
        block = Block(
            attn_norm=present("attn_norm.weight").float().realize(),
            q=get("attn_q.weight"),
            k=get("attn_k.weight"),
            v=get("attn_v.weight"),
            output=present("attn_output.weight"),
            ffn_norm=present("ffn_norm.weight").float().realize(),
            q_bias=floats("attn_q.bias"),
            k_bias=floats("attn_k.bias"),
            v_bias=floats("attn_v.bias"),
            q_norm=floats("attn_q_norm.weight"),
            k_norm=floats("attn_k_norm.weight"),
            qkv=get("attn_qkv.weight"),
            post_attention_norm=floats("post_attention_norm.weight"),
            post_ffw_norm=floats("post_ffw_norm.weight"),
            local=index in self.config.local_blocks,
        )
        biases = [bias for bias in (block.q_bias, block.k_bias, block.v_bias) if bias is not None]
        if block.qkv is not None and len(biases) == 3:
            block.qkv_bias = concat(biases, dim=0).realize()
        if self.config.num_experts:
            block.router, block.gate_experts = get("ffn_gate_inp.weight"), get("ffn_gate_exps.weight")
            block.up_experts, block.down_experts = get("ffn_up_exps.weight"), get("ffn_down_exps.weight")
        else:
            block.gate, block.up, block.down = get("ffn_gate.weight"), get("ffn_up.weight"), get("ffn_down.weight")
            block.gate_up = get("ffn_gate_up.weight")
            if block.gate is None and block.up is not None and block.up.shape[0] == 2 * self.config.hidden_dim:
                block.gate_up, block.up = block.up, None  # phi3: ffn_up holds the gate's rows, then the up's
        return block

    # ------------------------------------------------------------------------------------------- the forward

    def forward(self, tokens: list[int], start_pos: int) -> Tensor:
        """Logits `(vocab,)` of the last of `tokens`, which sit at positions start_pos.. of the sequence; their
        keys and values go into the KV cache. Runs the step through TinyJit (JIT=0: plainly every time)."""
        count = len(tokens)
        if count == 0:
            raise ValueError("forward needs at least one token")
        if start_pos + count > self.max_context:
            raise ContextOverflowError(
                f"context overflow: {start_pos + count} tokens do not fit the maximum context of {self.max_context}"
            )
        if count < BLOCK_ROWS[0]:
            for offset, token in enumerate(tokens):
                logits = self._decode(token, start_pos + offset)
            return logits
        rows = padded_rows(count)
        if rows in BLOCK_ROWS:
            padded = tokens + [tokens[-1]] * (rows - count)  # padding rows write cache rows later tokens overwrite
            return self._chunk(padded, count, start_pos)
        # a chunk longer than any of BLOCK_ROWS runs plainly at a concrete position
        last = Tensor((np.arange(count) == count - 1)[:, None])
        logits = self._step(start_pos, last, *self.embedding_table.inputs(tokens))
        release_cached_memory(self.caches[0].device)
        return logits

    @property
    def decode_step(self) -> TinyJit | None:
        """The decode step of the positions before the first sliding window's end (of every position in a model
        without sliding-window blocks)."""
        return self.decode_steps.get("decode")

    def _decode(self, token: int, position: int) -> Tensor:
        """The logits after `token` at `position`: a replay of the captured decode step, or, from position
        sliding_window - 1 on, of the one whose sliding-window blocks read their window only (see SlidingWindow)."""
        if self.block_steps:  # a decode step after long chunks: the prompt is in
            self.drop_chunk_captures()  # (a short prompt's kept capture costs a check per step)
        name, variable = "decode", self.position
        if self.window_position is not None and position >= self.config.sliding_window - 1:
            name, variable = "decode window", self.window_position
        step = self.decode_steps.get(name)
        if step is None and self.capture_store is not None:
            step = self.capture_store.load(name, self, self._step)
        if step is None:
            # the step does the same work every call (weights and caches are realized at load), so the first call
            # is captured: a short answer would otherwise spend a step scheduling
            step = TinyJit(self._step, plain_calls=0)
        self.decode_steps[name] = step
        captured = step.graph is not None
        inputs = self.embedding_table.inputs([token])
        logits = self._run_step(step, f"the {name} step", name, variable.bind(position), None, *inputs)
        if not captured and step.graph is not None:
            release_cached_memory(self.caches[0].device)  # what scheduling and compiling the capture freed
        return logits

    def _run_step(self, step: TinyJit, what: str, store_name: str, *args: object) -> Tensor:
        """`step(*args)`; when the call captures, inside on_capture(what), and the capture is then stored."""
        if step.captured or not int(JIT):  # (JIT=0 runs every call plainly: nothing is captured)
            return step(*args)
        with self.on_capture(what):
            result = step(*args)
        if step.captured and self.capture_store is not None:
            self.capture_store.save(store_name, self, step)
        return result

    def _chunk(self, tokens: list[int], count: int, start_pos: int) -> Tensor:
        """The logits after `tokens[count - 1]` of a padded chunk at start_pos, block by block (see BLOCK_ROWS).

        The position is a Variable here too (the cache assign and RoPE rows), but attention reads a concrete
        window under a mask: its kernels over a symbolic length ran many times slower for many rows."""
        rows, config = len(tokens), self.config
        cache_rows = concrete_size(self.caches[0].shape[2], "a prefill chunk's window")
        window = min(-(-(start_pos + rows) // CHUNK_WINDOW) * CHUNK_WINDOW, cache_rows)
        x = self.embedded(self.embedding_table.inputs(tokens)).contiguous().realize()
        keys, queries = np.arange(window)[None, :], start_pos + np.arange(rows)[:, None]
        visible = {False: keys <= queries}  # causal, (rows, window)
        if config.local_blocks:  # the key tiles from chunk_window_start's on
            seen = visible[False] & (keys > queries - config.sliding_window)
            visible[True] = seen[:, self.chunk_window_start(rows, window) * KEY_TILE :]
        masks = {local: Tensor(rows_seen.reshape(rows, -1, KEY_TILE)) for local, rows_seen in visible.items()}
        position = self.position.bind(start_pos)
        for block, cache in zip(self.blocks, self.caches, strict=True):
            weights = block_tensors(block)
            step, store_name = self._block_step(block, rows, window, weights)
            mask = masks[block.local]
            self._run_step(step, f"a {rows}-row prefill step", store_name, position, x, mask, cache, *weights)
        last = Tensor((np.arange(rows) == count - 1)[:, None])
        store_name = f"chunk logits {rows}"
        logits_step = self.chunk_logits_steps.get(rows)
        if logits_step is None and self.capture_store is not None:
            logits_step = self.capture_store.load(store_name, self, self._chunk_logits)
        if logits_step is None:  # captured too: built in Python, its matvec graph took 40 ms of a 43-token prefill
            logits_step = TinyJit(self._chunk_logits, plain_calls=0)
        self.chunk_logits_steps[rows] = logits_step
        logits = self._run_step(logits_step, f"the logits of a {rows}-row prefill step", store_name, last, x)
        release_cached_memory(self.caches[0].device)
        return logits

    def _chunk_logits(self, last: Tensor, x: Tensor) -> Tensor:
        """The logits `(vocab,)` of the row of x `(rows, dim)` that `last` `(rows, 1)` selects."""
        chosen = last.where(x, 0.0).sum(0, keepdim=True)  # exact: the other rows add 0
        return self.logits(chosen).reshape(-1).realize()

    def _block_step(self, block: Block, rows: int, window: int, weights: list[Tensor]) -> tuple[TinyJit, str]:
        """The captured forward of blocks like `block` for chunks of `rows` rows attending over `window` rows, and
        its name in the capture store."""
        shapes = tuple((w.shape, w.dtype) for w in weights)
        key = (rows, window, self.kv_cache, self.matvec, block_layout(block), shapes)
        store_name = f"block {key!r}"
        first_tile = self.chunk_window_start(rows, window) if block.local else 0
        forward = functools.partial(self._block_forward, block, first_tile)
        if key not in self.block_steps:
            self.drop_narrower_chunk_captures(window)
        if key not in self.block_steps and self.capture_store is not None:
            stored = self.capture_store.load(store_name, self, forward)
            if stored is not None:
                self.block_steps[key] = stored
        if key not in self.block_steps:
            self.block_steps[key] = TinyJit(forward, plain_calls=0)
        return self.block_steps[key], store_name

    def chunk_window_start(self, rows: int, window: int) -> int:
        """The first key tile a sliding-window block's chunk of `rows` rows reads when its attention covers `window`
        cache rows: the tile of the first row that the first row of the earliest chunk sharing this capture (the
        chunks whose last row lies in the same CHUNK_WINDOW, see _chunk) can see, so a chunk at a long position
        reads the window's rows, not the whole cache."""
        earliest_start = -(-window // CHUNK_WINDOW) * CHUNK_WINDOW - CHUNK_WINDOW - rows + 1
        return max(0, earliest_start - self.config.sliding_window + 1) // KEY_TILE

    def drop_chunk_captures(self) -> None:
        """Free the block captures of long chunks (each holds a block's float scratch weights, tens of MB on big
        models). A prompt's chunks share a capture while they share a KV window; the next prompt's rarely do, so
        the first decode step or short chunk after them drops them (and so does Generator.prefill). Those that
        keeps_chunk_capture keeps stay."""
        kept = {key: step for key, step in self.block_steps.items() if self.keeps_chunk_capture(key[0], key[1])}
        if len(kept) < len(self.block_steps):
            self.block_steps = kept
            release_cached_memory(self.caches[0].device)

    def drop_narrower_chunk_captures(self, window: int) -> None:
        """Free the block captures of windows narrower than `window` (but those keeps_chunk_capture keeps). A prompt's
        chunks attend over growing windows, so once one needs a wider window the narrower captures are not used
        again for this prompt, and drop_chunk_captures would free them after it: SmolLM2-135M's 1,024-token prompt
        held four (one per 256-row chunk), a 361 MB peak against 243 MB for the same prompt fed 256 tokens at a
        time."""
        narrower = [key for key in self.block_steps if key[1] < window and not self.keeps_chunk_capture(*key[:2])]
        for key in narrower:
            del self.block_steps[key]
        if narrower:
            release_cached_memory(self.caches[0].device)

    def keeps_chunk_capture(self, rows: int, window: int) -> bool:
        """Whether the block capture of chunks of `rows` rows attending over `window` cache rows stays across
        prompts: a short prompt's first chunk (at most SHORT_PROMPT_ROWS rows in the first CHUNK_WINDOW, as every
        new conversation's is), where a block's float scratch weights are small (KEPT_CHUNK_CAPTURE_BYTES). Loading
        it from the capture store again took 20 ms of a 43-token prompt's 250 ms to its first token."""
        short = rows <= SHORT_PROMPT_ROWS and window == CHUNK_WINDOW
        return short and self.block_float_bytes <= KEPT_CHUNK_CAPTURE_BYTES

    def _block_forward(
        self,
        template: Block,
        first_tile: int,
        position: UOp,
        x: Tensor,
        mask: Tensor,
        cache: Tensor,
        *weights: Tensor,
    ) -> Tensor:
        """One block's forward of the rows of x (its buffer `(rows, dim)` updated in place), the block's Tensors
        given as `weights` (see rebuilt_block), attending over the `mask.shape[1]` key tiles of `cache` from
        `first_tile` on (a sliding-window block's, see chunk_window_start; else 0)."""
        block, config, count = rebuilt_block(template, list(weights)), self.config, x.shape[0]
        tables = self.local_rope_tables if block.local else self.rope_tables
        cos, sin = (table[position : position + count] for table in tables)
        attn_norm, ffn_norm = RMSNorm(block.attn_norm, config.norm_eps), RMSNorm(block.ffn_norm, config.norm_eps)
        tiles = concrete_size(mask.shape[1], "a prefill chunk's key tiles")
        visible = (first_tile + tiles) * KEY_TILE
        window = SlidingWindow(first_tile * KEY_TILE, tiles) if first_tile else None
        attended = self._attention(block, cache, position, visible, x, attn_norm, cos, sin, mask, window)
        h = (x + post_norm(attended, block.post_attention_norm, config.norm_eps)).contiguous()
        x.assign(h + post_norm(self.feed_forward(block, h, ffn_norm), block.post_ffw_norm, config.norm_eps)).realize()
        return x

    def _step(self, position: UOp | int, last: Tensor | None, *token_rows: Tensor) -> Tensor:
        """The logits `(vocab,)` of the row of the chunk `token_rows` that `last` `(rows, 1)` selects (None: its
        only row), its rows at positions `position`..: the function the decode step captures. Every block's keys
        and values are assigned into its cache inside the step, so a replay leaves nothing to copy afterwards."""
        config = self.config
        x = self.embedded(list(token_rows))
        count = x.shape[0]
        ropes = {local: tuple(table[position : position + count] for table in tables)
                 for local, tables in ((False, self.rope_tables), (True, self.local_rope_tables))}  # fmt: skip
        # causal: a row sees the keys up to its own position, in the key tiles that hold the rows up to the last;
        # a sliding-window block only the last config.sliding_window of them (past the first window, in the tiles
        # of its SlidingWindow only)
        tiles = key_tiles(position + count)
        keys = self.positions.reshape(-1, KEY_TILE)[:tiles].reshape(1, tiles, KEY_TILE)
        queries = self.positions[position : position + count].reshape(-1, 1, 1)
        masks, windows = {False: keys <= queries}, dict[bool, SlidingWindow | None]({False: None})
        if config.local_blocks:
            masks[True], windows[True] = masks[False] & (keys > queries - config.sliding_window), None
            if known_le(config.sliding_window - 1, position):  # past the first window: read the window only
                rows = concrete_size(count, "a sliding window's rows")
                window = windows[True] = SlidingWindow.of(position, rows, config.sliding_window)
                keys = self.positions.reshape(-1, KEY_TILE)[window.tiles].unsqueeze(0)
                masks[True] = (keys <= queries) & (keys > queries - config.sliding_window)
        for block, cache in zip(self.blocks, self.caches, strict=True):
            attn_norm, ffn_norm = RMSNorm(block.attn_norm, config.norm_eps), RMSNorm(block.ffn_norm, config.norm_eps)
            cos, sin = ropes[block.local]
            # h in a buffer of its own, written by the attention output's matvec: the MLP's matvecs read it in
            # every output lane, so the scheduler stores it anyway, but only after it has given that matvec a
            # kernel of its own (a reduction read by another reduction is stored), one more kernel per block
            attended = self._attention(block, cache, position, position + count, x, attn_norm, cos, sin,
                                       masks[block.local], windows[block.local])  # fmt: skip
            h = (x + post_norm(attended, block.post_attention_norm, config.norm_eps)).contiguous()
            x = h + post_norm(self.feed_forward(block, h, ffn_norm), block.post_ffw_norm, config.norm_eps)
            # one realize per block keeps each graph small, and every block's graph has the same structure, so
            # the scheduler's cache serves blocks 2..N from block 1's schedule (and a long chunk's float scratch
            # weights live one block at a time)
            x = x.contiguous().realize()
        chosen = x if last is None else last.where(x, 0.0).sum(0, keepdim=True)  # exact: the other rows add 0
        out = self.logits(chosen).reshape(-1)
        return out.realize()

    def logits(self, x: Tensor) -> Tensor:
        """The logits `(rows, vocab)` of the final hidden rows x: normalized, projected, soft-capped (gemma2)."""
        logits = linear(x, self.output, norm=RMSNorm(self.output_norm, self.config.norm_eps))
        return soft_cap(logits, self.config.final_softcap)

    def embedded(self, inputs: list[Tensor]) -> Tensor:
        """The float rows `(tokens, dim)` of the token rows `inputs` (EmbeddingTable.inputs), scaled as the model
        scales its embeddings (gemma3: by sqrt(dim))."""
        x = self.embedding_table.decode(inputs)
        return x if self.config.embedding_scale == 1.0 else x * self.config.embedding_scale

    def _attention(
        self,
        block: Block,
        cache: Tensor,
        position: UOp | int,
        visible: UOp | int,
        x: Tensor,
        norm: RMSNorm,
        cos: Tensor,
        sin: Tensor,
        mask: Tensor,
        window: SlidingWindow | None = None,
    ) -> Tensor:
        """The attention output of the rows of norm(x) at positions `position`..: their keys and values are
        assigned into `cache` there, then the queries attend over the cache's first `visible` rows, or the key
        tiles of `window` (mask `(T, tiles, KEY_TILE)`: which keys of those tiles each row sees). The keys and values
        are rounded to the cache's dtype as they are stored, and the new rows attend over them as stored, like the
        later ones."""
        q, k, v = self.rotated_qkv(block, x, cos, sin, norm)
        count = x.shape[0]
        # realized here, the queries with them (else their projection would run again for the attention below):
        # the assigns update views, not `cache`, so the reads below must come after them
        q = q.contiguous()
        rows = slice(position, position + count)
        new_keys = key_rows(cache)[:, rows].assign(stored_rows(k.transpose(0, 1), cache.dtype))
        Tensor.realize(new_keys, cache[1, :, rows].assign(stored_rows(v.transpose(0, 1), cache.dtype)), q)
        if window is None:
            keys, values = cache_keys(cache)[:, : mask.shape[1]], cache[1, :, :visible]
        else:
            keys, values = cache_keys(cache)[:, window.tiles], window.rows(cache[1], visible)
        attended = attend(q, keys, values, mask, self.config.attention_factor(), self.config.attention_softcap)
        return linear(attended, block.output)

    def rotated_qkv(
        self, block: Block, x: Tensor, cos: Tensor, sin: Tensor, norm: RMSNorm | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The queries `(T, heads, head_dim)`, keys and values `(T, kv_heads, head_dim)` of the rows of norm(x) (or
        x): projected, q/k-normed where the model has those norms, and rotated by the RoPE rows cos, sin
        `(T, 1, rope_dim / 2)`."""
        config, count = self.config, x.shape[0]
        q, k, v = self._qkv(block, x, norm)
        if block.q_norm is not None and block.q_norm.shape[-1] != config.head_dim:  # olmoe: over the projection
            k_norm = block_tensor(block.k_norm, "attn_k_norm.weight")
            q, k = rms_norm(q, block.q_norm, config.norm_eps), rms_norm(k, k_norm, config.norm_eps)
        q = q.reshape(count, config.n_heads, config.head_dim)
        k = k.reshape(count, config.n_kv_heads, config.head_dim)
        v = v.reshape(count, config.n_kv_heads, config.head_dim)
        if block.q_norm is not None and block.q_norm.shape[-1] == config.head_dim:  # qwen3: per head
            k_norm = block_tensor(block.k_norm, "attn_k_norm.weight")
            q, k = rms_norm(q, block.q_norm, config.norm_eps), rms_norm(k, k_norm, config.norm_eps)
        q = apply_rope(q, cos, sin, config.rope_dim, config.rope_interleaved)
        k = apply_rope(k, cos, sin, config.rope_dim, config.rope_interleaved)
        return q, k, v

    def _qkv(self, block: Block, x: Tensor, norm: RMSNorm | None) -> tuple[Tensor, Tensor, Tensor]:
        """The projections of the rows of norm(x), each in a buffer of its own: fused into its consumers, a
        projection runs once for the cache assign and again for the queries, and a decode step's matvec
        (tg.llm.lanes) fused into the RoPE kernels ran unvectorized, 2.5 GFLOP/s against its own kernel's 10+. A
        decode step normalizes inside the matvec kernel (see weights.linear)."""
        if block.qkv is None:
            assert block.q is not None and block.k is not None and block.v is not None
            q, k, v = (linear(x, weight, bias, norm).contiguous() for weight, bias in
                       ((block.q, block.q_bias), (block.k, block.k_bias), (block.v, block.v_bias)))  # fmt: skip
            return q, k, v
        config = self.config
        qkv = linear(x, block.qkv, block.qkv_bias, norm).contiguous()
        q_end = config.n_heads * config.head_dim
        k_end = q_end + config.n_kv_heads * config.head_dim
        return qkv[..., :q_end], qkv[..., q_end:k_end], qkv[..., k_end:]

    def feed_forward(self, block: Block, x: Tensor, norm: RMSNorm | None = None) -> Tensor:
        """The MLP (or mixture of experts) of the rows of norm(x) (or x). A decode step's dense MLP is two kernels:
        norm, gate and up projections and silu(gate) * up in one (weights.gated_linear), the down projection and
        whatever adds its result in the other."""
        activation = self.config.ffn_activation
        if block.gate_up is not None:
            hidden = gated_linear(x, block.gate_up, norm, activation)
            return linear(hidden, block_tensor(block.down, "ffn_down.weight"))
        if not self.config.num_experts:
            gate_weight = block_tensor(block.gate, "ffn_gate.weight")
            up_weight = block_tensor(block.up, "ffn_up.weight")
            down_weight = block_tensor(block.down, "ffn_down.weight")
            gate = activate(linear(x, gate_weight, norm=norm), activation)
            return linear(gate * linear(x, up_weight, norm=norm), down_weight)
        config = self.config
        if norm is not None:
            x = norm(x)
        probabilities = linear(x, block_tensor(block.router, "ffn_gate_inp.weight")).softmax(-1)  # (T, experts)
        k = config.num_experts_per_tok
        if x.shape[0] * k < config.num_experts:
            return self._chosen_experts_only(block, x, probabilities)
        chosen = top_k_mask(probabilities, k)
        weights = chosen.where(probabilities, 0.0)
        if config.normalize_top_k:
            weights = weights / weights.sum(-1, keepdim=True)
        # many tokens: every expert runs on every token and unchosen ones get weight 0 (E/k times the work, but each
        # expert's weights are read once for all the tokens)
        inputs = x.unsqueeze(0)  # (1, T, dim)
        gate_experts = block_tensor(block.gate_experts, "ffn_gate_exps.weight").float()
        up_experts = block_tensor(block.up_experts, "ffn_up_exps.weight").float()
        down_experts = block_tensor(block.down_experts, "ffn_down_exps.weight").float()
        gate = inputs.matmul(gate_experts.transpose(-1, -2))  # (E, T, hidden)
        up = inputs.matmul(up_experts.transpose(-1, -2))
        expert_out = (gate.silu() * up).matmul(down_experts.transpose(-1, -2))  # (E, T, dim)
        return (expert_out * weights.transpose(0, 1).unsqueeze(-1)).sum(0)

    def _chosen_experts_only(self, block: Block, x: Tensor, probabilities: Tensor) -> Tensor:
        """The mixture of experts for a few tokens (fewer token-expert pairs than experts, as in a decode step): the
        weights of each token's k chosen experts are read by index (a gather), so the work is k experts per token,
        not all of them. The choice and its weights are top_k_mask's: the k most probable, ties to the lower index."""
        config, (tokens, dim), k = self.config, x.shape, self.config.num_experts_per_tok
        ranks = expert_ranks(probabilities)  # (T, E): 0 for the most probable
        slot_is = ranks.unsqueeze(1) == Tensor.arange(k, dtype=dtypes.int32).reshape(1, k, 1)  # (T, k, E)
        experts = Tensor.arange(config.num_experts, dtype=dtypes.int32).reshape(1, 1, -1)
        chosen = slot_is.where(experts, 0).sum(-1).reshape(tokens * k)  # the expert in each (token, slot)
        weights = slot_is.where(probabilities.unsqueeze(1), 0.0).sum(-1)  # (T, k)
        if config.normalize_top_k:
            weights = weights / weights.sum(-1, keepdim=True)
        inputs = x.unsqueeze(1).expand(tokens, k, dim).reshape(tokens * k, dim, 1)
        gate_experts = block_tensor(block.gate_experts, "ffn_gate_exps.weight").float()
        up_experts = block_tensor(block.up_experts, "ffn_up_exps.weight").float()
        down_experts = block_tensor(block.down_experts, "ffn_down_exps.weight").float()
        gate = (gate_experts[chosen] @ inputs).squeeze(-1)  # (T*k, hidden)
        up = (up_experts[chosen] @ inputs).squeeze(-1)
        hidden = (gate.silu() * up).unsqueeze(-1)
        out = (down_experts[chosen] @ hidden).reshape(tokens, k, dim)
        return (out * weights.unsqueeze(-1)).sum(1)


# ----------------------------------------------------------------------------------------------- loading


# projections that read the same input are stored as one matrix (rows stacked), so one matvec kernel (and one
# launch) computes them all; the model splits the output. Only same-typed members of equal row length are fused.
FUSED_PROJECTIONS = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "ffn_gate_up": ("ffn_gate", "ffn_up")}


def fused_groups(gguf: GGUFFile) -> dict[str, tuple[str, list[str]]]:
    """{member tensor name: (fused tensor name, its member names in order)} for the fusable projections."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for index in range(int(gguf.metadata.get(f"{gguf.metadata.get('general.architecture')}.block_count", 0))):
        for fused, parts in FUSED_PROJECTIONS.items():
            names = [f"blk.{index}.{part}.weight" for part in parts]
            infos = [gguf.tensors.get(name) for name in names]
            if any(info is None for info in infos):
                continue
            kinds = {(info.ggml_type, info.shape[1:]) for info in infos if info is not None}
            biases = {name.replace(".weight", ".bias") in gguf.tensors for name in names}
            if len(kinds) == 1 and len(biases) == 1:  # one type and shape; biases on all members or none
                for name in names:
                    groups[name] = (f"blk.{index}.{fused}.weight", names)
    return groups


def load_weights(gguf: GGUFFile) -> dict[str, Weight]:
    """Every tensor of the file as a Weight, read once into device memory (quantized ones stay packed); the
    members of a fused projection (FUSED_PROJECTIONS) become one Weight under the fused name."""
    groups, weights = fused_groups(gguf), {}
    waiting: dict[str, dict[str, tuple[GGUFTensorInfo, np.ndarray]]] = {}
    for info, view in mapped_tensors(gguf):
        if info.name not in groups:
            weights[info.name] = _load_weight(info, _file_bytes(info, view))
            continue
        fused, names = groups[info.name]
        members = waiting.setdefault(fused, {})
        members[info.name] = (info, _file_bytes(info, view).copy())  # the file's mapping may close before the rest
        if len(members) == len(names):
            first = members[names[0]][0]
            raw = np.concatenate([members[name][1] for name in names])
            rows = sum(members[name][0].shape[0] for name in names)
            weights[fused] = _load_weight(GGUFTensorInfo(fused, (rows, *first.shape[1:]), first.ggml_type, 0,
                                                         first.path), raw)  # fmt: skip
            del waiting[fused]
    return weights


def _file_bytes(info: GGUFTensorInfo, view: memoryview) -> np.ndarray:
    """The tensor's bytes in the file (a view of the mapping)."""
    return np.frombuffer(view, dtype=np.uint8, count=info.nbytes, offset=info.offset)


def _load_weight(info: GGUFTensorInfo, raw: np.ndarray) -> Weight:
    if info.type_name in FLOAT_TYPES or info.type_name == "BF16":
        return Weight(load_tensor(dataclasses.replace(info, offset=0), raw.data).realize(), info.ggml_type,
                      info.shape)  # fmt: skip
    _, block_elements, block_bytes = GGML_TYPES[info.ggml_type]
    raw = raw.reshape(*info.shape[:-1], info.shape[-1] // block_elements, block_bytes)
    return quantized_weight(raw, info.ggml_type, info.shape)


def load_model(
    path: str | Path, max_context: int = 4096, kv_cache: str = DEFAULT_KV_CACHE, matvec: str = DEFAULT_MATVEC
) -> tuple[Transformer, GGUFFile]:
    """Read a GGUF file and build its Transformer with a KV cache of type `kv_cache` (see
    tg.llm.config.KV_CACHE_TYPES) and decode-step matvecs `matvec` (MATVEC_TYPES); raises UnsupportedModelError for
    unknown architectures."""
    kv_cache_dtype(kv_cache)  # an unknown type is refused before the file is read
    check_matvec(matvec)
    gguf = gguf_read(path)
    vocab = len(gguf.metadata.get("tokenizer.ggml.tokens", []))
    config = TransformerConfig.from_metadata(gguf.metadata, vocab)
    for info in gguf.tensors.values():
        if info.type_name not in FLOAT_TYPES and info.type_name not in ("BF16", *DEQUANTIZERS):
            raise UnsupportedModelError(f"tensor {info.name!r} has GGML type {info.type_name}, which is not supported")
    embedding = EmbeddingTable(gguf.tensors["token_embd.weight"])
    model = Transformer(config, load_weights(gguf), max_context, embedding, kv_cache, matvec)
    model.capture_store = CaptureStore(path)
    release_cached_memory(model.caches[0].device)  # the load's scratch: the file's bytes reshuffled per weight
    return model, gguf


def parameter_count(gguf: GGUFFile) -> int:
    return sum(math.prod(info.shape) for info in gguf.tensors.values())
