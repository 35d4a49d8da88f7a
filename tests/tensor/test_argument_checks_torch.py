"""Issue 30 item 10: arguments that torch rejects are rejected when the op is built, with torch's exception type
(torch's C++ checks raise RuntimeError; indexing IndexError; unsupported modes NotImplementedError; wrong argument
types TypeError). tg's argument errors that were ValueErrors stay ValueErrors too (ArgumentError is both), so
code written against either still catches them.

Each case: the call, the exception type torch raises for the same call, and words of tg's message."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor


def x() -> Tensor:
    return Tensor.ones(2, 3)


CASES: dict[str, tuple[Callable[[], object], type[BaseException], str]] = {
    "clip_without_bounds": (lambda: x().clip(None, None), RuntimeError, "min.*max"),
    "clamp_without_bounds": (lambda: x().clamp(), RuntimeError, "min.*max"),
    "flip_repeated_axis": (lambda: x().flip((0, 0)), RuntimeError, "more than once"),
    "one_hot_negative_class": (lambda: Tensor([-1, 1]).one_hot(), RuntimeError, "non-negative"),
    "one_hot_num_classes_below_minus_one": (lambda: Tensor([0, 1]).one_hot(-2), RuntimeError, "num_classes"),
    "one_hot_of_floats": (lambda: Tensor([1.0]).one_hot(3), RuntimeError, "integer"),
    "linspace_bool": (lambda: Tensor.linspace(0, 1, 3, dtype=dtypes.bool), RuntimeError, "bool"),
    "linspace_negative_steps": (lambda: Tensor.linspace(0, 1, -1), RuntimeError, "steps"),
    "arange_zero_step": (lambda: Tensor.arange(0, 3, 0), RuntimeError, "step"),
    "sum_repeated_axis": (lambda: x().sum((0, 0)), RuntimeError, "repeated"),
    "split_size_zero": (lambda: x().split(0), RuntimeError, "split size"),
    "chunk_zero": (lambda: x().chunk(0), RuntimeError, "chunk"),
    "unfold_step_zero": (lambda: x().unfold(0, 1, 0), RuntimeError, "step"),
    "topk_k_too_large": (lambda: x().topk(5), RuntimeError, "k=5"),
    "multinomial_3d": (lambda: Tensor.ones(2, 2, 2).multinomial(), RuntimeError, "1-d or 2-d"),
    "multinomial_too_many": (lambda: Tensor.ones(3).multinomial(4), RuntimeError, "without replacement"),
    "randint_empty_range": (lambda: Tensor.randint(3, low=5, high=2), RuntimeError, "low < high"),
    "uniform_low_above_high": (lambda: Tensor.uniform(2, low=1.0, high=0.0), RuntimeError, "low <= high"),
    "avg_pool_kernel_zero": (lambda: Tensor.ones(1, 1, 4, 4).avg_pool2d(kernel_size=0), RuntimeError, "kernel_size"),
    "max_pool_stride_zero": (lambda: Tensor.ones(1, 1, 4, 4).max_pool2d(stride=0), RuntimeError, "stride"),
    "roll_shifts_and_dims_differ": (lambda: x().roll((1, 2), (0,)), RuntimeError, "one shift per dim"),
    "diagonal_same_axes": (lambda: x().diagonal(dim1=0, dim2=0), RuntimeError, "different axes"),
    "masked_fill_float_mask": (lambda: x().masked_fill(Tensor.ones(2, 3), 0.0), RuntimeError, "bool"),
    "cross_entropy_label_smoothing": (
        lambda: x().cross_entropy(Tensor([0, 1]), label_smoothing=2.0),
        RuntimeError,
        "label_smoothing",
    ),
    "item_of_many": (lambda: x().item(), RuntimeError, "one element"),
    "meshgrid_indexing": (lambda: Tensor.ones(2).meshgrid(Tensor.ones(3), indexing="ab"), RuntimeError, "indexing"),
    "index_with_a_float_tensor": (lambda: x()[Tensor([0.0, 1.0])], IndexError, "integer"),
    "index_with_a_float_array": (lambda: x()[[0.5, 1.0]], IndexError, "integer"),
    "index_with_a_float": (lambda: x()[1.5], IndexError, "unsupported index"),
    "reshape_float_size": (lambda: x().reshape(2.0, 3), TypeError, "int"),
    "repeat_negative": (lambda: x().repeat(-1, 1), RuntimeError, "non-negative"),
    "repeat_interleave_negative": (lambda: x().repeat_interleave(-1), RuntimeError, "non-negative"),
    "multinomial_no_samples": (lambda: Tensor.ones(3).multinomial(0), RuntimeError, "positive number"),
    "scatter_unknown_reduce": (lambda: x().scatter(0, Tensor([[0]]), 1.0, reduce="max"), RuntimeError, "reduce"),
    "scatter_reduce_unknown": (lambda: x().scatter_reduce(0, Tensor([[0]]), x(), "max"), RuntimeError, "reduce"),
    "interpolate_to_size_zero": (lambda: Tensor.ones(1, 1, 2, 2).interpolate((0, 2)), RuntimeError, "above 0"),
    "masked_select_float_mask": (lambda: x().masked_select(Tensor.ones(2, 3)), RuntimeError, "bool"),
    "triu_float_diagonal": (lambda: x().triu(1.5), TypeError, "integer"),
    "chunk_float_count": (lambda: x().chunk(1.5), TypeError, "integer"),
    "one_hot_float_count": (lambda: Tensor([0]).one_hot(2.5), TypeError, "int num_classes"),
    "randint_float_bounds": (lambda: Tensor.randint(3, low=0.5, high=3), TypeError, "int bounds"),
    "zeros_float_size": (lambda: Tensor.zeros(2.0), TypeError, "int sizes"),
    "full_float_size": (lambda: Tensor.full((2.5,), 1.0), TypeError, "int sizes"),
    "pad_unknown_mode": (lambda: x().pad((1, 1), mode="symmetric"), NotImplementedError, "pad mode"),
    "softmax_int_dtype": (lambda: x().softmax(dtype=dtypes.int32), RuntimeError, "float dtype"),
    "log_softmax_int_dtype": (lambda: x().log_softmax(dtype=dtypes.int32), RuntimeError, "float dtype"),
    "softmin_bool_dtype": (lambda: x().softmin(dtype=dtypes.bool), RuntimeError, "float dtype"),
    "gather_float_index": (lambda: x().gather(0, Tensor([[0.0]])), RuntimeError, "integer"),
    "scatter_float_index": (lambda: x().scatter(0, Tensor([[0.0]]), 1.0), RuntimeError, "integer"),
    "interpolate_unknown_mode": (
        lambda: Tensor.ones(1, 1, 2, 2).interpolate((3, 3), mode="cubic"),
        NotImplementedError,
        "mode",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rejected_with_torchs_exception_type(name: str) -> None:
    call, torch_type, words = CASES[name]
    with pytest.raises(torch_type, match=words):
        call()


def test_accepted_edge_cases_still_work() -> None:
    """torch accepts these: one bound of clip, an empty uniform range, a one-hot with -1 classes inferred."""
    assert x().clip(None, 0.5).tolist() == [[0.5] * 3] * 2
    assert Tensor.uniform(3, low=2.0, high=2.0).tolist() == [2.0, 2.0, 2.0]
    assert Tensor([0, 2]).one_hot(-1).tolist() == [[1, 0, 0], [0, 0, 1]]
    assert x().flip((0, 1)).shape == (2, 3) and x().sum((0, 1)).item() == 6.0
    assert x().softmax(dtype=dtypes.float16).dtype is dtypes.float16


def test_negative_conv_and_pool_padding_crops_as_tinygrad() -> None:
    """torch refuses negative padding in conv and pooling; tinygrad crops, as every pad mode does (docs/ops.md)."""
    image = Tensor([[[[float(4 * row + col) for col in range(4)] for row in range(4)]]])
    assert image.conv2d(Tensor.ones(1, 1, 2, 2), padding=-1).tolist() == [[[[5.0 + 6 + 9 + 10]]]]
    assert image.avg_pool2d(2, padding=-1).tolist() == [[[[7.5]]]]
    assert image.max_pool2d(2, padding=-1).tolist() == [[[[10.0]]]]


def test_stack_and_cat_of_nothing_are_type_errors_as_tinygrad() -> None:
    """Both are methods of a first tensor (tinygrad's signature): without one, Python's own TypeError."""
    with pytest.raises(TypeError):
        Tensor.stack()
    with pytest.raises(TypeError):
        Tensor.cat()


@pytest.mark.parametrize("p", [0, 1, 3, float("inf"), -float("inf")])
def test_normalize_uses_torchs_vector_norm_for_every_p(p: float) -> None:
    """F.normalize divides by the vector p-norm (p = 0: the count of non-zeros; +-inf: the max/min magnitude)
    clamped below by eps; p = 0 used to divide by zero when the op was built."""
    import numpy as np

    values = np.array([[3.0, 0.0, -4.0], [0.0, 0.0, 0.5]])
    norm = np.linalg.norm(values, ord=p, axis=1, keepdims=True)
    expected = values / np.maximum(norm, 1e-12)
    result = Tensor(values, dtype=dtypes.float64).normalize(p=p, dim=1)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12)
