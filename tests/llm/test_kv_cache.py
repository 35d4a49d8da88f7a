"""The KV cache layout (tg.llm.model.KEY_TILE): values row-major, keys in tiles of KEY_TILE rows stored feature-major.
Rows written from the host (write_cache_rows, the server's path) and by an assign inside a step (key_rows, the
model's path) land where the layout says; the oracle is numpy indexing written from the layout's definition."""

from __future__ import annotations

import numpy as np
import pytest

from tg.hcq import Buffer
from tg.llm.model import KEY_TILE, key_rows, write_cache_rows
from tg.tensor import Tensor, Variable

KV_HEADS, ROWS, HEAD_DIM = 2, 48, 8


def expected_cache(rows: dict[int, np.ndarray]) -> np.ndarray:
    """The cache's memory `(2, kv_heads, rows, head_dim)` holding `rows` {position: (2, kv_heads, head_dim)}, zeros
    elsewhere: the value of position p, head h at [1, h, p]; its key's feature d at flat element
    ((h * ROWS/KEY_TILE + p // KEY_TILE) * HEAD_DIM + d) * KEY_TILE + p % KEY_TILE of part 0."""
    memory = np.zeros((2, KV_HEADS, ROWS, HEAD_DIM), np.float32)
    keys = memory[0].reshape(-1)  # a view
    for position, row in rows.items():
        memory[1, :, position] = row[1]
        for head in range(KV_HEADS):
            for feature in range(HEAD_DIM):
                tile = head * (ROWS // KEY_TILE) + position // KEY_TILE
                keys[(tile * HEAD_DIM + feature) * KEY_TILE + position % KEY_TILE] = row[0, head, feature]
    return memory


def random_rows(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 2, KV_HEADS, HEAD_DIM)).astype(np.float32)


@pytest.mark.parametrize("host_visible", [True, False])
def test_write_cache_rows_places_keys_in_tiles_and_values_in_rows(monkeypatch, host_visible: bool) -> None:
    """A chunk across a tile boundary, then a single row; without host-visible memory the touched tiles and rows
    are copied out and back (the other rows of those tiles keep their values)."""
    if not host_visible:
        monkeypatch.setattr(Buffer, "host_view", lambda self: None)
    cache = Tensor.zeros(2, KV_HEADS, ROWS, HEAD_DIM).contiguous().realize()
    chunk, single = random_rows(5, seed=1), random_rows(1, seed=2)
    write_cache_rows(cache, memoryview(chunk).cast("B"), 13)  # rows 13..17: tiles 0 and 1
    write_cache_rows(cache, memoryview(single).cast("B"), 15)  # overwrites row 15 only
    rows = {13 + i: chunk[i] for i in range(5)} | {15: single[0]}
    np.testing.assert_array_equal(cache.numpy(), expected_cache(rows))


def test_an_assign_through_key_rows_at_a_symbolic_position_matches_the_layout() -> None:
    """The model's path: keys assigned into the rows view of the tiles, values into [1], at a bound position."""
    cache = Tensor.zeros(2, KV_HEADS, ROWS, HEAD_DIM).contiguous().realize()
    new = random_rows(3, seed=3)
    position = Variable("start_pos", 0, ROWS - 3).bind(30)
    keys, values = Tensor(new[:, 0].transpose(1, 0, 2).copy()), Tensor(new[:, 1].transpose(1, 0, 2).copy())
    rows = slice(position, position + 3)
    Tensor.realize(key_rows(cache)[:, rows].assign(keys), cache[1, :, rows].assign(values))
    np.testing.assert_array_equal(cache.numpy(), expected_cache({30 + i: new[i] for i in range(3)}))


def test_a_float16_cache_reads_back_as_float32_exactly_for_every_bit_pattern() -> None:
    """attention reads a float16 cache with `.float()`, which the C renderer widens from the bits with integer ops
    under gcc 12 (tests/codegen/test_half_conversion.py); numpy's conversion is the oracle for all 65,536 patterns:
    zeros, subnormals, normals, infinities (NaNs: any NaN)."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got, want = Tensor(halves).float().numpy(), halves.astype(np.float32)
    assert got.dtype == np.float32
    nan = np.isnan(want)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all()
