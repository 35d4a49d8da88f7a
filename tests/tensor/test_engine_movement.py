"""Movement ops, ASSIGN, COPY, CONTIGUOUS, empty tensors and the NULL device through the engine."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.flags import Context
from tg.codegen.schedule.graph import shape_of
from tg.hcq.engine import GlobalCounters, read_bytes, realize

from .devices import DEVICES
from .test_engine import alu, expand, full, reduce, reshape, tensor, to_numpy

rng = np.random.default_rng(2)


def movement(op: Ops, node: UOp, arg: object) -> UOp:
    return UOp(op, node.dtype, (node,), arg)


@pytest.mark.parametrize("device", DEVICES)
def test_pad_fills_zero_around_the_source(device: str) -> None:
    a = rng.random((3, 4), np.float32)
    padded = movement(Ops.PAD, tensor(a, device), ((1, 2), (0, 3)))
    np.testing.assert_array_equal(to_numpy(padded), np.pad(a, ((1, 2), (0, 3))))


@pytest.mark.parametrize("device", DEVICES)
def test_pad_of_a_computed_value_and_sum_over_padding(device: str) -> None:
    a = rng.random((3, 4), np.float32)
    A = tensor(a, device)
    padded = movement(Ops.PAD, alu(Ops.MUL, A, A), ((2, 0), (1, 1)))
    np.testing.assert_allclose(
        to_numpy(reduce(padded, Ops.ADD, (0,))), np.pad(a * a, ((2, 0), (1, 1))).sum(0, keepdims=True), rtol=1e-6
    )


@pytest.mark.parametrize("device", DEVICES)
def test_shrink_flip_and_permute_compose(device: str) -> None:
    a = rng.random((5, 6, 7), np.float32)
    node = movement(Ops.SHRINK, tensor(a, device), ((1, 4), (0, 6), (2, 7)))
    node = movement(Ops.FLIP, node, (True, False, True))
    node = movement(Ops.PERMUTE, node, (2, 0, 1))
    np.testing.assert_array_equal(to_numpy(node), a[1:4, :, 2:7][::-1, :, ::-1].transpose(2, 0, 1))


@pytest.mark.parametrize("device", DEVICES)
def test_negative_step_slice_as_flip_then_strided_reshape(device: str) -> None:
    a = rng.random((10,), np.float32)
    flipped = movement(Ops.FLIP, tensor(a, device), (True,))  # a[::-2] == flip, reshape (5, 2), take column 0
    strided = movement(Ops.SHRINK, reshape(flipped, (5, 2)), ((0, 5), (0, 1)))
    np.testing.assert_array_equal(to_numpy(reshape(strided, (5,))), a[::-2])


@pytest.mark.parametrize("device", DEVICES)
def test_reshape_that_splits_and_merges_axes(device: str) -> None:
    a = rng.random((4, 6), np.float32)
    node = reshape(movement(Ops.PERMUTE, tensor(a, device), (1, 0)), (3, 8))
    np.testing.assert_array_equal(to_numpy(node), a.T.reshape(3, 8))


@pytest.mark.parametrize("device", DEVICES)
def test_broadcast_of_a_reduction_gets_its_own_kernel(device: str) -> None:
    a = rng.random((4, 5), np.float32)
    A = tensor(a, device)
    centered = alu(Ops.ADD, A, alu(Ops.NEG, expand(reduce(A, Ops.MAX, (0,)), (4, 5))))
    GlobalCounters.reset()
    np.testing.assert_allclose(to_numpy(centered), a - a.max(0, keepdims=True))
    assert GlobalCounters.kernel_count == 2
    # a row reduction (the last axis) broadcast along its row fuses: computed once per row (fuse_row_reduction)
    row_centered = alu(Ops.ADD, A, alu(Ops.NEG, expand(reduce(A, Ops.MAX, (1,)), (4, 5))))
    GlobalCounters.reset()
    np.testing.assert_allclose(to_numpy(row_centered), a - a.max(1, keepdims=True))
    assert GlobalCounters.kernel_count == 1


@pytest.mark.parametrize("device", DEVICES)
def test_empty_tensors_need_no_kernel(device: str) -> None:
    a = np.zeros((0, 3), np.float32)
    A = tensor(a, device)
    GlobalCounters.reset()
    assert to_numpy(alu(Ops.ADD, A, A)).shape == (0, 3)
    assert GlobalCounters.kernel_count == 0
    np.testing.assert_array_equal(to_numpy(reduce(A, Ops.ADD, (0,))), np.zeros((1, 3), np.float32))
    np.testing.assert_array_equal(to_numpy(reduce(A, Ops.MAX, (0,))), np.full((1, 3), -np.inf, np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_constant_tensor_realizes_to_a_filled_buffer(device: str) -> None:
    np.testing.assert_array_equal(to_numpy(full(7, (2, 3), dtypes.int32, device)), np.full((2, 3), 7, np.int32))
    np.testing.assert_array_equal(to_numpy(full(True, (2,), dtypes.bool, device)), np.ones(2, np.bool_))


@pytest.mark.parametrize("device", DEVICES)
def test_assign_writes_into_the_target_buffer(device: str) -> None:
    a = rng.random((3, 4), np.float32)
    target = tensor(a, device)
    (result,) = realize(UOp(Ops.ASSIGN, dtypes.float32, (target, alu(Ops.ADD, target, target))))
    assert result.src[0] is target.src[0]  # the same buffer, now holding the new values
    np.testing.assert_array_equal(to_numpy(target), a + a)


@pytest.mark.parametrize("device", DEVICES)
def test_assign_into_a_slice_leaves_the_rest(device: str) -> None:
    a = rng.random((4, 4), np.float32)
    target = tensor(a, device)
    view = movement(Ops.SHRINK, target, ((1, 3), (0, 4)))
    realize(UOp(Ops.ASSIGN, dtypes.float32, (view, full(0.0, (2, 4), dtypes.float32, device))))
    expected = a.copy()
    expected[1:3] = 0
    np.testing.assert_array_equal(to_numpy(target), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_assign_of_its_own_flip_reads_before_it_writes(device: str) -> None:
    a = rng.random((6,), np.float32)
    target = tensor(a, device)
    realize(UOp(Ops.ASSIGN, dtypes.float32, (target, movement(Ops.FLIP, target, (True,)))))
    np.testing.assert_array_equal(to_numpy(target), a[::-1])


@pytest.mark.parametrize("device", DEVICES)
def test_readers_of_the_old_value_run_before_the_assign(device: str) -> None:
    a = rng.random((5,), np.float32)
    target = tensor(a, device)
    old_doubled = alu(Ops.ADD, target, target)
    assign = UOp(Ops.ASSIGN, dtypes.float32, (target, full(1.0, (5,), dtypes.float32, device)))
    doubled, _ = realize(old_doubled, assign)
    np.testing.assert_array_equal(to_numpy(doubled), a + a)
    np.testing.assert_array_equal(to_numpy(target), np.ones(5, np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_contiguous_makes_a_copy_with_its_own_buffer(device: str) -> None:
    a = rng.random((3, 4), np.float32)
    A = tensor(a, device)
    (copy,) = realize(UOp(Ops.CONTIGUOUS, dtypes.float32, (movement(Ops.PERMUTE, A, (1, 0)),)))
    assert copy.src[0] is not A.src[0]
    np.testing.assert_array_equal(to_numpy(copy), a.T)


def test_copy_between_devices() -> None:
    a = rng.random((3, 4), np.float32)
    on_python = UOp(
        Ops.COPY, dtypes.float32, (movement(Ops.PERMUTE, tensor(a, "CPU"), (1, 0)), UOp(Ops.DEVICE, arg="PYTHON"))
    )
    (result,) = realize(on_python)
    assert result.src[0].src[0].arg == "PYTHON"
    np.testing.assert_array_equal(to_numpy(alu(Ops.ADD, result, result)), a.T + a.T)


def test_null_device_compiles_and_runs_nothing_and_refuses_to_read() -> None:
    a = tensor(np.ones((4, 4), np.float32), "NULL")
    GlobalCounters.reset()
    (result,) = realize(alu(Ops.MUL, a, a))
    assert GlobalCounters.kernel_count == 1
    with pytest.raises(RuntimeError, match="NULL"):
        read_bytes(result)
    with Context(NULL_ALLOW_COPYOUT=1):
        assert len(read_bytes(result)) == 64


def test_debug_2_prints_one_line_per_kernel_and_4_the_source(capsys: pytest.CaptureFixture[str]) -> None:
    a = tensor(rng.random((8, 8), np.float32))
    node = reduce(alu(Ops.MUL, a, a), Ops.ADD, (1,))
    with Context(DEBUG=2):
        realize(node)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("***")]
    assert len(lines) == 1 and "r_8_8" in lines[0] and "GFLOP/s" in lines[0] and "GB/s" in lines[0]
    with Context(DEBUG=4):
        realize(reduce(alu(Ops.MUL, a, alu(Ops.ADD, a, a)), Ops.MAX, (0,)))
    out = capsys.readouterr().out
    assert "r_8_8(" in out and "***" in out  # the C function or the LLVM one (DEV=CPU:LLVM)


def test_read_bytes_of_a_view_returns_it_contiguous() -> None:
    a = rng.random((3, 5), np.float32)
    view = movement(Ops.PERMUTE, tensor(a), (1, 0))
    data = np.frombuffer(read_bytes(view), np.float32).reshape(shape_of(view))
    np.testing.assert_array_equal(data, a.T)


@pytest.mark.parametrize("device", DEVICES)
def test_chained_assigns_apply_in_order(device: str) -> None:
    a = rng.random((4,), np.float32)
    target = tensor(a, device)
    first = UOp(Ops.ASSIGN, dtypes.float32, (target, alu(Ops.ADD, target, target)))
    second = UOp(Ops.ASSIGN, dtypes.float32, (first, alu(Ops.MUL, first, first)))
    GlobalCounters.reset()
    (result,) = realize(second)
    assert GlobalCounters.kernel_count == 2
    np.testing.assert_array_equal(to_numpy(result), (a + a) * (a + a))
    np.testing.assert_array_equal(to_numpy(target), (a + a) * (a + a))


def test_copy_of_an_assign_into_a_slice_copies_only_the_slice() -> None:
    a = rng.random((4, 3), np.float32)
    target = tensor(a)
    view = movement(Ops.SHRINK, target, ((1, 3), (0, 3)))
    assign = UOp(Ops.ASSIGN, dtypes.float32, (view, full(5.0, (2, 3), dtypes.float32)))
    (moved,) = realize(UOp(Ops.COPY, dtypes.float32, (assign, UOp(Ops.DEVICE, arg="PYTHON"))))
    np.testing.assert_array_equal(to_numpy(moved), np.full((2, 3), 5.0, np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_reading_an_assign_into_a_slice_reads_the_slice(device: str) -> None:
    a = rng.random((4, 3), np.float32)
    target = tensor(a, device)
    view = movement(Ops.SHRINK, target, ((2, 4), (0, 3)))
    assign = UOp(Ops.ASSIGN, dtypes.float32, (view, alu(Ops.ADD, view, view)))
    np.testing.assert_array_equal(to_numpy(alu(Ops.MUL, assign, assign)), (2 * a[2:]) ** 2)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_that_only_reads_padding_drops_the_unread_buffer(device: str) -> None:
    a, b = rng.random((4,), np.float32), rng.random((2,), np.float32)
    only_padding = movement(Ops.SHRINK, movement(Ops.PAD, tensor(a, device), ((0, 3),)), ((5, 7),))
    np.testing.assert_array_equal(to_numpy(alu(Ops.ADD, only_padding, tensor(b, device))), b)


@pytest.mark.parametrize("device", DEVICES)
def test_padding_a_zero_constant(device: str) -> None:
    padded = movement(Ops.PAD, full(0.0, (2,), dtypes.float32, device), ((1, 1),))
    np.testing.assert_array_equal(to_numpy(padded), np.zeros(4, np.float32))


def test_realizing_the_same_assign_twice_applies_it_twice() -> None:
    target = tensor(np.zeros(3, np.float32))
    increment = UOp(Ops.ASSIGN, dtypes.float32, (target, alu(Ops.ADD, target, full(1.0, (3,), dtypes.float32))))
    realize(increment)
    realize(increment)
    np.testing.assert_array_equal(to_numpy(target), np.full(3, 2.0, np.float32))


def test_assign_to_an_expanded_view_is_refused() -> None:
    target = movement(Ops.EXPAND, reshape(tensor(np.zeros(3, np.float32)), (1, 3)), (2, 3))
    with pytest.raises(ValueError, match="expanded view"):
        realize(UOp(Ops.ASSIGN, dtypes.float32, (target, full(1.0, (2, 3), dtypes.float32))))
