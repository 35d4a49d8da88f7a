"""The GATHER node: reading by index tensors costs one load per element, not a comparison with every position
(issue 30: "indexing with two index tensors costs O(index x source) operations")."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.flags import Context
from tg.codegen.pipeline import CodegenFlags, kernel_to_program
from tg.codegen.render.c import CRenderer
from tg.codegen.schedule.graph import ShapeError
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.spec import TENSOR_SPEC
from tg.tensor import Tensor, TinyJit

from .devices import DEVICES


def _random(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _kernels(tensor: Tensor) -> list[UOp]:
    return [item.ast for item in create_schedule((tensor.uop,)).items if isinstance(item, KernelCall)]


def _ops_of_only_kernel(tensor: Tensor) -> int:
    (ast,) = _kernels(tensor)
    return kernel_to_program(ast, CRenderer(), CodegenFlags(noopt=True)).ops


def test_two_index_tensors_cost_the_same_whatever_the_source_size() -> None:
    rows, cols = np.array([3, 0, 7, 5] * 25), np.array([1, 6, 2, 7] * 25)
    small = Tensor(_random((8, 8))).realize()
    large = Tensor(_random((512, 512))).realize()
    small_ops = _ops_of_only_kernel(small[Tensor(rows), Tensor(cols)])
    assert small_ops == _ops_of_only_kernel(large[Tensor(rows), Tensor(cols)])
    # per element: the two bounds checks and the address; the one-hot form it replaces did 8 * 8 compares
    assert small_ops <= 10 * len(rows)


def test_the_gather_kernel_has_no_reduction_and_one_load_of_the_source_per_element() -> None:
    source = Tensor(_random((64, 32))).realize()
    (ast,) = _kernels(source[Tensor([1, 63, 5]), Tensor([0, 31, 2])])
    assert not [u for u in ast.toposort() if u.op is Ops.REDUCE]
    loads = [u for u in ast.toposort() if u.op is Ops.LOAD]
    assert len(loads) == 3  # the two index tensors and the source


@pytest.mark.parametrize("device", DEVICES)
def test_gather_reads_out_of_range_positions_as_zero_and_wraps_negative_ones(device: str) -> None:
    x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=device)
    index = Tensor([[0, 1, 9], [-1, -2, -9]], device=device)
    assert x.gather(1, index).tolist() == [[1.0, 2.0, 0.0], [6.0, 5.0, 0.0]]


@pytest.mark.parametrize("device", DEVICES)
def test_gather_with_a_computed_source_and_computed_indices_matches_numpy(device: str) -> None:
    x, y = _random((5, 6), 1), _random((5, 6), 2)
    index = np.random.default_rng(3).integers(0, 5, size=(7, 6))
    result = (Tensor(x, device=device) * 2 + Tensor(y, device=device)).gather(0, Tensor(index, device=device) % 5)
    np.testing.assert_allclose(result.numpy(), np.take_along_axis(x * 2 + y, index, 0), rtol=1e-6)


def _reductions(ast: UOp) -> list[UOp]:
    return [u for u in ast.toposort() if u.op is Ops.REDUCE]


def test_a_reduction_gathered_more_times_than_it_has_elements_gets_its_own_kernel() -> None:
    x = _random((64, 48), 4)
    rows = np.random.default_rng(5).integers(0, 64, size=200)
    picked = Tensor(x).realize().sum(1)[Tensor(rows)]
    *first, gather_kernel = _kernels(picked)
    assert len(first) == 1 and _reductions(first[0])
    assert not _reductions(gather_kernel)  # read from memory, not summed again for each of the 200 reads
    np.testing.assert_allclose(picked.numpy(), x.sum(1)[rows], rtol=1e-5)


def test_a_reduction_gathered_at_a_few_positions_is_computed_there_only() -> None:
    x = _random((64, 48), 4)
    rows = np.array([3, 60, 0])
    picked = Tensor(x).realize().sum(1)[Tensor(rows)]
    (kernel,) = _kernels(picked)  # three sums of 48, not 64 of them stored first
    assert _reductions(kernel)
    np.testing.assert_allclose(picked.numpy(), x.sum(1)[rows], rtol=1e-5)


def test_the_gradient_of_two_index_reads_adds_every_read_back_to_its_position() -> None:
    x = _random((6, 7, 5), 5)
    rows, cols = np.array([[0, 5, -1], [2, 2, 3]]), np.array([1, 4, 1])
    weights = _random((2, 3, 7), 6)
    t = Tensor(x, requires_grad=True)
    (t[Tensor(rows), :, Tensor(cols)] * Tensor(weights)).sum().backward()
    expected = np.zeros_like(x)
    for a in range(2):
        for b in range(3):
            expected[rows[a, b], :, cols[b]] += weights[a, b]  # repeated positions add up (2, :, 1 twice)
    np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-6)


def test_the_gradient_of_gather_matches_a_scatter_add() -> None:
    x = _random((4, 3), 7)
    index = np.array([[0, 3, 3], [3, 3, 1], [2, 0, 0]])
    t = Tensor(x, requires_grad=True)
    t.gather(0, Tensor(index)).sum().backward()
    expected = np.zeros_like(x)
    np.add.at(expected, (index, np.arange(3)[None, :].repeat(3, 0)), 1.0)
    np.testing.assert_array_equal(t.grad.numpy(), expected)


def test_a_jitted_read_by_index_follows_new_index_values() -> None:
    x = _random((16, 9), 8)
    source = Tensor(x).realize()
    read = TinyJit(lambda rows, cols: (source[rows, cols] * 1.0).realize())
    for step in range(4):
        rows = np.random.default_rng(step).integers(0, 16, size=5)
        cols = np.random.default_rng(step + 10).integers(0, 9, size=5)
        got = read(Tensor(rows.astype(np.int32)).realize(), Tensor(cols.astype(np.int32)).realize())
        np.testing.assert_array_equal(got.numpy(), x[rows, cols])


def test_spec_checks_gather_nodes() -> None:
    source, index = Tensor([1.0, 2.0]), Tensor([1, 0])
    good = UOp(Ops.GATHER, dtypes.float32, (source.uop, index.uop), (0,))
    assert TENSOR_SPEC[Ops.GATHER](good)
    float_index = UOp(Ops.GATHER, dtypes.float32, (source.uop, source.uop), (0,))
    assert not TENSOR_SPEC[Ops.GATHER](float_index)
    no_index = UOp(Ops.GATHER, dtypes.float32, (source.uop,), ())
    assert not TENSOR_SPEC[Ops.GATHER](no_index)
    with Context(SPEC=2):
        assert (source[index] + 1).tolist() == [3.0, 2.0]


def test_a_gather_whose_index_shape_disagrees_on_another_axis_is_a_shape_error() -> None:
    source, index = Tensor(_random((3, 4))), Tensor(np.zeros((2, 5), dtype=np.int32))
    with pytest.raises(ShapeError, match="GATHER along axes"):
        _ = source._wrap(UOp(Ops.GATHER, source.dtype, (source.uop, index.uop), (0,))).shape


@pytest.mark.parametrize("count", [3, 16, 37])
def test_an_index_made_from_a_comparison_reads_the_right_elements(count: int) -> None:
    """Regression: gcc 12 at -O3 -march=native vectorized the loop computing such an index and read lane 0 (and
    others) at -1 instead of 1 (tests/tensor's Appendix B case, [0, 1, 2] for [2, 1, 2] on the CI's gcc leg)."""
    values = np.where(np.arange(count) % 3 == 1, 0.0, 0.5).astype(np.float32)
    index = Tensor(values).cast(dtypes.bool).cast(dtypes.int32)
    expected = np.array([1, 2, 3], dtype=np.int32)[(values != 0).astype(np.int32)]
    np.testing.assert_array_equal(Tensor([1, 2, 3])[index].numpy(), expected)


def test_the_c_source_keeps_a_loaded_index_out_of_the_vectorizer() -> None:
    source = Tensor([1.0, 2.0, 3.0]).realize()
    (ast,) = _kernels(source[Tensor([0.5, 0.0, 2.0]).cast(dtypes.bool).cast(dtypes.int32)])
    program = kernel_to_program(ast, CRenderer(), CodegenFlags())
    assert '__asm__("" : "+r"(' in program.src
