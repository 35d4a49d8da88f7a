"""Tensor API parity with tinygrad and torch: each gap the torch-referenced op suite found,
checked against numpy (or torch's documented semantics, spelled out where numpy has no equivalent)."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------------- 0-d tensors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_reductions_of_a_0d_tensor_keep_shape_empty(device, axis):
    x = Tensor(np.float32(1.5), device=device)
    assert x.shape == ()
    for result, expected in [
        (x.sum(axis), 1.5),
        (x.prod(axis), 1.5),
        (x.max(axis), 1.5),
        (x.mean(axis), 1.5),
        (x.logsumexp(axis), 1.5),  # log(exp(x)) = x
    ]:
        assert result.shape == ()
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)
    softmax_axis = -1 if axis is None else axis
    assert x.softmax(softmax_axis).shape == ()
    np.testing.assert_allclose(x.softmax(softmax_axis).numpy(), 1.0)
    np.testing.assert_allclose(x.log_softmax(softmax_axis).numpy(), 0.0, atol=1e-7)
    np.testing.assert_allclose(x.softmin(softmax_axis).numpy(), 1.0)
    for position in (x.argmax(axis), x.argmin(axis)):
        assert position.shape == () and position.item() == 0


def test_reducing_a_0d_tensor_over_axis_1_is_an_index_error():
    with pytest.raises(IndexError):
        Tensor(2.0).sum(1)
    with pytest.raises(IndexError):
        Tensor(2.0).softmax(1)


# ---------------------------------------------------------------------------------------------------- pad modes

NUMPY_PAD_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_match_numpy(device, mode):
    x = _random((2, 3, 4), 1)
    per_axis = ((0, 0), (2, 1), (3, 2))
    result = Tensor(x, device=device).pad(per_axis, mode=mode)
    np.testing.assert_array_equal(result.numpy(), np.pad(x, per_axis, mode=NUMPY_PAD_MODE[mode]))
    flat = Tensor(x, device=device).pad((3, 2, 2, 1), mode=mode)  # torch's form: last axis first
    np.testing.assert_array_equal(flat.numpy(), np.pad(x, per_axis, mode=NUMPY_PAD_MODE[mode]))


def test_pad_modes_on_a_known_row():
    row = Tensor([1, 2, 3], device="PYTHON")
    assert row.pad((3, 2), mode="circular").tolist() == [1, 2, 3, 1, 2, 3, 1, 2]
    assert row.pad((2, 2), mode="reflect").tolist() == [3, 2, 1, 2, 3, 2, 1]
    assert row.pad((2, 2), mode="replicate").tolist() == [1, 1, 1, 2, 3, 3, 3]
    assert row.pad((1, 1), "constant", 9).tolist() == [9, 1, 2, 3, 9]


def test_pad_mode_errors():
    x = Tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="pad mode"):
        x.pad((1, 1), mode="symmetric")
    with pytest.raises(ValueError, match="pad mode"):
        x.pad((1, 1), 5.0)  # a fill value goes in value=, the second argument is the mode as in tinygrad
    with pytest.raises(RuntimeError, match="reflect padding"):  # torch: pad must be smaller than the size
        x.pad((3, 0), mode="reflect")
    with pytest.raises(RuntimeError, match="circular padding"):
        x.pad((4, 0), mode="circular")
    assert x.pad((-1, 0), mode="replicate").tolist() == [2.0, 3.0]  # a negative amount crops (torch)


# ---------------------------------------------------------------------------------------------------- elementwise


@pytest.mark.parametrize("device", DEVICES)
def test_fmod_matches_numpy_for_floats(device):
    a = np.array([-7.5, 7.5, -7.5, 7.5, 0.0, -0.0, 5.25, -5.25, 1e6, np.inf, 3.0, 5.0], np.float32)
    b = np.array([2, 2, -2, -2, 3, 3, 0.5, 1.5, 7, 2, np.inf, 0.0], np.float32)
    with np.errstate(invalid="ignore"):
        expected = np.fmod(a, b)
    result = Tensor(a, device=device).fmod(Tensor(b, device=device)).numpy()
    np.testing.assert_array_equal(result, expected)
    numbers = ~np.isnan(expected)  # the sign of the dividend, -0.0 included (a NaN's sign bit is not meaningful)
    np.testing.assert_array_equal(np.signbit(result[numbers]), np.signbit(expected[numbers]))


@pytest.mark.parametrize("device", DEVICES)
def test_fmod_matches_numpy_for_ints(device):
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, 64).astype(np.int32)
    b = rng.integers(-9, 10, 64).astype(np.int32)
    b[b == 0] = 7
    np.testing.assert_array_equal(Tensor(a, device=device).fmod(Tensor(b, device=device)).numpy(), np.fmod(a, b))
    np.testing.assert_array_equal(Tensor(a, device=device).fmod(4).numpy(), np.fmod(a, 4))
    unsigned = np.array([7, 8, 9], np.uint8)
    np.testing.assert_array_equal(Tensor(unsigned, device=device).fmod(4).numpy(), np.fmod(unsigned, 4))


@pytest.mark.parametrize("device", DEVICES)
def test_log10_and_softmin_match_numpy(device):
    x = np.abs(_random((3, 5), 2)) + 0.01
    np.testing.assert_allclose(Tensor(x, device=device).log10().numpy(), np.log10(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(Tensor([1, 10, 1000], device=device).log10().numpy(), [0, 1, 3], atol=1e-6)
    shifted = np.exp(-x - (-x).max(1, keepdims=True))
    expected = shifted / shifted.sum(1, keepdims=True)
    np.testing.assert_allclose(Tensor(x, device=device).softmin(1).numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(Tensor(x, device=device).softmin(0, dtype="float64").numpy(), np.exp(-x.astype(
        np.float64)) / np.exp(-x.astype(np.float64)).sum(0), rtol=1e-12)  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
def test_shift_operators(device):
    x = np.array([1, 2, 3, 100], np.int32)
    np.testing.assert_array_equal((Tensor(x, device=device) << 3).numpy(), x << 3)
    np.testing.assert_array_equal((Tensor(x, device=device) >> 1).numpy(), x >> 1)
    np.testing.assert_array_equal((1 << Tensor(x[:3], device=device)).numpy(), 1 << x[:3])
    shifts = np.array([0, 1, 2, 3], np.int32)
    np.testing.assert_array_equal((Tensor(x, device=device) << Tensor(shifts, device=device)).numpy(), x << shifts)


# ---------------------------------------------------------------------------------------------------- creation


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("start", "stop", "steps"), [(0, 1, 5), (-3.5, 2.25, 7), (10, -10, 4), (2, 3, 1), (0, 1, 0)])
def test_linspace_matches_numpy(device, start, stop, steps):
    result = Tensor.linspace(start, stop, steps, device=device)
    assert result.dtype is dtypes.default_float
    np.testing.assert_allclose(result.numpy(), np.linspace(start, stop, steps, dtype=np.float32), rtol=1e-6)


def test_linspace_int_dtype_truncates_as_torch():
    # torch.linspace(0, 10, 4, dtype=torch.int32) is [0, 3, 6, 10]: the float steps truncated
    assert Tensor.linspace(0, 10, 4, dtype="int32").tolist() == [0, 3, 6, 10]
    assert Tensor.linspace(0, 10, 4, dtype=dtypes.int32).dtype is dtypes.int32
    with pytest.raises(ValueError):
        Tensor.linspace(0, 1, -1)


# ---------------------------------------------------------------------------------------------------- dtypes


def test_dtypes_given_as_strings():
    assert Tensor([1, 2], dtype="int32").dtype is dtypes.int32
    assert Tensor([1, 2], dtype="float16").dtype is dtypes.float16
    assert Tensor.zeros(2, dtype="half").dtype is dtypes.float16
    assert Tensor.ones(2, 2, dtype="bool").dtype is dtypes.bool
    assert Tensor.full((2,), 3, dtype="int64").dtype is dtypes.int64
    assert Tensor.arange(4, dtype="int16").dtype is dtypes.int16
    assert Tensor.empty(3, dtype="uint8").dtype is dtypes.uint8
    assert Tensor.eye(2, dtype="float64").dtype is dtypes.float64
    x = Tensor([1.5, 2.5], device="PYTHON")
    assert x.cast("int64").dtype is dtypes.int64
    assert x.cast("int64").tolist() == [1, 2]
    assert x.bitcast("int32").dtype is dtypes.int32
    assert x.zeros_like(dtype="int8").dtype is dtypes.int8
    assert x.sum(dtype="float64").dtype is dtypes.float64
    assert x.cumsum(dtype="float64").dtype is dtypes.float64
    assert x.softmax(dtype="float64").dtype is dtypes.float64
    assert Tensor.rand(2, dtype="float16").dtype is dtypes.float16
    assert Tensor.randint(3, high=5, dtype="int64").dtype is dtypes.int64
    assert Tensor.uniform(2, dtype="float64").dtype is dtypes.float64
    assert Tensor.kaiming_uniform(2, 2, dtype="half").dtype is dtypes.float16
    with pytest.raises(ValueError, match="unknown dtype"):
        Tensor([1], dtype="int33")


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.int64])
def test_dtype_min_max_match_numpy(dtype):
    from tg.codegen import to_numpy

    info = np.iinfo(to_numpy(dtype))
    assert (dtype.min, dtype.max) == (info.min, info.max)


def test_dtype_min_max_for_floats_and_bool():
    assert (dtypes.float32.min, dtypes.float32.max) == (-math.inf, math.inf)  # tinygrad's: floats reach inf
    assert (dtypes.bool.min, dtypes.bool.max) == (False, True)


def test_cast_shortcuts():
    x = Tensor([1.7, -2.2], device="PYTHON")
    assert x.long().dtype is dtypes.int64 and x.long().tolist() == [1, -2]
    assert x.short().dtype is dtypes.int16 and x.short().tolist() == [1, -2]
    assert x.bfloat16().dtype is dtypes.bfloat16
    np.testing.assert_allclose(x.bfloat16().float().numpy(), [1.703125, -2.203125])  # bfloat16 has 8 bits


def test_size_is_torchs():
    x = Tensor.empty(2, 3, 4)
    assert x.size() == (2, 3, 4)
    assert (x.size(0), x.size(-1)) == (2, 4)
    with pytest.raises(IndexError):
        x.size(3)


# ---------------------------------------------------------------------------------------------------- scans


def _reference_cumextreme(row, better):
    """torch's rule, one element at a time: a NaN, or a value `better` than or equal to the running one, takes over."""
    values, indices, best, at = [], [], row[0], 0
    for i, value in enumerate(row):
        if math.isnan(value) or (not math.isnan(best) and better(value, best)):
            best, at = value, i
        values.append(best)
        indices.append(at)
    return values, indices


@pytest.mark.parametrize("device", DEVICES)
def test_cummax_and_cummin_return_values_and_indices(device):
    x = Tensor([1.0, 3.0, 3.0, 2.0, 5.0, math.nan, 4.0, math.nan], device=device)
    values, indices = x.cummax(0)
    np.testing.assert_array_equal(values.numpy(), [1, 3, 3, 3, 5, np.nan, np.nan, np.nan])
    assert indices.tolist() == [0, 1, 2, 2, 4, 5, 5, 7]  # ties and NaNs move to the latest position, as torch
    assert indices.dtype is dtypes.int32
    result = x.cummin()
    np.testing.assert_array_equal(result.values.numpy(), [1, 1, 1, 1, 1, np.nan, np.nan, np.nan])
    assert result.indices.tolist() == [0, 0, 0, 0, 0, 5, 5, 7]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cummax_cummin_indices_against_a_reference(device, axis):
    data = np.random.default_rng(5).integers(-3, 4, (4, 6)).astype(np.float32)  # many ties
    t = Tensor(data, device=device)
    moved = np.moveaxis(data, axis, -1)
    for result, better in [(t.cummax(axis), lambda a, b: a >= b), (t.cummin(axis), lambda a, b: a <= b)]:
        pairs = [_reference_cumextreme(list(row), better) for row in moved.reshape(-1, moved.shape[-1])]
        values = np.moveaxis(np.array([p[0] for p in pairs]).reshape(moved.shape), -1, axis)
        indices = np.moveaxis(np.array([p[1] for p in pairs]).reshape(moved.shape), -1, axis)
        np.testing.assert_array_equal(result.values.numpy(), values)
        np.testing.assert_array_equal(result.indices.numpy(), indices)
    ints = Tensor(data.astype(np.int32), device=device).cummax(axis)
    assert ints.values.dtype is dtypes.int32
    np.testing.assert_array_equal(ints.values.numpy(), np.maximum.accumulate(data, axis).astype(np.int32))


# ---------------------------------------------------------------------------------------------------- shape ops


@pytest.mark.parametrize("device", DEVICES)
def test_one_hot_matches_numpy(device):
    labels = np.array([[0, 3], [2, 1]], np.int32)
    np.testing.assert_array_equal(Tensor(labels, device=device).one_hot(5).numpy(), np.eye(5, dtype=np.int32)[labels])
    np.testing.assert_array_equal(
        Tensor(labels, device=device).one_hot().numpy(), np.eye(4, dtype=np.int32)[labels]
    )  # num_classes=-1: one more than the largest label, as torch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("offset", "dim1", "dim2"), [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 2), (0, -1, 0)])
def test_diagonal_matches_numpy(device, offset, dim1, dim2):
    x = _random((3, 4, 5), 4)
    result = Tensor(x, device=device).diagonal(offset=offset, dim1=dim1, dim2=dim2)
    np.testing.assert_array_equal(result.numpy(), np.diagonal(x, offset, dim1, dim2))


@pytest.mark.parametrize("device", DEVICES)
def test_roll_signatures_match_numpy(device):
    x = np.arange(24).reshape(2, 3, 4).astype(np.int32)
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(t.roll(5).numpy(), np.roll(x, 5))
    np.testing.assert_array_equal(t.roll(shifts=-1, dims=2).numpy(), np.roll(x, -1, 2))
    np.testing.assert_array_equal(t.roll((1, 2), (0, -1)).numpy(), np.roll(x, (1, 2), (0, -1)))
    np.testing.assert_array_equal(t.roll([7], [1]).numpy(), np.roll(x, [7], [1]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_signatures_match_numpy(device, indexing):
    a, b, c = np.arange(2, dtype=np.int32), np.arange(3, dtype=np.int32) * 10, np.arange(4, dtype=np.int32) * 100
    ta, tb, tc = (Tensor(v, device=device) for v in (a, b, c))
    expected = np.meshgrid(a, b, c, indexing=indexing)
    for grids in (Tensor.meshgrid(ta, tb, tc, indexing=indexing), Tensor.meshgrid([ta, tb, tc], indexing=indexing)):
        assert isinstance(grids, tuple) and len(grids) == 3
        for grid, want in zip(grids, expected, strict=True):
            np.testing.assert_array_equal(grid.numpy(), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("formula", "shapes"),
    [
        ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
        ("...ij,...jk", [(2, 2, 3, 4), (4, 5)]),
        ("i...->...i", [(3, 2, 4)]),
        ("...,...->...", [(2, 3), (3,)]),
        ("ij...,jk...->ik...", [(2, 3, 4), (3, 5, 4)]),
    ],
)
def test_einsum_with_ellipsis_matches_numpy(device, formula, shapes):
    arrays = [_random(shape, seed) for seed, shape in enumerate(shapes)]
    result = Tensor.einsum(formula, *(Tensor(a, device=device) for a in arrays))
    np.testing.assert_allclose(result.numpy(), np.einsum(formula, *arrays), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------- indexing


@pytest.mark.parametrize("device", DEVICES)
def test_list_and_tuple_fancy_indexing_matches_numpy(device):
    x = np.arange(24).reshape(4, 6).astype(np.int32)
    t = Tensor(x, device=device)
    for index in [
        [0, 2],
        ([3, 1],),
        ((0, 1),),
        ([0, 1], [1, 2]),
        ((0, -1), (5, 0)),
        (slice(None), [0, -1]),
        (1, [2, 3]),
        ([[0, 1], [2, 3]], slice(1, 3)),
    ]:
        np.testing.assert_array_equal(t[index].numpy(), x[index], err_msg=str(index))


@pytest.mark.parametrize(
    "index", [5, -6, [0, 5], (0, 9), ([1, 2], [0, 7]), (slice(None), [-7]), np.array([5]), ((0, 8),)]
)
def test_index_out_of_range_is_an_index_error(index):
    t = Tensor.arange(30).reshape(5, 6)
    with pytest.raises(IndexError):
        np.arange(30).reshape(5, 6)[index]  # the oracle agrees this is out of range
    with pytest.raises(IndexError):
        t[index]


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_from_a_tensor_source_without_reduce(device):
    target = _random((3, 5), 6)
    index = np.array([[0, 1, 2, 0], [2, 0, 1, 1]], np.int32)  # along dim 0, distinct per column
    source = _random((2, 4), 7)
    expected = target.copy()
    for i in range(index.shape[0]):
        for j in range(index.shape[1]):
            expected[index[i, j], j] = source[i, j]  # torch's definition: out[index[i][j]][j] = src[i][j]
    result = Tensor(target, device=device).scatter(0, Tensor(index, device=device), Tensor(source, device=device))
    np.testing.assert_array_equal(result.numpy(), expected)
    bigger_source = np.concatenate([source, _random((1, 4), 8)])  # src may be larger than index: only index's part
    bigger = Tensor(bigger_source, device=device)
    result = Tensor(target, device=device).scatter(0, Tensor(index, device=device), bigger)
    np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_along_last_dim_matches_put_along_axis(device):
    target = _random((3, 5), 10)
    index = np.array([[4, 0], [1, 3], [2, 2]], np.int32)
    index[2] = [2, 0]  # distinct within each row: numpy and torch agree only then
    source = _random((3, 2), 11)
    expected = target.copy()
    np.put_along_axis(expected, index, source, axis=1)
    result = Tensor(target, device=device).scatter(1, Tensor(index, device=device), Tensor(source, device=device))
    np.testing.assert_array_equal(result.numpy(), expected)


# ---------------------------------------------------------------------------------------------------- exceptions


def test_shape_mismatch_is_both_runtime_error_and_value_error():
    for bad in (
        lambda: Tensor.ones(2, 3) + Tensor.ones(4, 5),
        lambda: Tensor.ones(2, 3).reshape(4, 2),
        lambda: Tensor.ones(2, 3) @ Tensor.ones(2, 3),
        lambda: Tensor.ones(2, 3).expand(4, 4),
    ):
        with pytest.raises(RuntimeError):
            bad()
        with pytest.raises(ValueError):
            bad()


# ---------------------------------------------------------------------------------------------------- the wider API


@pytest.mark.parametrize("device", DEVICES)
def test_div_rounding_modes_match_torch_definitions(device):
    a = np.array([7, -7, 7, -7, 6, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], np.int32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal(ta.div(tb, rounding_mode="trunc").numpy(), np.trunc(a / b).astype(np.int32))
    np.testing.assert_array_equal(ta.div(tb, rounding_mode="floor").numpy(), np.floor_divide(a, b))
    x = np.array([7.5, -7.5, 1.0], np.float32)
    y = np.array([2.0, 2.0, -3.0], np.float32)
    np.testing.assert_array_equal(
        Tensor(x, device=device).div(Tensor(y, device=device), rounding_mode="trunc").numpy(), np.trunc(x / y)
    )
    np.testing.assert_array_equal(
        Tensor(x, device=device).div(Tensor(y, device=device), rounding_mode="floor").numpy(), np.floor(x / y)
    )
    with pytest.raises(ValueError):
        ta.div(tb, rounding_mode="round")


def test_activation_parameters_and_isinf_flags():
    x = np.array([-4.0, -1.0, 0.0, 0.5, 3.0], np.float32)
    t = Tensor(x, device="PYTHON")
    np.testing.assert_allclose(t.hardsigmoid(0.2, 0.5).numpy(), np.clip(0.2 * x + 0.5, 0, 1), rtol=1e-6)
    alpha, gamma = 1.5, 2.0
    np.testing.assert_allclose(t.selu(alpha, gamma).numpy(), gamma * np.where(x > 0, x, alpha * np.expm1(x)), rtol=1e-6)
    inf = Tensor([math.inf, -math.inf, 1.0, math.nan], device="PYTHON")
    assert inf.isinf().tolist() == [True, True, False, False]
    assert inf.isinf(detect_negative=False).tolist() == [True, False, False, False]
    assert inf.isinf(detect_positive=False).tolist() == [False, True, False, False]


def test_flip_clone_realize_and_linear_keywords():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor(x, device="PYTHON")
    np.testing.assert_array_equal(t.flip(axis=1).numpy(), np.flip(x, 1))
    np.testing.assert_array_equal(t.flip(axis=(0, 1)).numpy(), np.flip(x, (0, 1)))
    copy = t.clone(device="PYTHON")
    assert copy.device == "PYTHON"
    np.testing.assert_array_equal(copy.realize(do_update_stats=False).numpy(), x)
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = t.linear(Tensor(w, device="PYTHON"), dtype="float64")
    assert result.dtype is dtypes.float64
    np.testing.assert_allclose(result.numpy(), x.astype(np.float64) @ w)


def test_eq_ne_pad_to_shrink_to():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = Tensor(x, device="PYTHON")
    assert t.eq(2).tolist() == (x == 2).tolist() and t.ne(2).tolist() == (x != 2).tolist()
    np.testing.assert_array_equal(t.pad_to(4, None).numpy(), np.pad(x, ((0, 2), (0, 0))))
    np.testing.assert_array_equal(t.pad_to((3, 5), value=-1).numpy(), np.pad(x, ((0, 1), (0, 2)), constant_values=-1))
    np.testing.assert_array_equal(t.shrink_to(1, 2).numpy(), x[:1, :2])
    np.testing.assert_array_equal(t.shrink_to((None, 1)).numpy(), x[:, :1])


def test_replace_and_to_():
    t = Tensor([1.0, 2.0], device="PYTHON")
    other = Tensor([5.0, 6.0], device="PYTHON")
    assert t.replace(other) is t and t.tolist() == [5.0, 6.0]
    with pytest.raises(ValueError):
        t.replace(Tensor([1.0, 2.0, 3.0]))
    moved = Tensor([3, 4], device="PYTHON")
    assert moved.to_("CPU") is moved and moved.device == "CPU" and moved.tolist() == [3, 4]


def test_invalids_from_blob_and_from_url(tmp_path):
    assert Tensor.invalids(2, 3, dtype="int16").shape == (2, 3)
    source = np.arange(6, dtype=np.float32)
    blob = Tensor.from_blob(source.ctypes.data, (2, 3), dtype=dtypes.float32, device="PYTHON")
    np.testing.assert_array_equal(blob.numpy(), source.reshape(2, 3))
    import gzip

    raw = bytes(range(10))
    (tmp_path / "data.bin").write_bytes(raw)
    (tmp_path / "data.gz").write_bytes(gzip.compress(raw))
    assert Tensor.from_url((tmp_path / "data.bin").as_uri()).tolist() == list(raw)
    assert Tensor.from_url((tmp_path / "data.gz").as_uri(), gunzip=True).tolist() == list(raw)


def test_sequential_and_batchnorm():
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    t = Tensor(x, device="PYTHON")
    np.testing.assert_allclose(t.sequential([lambda v: v * 2, lambda v: v + 1]).numpy(), x * 2 + 1)
    weight, bias = np.array([1.0, 2.0, 3.0], np.float32), np.array([0.5, 0.0, -0.5], np.float32)
    mean, var = x.mean((0, 2)), x.var((0, 2))
    invstd = 1 / np.sqrt(var + 1e-5)
    expected = (x - mean[:, None]) * invstd[:, None] * weight[:, None] + bias[:, None]
    result = t.batchnorm(*(Tensor(v, device="PYTHON") for v in (weight, bias, mean, invstd)))
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-6)
    no_affine = t.batchnorm(None, None, Tensor(mean, device="PYTHON"), Tensor(invstd, device="PYTHON"))
    np.testing.assert_allclose(no_affine.numpy(), (x - mean[:, None]) * invstd[:, None], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("formula", "sizes", "reference"),
    [
        ("b c (h w) -> b h w c", {"h": 2}, lambda x: x.reshape(2, 3, 2, 2).transpose(0, 2, 3, 1)),
        ("b c w -> (b c) w", {}, lambda x: x.reshape(6, 4)),
        ("b c w -> w (c b)", {}, lambda x: x.transpose(2, 1, 0).reshape(4, 6)),
        ("... w -> w ...", {}, lambda x: np.moveaxis(x, -1, 0)),
        ("b c w -> b 1 c w", {}, lambda x: x[:, None]),
        ("b c (w two) -> b (c w) two", {"two": 2}, lambda x: x.reshape(2, 3, 2, 2).reshape(2, 6, 2)),
    ],
)
def test_rearrange_matches_numpy(formula, sizes, reference):
    x = np.arange(24).reshape(2, 3, 4).astype(np.int32)
    np.testing.assert_array_equal(Tensor(x, device="PYTHON").rearrange(formula, **sizes).numpy(), reference(x))


def test_rearrange_errors():
    t = Tensor.empty(2, 3, 4)
    for formula, sizes in [("b c -> c b", {}), ("b c w -> b c", {}), ("b (c x y) w -> b c w", {}), ("a b c", {})]:
        with pytest.raises(ValueError):
            t.rearrange(formula, **sizes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (2, 5, 4), (3, 5)])
def test_qr_matches_numpy(device, shape):
    a = _random(shape, 12)
    q, r = Tensor(a, device=device).qr()
    q, r = q.numpy().astype(np.float64), r.numpy().astype(np.float64)
    m = shape[-2]
    assert q.shape == (*shape[:-2], m, m) and r.shape == shape
    np.testing.assert_allclose(q @ r, a, atol=1e-5)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(m), q.shape), atol=1e-5)
    np.testing.assert_allclose(np.tril(r, -1), 0, atol=1e-5)
    _, reference = np.linalg.qr(a.astype(np.float64), mode="complete")  # unique up to the signs of R's rows
    np.testing.assert_allclose(np.abs(np.diagonal(r, 0, -2, -1)), np.abs(np.diagonal(reference, 0, -2, -1)), rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("source", "target"),
    [(np.uint8, np.int64), (np.int64, np.uint8), (np.float32, np.uint16), (np.uint16, np.float32), (np.int8, np.int32)],
)
def test_shape_changing_bitcast_matches_numpy_view(device, source, target):
    data = np.random.default_rng(4).integers(0, 256, (2, 2, 16)).astype(np.uint8).view(source)
    result = Tensor(data, device=device).bitcast(dtypes.by_name(np.dtype(target).name))
    np.testing.assert_array_equal(result.numpy().view(np.uint8), data.view(target).view(np.uint8))
    assert result.shape == data.view(target).shape


def test_shape_changing_bitcast_errors_are_runtime_errors():
    with pytest.raises(RuntimeError, match="last axis"):
        Tensor.empty(3, dtype=dtypes.uint8).bitcast(dtypes.int32)  # 3 bytes do not make an int32
    with pytest.raises(RuntimeError):
        Tensor(np.uint8(1)).bitcast(dtypes.int16)  # a 0-d tensor has no axis to absorb the change


def test_dtype_mismatch_in_assign_and_setitem_is_runtime_error_and_type_error():
    target = Tensor([1.0, 2.0], device="PYTHON").clone()
    for error in (RuntimeError, TypeError):
        with pytest.raises(error, match="assign dtype mismatch"):
            target.assign(Tensor([1, 2], device="PYTHON"))
        with pytest.raises(error, match="setitem dtype mismatch"):
            target[0] = Tensor(1, device="PYTHON")


def test_tournament_rounds_pair_everyone_once():
    from tg.tensor.svd import tournament_rounds

    for n in (2, 3, 4, 5, 8):
        rounds = tournament_rounds(n)
        pairs = [pair for round_ in rounds for pair in round_]
        assert sorted(pairs) == [(p, q) for p in range(n) for q in range(p + 1, n)]
        assert all(len({i for pair in round_ for i in pair}) == 2 * len(round_) for round_ in rounds)  # disjoint


@pytest.mark.slow
@pytest.mark.parametrize(("device", "shape"), [("CPU", (4, 3)), ("PYTHON", (2, 2, 3))])
def test_svd_matches_numpy(device, shape):
    a = _random(shape, 13)
    u, s, vh = Tensor(a, device=device).svd()
    u, s, vh = (t.numpy().astype(np.float64) for t in (u, s, vh))
    m, n = shape[-2:]
    k = min(m, n)
    assert (u.shape[-2:], s.shape[-1], vh.shape[-2:]) == ((m, m), k, (n, n))
    np.testing.assert_allclose(s, np.linalg.svd(a.astype(np.float64), compute_uv=False), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=1e-5)
    for orthogonal in (u, vh):
        size = orthogonal.shape[-1]
        np.testing.assert_allclose(
            np.swapaxes(orthogonal, -1, -2) @ orthogonal, np.broadcast_to(np.eye(size), orthogonal.shape), atol=1e-5
        )
    thin_u, _, thin_vh = Tensor(a, device=device).svd(full_matrices=False)
    assert thin_u.shape[-2:] == (m, k) and thin_vh.shape[-2:] == (k, n)


@pytest.mark.parametrize("device", DEVICES)
def test_pickled_tensors_own_their_storage(device):
    import pickle

    t = Tensor([1, 2, 3, 4], device=device).realize()
    first, second = pickle.loads(pickle.dumps(t)), pickle.loads(pickle.dumps(t))
    assert first.uop is not second.uop and first.device == device
    first[0] = 9
    first.realize()
    assert (first.tolist(), second.tolist(), t.tolist()) == ([9, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4])
    view = pickle.loads(pickle.dumps(t[1:3]))  # a view pickles as its own values
    assert view.tolist() == [2, 3] and view.shape == (2,)
    lazy = pickle.loads(pickle.dumps(Tensor.arange(6, device=device).reshape(2, 3).float() * 2))
    assert lazy.dtype is dtypes.float32 and lazy.tolist() == [[0, 2, 4], [6, 8, 10]]
    assert pickle.loads(pickle.dumps(Tensor.empty(0, 3, device=device))).shape == (0, 3)


def test_dtype_groups_and_fp8_limits():
    import ml_dtypes

    from tg.codegen.dtype import FP8E4M3_MAX, FP8E4M3FNUZ_MAX, FP8E5M2_MAX, FP8E5M2FNUZ_MAX

    assert (FP8E4M3_MAX, FP8E5M2_MAX, FP8E4M3FNUZ_MAX, FP8E5M2FNUZ_MAX) == tuple(
        float(ml_dtypes.finfo(t).max)
        for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz)
    )
    assert set(dtypes.fp8s) == {dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz}
    assert set(dtypes.floats) == set(dtypes.fp8s) | {dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64}
    assert set(dtypes.uints) == {dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64}
    assert set(dtypes.sints) == {dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64}
    assert set(dtypes.ints) == set(dtypes.uints) | set(dtypes.sints)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [0, 2, 4, 7])
def test_masked_select_and_nonzero_with_a_fixed_size(device, size):
    x = np.random.default_rng(8).integers(-3, 3, (3, 4)).astype(np.int32)
    x[x < 0] = 0
    mask = x > 0
    selected = x[mask]
    expected = np.concatenate([selected, np.full(max(0, size - len(selected)), -5, np.int32)])[:size]
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(
        t.masked_select(Tensor(mask, device=device), size=size, fill_value=-5).numpy(), expected
    )
    found = np.argwhere(x != 0).astype(np.int32)
    padded = np.concatenate([found, np.full((max(0, size - len(found)), 2), -1, np.int32)])[:size]
    np.testing.assert_array_equal(t.nonzero(size=size, fill_value=-1).numpy(), padded)


def test_masked_select_with_size_keeps_float_bits():
    values = Tensor([-0.0, 1.5, math.nan], device="PYTHON")
    picked = values.masked_select(Tensor([True, False, True], device="PYTHON"), size=3, fill_value=7.0).numpy()
    assert np.signbit(picked[0]) and np.isnan(picked[1]) and picked[2] == 7.0


def test_contiguous_backward_keeps_the_value():
    x = Tensor([[1.0, 2.0], [3.0, 4.0]], device="PYTHON").T
    assert x.contiguous_backward().tolist() == [[1.0, 3.0], [2.0, 4.0]]
