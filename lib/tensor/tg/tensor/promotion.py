"""Type promotion and broadcasting: what dtype and shape a binary op between two operands produces.

Tensors promote by `least_upper_dtype` (numpy/torch rules). Python scalars are weak: they take the tensor's dtype
when their kind fits it (`int8_tensor + 1` stays int8) and only lift the kind when they must (`int_tensor + 1.5`
becomes the default float, `bool_tensor + 1` the default int).
"""

from __future__ import annotations

from typing import Any, overload

from tg.codegen import DType, UOp, dtypes, least_upper_dtype, to_dtype
from tg.codegen.schedule.graph import Shape, ShapeError

PythonScalar = bool | int | float


_NUMPY_STYLE_NAMES = {
    "char": "int8", "uchar": "uint8", "short": "int16", "ushort": "uint16", "int": "int32", "uint": "uint32",
    "long": "int64", "ulong": "uint64", "half": "float16", "float": "float32", "double": "float64",
}  # fmt: skip


def dtype_name(dtype: DType) -> str:
    """The name users know a dtype by in messages: int8, float16, ... (tg's dtype names are C's: char, half)."""
    return _NUMPY_STYLE_NAMES.get(dtype.name, dtype.name)


class DTypeMismatchError(TypeError, RuntimeError):
    """Operands of the wrong dtype for an operation that does not convert (assign, setitem, bitcast): a TypeError,
    and a RuntimeError as tinygrad and torch raise."""


@overload
def dtype_argument(dtype: DType | str) -> DType: ...
@overload
def dtype_argument(dtype: None) -> None: ...
@overload
def dtype_argument(dtype: DType | str | None) -> DType | None: ...
def dtype_argument(dtype: DType | str | None) -> DType | None:
    """A public API's `dtype=` argument as a DType: names such as "int32" or "half" are accepted as in tinygrad."""
    return None if dtype is None else to_dtype(dtype)


def is_python_scalar(value: Any) -> bool:
    """A bool, int or float, or a symbolic int (a bound Variable or an expression of them): a weak scalar."""
    return isinstance(value, (bool, int, float)) or is_symbolic_int(value)


def is_symbolic_int(value: Any) -> bool:
    return isinstance(value, UOp) and value.dtype is dtypes.index


def python_scalar_dtype(value: PythonScalar) -> DType:
    """The dtype a Python scalar gets on its own: bool, the default int or the default float."""
    if isinstance(value, bool):
        return dtypes.bool
    if isinstance(value, int) or is_symbolic_int(value):
        return dtypes.default_int
    return dtypes.default_float


def int_data_dtype(smallest: int, largest: int) -> DType:
    """The dtype a constructor gives Python ints from `smallest` to `largest`: the default int when it holds them,
    else int64, else uint64 (torch's default int is int64; tinygrad also widens)."""
    for dtype in (dtypes.default_int, dtypes.int64, dtypes.uint64):
        if dtypes.min(dtype) <= smallest and largest <= dtypes.max(dtype):
            return dtype
    raise OverflowError(f"Python integers from {smallest} to {largest} fit no integer dtype")


def _scalar_kind_rank(dtype: DType) -> int:
    """bool < int < float: the order in which a weak scalar can lift a tensor's kind."""
    if dtypes.is_float(dtype):
        return 2
    if dtypes.is_int(dtype):
        return 1
    return 0


def weak_scalar_result(tensor_dtype: DType, value: PythonScalar) -> DType:
    """The dtype of `tensor op value` for a Python scalar `value`: the tensor's, unless the scalar's kind is higher."""
    scalar_dtype = python_scalar_dtype(value)
    if _scalar_kind_rank(scalar_dtype) <= _scalar_kind_rank(tensor_dtype):
        return tensor_dtype
    return scalar_dtype


def result_dtype(*operands: Any) -> DType:
    """The common dtype of operands that are tensors (anything with a `.dtype`) or weak Python scalars."""
    tensor_dtypes = [operand.dtype for operand in operands if not is_python_scalar(operand)]
    scalars = [operand for operand in operands if is_python_scalar(operand)]
    if tensor_dtypes:
        common = least_upper_dtype(*tensor_dtypes)
    else:
        common = least_upper_dtype(*(python_scalar_dtype(value) for value in scalars))
    for value in scalars:
        common = weak_scalar_result(common, value)
    return common


def check_scalar_fits(value: PythonScalar, dtype: DType) -> None:
    """A Python int that an int dtype cannot hold is an error in an op with a tensor (as in numpy 2 and torch), not
    a silent wrap. (Constructors wrap instead, as torch.tensor and C casts: see tg.tensor.creation.)"""
    if isinstance(value, bool) or not isinstance(value, int) or not dtypes.is_int(dtype):
        return
    if not dtypes.min(dtype) <= value <= dtypes.max(dtype):
        raise OverflowError(f"Python integer {value} is out of bounds for {dtype_name(dtype)}")


def broadcast_shapes(*shapes: Shape) -> Shape:
    """numpy broadcasting: align shapes on the right; each axis must be equal or 1 in every operand."""
    ndim = max((len(shape) for shape in shapes), default=0)
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    result = []
    for axis in range(ndim):
        sizes = {shape[axis] for shape in padded} - {1}
        if len(sizes) > 1:
            raise ShapeError(f"cannot broadcast shapes {' and '.join(str(tuple(s)) for s in shapes)}")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)
