"""The int8 KV cache (`--kv-cache q8`): what a stored row holds and how attention reads it back.

A key or value row of one position and one KV head (head_dim floats) is stored as head_dim int8 numbers q and,
after them, the 4 bytes of one float32 scale s (little-endian): the row is s * q, with s = max|x| / 127 and
q = round(x / s) (a row of zeros has s = 0). One scale per row, not per block of 32 as llama.cpp's q8_0: a key's
scale then factors out of its whole dot product with a query (one multiply per score) and a value's into its
softmax weight (one multiply per weight), so attention's inner sums read int8 numbers only.

The scale's bytes sit in the row's last SCALE_BYTES places, so the cache stays one int8 Tensor with rows
head_dim + SCALE_BYTES wide in the layout of tg.llm.model.KEY_TILE: a key tile holds each feature's 16 rows
together and, after the head_dim features, the scale bytes of its 16 rows the same way.
"""

from __future__ import annotations

from tg.codegen import dtypes
from tg.codegen.dtype import DType
from tg.llm.ops import concat
from tg.tensor import Tensor

QUANTIZED_KV_DTYPE = dtypes.int8
SCALE_BYTES = 4  # a float32
LARGEST_CODE = 127  # symmetric: -127..127


def cache_row_width(head_dim: int, dtype: DType) -> int:
    """How many elements of `dtype` a cached row of head_dim features takes (the scale's bytes after int8 ones)."""
    return head_dim + SCALE_BYTES if dtype == QUANTIZED_KV_DTYPE else head_dim


def stored_rows(x: Tensor, dtype: DType) -> Tensor:
    """The rows x `(..., head_dim)` as a KV cache of `dtype` stores them `(..., cache_row_width)`: rounded to a
    float dtype, or quantized to int8 codes followed by their scale's bytes (see the module docstring)."""
    if dtype != QUANTIZED_KV_DTYPE:
        return x.cast(dtype)
    x = x.float()
    largest = x.abs().max(-1, keepdim=True)
    scale = largest / LARGEST_CODE
    codes = (x / (largest > 0).where(scale, 1.0)).round().cast(dtype)  # |x / scale| <= 127: no clamp needed
    return concat([codes, scale.bitcast(dtype)], dim=-1)


def split_scales(stored: Tensor, axis: int, head_dim: int) -> tuple[Tensor, Tensor | None]:
    """(the codes or floats of `stored`, cached rows whose features run along `axis`, as float32 with head_dim
    features; the rows' scales with 1 in place of the features, or None when the rows are floats). An int8 cache's
    features are codes: the rows are codes * scales."""
    if stored.dtype != QUANTIZED_KV_DTYPE:
        return stored, None
    moved = stored.transpose(axis, -1)
    codes, scale_bytes = moved[..., :head_dim], moved[..., head_dim:]
    return codes.float().transpose(axis, -1), scale_bytes.bitcast(dtypes.float32).transpose(axis, -1)
