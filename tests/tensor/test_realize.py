"""Realizing, laziness, assign and in-place ops, copies between devices, the NULL device and kernel counts."""

import numpy as np
import pytest

from tg.codegen import Ops, dtypes
from tg.tensor import GlobalCounters, Tensor

from .devices import DEVICES


def test_building_ops_runs_no_kernel():
    a, b = Tensor(np.ones((4, 4), np.float32)), Tensor.arange(4)
    GlobalCounters.reset()
    x = ((a * 2 + b).exp().sum(1) / 3).reshape(2, 2)[::-1].maximum(0)
    x = x.permute(1, 0).pad(((1, 1), None)).cast(dtypes.float16).contiguous()
    assert GlobalCounters.kernel_count == 0
    x.realize()
    assert GlobalCounters.kernel_count > 0


def test_realize_returns_self_and_reads_memory():
    t = Tensor([1, 2, 3]) + 1
    assert t.realize() is t
    base = t.uop
    while base.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP):
        base = base.src[0]
    assert base.op is Ops.BUFFER
    assert t.tolist() == [2, 3, 4]


def test_realize_several_tensors_in_one_call():
    a = Tensor([1.0, 2.0])
    b, c = a * 2, a + 1
    b.realize(c)
    assert b.tolist() == [2.0, 4.0] and c.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_operators_write_into_the_same_tensor(device):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = Tensor(x, device=device)
    same = t
    t += 5
    t *= 2
    t -= Tensor([1, 2, 3], device=device)
    t //= 3
    assert same is t
    np.testing.assert_array_equal(t.numpy(), ((x + 5) * 2 - np.array([1, 2, 3])) // 3)


@pytest.mark.parametrize("device", DEVICES)
def test_assign_broadcasts_and_accepts_python_values(device):
    t = Tensor.zeros(2, 3, device=device).contiguous().realize()
    t.assign(Tensor([1.0, 2.0, 3.0], device=device))
    np.testing.assert_array_equal(t.numpy(), np.array([[1, 2, 3], [1, 2, 3]], np.float32))
    t.assign(7.5)
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), 7.5, np.float32))
    t.assign([[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("device", DEVICES)
def test_assign_into_a_view_writes_the_base(device):
    base = Tensor(np.zeros(6, np.float32), device=device)
    base[1:4].assign(Tensor([1.0, 2.0, 3.0], device=device)).realize()
    np.testing.assert_array_equal(base.numpy(), np.array([0, 1, 2, 3, 0, 0], np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_assign_reads_the_old_value_of_its_own_view(device):
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    t = Tensor(x, device=device)
    t.assign(t.T + t.flip(0)).realize()
    np.testing.assert_array_equal(t.numpy(), x.T + x[::-1])


def test_assign_to_an_unrealized_value_stays_lazy():
    t = Tensor([1, 2]) + 1
    GlobalCounters.reset()
    t.assign(t * 10)
    t += Tensor.ones(2, dtype=dtypes.int32)
    assert GlobalCounters.kernel_count == 0
    assert t.tolist() == [21, 31]
    z = Tensor.zeros(3)
    z += 2
    assert z.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("device", DEVICES)
def test_clone_has_its_own_storage(device):
    a = Tensor([1, 2, 3], device=device)
    b = a.clone()
    b += 10
    assert a.tolist() == [1, 2, 3] and b.tolist() == [11, 12, 13]
    c = a.contiguous()
    assert c.tolist() == [1, 2, 3]


def test_to_copies_between_devices():
    x = np.arange(5, dtype=np.float32)
    on_python = Tensor(x, device="CPU").to("PYTHON")
    assert on_python.device == "PYTHON"
    back = (on_python * 2).to("CPU")
    np.testing.assert_array_equal(back.numpy(), x * 2)
    with pytest.raises(ValueError, match="different devices"):
        Tensor(x, device="CPU") + Tensor(x, device="PYTHON")


def test_detach_keeps_the_value():
    assert (Tensor([1.0, 2.0]).detach() * 2).tolist() == [2.0, 4.0]


def test_null_device_builds_and_compiles_but_reading_is_an_error():
    a = Tensor.empty(4, 4, device="NULL")
    b = Tensor.ones(4, device="NULL", dtype=dtypes.int32)
    x = (a.exp() * b + 1).sum(0)[::-1].maximum(0)
    y = ((b // 3) % 2 == 0).where(a[0], 2.5).cast(dtypes.float16)
    x.realize(y)
    assert x.device == "NULL"
    with pytest.raises(Exception, match="(?i)null"):
        x.numpy()


def test_kernel_counts():
    a, b, c = (Tensor(np.full((16, 16), v, np.float32)) for v in (1, 2, 3))
    GlobalCounters.reset()
    (a + b * c).realize()
    assert GlobalCounters.kernel_count == 1
    GlobalCounters.reset()
    (a + b).sum().realize()
    assert GlobalCounters.kernel_count == 1
    GlobalCounters.reset()
    shifted = (a - a.max(-1, keepdim=True)).exp()
    (shifted / shifted.sum(-1, keepdim=True)).realize()
    assert GlobalCounters.kernel_count <= 3


INPLACE = {
    "+=": lambda t, o: t.__iadd__(o),
    "-=": lambda t, o: t.__isub__(o),
    "*=": lambda t, o: t.__imul__(o),
    "//=": lambda t, o: t.__ifloordiv__(o),
    "%=": lambda t, o: t.__imod__(o),
    "**=": lambda t, o: t.__ipow__(o),
    "&=": lambda t, o: t.__iand__(o),
    "|=": lambda t, o: t.__ior__(o),
    "^=": lambda t, o: t.__ixor__(o),
    "<<=": lambda t, o: t.__ilshift__(o),
    ">>=": lambda t, o: t.__irshift__(o),
}
NUMPY_INPLACE = {
    "+=": np.add, "-=": np.subtract, "*=": np.multiply, "//=": np.floor_divide, "%=": np.mod, "**=": np.power,
    "&=": np.bitwise_and, "|=": np.bitwise_or, "^=": np.bitwise_xor, "<<=": np.left_shift, ">>=": np.right_shift,
}  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("operator", list(INPLACE))
def test_inplace_operator_matches_numpy(device, operator):
    x = np.array([[5, -7, 12], [3, 0, -1]], dtype=np.int32)
    other = np.array([2, 3, 1], dtype=np.int32)
    t = Tensor(x, device=device)
    result = INPLACE[operator](t, Tensor(other, device=device))
    assert result is t
    np.testing.assert_array_equal(t.numpy(), NUMPY_INPLACE[operator](x, other))


def test_inplace_true_division_of_ints_is_a_dtype_error():
    t = Tensor([1, 2])
    with pytest.raises(TypeError, match="int32.*float32|float32.*int32"):
        t /= 2


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_true_division_of_floats(device):
    t = Tensor([1.0, 3.0], device=device)
    t /= 2
    assert t.tolist() == [0.5, 1.5]


@pytest.mark.parametrize("device", DEVICES)
def test_setitem_matches_numpy(device):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = Tensor(x, device=device)
    t[1] = 0.5
    x[1] = 0.5
    t[::-2, 1:5:2] = Tensor([[10.0, 20.0]], device=device)
    x[::-2, 1:5:2] = [[10.0, 20.0]]
    t[..., -1] = t[..., 0] * 2
    x[..., -1] = x[..., 0] * 2
    np.testing.assert_array_equal(t.numpy(), x)


def test_setitem_on_a_pending_value_and_dtype_mismatch():
    t = Tensor([1, 2, 3]) + 1
    t[0] = 9
    assert t.tolist() == [9, 3, 4]
    with pytest.raises(TypeError, match="dtype mismatch"):
        t[1:] = Tensor([1.5, 2.5])


SETITEM_INDICES = [
    (slice(None, None, 2),), (slice(None, None, -2),), (slice(1, None, 3), 2), (-1, slice(4, 0, -3)),
    (Ellipsis, slice(None, None, 4)), (None, 2), (slice(2, 2),), (slice(None), slice(None, None, -1)),
]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", SETITEM_INDICES, ids=repr)
def test_strided_setitem_matches_numpy(device, index):
    x = np.arange(35, dtype=np.int32).reshape(5, 7)
    t = Tensor(x, device=device)
    value = -np.arange(x[index].size, dtype=np.int32).reshape(x[index].shape) - 1
    t[index] = Tensor(value, device=device)
    x[index] = value
    np.testing.assert_array_equal(t.numpy(), x)


def test_setitem_is_lazy():
    t = Tensor(np.zeros((4, 4), np.float32))
    GlobalCounters.reset()
    t[1:3, ::-1] = 2.0
    assert GlobalCounters.kernel_count == 0
    assert t.numpy()[1:3].tolist() == [[2.0] * 4] * 2 and GlobalCounters.kernel_count == 1


@pytest.mark.parametrize("device", DEVICES)
def test_assign_into_a_strided_view_writes_every_other_element(device):
    base = Tensor(np.zeros(6, np.int32), device=device)
    base[::-2].assign(Tensor([1, 2, 3], device=device)).realize()
    np.testing.assert_array_equal(base.numpy(), np.array([0, 3, 0, 2, 0, 1], np.int32))


def test_assign_never_writes_into_the_assigned_value():
    a = Tensor([1.0, 2.0, 3.0])
    b = Tensor.ones(3) * 1
    b.assign(a)
    b.assign(Tensor.zeros(3))
    b.realize()
    assert a.tolist() == [1.0, 2.0, 3.0] and b.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("device", DEVICES)
def test_reads_after_an_assign_see_it_and_writes_wait_for_earlier_reads(device):
    x = Tensor([1.0, 2.0], device=device)
    state = Tensor([0.0, 0.0], device=device)
    state.assign(state + x * 2)
    result = state + 1
    x.assign(x + 1).realize(state, result)
    assert x.tolist() == [2.0, 3.0] and state.tolist() == [2.0, 4.0] and result.tolist() == [3.0, 5.0]


def test_contiguous_of_a_whole_realized_buffer_runs_no_kernel():
    """A CONTIGUOUS of a realized buffer in its own layout (or a reshape of it) is that buffer: no copy kernel. One
    in another layout (a transpose) or of part of it (a slice) is still copied, and clone() always copies."""
    values = np.arange(12, dtype=np.float32)
    x = (Tensor(values) + 1).realize()
    GlobalCounters.reset()
    same = x.contiguous().realize()
    reshaped = x.reshape(3, 4).contiguous().realize()
    assert GlobalCounters.kernel_count == 0
    transposed = x.reshape(3, 4).T.contiguous().realize()
    sliced = x[2:8].contiguous().realize()
    cloned = x.clone().realize()
    assert GlobalCounters.kernel_count == 3
    np.testing.assert_array_equal(same.numpy(), values + 1)
    np.testing.assert_array_equal(reshaped.numpy(), (values + 1).reshape(3, 4))
    np.testing.assert_array_equal(transposed.numpy(), (values + 1).reshape(3, 4).T)
    np.testing.assert_array_equal(sliced.numpy(), values[2:8] + 1)
    x.assign(Tensor(values * 0)).realize()
    np.testing.assert_array_equal(cloned.numpy(), values + 1)  # fresh storage: the write to x does not reach it
