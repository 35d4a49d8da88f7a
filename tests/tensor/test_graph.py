"""Graph-level tests of the Tensor front end: shapes, dtypes, promotion and errors, checked when ops are built.

None of these run a kernel: they look only at the tensor graph (shapes come from `shape_of`, the contract).
Expected shapes come from numpy (applying the same op to an array of that shape); expected dtypes from the
numpy/torch promotion rules the project follows.
"""

import numpy as np
import pytest

from tg.codegen import Ops, dtypes
from tg.codegen.schedule.graph import ShapeError
from tg.tensor import Tensor

# ---------------------------------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((4, 1, 5), (3, 1)), ((), (2, 2)), ((0,), (1,)), ((1, 0), (3, 1))],
)
def test_binary_op_broadcasts_like_numpy(shape_a, shape_b):
    expected = (np.zeros(shape_a) + np.zeros(shape_b)).shape
    assert (Tensor.zeros(*shape_a) + Tensor.zeros(*shape_b)).shape == expected
    assert (Tensor.zeros(*shape_b) * Tensor.zeros(*shape_a)).shape == expected


def test_broadcast_mismatch_names_both_shapes():
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(4,\)"):
        Tensor.zeros(2, 3) + Tensor.zeros(4)


def test_where_broadcasts_condition_and_both_values():
    cond = Tensor.zeros(2, 1, dtype=dtypes.bool)
    assert cond.where(Tensor.zeros(3), 1.0).shape == (2, 3)


@pytest.mark.parametrize(
    ("shape", "new_shape"), [((2, 3), (3, 2)), ((2, 3), (-1,)), ((2, 3, 4), (4, -1)), ((0, 3), (3, 0)), ((), (1, 1))]
)
def test_reshape_infers_like_numpy(shape, new_shape):
    assert Tensor.zeros(*shape).reshape(new_shape).shape == np.zeros(shape).reshape(new_shape).shape


@pytest.mark.parametrize("bad", [(4,), (-1, -1), (5, -1), (-2, 3)])
def test_invalid_reshape_says_what_was_asked(bad):
    with pytest.raises(ShapeError, match=r"\(2, 3\)"):
        Tensor.zeros(2, 3).reshape(bad)


def test_movement_shapes_match_numpy():
    x = np.zeros((2, 3, 4))
    t = Tensor.zeros(2, 3, 4)
    assert t.permute(2, 0, 1).shape == x.transpose(2, 0, 1).shape
    assert t.transpose(0, 2).shape == x.swapaxes(0, 2).shape
    assert t.expand(5, 2, 3, 4).shape == np.broadcast_to(x, (5, 2, 3, 4)).shape
    assert t.pad(((1, 2), None, (0, 3))).shape == np.pad(x, ((1, 2), (0, 0), (0, 3))).shape
    assert t.shrink(((0, 1), None, (1, 3))).shape == x[0:1, :, 1:3].shape
    assert t.flip(0, 2).shape == x.shape
    assert t.flatten().shape == x.reshape(-1).shape
    assert t.flatten(1).shape == x.reshape(2, -1).shape
    assert t.unsqueeze(-1).shape == np.expand_dims(x, -1).shape
    assert Tensor.zeros(1, 3, 1).squeeze().shape == np.zeros((1, 3, 1)).squeeze().shape
    assert Tensor.zeros(1, 3, 1).squeeze(2).shape == np.zeros((1, 3, 1)).squeeze(2).shape
    assert Tensor.zeros(2, 5).T.shape == (5, 2)


def test_expand_of_a_non_one_axis_names_both_shapes():
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(2, 4\)"):
        Tensor.zeros(2, 3).expand(2, 4)


def test_shrink_out_of_bounds_says_what_was_asked():
    with pytest.raises(ShapeError, match=r"\(0, 5\)"):
        Tensor.zeros(3).shrink(((0, 5),))


def test_permute_needs_every_axis_once():
    with pytest.raises(ShapeError, match=r"\(0, 0\)"):
        Tensor.zeros(2, 3).permute(0, 0)


@pytest.mark.parametrize(
    "index",
    [
        0, -1, slice(None), slice(1, None), slice(None, None, -1), slice(None, None, 2), slice(-1, 0, -2),
        (1, 2), (Ellipsis, 1), (None, 0, Ellipsis, None), (slice(0, 0),), (slice(5, 1),), (1, slice(None, None, -3)),
        (Ellipsis,), (slice(None), None, slice(None, None, -1)),
    ],
)  # fmt: skip
def test_getitem_shape_matches_numpy(index):
    x = np.zeros((3, 4, 5))
    assert Tensor.zeros(3, 4, 5)[index].shape == x[index].shape


@pytest.mark.parametrize("index", [3, -4, (0, 4), (0, 0, 5)])
def test_out_of_range_index_says_what_was_asked(index):
    with pytest.raises(IndexError, match="out of range"):
        Tensor.zeros(3, 4, 5)[index]


def test_too_many_indices_is_an_index_error():
    with pytest.raises(IndexError, match="too many indices"):
        Tensor.zeros(3)[0, 0]


@pytest.mark.parametrize(
    ("axis", "keepdim"), [(None, False), (0, False), (1, True), (-1, False), ((0, 2), False), ((0, 2), True)]
)
def test_reduce_shape_matches_numpy(axis, keepdim):
    x = np.zeros((2, 3, 4))
    assert Tensor.zeros(2, 3, 4).sum(axis, keepdim).shape == x.sum(axis, keepdims=keepdim).shape
    assert Tensor.zeros(2, 3, 4).max(axis, keepdim).shape == x.max(axis, keepdims=keepdim).shape


def test_reduce_axis_out_of_range_is_an_index_error():
    with pytest.raises(IndexError, match="axis 3"):
        Tensor.zeros(2, 3, 4).sum(3)


# ---------------------------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (dtypes.int8, dtypes.uint8, dtypes.int16),
        (dtypes.int8, dtypes.int32, dtypes.int32),
        (dtypes.bool, dtypes.int8, dtypes.int8),
        (dtypes.int32, dtypes.float16, dtypes.float16),
        (dtypes.float16, dtypes.float32, dtypes.float32),
        (dtypes.float32, dtypes.float64, dtypes.float64),
        (dtypes.uint8, dtypes.float32, dtypes.float32),
    ],
)
def test_tensors_promote_to_their_least_upper_dtype(a, b, expected):
    assert (Tensor.ones(2, dtype=a) + Tensor.ones(2, dtype=b)).dtype is expected


@pytest.mark.parametrize(
    ("dtype", "scalar", "expected"),
    [
        (dtypes.int8, 1, dtypes.int8),
        (dtypes.uint8, 3, dtypes.uint8),
        (dtypes.int8, 1.5, dtypes.float32),
        (dtypes.float16, 2.0, dtypes.float16),
        (dtypes.float16, 2, dtypes.float16),
        (dtypes.bool, 1, dtypes.int32),
        (dtypes.bool, True, dtypes.bool),
        (dtypes.float64, 1.5, dtypes.float64),
    ],
)
def test_python_scalars_are_weak(dtype, scalar, expected):
    t = Tensor.ones(2, dtype=dtype)
    assert (t + scalar).dtype is expected
    assert (scalar * t).dtype is expected


def test_python_int_out_of_range_names_the_dtype():
    with pytest.raises(OverflowError, match="int8"):
        Tensor.ones(2, dtype=dtypes.int8) + 300


def test_comparisons_give_bool_and_true_division_gives_float():
    a = Tensor.ones(3, dtype=dtypes.int32)
    for result in (a < 1, a <= 1, a > a, a >= 1.5, a == 2, a != a):
        assert result.dtype is dtypes.bool
    assert (a / 2).dtype is dtypes.float32
    assert (a // 2).dtype is dtypes.int32
    assert a.exp().dtype is dtypes.float32
    assert Tensor.ones(3, dtype=dtypes.float16).exp().dtype is dtypes.float16


def test_python_data_dtypes_follow_tinygrad():
    assert Tensor(3).dtype is dtypes.int32
    assert Tensor(3.0).dtype is dtypes.float32
    assert Tensor(True).dtype is dtypes.bool
    assert Tensor.full((2,), 7).dtype is dtypes.int32
    assert Tensor.zeros(2).dtype is dtypes.float32


def test_reduction_accumulation_dtypes():
    assert Tensor.ones(4, dtype=dtypes.int8).sum().dtype is dtypes.int32
    assert Tensor.ones(4, dtype=dtypes.uint8).sum().dtype is dtypes.uint32
    assert Tensor.ones(4, dtype=dtypes.bool).sum().dtype is dtypes.int32
    assert Tensor.ones(4, dtype=dtypes.float16).sum().dtype is dtypes.float16
    assert Tensor.ones(4, dtype=dtypes.int8).sum(dtype=dtypes.int16).dtype is dtypes.int16
    assert Tensor.ones(4, dtype=dtypes.int8).max().dtype is dtypes.int8
    assert Tensor.ones(4, dtype=dtypes.int32).mean().dtype is dtypes.float32
    # a float16 sum accumulates in float32 inside the graph
    casts = [n for n in Tensor.ones(4, dtype=dtypes.float16).sum().uop.toposort() if n.op is Ops.REDUCE_AXIS]
    assert casts[0].dtype is dtypes.float32


@pytest.mark.parametrize("op", ["__and__", "__or__", "__xor__", "__lshift__", "__rshift__"])
def test_bitwise_ops_on_floats_name_the_dtype(op):
    with pytest.raises(TypeError, match="float"):
        getattr(Tensor.ones(2), op)(Tensor.ones(2))


def test_bool_subtraction_names_the_dtypes():
    with pytest.raises(TypeError, match="bool and bool"):
        Tensor.ones(2, dtype=dtypes.bool) - Tensor.ones(2, dtype=dtypes.bool)


def test_bitcast_between_item_sizes_names_both_dtypes():
    # a size-changing bitcast reshapes the last axis (torch's view(dtype)); 3 bytes cannot make an int32
    with pytest.raises(TypeError, match=r"uint8 \(1 bytes\) to int32 \(4 bytes\)"):
        Tensor.ones(3, dtype=dtypes.uint8).bitcast(dtypes.int32)


def test_assign_dtype_mismatch_names_both_dtypes():
    with pytest.raises(TypeError, match="assign dtype mismatch.*float.*int"):
        Tensor.empty(2).assign(Tensor.empty(2, dtype=dtypes.int32))


def test_assign_shape_mismatch_names_both_shapes():
    with pytest.raises(ShapeError, match=r"\(3,\).*\(2,\)"):
        Tensor.empty(2).assign(Tensor.empty(3))


# ---------------------------------------------------------------------------------------------------- laziness


def test_building_ops_creates_no_buffer_for_constants():
    x = (Tensor.ones(4, 4) * 2 + Tensor.full((4,), 3.0)).sum(1)
    assert not any(node.op is Ops.BUFFER for node in x.uop.toposort())


def test_assign_on_a_buffer_builds_an_assign_node():
    target = Tensor.empty(3)
    target += 1
    assert target.uop.op is Ops.ASSIGN
    assert target.uop.src[0].op is Ops.BUFFER


def test_bool_operand_to_python_is_ambiguous():
    with pytest.raises(TypeError, match="ambiguous"):
        bool(Tensor.ones(2) > 0)


def test_numpy_integers_index_like_ints():
    assert Tensor.zeros(3, 4)[np.int64(1), np.int32(-1)].shape == ()


def test_tensor_indices_select_elements():  # advanced indexing (tg.tensor.advanced_indexing)
    assert Tensor([5, 6, 7])[Tensor([2, 0])].tolist() == [7, 5]


def test_python_int_too_large_for_int32_makes_an_int64_tensor():
    assert Tensor(2**40).dtype is dtypes.int64 and Tensor(2**40).item() == 2**40  # torch's default int
    assert Tensor(2**40, dtype=dtypes.int64).dtype is dtypes.int64


def test_assign_into_an_expanded_view_is_an_error():
    with pytest.raises(ValueError, match="expanded"):
        Tensor.empty(1, 3).expand(2, 3).assign(Tensor.zeros(2, 3))


def test_assign_into_a_padded_view_is_an_error():
    with pytest.raises(ValueError, match="padded"):
        Tensor.empty(5).pad(((1, 0),)).assign(Tensor.zeros(6))
    # a strided slice pads its axis internally but never shows the padding: writable (numpy: a[::2] = 0)
    t = Tensor.ones(5).contiguous()
    t[::2].assign(Tensor.zeros(3))
    assert t.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    u = Tensor.ones(6).contiguous()
    u[::2].assign(Tensor.zeros(3))
    assert u.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]


def test_default_float_comes_from_the_environment():
    import os
    import subprocess
    import sys

    script = (
        "from tg.tensor import Tensor, dtypes\n"
        "print(Tensor([1.5]).dtype, (Tensor([1, 2]) / 2).dtype, Tensor([1]).exp().dtype, Tensor.zeros(1).dtype)\n"
    )
    environment = {**os.environ, "DEFAULT_FLOAT": "float16"}
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["dtypes.half"] * 4
