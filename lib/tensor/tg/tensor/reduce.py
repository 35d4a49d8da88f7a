"""Reductions: `sum, prod, max, min, mean, any, all` over axes, with `keepdim` and an accumulation dtype.

Sums and products accumulate in a wider dtype by default (as tinygrad): bools and small ints in int32, small
unsigned ints in uint32, 16-bit floats in float32 (then rounded back to the input's dtype); `dtype=` picks the
accumulation and result dtype explicitly. `min` is built as `max` of an order-reversing map (-x, ~x).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg.codegen import DType, Ops, UOp, dtypes, least_upper_dtype
from tg.codegen.schedule.graph import ReduceArg
from tg.tensor.base import Axis, TensorBase, as_tensor
from tg.tensor.errors import ArgumentError
from tg.tensor.fp8 import is_fp8
from tg.tensor.movement import normalize_axis
from tg.tensor.promotion import dtype_argument

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def sum_accumulator(dtype: DType) -> DType:
    """The dtype sums and products of `dtype` accumulate in."""
    if dtypes.is_unsigned(dtype):
        return least_upper_dtype(dtype, dtypes.uint32)
    if dtypes.is_int(dtype) or dtype is dtypes.bool:
        return least_upper_dtype(dtype, dtypes.int32)
    return least_upper_dtype(dtype, dtypes.float32)


def check_extreme_has_elements(shape: tuple, axis: Axis, operation: str) -> None:
    """max, min, argmax and argmin have no identity: over nothing they raise as torch does, a RuntimeError for a
    reduction of every axis and an IndexError naming the empty axis otherwise."""
    axes = reduce_axes(axis, len(shape))
    empty = [a for a in axes if shape[a] == 0]
    if not empty:
        return
    if axis is None:
        raise RuntimeError(f"{operation} of an empty tensor (shape {shape}) needs an axis: there is no identity")
    raise IndexError(f"{operation} over axis {empty[0]} of shape {shape}: the axis is empty (there is no identity)")


def reduce_axes(axis: Axis, ndim: int) -> tuple[int, ...]:
    """The axes to reduce, from the front, sorted and without repeats (None: all of them)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    if ndim == 0:  # a 0-d tensor reduces over axis 0 or -1 (as in torch and tinygrad): nothing to reduce
        for a in axis:
            normalize_axis(a, ndim)
        return ()
    axes = sorted({normalize_axis(a, ndim) for a in axis})
    if len(axes) != len(tuple(axis)):
        raise ArgumentError(f"repeated axis in {tuple(axis)}")
    return tuple(axes)


class ReduceOps(TensorBase):
    """`sum, prod, max, min, mean, any, all`."""

    def _reduce(self, op: Ops, axis: Axis, keepdim: bool) -> Tensor:
        axes = reduce_axes(axis, self.ndim)
        if not axes:
            return as_tensor(self)
        reduced = self._wrap(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), ReduceArg(op, axes)))
        if keepdim:
            return reduced
        return reduced.reshape(tuple(size for i, size in enumerate(self.shape) if i not in axes))

    def _accumulated(self, op: Ops, axis: Axis, keepdim: bool, dtype: DType | None) -> Tensor:
        accumulator = sum_accumulator(self.dtype) if dtype is None else dtype
        result = self.cast(accumulator)._reduce(op, axis, keepdim)
        if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16):
            return result.cast(self.dtype)
        return result

    def sum(self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return self._accumulated(Ops.ADD, axis, keepdim, dtype)

    def prod(self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return self._accumulated(Ops.MUL, axis, keepdim, dtype)

    def max(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        check_extreme_has_elements(self.shape, axis, "max/min")
        axes = reduce_axes(axis, self.ndim)
        if is_fp8(self.dtype):  # compared as float32: renderers have no fp8 comparison
            return self.float().max(axes, keepdim).cast(self.dtype)
        return self._reduce(Ops.MAX, axes, keepdim)

    def min(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        if dtypes.is_float(self.dtype):
            return -((-self).max(axis, keepdim))
        return ~((~self).max(axis, keepdim))  # ~x = -x-1 reverses the order of ints without overflow

    def mean(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """The average; ints average as the default float, 16-bit floats in float32 rounded back."""
        output_dtype = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
        accumulator = sum_accumulator(output_dtype)
        count = math.prod(self.shape[a] for a in reduce_axes(axis, self.ndim))
        total = self.sum(axis, keepdim, dtype=accumulator)
        return (total / count).cast(output_dtype)  # an empty mean is 0/0: NaN, as numpy

    def any(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        if self.numel() == 0:  # max has no identity; counting the true elements does
            return self.bool().sum(axis, keepdim).bool()
        return (self != 0).max(axis, keepdim)

    def all(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        return (self == 0).any(axis, keepdim).logical_not()
