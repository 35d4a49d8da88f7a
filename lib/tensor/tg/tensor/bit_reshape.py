"""Bitcasts between dtypes of different item sizes, as torch's `view(dtype)` and tinygrad's `bitcast`.

The last axis absorbs the change: n elements of `a` bytes become n * a / b elements of `b` bytes, in little-endian
byte order (what the memory holds). Values go through bytes: each element is split into its bytes by shifts of an
unsigned integer of its size, and the bytes are joined into the wider integers by shifts and a sum (the bits never
overlap, so the sum is an or), then bitcast to the target dtype.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen import DType, dtypes
from tg.tensor.promotion import DTypeMismatchError, dtype_name

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

UNSIGNED_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _byte_shifts(like: Tensor, size: int, dtype: DType) -> Tensor:
    return like.arange(0, 8 * size, 8, dtype=dtype, device=like.device)


def to_bytes(x: Tensor) -> Tensor:
    """uint8 (..., n * itemsize): the bytes of every element, lowest first."""
    size = x.dtype.itemsize
    unsigned = x.bitcast(UNSIGNED_OF_SIZE[size])
    if size == 1:
        return unsigned
    parts = (unsigned.unsqueeze(-1) >> _byte_shifts(x, size, unsigned.dtype)) & 0xFF
    return parts.cast(dtypes.uint8).reshape(*x.shape[:-1], x.shape[-1] * size)


def from_bytes(data: Tensor, dtype: DType) -> Tensor:
    """`dtype` (..., n / itemsize) from uint8 bytes (..., n), lowest byte first."""
    size = dtype.itemsize
    unsigned_dtype = UNSIGNED_OF_SIZE[size]
    if size == 1:
        return data.bitcast(dtype)
    grouped = data.reshape(*data.shape[:-1], data.shape[-1] // size, size).cast(unsigned_dtype)
    joined = (grouped << _byte_shifts(data, size, unsigned_dtype)).sum(-1, dtype=unsigned_dtype)
    return joined.bitcast(dtype)


def resized_bitcast(x: Tensor, dtype: DType) -> Tensor:
    old, new = x.dtype.itemsize, dtype.itemsize
    if old not in UNSIGNED_OF_SIZE or new not in UNSIGNED_OF_SIZE:
        raise DTypeMismatchError(f"cannot bitcast {dtype_name(x.dtype)} to {dtype_name(dtype)}")
    if x.ndim == 0 or (x.shape[-1] * old) % new:
        raise DTypeMismatchError(
            f"bitcast of shape {x.shape} from {dtype_name(x.dtype)} ({old} bytes) to {dtype_name(dtype)} ({new} bytes) "
            "needs a last axis whose bytes divide into the new item size"
        )
    return from_bytes(to_bytes(x), dtype)
