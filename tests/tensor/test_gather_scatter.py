"""gather, scatter, scatter_reduce, masked_fill, masked_select, one_hot and nonzero against numpy."""

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _index(shape, high, seed=0):
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.int32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_matches_take_along_axis(device, dim):
    x = _random((3, 4, 5), 1)
    index = _index((3, 4, 5)[: dim % 3] + (6,) + (3, 4, 5)[dim % 3 + 1 :], x.shape[dim], 2)
    result = Tensor(x, device=device).gather(dim, Tensor(index, device=device))
    np.testing.assert_array_equal(result.numpy(), np.take_along_axis(x, index, dim))


@pytest.mark.parametrize("device", DEVICES)
def test_gather_with_a_smaller_index_and_special_values(device):
    x = np.array([[np.nan, -0.0, np.inf], [1.0, -np.inf, 2.0]], dtype=np.float32)
    index = np.array([[2, 1], [0, 0]], dtype=np.int32)
    result = Tensor(x, device=device).gather(1, Tensor(index, device=device)).numpy()
    np.testing.assert_array_equal(result, [[np.inf, -0.0], [1.0, 1.0]])
    assert np.signbit(result[0, 1])


def test_gather_with_bool_derived_index_spec_appendix_b():
    x = Tensor([1, 2, 3], device="CPU")
    index = Tensor([0.5, 0, 2], device="CPU").cast(dtypes.bool).cast(dtypes.int32)
    assert x.gather(0, index).tolist() == [2, 1, 2]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_matches_numpy_put_along_axis(device, dim):
    target, src = _random((4, 5), 3), _random((4, 5), 4)
    # distinct indices along dim, so that the result does not depend on which duplicate wins
    index = np.argsort(np.random.default_rng(5).random((4, 5)), axis=dim).astype(np.int32)
    index = index[:3] if dim == 0 else index[:, :3]
    expected = target.copy()
    np.put_along_axis(expected, index, src[:3] if dim == 0 else src[:, :3], dim)
    result = Tensor(target, device=device).scatter(dim, Tensor(index, device=device), Tensor(src, device=device))
    np.testing.assert_array_equal(result.numpy(), expected)


def test_scatter_of_a_scalar():
    result = Tensor.zeros(2, 4, device="CPU").scatter(1, Tensor([[1], [3]], device="CPU"), 7.0)
    np.testing.assert_array_equal(result.numpy(), [[0, 7, 0, 0], [0, 0, 0, 7]])


def numpy_scatter_reduce(target, dim, index, src, reduce, include_self):
    out = target.astype(np.float64).copy()
    seen = np.zeros(target.shape, dtype=bool)
    hits = {}
    for position in np.ndindex(index.shape):
        destination = list(position)
        destination[dim] = index[position]
        hits.setdefault(tuple(destination), []).append(src[position])
    for destination, values in hits.items():
        values = ([target[destination]] if include_self else []) + values
        out[destination] = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce](
            values
        )
        seen[destination] = True
    return out.astype(target.dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_numpy(device, reduce, include_self):
    target, src = _random((3, 4), 6), _random((3, 6), 7)
    index = _index((3, 6), 4, 8)
    expected = numpy_scatter_reduce(target, 1, index, src, reduce, include_self)
    result = Tensor(target, device=device).scatter_reduce(
        1, Tensor(index, device=device), Tensor(src, device=device), reduce, include_self
    )
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_masked_fill_and_masked_select(device):
    x = _random((3, 4), 9)
    mask = x > 0.3
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(
        t.masked_fill(Tensor(mask, device=device), -np.inf).numpy(), np.where(mask, -np.inf, x)
    )
    np.testing.assert_array_equal(t.masked_select(Tensor(mask, device=device)).numpy(), x[mask])
    row_mask = np.array([True, False, False, True])
    np.testing.assert_array_equal(t.masked_select(Tensor(row_mask, device=device)).numpy(), x[:, row_mask].ravel())


@pytest.mark.parametrize("device", DEVICES)
def test_one_hot_matches_numpy(device):
    labels = np.array([[0, 3], [2, 1]], dtype=np.int32)
    np.testing.assert_array_equal(Tensor(labels, device=device).one_hot(5).numpy(), np.eye(5, dtype=np.int32)[labels])
    assert Tensor(labels, device=device).one_hot().shape == (2, 2, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_nonzero_matches_numpy_argwhere(device):
    x = np.array([[0, 1.5, 0], [np.nan, 0, -2]], dtype=np.float32)
    np.testing.assert_array_equal(Tensor(x, device=device).nonzero().numpy(), np.argwhere(x))
    assert Tensor.zeros(3, device=device).nonzero().shape == (0, 1)


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_with_reduce_combines_with_existing_values(reduce):
    target = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    index = np.array([[2, 2, 0]], dtype=np.int32)
    result = Tensor(target, device="CPU").scatter(1, Tensor(index, device="CPU"), 2.0, reduce=reduce)
    expected = [[3.0, 2.0, 7.0]] if reduce == "add" else [[2.0, 2.0, 12.0]]
    np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_with_duplicate_indices_writes_one_of_the_written_values(device):
    """torch leaves the winner among duplicates unspecified; it must be one of them, never their sum (issue 30)."""
    result = Tensor.zeros(3, device=device).scatter(0, Tensor([0, 0], device=device), Tensor([2.0, 4.0], device=device))
    values = result.tolist()
    assert values[0] in (2.0, 4.0) and values[1:] == [0.0, 0.0]
    # 2-d along dim 1 with three sources on one position, for ints too (picked by bits, not summed)
    index = Tensor([[1, 1, 1], [0, 2, 0]], device=device)
    src = np.array([[5, 6, 7], [8, 9, 10]], dtype=np.int32)
    out = Tensor.zeros(2, 3, dtype=dtypes.int32, device=device).scatter(1, index, Tensor(src, device=device)).numpy()
    assert out[0, 1] in (5, 6, 7) and out[0, 0] == 0 and out[0, 2] == 0
    assert out[1, 0] in (8, 10) and out[1, 1] == 0 and out[1, 2] == 9


def test_scatter_gradient_reaches_only_the_source_that_was_written():
    """d out / d src is 1 for the source element that landed and 0 for those overwritten (and for the target, 0
    where written, 1 elsewhere): checked against which value came out."""
    target = Tensor([1.0, 1.0, 1.0], dtype=dtypes.float64, requires_grad=True)
    src = Tensor([2.0, 4.0, 8.0], dtype=dtypes.float64, requires_grad=True)
    out = target.scatter(0, Tensor([2, 2, 0]), src)
    values = out.tolist()
    assert values[2] in (2.0, 4.0) and values[0] == 8.0 and values[1] == 1.0
    out.sum().backward()
    winner = [2.0, 4.0].index(values[2])
    expected_src = [0.0, 0.0, 1.0]
    expected_src[winner] = 1.0
    assert src.grad.tolist() == expected_src
    assert target.grad.tolist() == [0.0, 1.0, 0.0]
