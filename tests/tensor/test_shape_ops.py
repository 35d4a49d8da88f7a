"""cat, stack, repeat, repeat_interleave, split, chunk, unfold, roll, tril, triu, diag against numpy."""

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.codegen.schedule.graph import ShapeError
from tg.tensor import Tensor
from tg.tensor.positions import positions

from .devices import DEVICES


def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("count", [0, 1, 2, 5, 8, 9, 33])
def test_positions_count_up_in_kernels(device, count):
    np.testing.assert_array_equal(positions(Tensor(0, device=device), count).numpy(), np.arange(count))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_matches_numpy(device, dim):
    arrays = [_random((2, 3, 4), 1), _random((2, 3, 4), 2), _random((2, 3, 4), 3)]
    result = Tensor(arrays[0], device=device).cat(*(Tensor(a, device=device) for a in arrays[1:]), dim=dim)
    np.testing.assert_array_equal(result.numpy(), np.concatenate(arrays, dim))


@pytest.mark.parametrize("device", DEVICES)
def test_cat_keeps_negative_zero_nan_and_promotes(device):
    a = np.array([-0.0, np.nan, np.inf], dtype=np.float32)
    b = np.array([1, 2], dtype=np.int32)
    result = Tensor(a, device=device).cat(Tensor(b, device=device))
    assert result.dtype is dtypes.float32
    expected = np.concatenate([a, b.astype(np.float32)])
    np.testing.assert_array_equal(result.numpy(), expected)
    assert np.signbit(result.numpy()[0])


@pytest.mark.parametrize("device", DEVICES)
def test_cat_of_bools_and_uneven_sizes(device):
    a, b = np.array([[True], [False]]), np.array([[False, True], [True, True]])
    result = Tensor(a, device=device).cat(Tensor(b, device=device), dim=1)
    np.testing.assert_array_equal(result.numpy(), np.concatenate([a, b], 1))


def test_cat_of_mismatched_shapes_is_an_error():
    with pytest.raises(ShapeError):
        Tensor.ones(2, 3, device="CPU").cat(Tensor.ones(3, 3, device="CPU"), dim=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack_matches_numpy(device, dim):
    arrays = [_random((2, 3), 1), _random((2, 3), 2)]
    result = Tensor.stack(*(Tensor(a, device=device) for a in arrays), dim=dim)
    np.testing.assert_array_equal(result.numpy(), np.stack(arrays, dim))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("repeats", [(2, 1), (1, 3), (2, 2, 3)], ids=str)
def test_repeat_matches_numpy_tile(device, repeats):
    x = _random((2, 3))
    np.testing.assert_array_equal(Tensor(x, device=device).repeat(repeats).numpy(), np.tile(x, repeats))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_repeat_interleave_matches_numpy(device, dim):
    x = _random((2, 3))
    np.testing.assert_array_equal(Tensor(x, device=device).repeat_interleave(3, dim).numpy(), np.repeat(x, 3, dim))


@pytest.mark.parametrize("device", DEVICES)
def test_split_and_chunk_match_numpy(device):
    x = _random((7, 2))
    t = Tensor(x, device=device)
    pieces = t.split(3)
    assert [p.shape for p in pieces] == [(3, 2), (3, 2), (1, 2)]
    for piece, expected in zip(pieces, np.split(x, [3, 6]), strict=True):
        np.testing.assert_array_equal(piece.numpy(), expected)
    for piece, expected in zip(t.split([2, 5]), np.split(x, [2]), strict=True):
        np.testing.assert_array_equal(piece.numpy(), expected)
    chunks = t.chunk(3)
    assert [c.shape[0] for c in chunks] == [3, 3, 1]  # torch: ceil(7 / 3) per chunk
    np.testing.assert_array_equal(t.chunk(2, dim=1)[1].numpy(), x[:, 1:])
    with pytest.raises(ShapeError):
        t.split([2, 2])


def _numpy_unfold(x, dim, size, step):
    windows = np.lib.stride_tricks.sliding_window_view(x, size, axis=dim)
    return np.take(windows, np.arange(0, windows.shape[dim], step), axis=dim)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("args", [(0, 2, 1), (1, 3, 2), (1, 2, 5), (-1, 5, 1), (0, 1, 3)], ids=str)
def test_unfold_matches_numpy(device, args):
    x = _random((4, 5))
    np.testing.assert_array_equal(Tensor(x, device=device).unfold(*args).numpy(), _numpy_unfold(x, *args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("args", [(1, 0), (-2, 1), (7, 1), ((1, 2), (0, 1)), (3, None)], ids=str)
def test_roll_matches_numpy(device, args):
    x = _random((3, 4))
    np.testing.assert_array_equal(Tensor(x, device=device).roll(*args).numpy(), np.roll(x, *args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3])
def test_tril_triu_match_numpy(device, diagonal):
    x = _random((2, 3, 4))
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(t.tril(diagonal).numpy(), np.tril(x, diagonal))
    np.testing.assert_array_equal(t.triu(diagonal).numpy(), np.triu(x, diagonal))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("diagonal", [-2, 0, 1])
def test_diag_matches_numpy(device, diagonal):
    vector, matrix = _random((3,)), _random((3, 4))
    np.testing.assert_array_equal(Tensor(vector, device=device).diag(diagonal).numpy(), np.diag(vector, diagonal))
    np.testing.assert_array_equal(Tensor(matrix, device=device).diag(diagonal).numpy(), np.diag(matrix, diagonal))


@pytest.mark.parametrize("device", DEVICES)
def test_cat_and_stack_accept_every_calling_form(device):
    a, b = _random((2,), 1), _random((2,), 2)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    for result in (ta.cat(tb), Tensor.cat(ta, tb), Tensor.cat([ta, tb])):
        np.testing.assert_array_equal(result.numpy(), np.concatenate([a, b]))
    for result in (ta.stack(tb, dim=1), Tensor.stack(ta, tb, dim=1), Tensor.stack([ta, tb], dim=1)):
        np.testing.assert_array_equal(result.numpy(), np.stack([a, b], 1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("args", [(0, 0, 1), (1, 0, 1), (-1, 1, 2), (2, 2, 0), (0, -1, 0), (9, 0, 1)], ids=str)
def test_diagonal_matches_numpy(device, args):
    x = _random((3, 4, 5), 3)
    np.testing.assert_array_equal(Tensor(x, device=device).diagonal(*args).numpy(), np.diagonal(x, *args))


def test_unflatten_and_meshgrid_match_numpy():
    x = _random((2, 12), 4)
    np.testing.assert_array_equal(Tensor(x, device="CPU").unflatten(1, (3, -1)).numpy(), x.reshape(2, 3, 4))
    a, b, c = np.arange(3, dtype=np.float32), np.arange(4, dtype=np.float32) * 10, np.arange(2, dtype=np.float32)
    ta, tb, tc = (Tensor(v, device="CPU") for v in (a, b, c))
    for indexing in ("ij", "xy"):
        for ours, theirs in zip(
            Tensor.meshgrid(ta, tb, tc, indexing=indexing), np.meshgrid(a, b, c, indexing=indexing), strict=True
        ):
            np.testing.assert_array_equal(ours.numpy(), theirs)


def test_unflatten_and_meshgrid_on_python():
    x = _random((2, 6), 5)
    np.testing.assert_array_equal(Tensor(x, device="PYTHON").unflatten(-1, (2, 3)).numpy(), x.reshape(2, 2, 3))
    a, b = np.arange(2, dtype=np.float32), np.arange(3, dtype=np.float32)
    grids = Tensor(a, device="PYTHON").meshgrid(Tensor(b, device="PYTHON"), indexing="xy")
    for ours, theirs in zip(grids, np.meshgrid(a, b), strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs)
