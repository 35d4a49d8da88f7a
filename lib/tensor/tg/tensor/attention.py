"""Scaled dot-product attention: softmax(q k^T * scale + mask) v, with an optional causal mask and grouped heads.

The two products are Tensor.matmul (tg.tensor.linalg), batched over the leading axes. A long causal attention is
computed in blocks of CAUSAL_BLOCK_ROWS query rows, each over the keys its rows can see (`causal_blocks`): the scores
above the diagonal are never computed, so the two products and the softmax do about (n + 1) / 2n of the work for n
blocks.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from tg.codegen import UOp, dtypes
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


# Query rows per block of a causal attention over at least two blocks' worth (see causal_blocks). Causal attention of
# 12 heads of 64, gcc 12, 2 AVX-512 cores, one process per figure, medians of 11 (blocks of 512 / 256 / 128 rows;
# fewer than two blocks' worth is the whole attention at once), in a TinyJit replay: 512 rows 5.1-5.6 / 3.8 / 3.3-4.1
# ms, 1024 rows 15.5-20 / 12.7-13.0 / 13.8-16.9 ms; built and scheduled at every call: 512 rows 5.1-5.7 / 5.4-5.5 /
# 6.5-6.8 ms, 1024 rows 16.0-16.7 / 15.9-16.3 / 20.2-20.5 ms. In the GPT-2 block's forward over 1,024 tokens the
# attention's kernels took 16.3 ms in blocks of 512 and 14.5 ms in blocks of 256 (DEBUG=2). Blocks of 128 rows gain
# no more in a replay and lose at every call: there a block's kernels, and the Python that builds and launches them,
# cost more than the scores it skips.
CAUSAL_BLOCK_ROWS = 256


def causal_mask(queries: int | UOp, keys: int | UOp, like: Tensor) -> Tensor:
    """True where key j may be seen from query i: j <= i, aligned at the top-left as torch's is_causal. For plain
    sizes the same (unrealized) mask serves every call: building it was a tenth of a GPT-2 block's graph-building
    Python."""
    if isinstance(queries, int) and isinstance(keys, int):
        # (a class is hashable; mypy checks Tensor's own __hash__, an instance method, against Hashable instead)
        return _kept_causal_mask(type(like), queries, keys, like.device)  # type: ignore[arg-type]
    return _build_causal_mask(type(like), queries, keys, like.device)


@functools.lru_cache(maxsize=32)
def _kept_causal_mask(tensor_type: type[Tensor], queries: int, keys: int, device: str) -> Tensor:
    return _build_causal_mask(tensor_type, queries, keys, device)


def _build_causal_mask(tensor_type: type[Tensor], queries: int | UOp, keys: int | UOp, device: str) -> Tensor:
    # j < i + 1 (integers: one comparison per score, where <= is a < and an == joined by an or), the rows' i + 1
    # read from memory: computed, it was a kernel of its own at every call (a reduction reads it broadcast)
    rows_after = _positions(tensor_type, queries, device, first=1).reshape(queries, 1)
    columns = _positions(tensor_type, keys, device).reshape(1, keys)
    return columns < rows_after


def _positions(tensor_type: type[Tensor], count: int | UOp, device: str, first: int = 0) -> Tensor:
    """first, first + 1, ..., first + count - 1 as int32 on `device`. A plain count's positions are uploaded once
    and kept (they are never written): a model calling attention again on the same length reuses the buffer, so
    its graph and kernels are the same nodes as the last call's, with no upload and no new buffer."""
    if isinstance(count, UOp):  # a symbolic length: its bound value is part of the graph, so build it each time
        return tensor_type.arange(count, dtype=dtypes.int32, device=device) + first
    # (a class is hashable; mypy checks Tensor's own __hash__, an instance method, against Hashable instead)
    return _kept_positions(tensor_type, count, device, first)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=32)
def _kept_positions(tensor_type: type[Tensor], count: int, device: str, first: int) -> Tensor:
    return tensor_type.arange(first, first + count, dtype=dtypes.int32, device=device).realize()


def repeat_heads(t: Tensor, groups: int | UOp) -> Tensor:
    """(..., H, S, E) -> (..., H * groups, S, E), each head repeated `groups` times in place (GQA)."""
    if groups == 1:
        return t
    *batch, heads, length, width = t.shape
    repeated = t.unsqueeze(-3).expand(*batch, heads, groups, length, width)
    return repeated.reshape(*batch, heads * groups, length, width)


class AttentionOps(TensorBase):
    """`scaled_dot_product_attention`."""

    def scaled_dot_product_attention(
        self,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Tensor:
        """torch's scaled_dot_product_attention for query (..., L, E), key (..., S, E), value (..., S, Ev).

        A bool `attn_mask` keeps the positions that are True; a float one is added to the scores. `dropout_p` drops
        attention weights only while `Tensor.training` is set (tinygrad's rule, unlike torch's). With
        `enable_gqa`, key and value may have fewer heads (axis -3) than the query, which must be a multiple.
        """
        if is_causal and attn_mask is not None:
            raise ValueError("scaled_dot_product_attention takes is_causal or attn_mask, not both")
        if enable_gqa and self.ndim >= 3:
            groups = self.shape[-3] // key.shape[-3]
            key, value = repeat_heads(key, groups), repeat_heads(value, groups)
        scale = 1 / math.sqrt(concrete_size(self.shape[-1], "attention's scale")) if scale is None else scale
        queries, keys = self.shape[-2], key.shape[-2]
        drops = dropout_p != 0 and type(self).training  # (dropout acts only while training)
        long_rows = isinstance(queries, int) and isinstance(keys, int) and queries >= 2 * CAUSAL_BLOCK_ROWS
        if is_causal and not drops and long_rows:
            return causal_blocks(as_tensor(self), key, value, scale)
        scores = self.matmul(key.transpose(-1, -2)) * scale
        if is_causal:
            attn_mask = causal_mask(queries, keys, as_tensor(self))
        if attn_mask is not None:
            scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype is dtypes.bool else scores + attn_mask
        return scores.softmax(-1).dropout(dropout_p).matmul(value)  # dropout acts only while Tensor.training


def causal_blocks(query: Tensor, key: Tensor, value: Tensor, scale: float) -> Tensor:
    """Causal attention computed CAUSAL_BLOCK_ROWS query rows at a time: rows [start, end) see keys [0, end) at
    most (top-left aligned, as torch's is_causal), so each block's scores stop at its last row's diagonal. The
    blocks' results are concatenated along the query axis."""
    queries = concrete_size(query.shape[-2], "a causal attention's query blocks")
    keys = concrete_size(key.shape[-2], "a causal attention's query blocks")
    mask = causal_mask(queries, keys, query)
    parts = []
    for start in range(0, queries, CAUSAL_BLOCK_ROWS):
        end = min(queries, start + CAUSAL_BLOCK_ROWS)
        seen = min(keys, end)
        rows = query[..., start:end, :]
        scores = rows.matmul(key[..., :seen, :].transpose(-1, -2)) * scale
        scores = mask[start:end, :seen].where(scores, -math.inf)
        parts.append(scores.softmax(-1).matmul(value[..., :seen, :]))
    return parts[0].cat(*parts[1:], dim=-2)
