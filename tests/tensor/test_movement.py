"""Movement ops and indexing against numpy on CPU and PYTHON: values, not only shapes."""

import numpy as np
import pytest

from tg.codegen import dtypes, to_numpy
from tg.tensor import Tensor

from .devices import DEVICES


def source(shape=(3, 4, 5), dtype=dtypes.int32) -> np.ndarray:
    return np.arange(int(np.prod(shape))).reshape(shape).astype(to_numpy(dtype))


MOVEMENTS = {
    "reshape": (lambda t: t.reshape(5, -1, 3), lambda x: x.reshape(5, -1, 3)),
    "permute": (lambda t: t.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    "expand": (lambda t: t[:, :1].expand(2, 3, 4, 5), lambda x: np.broadcast_to(x[:, :1], (2, 3, 4, 5))),
    "pad": (lambda t: t.pad(((1, 0), None, (2, 1))), lambda x: np.pad(x, ((1, 0), (0, 0), (2, 1)))),
    "pad_value": (
        lambda t: t.pad(((0, 1), (1, 1), None), value=-7),
        lambda x: np.pad(x, ((0, 1), (1, 1), (0, 0)), constant_values=-7),
    ),
    "pad_negative": (
        lambda t: t.pad(((-1, 1), None, (0, -2))),
        lambda x: np.pad(x[1:, :, :3], ((0, 1), (0, 0), (0, 0))),
    ),
    "shrink": (lambda t: t.shrink(((1, 3), None, (2, 4))), lambda x: x[1:3, :, 2:4]),
    "flip": (lambda t: t.flip(0, 2), lambda x: x[::-1, :, ::-1]),
    "transpose": (lambda t: t.transpose(0, 2), lambda x: x.swapaxes(0, 2)),
    "T": (lambda t: t[0].T, lambda x: x[0].T),
    "squeeze": (lambda t: t[:1, :, 1:2].squeeze(), lambda x: x[:1, :, 1:2].squeeze()),
    "unsqueeze": (lambda t: t.unsqueeze(1), lambda x: np.expand_dims(x, 1)),
    "flatten": (lambda t: t.flatten(1), lambda x: x.reshape(3, -1)),
    "chain": (
        lambda t: t.permute(1, 0, 2).flip(1).reshape(4, 15)[1:, ::4],
        lambda x: x.transpose(1, 0, 2)[:, ::-1].reshape(4, 15)[1:, ::4],
    ),
}  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MOVEMENTS))
def test_movement_matches_numpy(np_check, device, name):
    tg_op, np_op = MOVEMENTS[name]
    x = source()
    np_check.matches(tg_op(Tensor(x, device=device)), np_op(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["permute", "pad", "flip", "chain"])
def test_movement_of_a_computed_value_matches_numpy(np_check, device, name):
    """Movement ops over an unrealized expression (fused into the consumer, not read from a buffer)."""
    tg_op, np_op = MOVEMENTS[name]
    x = source()
    np_check.matches(tg_op(Tensor(x, device=device) * 2 + 1), np_op(x * 2 + 1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.uint8, dtypes.bool, dtypes.float64], ids=lambda d: d.name)
def test_movement_keeps_every_dtype(np_check, device, dtype):
    x = np_check.random((3, 4), dtype, seed=3)
    t = Tensor(x, device=device)
    np_check.matches(t.T.flip(0).pad(((1, 1), None)), np.pad(x.T[::-1], ((1, 1), (0, 0))))


INDICES = [
    1, -1, slice(None, None, -1), slice(None, None, 2), slice(-1, 0, -2), slice(None, None, -3), slice(4, 1, -1),
    (1, 2), (Ellipsis, 1), (None, 0, Ellipsis, None), (slice(0, 0),), (slice(5, 1),), (1, slice(None, None, -3)),
    (slice(None), None, slice(None, None, -1)), (-2, slice(1, None, 2), -1), (slice(None, None, 7),),
    (Ellipsis, slice(None, None, -2)), (slice(2, None, -1), 3, slice(3, 0, -2)),
    (slice(1, 3), slice(None, None, -2), slice(2, 5)), (slice(1, 2), 2, slice(3, None)),
]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_getitem_matches_numpy(np_check, device, index):
    x = source()
    np_check.matches(Tensor(x, device=device)[index], x[index])


def test_slices_of_several_axes_are_one_shrink():
    """Every axis that keeps a run of elements in order is cut by the same SHRINK (one per axis made slicing a 4-D
    tensor cost as much Python as building a matmul); a flipped or strided axis is cut after it."""
    from tg.codegen.uop.ops import Ops

    t = Tensor.empty(1, 12, 64, 16)
    view = t[:, 2:5, 16:32]
    assert view.shape == (1, 3, 16, 16)
    assert view.uop.op is Ops.SHRINK and view.uop.src[0] is t.uop
    assert view.uop.arg == ((0, 1), (2, 5), (16, 32), (0, 16))


@pytest.mark.parametrize("device", DEVICES)
def test_getitem_with_negative_steps_on_a_computed_value(np_check, device):
    x = source((6, 7))
    t = Tensor(x, device=device)
    np_check.matches((t - 3)[::-2, 5:0:-3], (x - 3)[::-2, 5:0:-3])


@pytest.mark.parametrize("device", DEVICES)
def test_eye_and_movement_on_constants(np_check, device):
    for n, m in [(3, None), (2, 4), (4, 2), (1, 1)]:
        np_check.matches(Tensor.eye(n, m, device=device), np.eye(n, m, dtype=np.float32))
    np_check.matches(
        Tensor.full((2, 3), 5, device=device).pad(((1, 0), (0, 2))),
        np.pad(np.full((2, 3), 5, np.int32), ((1, 0), (0, 2))),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_empty_tensor_movements(np_check, device):
    x = np.zeros((0, 3), dtype=np.float32)
    t = Tensor(x, device=device)
    np_check.matches(t.reshape(3, 0).T, x.reshape(3, 0).T)
    np_check.matches(t.pad(((1, 1), None)), np.pad(x, ((1, 1), (0, 0))))
    np_check.matches(Tensor(source(), device=device)[1:1, ::-1], source()[1:1, ::-1])


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_reshape_none_keeps_the_size_at_that_position(device):
    """tinygrad's reshape: a None at position i is the input's size at position i (issue 30 item 5)."""
    x = np.arange(36, dtype=np.float32).reshape(2, 3, 6)
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(t.reshape(None, None, 2, 3).numpy(), x.reshape(2, 3, 2, 3))
    np.testing.assert_array_equal(t.reshape((None, -1)).numpy(), x.reshape(2, 18))
    np.testing.assert_array_equal(t.reshape(6, None, 2).numpy(), x.reshape(6, 3, 2))


def test_reshape_none_past_the_input_axes_is_an_error():
    with pytest.raises(ValueError, match="None"):
        Tensor.zeros(2, 3).reshape(1, 2, None)
