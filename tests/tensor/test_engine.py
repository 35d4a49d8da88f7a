"""The realize engine on tensor-graph nodes built by hand (no Tensor needed): results against numpy, kernel
counts of fused graphs, the schedule cache, and the engine API's contract."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.dtype import DType, from_numpy
from tg.codegen.schedule.graph import ReduceArg, const_node, shape_of
from tg.codegen.schedule.schedule import schedule_stats
from tg.hcq.engine import GlobalCounters, buffer_from_bytes, read_bytes, realize

from .devices import DEVICES


def tensor(array: np.ndarray, device: str = "CPU") -> UOp:
    array = np.ascontiguousarray(array)
    buf = buffer_from_bytes(array.tobytes(), from_numpy(array.dtype), device)
    return UOp(Ops.RESHAPE, buf.dtype, (buf,), array.shape)


def to_numpy(node: UOp) -> np.ndarray:
    np_dtype = np.dtype(node.dtype.fmt)
    return np.frombuffer(read_bytes(node), dtype=np_dtype).reshape(shape_of(node))


def full(value: object, shape: tuple[int, ...], dtype: DType, device: str = "CPU") -> UOp:
    scalar = const_node(value, dtype, device)
    ones = UOp(Ops.RESHAPE, dtype, (scalar,), (1,) * len(shape))
    return UOp(Ops.EXPAND, dtype, (ones,), shape)


def expand(node: UOp, shape: tuple[int, ...]) -> UOp:
    return UOp(Ops.EXPAND, node.dtype, (node,), shape)


def reshape(node: UOp, shape: tuple[int, ...]) -> UOp:
    return UOp(Ops.RESHAPE, node.dtype, (node,), shape)


def reduce(node: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
    return UOp(Ops.REDUCE_AXIS, node.dtype, (node,), ReduceArg(op, axes))


def alu(op: Ops, *srcs: UOp) -> UOp:
    dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else srcs[-1].dtype
    return UOp(op, dtype, srcs)


def kernels_to_realize(*nodes: UOp) -> int:
    GlobalCounters.reset()
    realize(*nodes)
    return GlobalCounters.kernel_count


rng = np.random.default_rng(0)


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_chain_with_broadcast_matches_numpy(device: str) -> None:
    a, b, c = rng.random((3, 4), np.float32), rng.random((1, 4), np.float32), rng.random((3, 1), np.float32)
    A, B, C = tensor(a, device), expand(tensor(b, device), (3, 4)), expand(tensor(c, device), (3, 4))
    result = alu(Ops.MAX, alu(Ops.ADD, alu(Ops.MUL, A, B), C), full(0.5, (3, 4), dtypes.float32, device))
    np.testing.assert_allclose(to_numpy(result), np.maximum(a * b + c, 0.5), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_sum_over_each_axis_matches_numpy(device: str) -> None:
    a = rng.random((5, 6, 7), np.float32)
    A = tensor(a, device)
    for axes in [(0,), (1,), (2,), (0, 2), (0, 1, 2)]:
        expected = a.sum(axis=axes, keepdims=True)
        np.testing.assert_allclose(to_numpy(reduce(A, Ops.ADD, axes)), expected, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_int32_elementwise_and_reduce_wrap_like_numpy(device: str) -> None:
    a = rng.integers(-(2**31), 2**31 - 1, (4, 8), dtype=np.int32)
    b = rng.integers(-(2**31), 2**31 - 1, (4, 8), dtype=np.int32)
    A, B = tensor(a, device), tensor(b, device)
    np.testing.assert_array_equal(to_numpy(alu(Ops.MUL, A, B)), a * b)
    np.testing.assert_array_equal(
        to_numpy(reduce(alu(Ops.ADD, A, B), Ops.ADD, (1,))), (a + b).sum(1, keepdims=True, dtype=np.int32)
    )
    np.testing.assert_array_equal(to_numpy(reduce(A, Ops.MAX, (0,))), a.max(0, keepdims=True))


@pytest.mark.parametrize("device", DEVICES)
def test_permute_and_reshape_read_through_index_arithmetic(device: str) -> None:
    a = rng.random((2, 3, 4), np.float32)
    A = tensor(a, device)
    permuted = UOp(Ops.PERMUTE, dtypes.float32, (A,), (2, 0, 1))
    np.testing.assert_array_equal(to_numpy(permuted), a.transpose(2, 0, 1))
    merged = reshape(permuted, (4, 6))
    np.testing.assert_array_equal(to_numpy(merged), a.transpose(2, 0, 1).reshape(4, 6))
    doubled = alu(Ops.ADD, merged, merged)
    np.testing.assert_array_equal(to_numpy(reshape(doubled, (8, 3))), (2 * a.transpose(2, 0, 1)).reshape(8, 3))


def test_fused_elementwise_is_one_kernel() -> None:
    a, b, c = (tensor(rng.random((16, 16), np.float32)) for _ in range(3))
    assert kernels_to_realize(alu(Ops.ADD, a, alu(Ops.MUL, b, c))) == 1


def test_sum_of_elementwise_is_one_kernel() -> None:
    a, b = (tensor(rng.random((16, 16), np.float32)) for _ in range(2))
    assert kernels_to_realize(reduce(alu(Ops.ADD, a, b), Ops.ADD, (0, 1))) == 1


def softmax(x: UOp) -> UOp:
    shape = shape_of(x)
    largest = expand(reduce(x, Ops.MAX, (len(shape) - 1,)), shape)
    shifted = alu(Ops.ADD, x, alu(Ops.NEG, largest))
    exps = alu(Ops.EXP2, alu(Ops.MUL, shifted, full(1 / math.log(2), shape, dtypes.float32)))
    total = expand(reduce(exps, Ops.ADD, (len(shape) - 1,)), shape)
    return alu(Ops.MUL, exps, alu(Ops.RECIPROCAL, total))


def test_softmax_is_at_most_three_kernels_and_correct() -> None:
    x = rng.standard_normal((8, 32)).astype(np.float32)
    out = softmax(tensor(x))
    assert kernels_to_realize(out) <= 3
    expected = np.exp(x - x.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-5, atol=1e-7)


def test_same_graph_on_new_buffers_hits_the_schedule_cache() -> None:
    def graph() -> UOp:
        a, b = (tensor(rng.random((7, 9), np.float32)) for _ in range(2))
        return reduce(alu(Ops.MUL, a, b), Ops.ADD, (1,))

    realize(graph())
    hits = schedule_stats.hits
    node = graph()
    (result,) = realize(node)
    assert schedule_stats.hits == hits + 1
    assert to_numpy(result).shape == (7, 1)


def test_a_launch_outside_a_capture_builds_no_capture_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel launch would otherwise build a KernelLaunch record only for `record` to drop it."""
    import tg.hcq.engine.run as run_module

    def refuse(*args: object) -> None:
        raise AssertionError("a capture record was built outside a capture")

    monkeypatch.setattr(run_module, "KernelLaunch", refuse)
    data = rng.random((3, 4), np.float32)
    np.testing.assert_array_equal(to_numpy(alu(Ops.MUL, tensor(data), tensor(data))), data * data)


def test_cached_schedule_computes_with_the_new_inputs() -> None:
    first, second = rng.random((5, 5), np.float32), rng.random((5, 5), np.float32)
    for data in (first, second):
        node = alu(Ops.MUL, tensor(data), tensor(data))
        np.testing.assert_array_equal(to_numpy(node), data * data)


def test_realize_returns_buffers_and_keeps_views_as_they_are() -> None:
    a = tensor(rng.random((4, 4), np.float32))
    view = UOp(Ops.PERMUTE, dtypes.float32, (a,), (1, 0))
    assert realize(view) == (view,)
    (result,) = realize(alu(Ops.ADD, a, a))
    assert result.op is Ops.RESHAPE and result.src[0].op is Ops.BUFFER and shape_of(result) == (4, 4)


def test_nothing_runs_before_realize() -> None:
    a = tensor(rng.random((4, 4), np.float32))
    GlobalCounters.reset()
    node = alu(Ops.ADD, a, a)
    assert GlobalCounters.kernel_count == 0
    to_numpy(node)
    assert GlobalCounters.kernel_count == 1


@pytest.mark.parametrize("device", DEVICES)
def test_graph_thousands_of_ops_deep_needs_no_deep_recursion(device: str) -> None:
    node = tensor(np.zeros(4, np.float32), device)
    one = full(1.0, (4,), dtypes.float32, device)
    for _ in range(3000):
        node = alu(Ops.ADD, node, one)
    np.testing.assert_array_equal(to_numpy(node), np.full(4, 3000, np.float32))


def test_one_kernel_cannot_mix_devices() -> None:
    a, b = tensor(np.ones(4, np.float32), "CPU"), tensor(np.ones(4, np.float32), "PYTHON")
    with pytest.raises(ValueError, match="CPU.*PYTHON|PYTHON.*CPU"):
        realize(alu(Ops.ADD, a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("shape", "axes"), [((6, 8), (0,)), ((3, 5, 16), (0, 1)), ((7, 4, 12), (1,)), ((9, 256 * 2), (0,))]
)
def test_reductions_across_rows_use_lanes_and_match_numpy(device: str, shape: tuple, axes: tuple) -> None:
    a = rng.standard_normal(shape).astype(np.float32)
    A = tensor(a, device)
    summed = reduce(A, Ops.ADD, axes)
    np.testing.assert_allclose(to_numpy(alu(Ops.MUL, summed, summed)), a.sum(axes, keepdims=True) ** 2, rtol=1e-4)
    np.testing.assert_array_equal(to_numpy(reduce(A, Ops.MAX, axes)), a.max(axes, keepdims=True))


def test_device_asking_for_an_unknown_renderer_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown renderer 'NIR'; known renderers: .*PTX, HIP"):
        realize(alu(Ops.ADD, tensor(np.ones(4, np.float32), "NULL:NIR"), tensor(np.ones(4, np.float32), "NULL:NIR")))
    a = tensor(np.ones(4, np.float32), "NULL:HIP")  # HIP renders (source only) on NULL
    realize(alu(Ops.ADD, a, a))


def test_memory_lives_exactly_as_long_as_a_node_that_reads_it() -> None:
    import gc

    from tg.hcq.engine import buffer_of

    (result,) = realize(alu(Ops.ADD, tensor(np.ones(8, np.float32)), tensor(np.ones(8, np.float32))))
    memory = buffer_of(result if result.op is Ops.BUFFER else result.src[0])
    view = reshape(result, (2, 4))
    del result
    gc.collect()
    assert memory.is_allocated()  # `view` still reads it
    np.testing.assert_array_equal(to_numpy(view), np.full((2, 4), 2, np.float32))
    del view
    gc.collect()
    assert not memory.is_allocated()
