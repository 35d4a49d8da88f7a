"""The Python that builds a Tensor graph takes shortcuts for the common cases (issue 23: the time before a block's
first kernel). Each shortcut must build exactly the nodes the general path builds, and step aside when it cannot."""

import numpy as np
import pytest

from tg.codegen import Ops, UOp, dtypes
from tg.hcq import Device
from tg.tensor import Tensor
from tg.tensor.attention import _kept_positions, causal_mask
from tg.tensor.autograd import no_grad
from tg.tensor.elementwise import expanded_constant


def scalar_of_shape(value: float, shape: tuple[int, ...], dtype=dtypes.float32, device: str | None = None) -> UOp:
    """A constant broadcast to `shape`, spelled out: CONST on its device (the default one unless given), reshaped to
    all-ones, expanded."""
    const = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device or Device.DEFAULT),), value)
    return UOp(Ops.EXPAND, dtype, (UOp(Ops.RESHAPE, dtype, (const,), (1,) * len(shape)),), shape)


def test_tensor_times_scalar_is_the_constant_expanded_to_its_shape() -> None:
    x = Tensor(np.ones((2, 3), np.float32))
    assert (x * 2.0).uop is UOp(Ops.MUL, dtypes.float32, (x.uop, scalar_of_shape(2.0, (2, 3))))


def test_a_reflected_scalar_stays_the_first_operand() -> None:
    x = Tensor(np.ones((2, 3), np.float32))
    assert (2.0 - x).uop is UOp(Ops.SUB, dtypes.float32, (scalar_of_shape(2.0, (2, 3)), x.uop))
    np.testing.assert_array_equal((2.0 - x).numpy(), np.full((2, 3), 1.0, np.float32))


def test_where_with_a_scalar_branch_expands_it() -> None:
    x = Tensor(np.array([[-1.0, 2.0]], np.float32))
    condition = x > 0
    result = condition.where(x, 0.0)
    assert result.uop is UOp(Ops.WHERE, dtypes.float32, (condition.uop, x.uop, scalar_of_shape(0.0, (1, 2))))
    np.testing.assert_array_equal(result.numpy(), [[0.0, 2.0]])


def test_a_scalar_that_promotes_takes_the_general_path() -> None:
    x = Tensor(np.array([1, 2], np.int32))
    result = x * 2.5
    assert result.dtype is dtypes.default_float
    np.testing.assert_allclose(result.numpy(), [2.5, 5.0])


def test_an_int_scalar_out_of_range_still_raises() -> None:
    with pytest.raises(OverflowError):
        Tensor(np.array([1, 2], np.int8)) * 300


def test_under_no_grad_the_scalar_path_matches_the_general_one() -> None:
    x = Tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
    with no_grad():
        result = x * 3.0
    assert result.uop.op is Ops.DETACH  # the general path's: the product is cut off from autograd
    np.testing.assert_array_equal(result.numpy(), [3.0, -6.0])


def test_a_causal_mask_of_plain_sizes_is_built_once_from_kept_positions() -> None:
    """The same graph at every call (no Python spent building it, the same nodes for the schedule cache), reading
    positions uploaded once: the rows' i + 1 too, which computed was a kernel of its own in every attention."""
    like = Tensor(np.zeros((4, 8), np.float32))
    first = causal_mask(5, 7, like)
    second = causal_mask(5, 7, like)
    assert second.uop is first.uop and causal_mask(7, 5, like).uop is not first.uop
    positions = [node for node in first.uop.toposort() if node.op is Ops.BUFFER]
    assert len(positions) == 2 and sorted(buffer.arg.size for buffer in positions) == [5, 7]
    rows = _kept_positions(Tensor, 5, like.device, 1)
    np.testing.assert_array_equal(rows.numpy(), np.arange(1, 6))
    np.testing.assert_array_equal(second.numpy(), np.tril(np.ones((5, 7), bool)))


def test_a_models_constants_are_built_once() -> None:
    x = Tensor(np.ones((3, 4), np.float32))
    first = x * 0.5
    hits = expanded_constant.cache_info().hits
    second = x * 0.5
    assert expanded_constant.cache_info().hits == hits + 1
    assert second.uop is first.uop


def test_zero_and_negative_zero_stay_distinct_constants() -> None:
    x = Tensor(np.array([1.0, -1.0], np.float32))
    zero, negative_zero = x * 0.0, x * -0.0  # 0.0 == -0.0 in Python: the cache must not confuse them
    assert zero.uop is not negative_zero.uop
    np.testing.assert_array_equal(np.signbit(negative_zero.numpy()), np.signbit(np.float32([1.0, -1.0]) * -0.0))


def test_expand_of_size_one_axes_is_one_node() -> None:
    column = Tensor(np.arange(3, dtype=np.float32).reshape(3, 1))
    assert column.expand(3, 4).uop is UOp(Ops.EXPAND, dtypes.float32, (column.uop,), (3, 4))
    assert column.expand(3, 1) is column
    assert column.expand(2, 3, 4).uop.op is Ops.EXPAND  # new leading axis: the general path, through a reshape
    np.testing.assert_array_equal(column.expand(2, 3, 4).numpy(), np.broadcast_to(np.arange(3.0)[:, None], (2, 3, 4)))
    with pytest.raises(ValueError):
        column.expand(4, 4)  # only size-1 axes grow


PRODUCT_SHAPES = [
    ((4, 3), (3, 5)),
    ((1, 3), (3, 5)),
    ((4, 3), (3, 1)),
    ((2, 4, 3), (3, 5)),
    ((2, 1, 3), (3, 1)),
    ((2, 2, 4, 3), (3, 5)),
    ((2, 4, 3), (2, 3, 5)),
    ((1, 2, 4, 3), (1, 2, 3, 5)),
    ((3,), (3, 5)),
    ((4, 3), (3,)),
]


@pytest.mark.parametrize(("left_shape", "right_shape"), PRODUCT_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_a_plain_matmul_is_built_directly_as_the_same_nodes_as_the_general_path(
    monkeypatch, left_shape, right_shape, dtype
) -> None:
    from tg.tensor import linalg

    left = Tensor(np.arange(np.prod(left_shape), dtype=dtype).reshape(left_shape))
    right = Tensor(np.arange(np.prod(right_shape), dtype=dtype).reshape(right_shape), requires_grad=dtype is np.float32)
    plain_right = right.reshape(3, -1) if right.ndim == 1 else right
    assert linalg._plain_product(left.reshape(1, 3) if left.ndim == 1 else left, plain_right, None) is not None
    direct = left @ right
    monkeypatch.setattr(linalg, "_plain_product", lambda *args: None)
    general = left @ right
    assert direct.uop is general.uop  # (nodes are unique: the same graph is the same object, tag included)
    np.testing.assert_array_equal(direct.numpy(), left.numpy() @ right.numpy())


def test_a_matmul_that_broadcasts_casts_or_runs_under_no_grad_takes_the_general_path() -> None:
    from tg.tensor import linalg

    matrix = Tensor(np.ones((4, 3), np.float32))
    assert linalg._plain_product(matrix, Tensor(np.ones((3, 5), np.float16)), None) is None  # a promotion
    assert linalg._plain_product(matrix, Tensor(np.ones((3, 5), np.float32)), dtypes.float16) is None  # a cast
    half = Tensor(np.ones((4, 3), np.float16))
    assert linalg._plain_product(half, Tensor(np.ones((3, 5), np.float16)), None) is None  # float32 accumulator
    batched = Tensor(np.ones((2, 4, 3), np.float32))
    assert linalg._plain_product(batched, Tensor(np.ones((1, 3, 5), np.float32)), None) is None  # a broadcast
    with no_grad():
        assert linalg._plain_product(matrix, Tensor(np.ones((3, 5), np.float32)), None) is None


def sliding_window_by_tensor_ops(tensor: Tensor, axis: int, size: int, stride: int, dilation: int) -> Tensor:
    """The windows built one Tensor method at a time (the reference for shape_ops.sliding_window's node chain)."""
    from tg.tensor.shape_ops import on_axis

    length = tensor.shape[axis]
    count = (length - dilation * (size - 1) - 1) // stride + 1
    moved = tensor.transpose(axis, -1) if axis != tensor.ndim - 1 else tensor
    outer = moved.shape[:-1]
    row = length + dilation
    tiles = -(-size * row // length)
    tiled = moved.reshape(outer + (1, length)).expand(outer + (tiles, length)).reshape(outer + (tiles * length,))
    rows = on_axis(tiled, len(outer), (0, size * row), shrink=True).reshape(outer + (size, row))
    if count * stride > row:
        rows = on_axis(rows, len(outer) + 1, (0, count * stride - row))
    rows = on_axis(rows, len(outer) + 1, (0, count * stride), shrink=True).reshape(outer + (size, count, stride))
    windows = on_axis(rows, len(outer) + 2, (0, 1), shrink=True).reshape(outer + (size, count)).transpose(-1, -2)
    if axis == tensor.ndim - 1:
        return windows
    order = list(range(windows.ndim))
    order[axis], order[-2] = order[-2], order[axis]
    return windows.permute(order)


@pytest.mark.parametrize(
    "shape, axis, size, stride, dilation",
    [
        ((2, 3, 10, 12), 2, 3, 1, 1),
        ((2, 3, 10, 12), 3, 3, 1, 1),
        ((2, 3, 10, 12), 3, 3, 2, 1),
        ((2, 3, 10, 12), 2, 2, 3, 2),
        ((1, 4, 9, 9), 2, 9, 1, 1),
        ((7,), 0, 3, 2, 1),
        ((5, 6), 0, 1, 1, 1),
        ((4, 20), 1, 4, 4, 3),
    ],
)
def test_sliding_windows_are_built_as_the_same_nodes_as_one_tensor_op_at_a_time(
    shape: tuple, axis: int, size: int, stride: int, dilation: int
) -> None:
    from tg.tensor.shape_ops import sliding_window

    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    x = Tensor(values)
    direct = sliding_window(x, axis, size, stride, dilation)
    assert direct.uop is sliding_window_by_tensor_ops(x, axis, size, stride, dilation).uop
    # and the values: result[..., o, ..., j] = x[..., o * stride + j * dilation, ...]
    count = (shape[axis] - dilation * (size - 1) - 1) // stride + 1
    taken = np.stack([np.take(values, [o * stride + j * dilation for j in range(size)], axis) for o in range(count)])
    expected = np.moveaxis(np.moveaxis(taken, 0, axis), axis + 1, -1)
    np.testing.assert_array_equal(direct.numpy(), expected)


def test_the_window_nodes_come_with_their_shapes() -> None:
    # the chain records each node's shape as it builds it, so that asking for the result's shape walks nothing; the
    # recorded shapes are those the graph's own rule infers
    from tg.codegen.schedule.graph import _infer_shape
    from tg.tensor.shape_ops import sliding_window

    x = Tensor(np.zeros((2, 3, 11, 13), np.float32))
    window = sliding_window(x, 2, 3, 2, 1).uop
    chain = [node for node in window.toposort() if node.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK)]
    assert len(chain) > 5
    for node in chain:
        assert node._shape == _infer_shape(node)
