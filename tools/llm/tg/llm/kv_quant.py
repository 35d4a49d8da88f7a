"""The int8 KV cache (`--kv-cache q8`): what a stored row holds and how attention reads it back.

A key or value row of one position and one KV head (head_dim floats) is stored in blocks of QUANT_BLOCK features,
as llama.cpp's q8_0 stores them: per block int8 codes q and one float32 scale s, the block being s * q, with
s = max|x| / 127 over the block and q = round(x / s) (a block of zeros has s = 0). Blocks of 32 rather than one
scale per row: one large feature then coarsens only the codes of its own block. On Gemma 3 270M's keys and values
(head_dim 256, the largest feature 4 to 12 times the row's root mean square) a scale per row left 1.0-2.7% relative
error against 0.6-1.1% for blocks of 32, and 3 of the 5 greedy answers of tests/llm/test_gemma3_real.py changed,
where blocks of 32 keep all 5. A head_dim that is not a multiple of QUANT_BLOCK has one block per row.

The row's codes come first, then the 4 bytes (little-endian) of each block's scale, so the cache stays one int8
Tensor with rows cache_row_width wide in the layout of tg.llm.model.KEY_TILE: a key tile holds each feature's 16 rows
together and, after the head_dim features, each scale byte's 16 rows the same way. Attention converts the codes to
float32 and multiplies each by its block's scale.
"""

from __future__ import annotations

from tg.codegen import dtypes
from tg.codegen.dtype import DType
from tg.llm.ops import concat
from tg.tensor import Tensor
from tg.tensor.symbolic import concrete_size

QUANTIZED_KV_DTYPE = dtypes.int8
QUANT_BLOCK = 32
SCALE_BYTES = 4  # a float32
LARGEST_CODE = 127  # symmetric: -127..127


def quant_block(head_dim: int) -> int:
    """The features per scale of an int8 row of head_dim features."""
    return QUANT_BLOCK if head_dim % QUANT_BLOCK == 0 else head_dim


def cache_row_width(head_dim: int, dtype: DType) -> int:
    """How many elements of `dtype` a cached row of head_dim features takes (int8: codes, then scale bytes)."""
    if dtype != QUANTIZED_KV_DTYPE:
        return head_dim
    return head_dim + head_dim // quant_block(head_dim) * SCALE_BYTES


def stored_rows(x: Tensor, dtype: DType) -> Tensor:
    """The rows x `(..., head_dim)` as a KV cache of `dtype` stores them `(..., cache_row_width)`: rounded to a
    float dtype, or quantized to int8 codes followed by their blocks' scales (see the module docstring)."""
    if dtype != QUANTIZED_KV_DTYPE:
        return x.cast(dtype)
    head_dim = concrete_size(x.shape[-1], "a KV cache row")
    block = quant_block(head_dim)
    blocks = x.float().reshape(*x.shape[:-1], head_dim // block, block)
    largest = blocks.abs().max(-1, keepdim=True)
    scale = largest / LARGEST_CODE
    codes = (blocks / (largest > 0).where(scale, 1.0)).round().cast(dtype)  # |x / scale| <= 127: no clamp needed
    scale_bytes = scale.bitcast(dtype).reshape(*x.shape[:-1], -1)  # (..., blocks * SCALE_BYTES)
    return concat([codes.reshape(x.shape), scale_bytes], dim=-1)


def dequantized(stored: Tensor, axis: int, head_dim: int) -> Tensor:
    """Cached rows whose features run along `axis`: an int8 cache's as float32 `head_dim` features (codes times
    their blocks' scales), a float cache's as they are."""
    if stored.dtype != QUANTIZED_KV_DTYPE:
        return stored
    block = quant_block(head_dim)
    moved = stored.transpose(axis, -1)
    codes, scale_bytes = moved[..., :head_dim], moved[..., head_dim:]
    scales = scale_bytes.bitcast(dtypes.float32)  # (..., head_dim / block)
    per_feature = scales.unsqueeze(-1).expand(*scales.shape, block).reshape(*scales.shape[:-1], head_dim)
    return (codes.float() * per_feature).transpose(axis, -1)
