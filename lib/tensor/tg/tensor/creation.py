"""Creating tensors: from Python data, numpy arrays and bytes, and the `zeros`/`ones`/`full`/... constructors.

Data from the host becomes a realized BUFFER through the engine's `buffer_from_bytes` (a copy, no kernel). Constant
tensors stay lazy: a CONST reshaped to all-ones and expanded, so `zeros(n) + x` never reads memory for the zeros.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tg.codegen import DType, Ops, UOp, dtypes, from_numpy, to_numpy, truncate
from tg.codegen.schedule.graph import (
    Shape,
    ShapeError,
    canonical_size,
    const_node,
    is_symbolic_shape,
    max_numel,
    new_buffer,
    symbolic_numel,
)
from tg.hcq import Device
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.errors import ArgumentError
from tg.tensor.promotion import (
    PythonScalar,
    dtype_argument,
    dtype_name,
    int_data_dtype,
    is_python_scalar,
    python_scalar_dtype,
)
from tg.tensor.symbolic import check_size, shape_text

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def canonical_device(device: str | None) -> str:
    """The canonical name of `device` (None: the default device from DEV; a tuple: each of a sharded tensor's)."""
    if isinstance(device, (tuple, list)):
        return tuple(Device.canonicalize(d) for d in device)
    return Device.DEFAULT if device is None else Device.canonicalize(device)


def normalize_shape(shape: tuple[Any, ...]) -> Shape:
    """Accept `f(2, 3)` and `f((2, 3))` alike; sizes must be non-negative ints or bound Variables."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for size in shape:
        if isinstance(size, UOp):
            check_size(size, f"shape {shape_text(shape)}")
        elif isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"a shape needs int sizes, got {tuple(shape)}")
        elif size < 0:
            raise ShapeError(f"a shape needs non-negative int sizes, got {tuple(shape)}")
    return tuple(canonical_size(size) for size in shape)


def const_of_shape(value: PythonScalar | UOp, shape: Shape, dtype: DType, device: str) -> UOp:
    """A lazy constant tensor: CONST reshaped to all-ones and expanded to `shape`."""
    if isinstance(device, tuple):  # for a sharded tensor: the constant whole on each device
        from tg.tensor.multi import replicate

        return replicate(lambda d: const_of_shape(value, shape, dtype, d), device)
    # a symbolic int (bound variables) stays an expression: the kernel computes it from its variable arguments
    if isinstance(value, UOp):
        node = const_node(check_size(value, "a Tensor value"), dtype, device)
    else:
        node = const_node(truncate(value, dtype), dtype, device)
    if not shape:
        return node
    node = UOp(Ops.RESHAPE, dtype, (node,), (1,) * len(shape))
    if all(size == 1 for size in shape):
        return node
    return UOp(Ops.EXPAND, dtype, (node,), shape)


def buffer_view(buffer: UOp, shape: Shape) -> UOp:
    """A flat BUFFER seen in `shape` (a symbolic shape sees the first elements of a buffer of its largest size)."""
    if is_symbolic_shape(shape):
        used = UOp(Ops.SHRINK, buffer.dtype, (buffer,), ((0, symbolic_numel(shape)),))
        return UOp(Ops.RESHAPE, buffer.dtype, (used,), tuple(shape))
    if tuple(shape) == (buffer.arg.size,):
        return buffer
    return UOp(Ops.RESHAPE, buffer.dtype, (buffer,), tuple(shape))


def upload(data: bytes | memoryview, shape: Shape, dtype: DType, device: str) -> UOp:
    from tg.tensor.engine import buffer_from_bytes

    return buffer_view(buffer_from_bytes(data, dtype, device), shape)


def _list_dtype(data: list | tuple) -> DType:
    """bools -> bool, ints -> the default int (int64 when it cannot hold them), any float -> the default float."""
    import numpy as np

    values: Any = np.array(data, dtype=object).ravel() if data else []
    if len(values) and all(isinstance(value, bool) for value in values):
        return dtypes.bool
    if len(values) and all(isinstance(value, int) for value in values):
        return int_data_dtype(min(values), max(values))
    return dtypes.default_float


def _wrapped_array(data: list | tuple, dtype: DType) -> Any:
    """Python data converted to integer `dtype` with ints wrapping modulo 2**bits (torch.tensor and C casts; numpy 2
    refuses out-of-range ints instead)."""
    import numpy as np

    wrap = np.frompyfunc(lambda value: truncate(value, dtype), 1, 1)
    return wrap(np.array(data, dtype=object)).astype(to_numpy(dtype))


def node_from_numpy(array: Any, device: str, dtype: DType | None) -> UOp:
    """A realized buffer holding `array`, converted on the host when `dtype` asks for another type."""
    import numpy as np

    source_dtype = from_numpy(array.dtype)
    if dtype is not None and dtype is not source_dtype:
        array = array.astype(to_numpy(dtype))
        source_dtype = dtype
    shape = array.shape  # before ascontiguousarray, which makes 0-d arrays 1-d
    flat = np.ascontiguousarray(array).reshape(-1)
    raw_bytes = flat.view(np.uint8).data  # (a memoryview) no intermediate copy: the engine copies once
    return upload(raw_bytes, shape, source_dtype, device)


def node_from_list(data: list | tuple, device: str, dtype: DType | None) -> UOp:
    import numpy as np

    dtype = _list_dtype(data) if dtype is None else dtype
    try:
        array = np.array(data, dtype=to_numpy(dtype))
    except OverflowError:
        array = _wrapped_array(data, dtype)
    except ValueError as error:
        raise ShapeError(f"nested lists must be rectangular to make a tensor ({error})") from None
    return node_from_numpy(array, device, dtype)


def node_from_bytes(data: bytes | bytearray | memoryview, device: str, dtype: DType | None) -> UOp:
    """Raw bytes read as elements of `dtype` (uint8 by default)."""
    dtype = dtypes.uint8 if dtype is None else dtype
    if len(data) % dtype.itemsize:
        element = f"{dtype_name(dtype)} elements ({dtype.itemsize} bytes)"
        raise ValueError(f"{len(data)} bytes are not a whole number of {element}")
    return upload(bytes(data), (len(data) // dtype.itemsize,), dtype, device)


def node_from_path(path: os.PathLike, dtype: DType | None) -> tuple[UOp, str]:
    """`Tensor(pathlib.Path(...))`: the whole file as a lazy tensor on its DISK device (uint8 unless `dtype`),
    mapped, not read. Returns the node and the device name."""
    from tg.hcq import Buffer
    from tg.tensor.engine import buffer_over

    location = os.path.abspath(path)
    dtype = dtypes.uint8 if dtype is None else dtype
    size = os.path.getsize(location)
    if size % dtype.itemsize:
        raise ValueError(f"{location} has {size} bytes, not a whole number of {dtype_name(dtype)} elements")
    device = f"DISK:{location}"
    if size == 0:
        return new_buffer(device, 0, dtype), device
    return buffer_over(Buffer(device, size // dtype.itemsize, dtype).allocate()), device


def node_from_data(data: Any, device: str, dtype: DType | None) -> UOp:
    """The graph node for `Tensor(data)`: a CONST for a scalar, a realized buffer for host data."""
    import numpy as np

    if data is None:
        return new_buffer(device, 0, dtype or dtypes.default_float)
    if is_python_scalar(data):
        if dtype is None:
            int_value = isinstance(data, int) and not isinstance(data, bool)
            dtype = int_data_dtype(data, data) if int_value else python_scalar_dtype(data)
        return const_of_shape(data, (), dtype, device)  # an int wraps into an int dtype (const_of_shape truncates)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return node_from_bytes(data, device, dtype)
    if isinstance(data, (list, tuple)):
        return node_from_list(data, device, dtype)
    if isinstance(data, np.ndarray):
        return node_from_numpy(data, device, dtype)
    if isinstance(data, np.generic):
        return node_from_numpy(np.asarray(data), device, dtype)
    raise TypeError(f"cannot make a tensor from {type(data).__name__}")


def _has_own_storage(node: UOp) -> bool:
    """Whether `node` is a BUFFER (or a reshape of one) that no other tensor was made from: uploaded or empty."""
    return node.op is Ops.BUFFER or (node.op is Ops.RESHAPE and node.src[0].op is Ops.BUFFER)


def as_leaf(tensor: Tensor, requires_grad: bool | None) -> Tensor:
    """`tensor` as torch's constructors return it with `requires_grad=`: with True, a leaf in its own storage.

    A constant or a computed value is a graph node that every equal constant shares (nodes are hash-consed), so a
    gradient asked for one `zeros(3)` would reach every other; a copy into fresh storage is a node of its own."""
    if requires_grad and not _has_own_storage(tensor.uop):
        tensor = tensor.clone()
    if requires_grad is not None:
        tensor.requires_grad = requires_grad
    return tensor


Constructor = TypeVar("Constructor", bound=Callable[..., Any])


def takes_requires_grad(constructor: Constructor) -> Constructor:
    """Give a constructor the keyword `requires_grad: bool | None = None` (see `as_leaf`)."""

    @functools.wraps(constructor)
    def with_requires_grad(*args: Any, requires_grad: bool | None = None, **kwargs: Any) -> Tensor:
        return as_leaf(constructor(*args, **kwargs), requires_grad)

    signature = inspect.signature(constructor)
    keyword = inspect.Parameter("requires_grad", inspect.Parameter.KEYWORD_ONLY, default=None)
    parameters = list(signature.parameters.values())
    at = next((i for i, p in enumerate(parameters) if p.kind is inspect.Parameter.VAR_KEYWORD), len(parameters))
    with_requires_grad.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*parameters[:at], keyword, *parameters[at:]]
    )
    return with_requires_grad  # type: ignore[return-value]


class CreationOps(TensorBase):
    """Constructors: `Tensor.zeros(2, 3)`, `Tensor.arange(10)`, `Tensor.eye(4)`, `t.ones_like()`, ..."""

    @classmethod
    @takes_requires_grad
    def empty(cls, *shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """A tensor with storage but unspecified contents."""
        dtype = dtype_argument(dtype)
        shape = normalize_shape(shape)
        dtype = dtypes.default_float if dtype is None else dtype
        device = canonical_device(device)
        if isinstance(device, tuple):  # storage on each of several devices (a whole copy each)
            from tg.tensor.multi import empty_sharded

            return as_tensor(cls(empty_sharded(shape, dtype, device, None), device=device))
        return as_tensor(cls(buffer_view(new_buffer(device, max_numel(shape), dtype), shape), device=device))

    @classmethod
    @takes_requires_grad
    def full(cls, shape: Any, fill_value: PythonScalar, dtype: DType | str | None = None, device: str | None = None):
        dtype = dtype_argument(dtype)
        shape = normalize_shape((shape,) if isinstance(shape, int) else tuple(shape))
        dtype = python_scalar_dtype(fill_value) if dtype is None else dtype
        device = canonical_device(device)
        return as_tensor(cls(const_of_shape(fill_value, shape, dtype, device), device=device))

    @classmethod
    @takes_requires_grad
    def zeros(cls, *shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return cls.full(normalize_shape(shape), 0.0, dtype or dtypes.default_float, device)

    @classmethod
    @takes_requires_grad
    def ones(cls, *shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return cls.full(normalize_shape(shape), 1.0, dtype or dtypes.default_float, device)

    @classmethod
    @takes_requires_grad
    def arange(
        cls, start: PythonScalar | UOp, stop: PythonScalar | UOp | None = None, step: PythonScalar = 1, **kwargs: Any
    ) -> Tensor:
        """`start, start+step, ...` below `stop`; ints give the default int, any float the default float.

        The values are computed on the host and uploaded (the tensor graph has no index node), like `Tensor(list)`.
        """
        import numpy as np

        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ArgumentError("arange needs a non-zero step")
        if isinstance(start, UOp) or isinstance(stop, UOp):
            return cls._symbolic_arange(start, stop, step, **kwargs)
        all_ints = all(isinstance(v, int) for v in (start, stop, step))
        count = max(0, math.ceil((stop - start) / step))
        last = start + (count - 1) * step if count else start
        # (int() only tells the checker what all_ints found)
        default = int_data_dtype(int(min(start, last)), int(max(start, last))) if all_ints else dtypes.default_float
        dtype = dtype_argument(kwargs.pop("dtype", None)) or default
        positions: Any = np.arange(count, dtype=np.float64 if not all_ints else np.int64)
        values = start + positions * step
        return as_tensor(cls(values.astype(to_numpy(dtype)), dtype=dtype, **kwargs))

    @classmethod
    def _symbolic_arange(cls, start: Any, stop: Any, step: Any, **kwargs: Any) -> Tensor:
        """arange with a bound Variable as a bound (int step): 0, 1, ... for the largest count, uploaded once,
        shrunk to the count, then scaled by the step and shifted by the start."""
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"arange with a symbolic bound needs an int step, got {step!r}")
        span = stop - start if step > 0 else start - stop
        count = check_size((span + abs(step) - 1) // abs(step), "arange")
        if not isinstance(count, int) and count.vmin < 0:
            raise ValueError(f"arange({start!r}, {stop!r}, {step}): the count {count.render()} may be negative")
        largest = count if isinstance(count, int) else int(count.vmax)
        values = cls.arange(largest, **kwargs)[:count]
        return (values * step if step != 1 else values) + start

    @classmethod
    @takes_requires_grad
    def invalids(cls, *shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Scratch storage whose contents are undefined until written (tinygrad's name; `empty` here)."""
        return cls.empty(*shape, dtype=dtype, device=device)

    @classmethod
    def from_blob(cls, ptr: int, shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """The `shape` elements of `dtype` at host address `ptr` (an int, e.g. `array.ctypes.data`), wrapped, not
        copied: the tensor reads that memory when it is used, and writes into it (`assign`, `t[i] = v`) land there.
        The caller keeps the memory alive while the tensor is in use. CPU devices only (their memory is host
        memory)."""
        from tg.tensor.engine import buffer_at_address

        dtype = dtype_argument(dtype) or dtypes.default_float
        shape = normalize_shape((shape,))
        device = canonical_device(device)
        node = buffer_at_address(int(ptr), math.prod(shape), dtype, device)
        return as_tensor(cls(node, device=device)).reshape(shape)

    @classmethod
    def from_url(cls, url: str, gunzip: bool = False, **kwargs: Any) -> Tensor:
        """The bytes at `url` (any scheme urllib reads: http(s), file) as a uint8 tensor; `gunzip` decompresses."""
        import gzip
        import urllib.request

        with urllib.request.urlopen(url) as response:
            data = response.read()
        return as_tensor(cls(gzip.decompress(data) if gunzip else data, **kwargs))

    @classmethod
    @takes_requires_grad
    def linspace(
        cls,
        start: PythonScalar,
        stop: PythonScalar,
        steps: int,
        dtype: DType | str | None = None,
        device: str | None = None,
    ) -> Tensor:
        """`steps` evenly spaced values from `start` to `stop`, both included (torch.linspace; default float).

        Computed in float64 on the host as numpy.linspace, then converted and uploaded like `arange`."""
        import numpy as np

        dtype = dtype_argument(dtype) or dtypes.default_float
        if steps < 0:
            raise ArgumentError(f"linspace needs a non-negative number of steps, got {steps}")
        if dtype is dtypes.bool:
            raise ArgumentError("linspace cannot make bool values (as torch)")
        values = np.linspace(float(start), float(stop), steps, dtype=np.float64)
        if not dtypes.is_float(dtype):
            values = np.trunc(values)
        return as_tensor(cls(values.astype(to_numpy(dtype)), dtype=dtype, device=device))

    @classmethod
    @takes_requires_grad
    def eye(cls, n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """The identity: ones on the diagonal. Built lazily from movement ops of a constant."""
        dtype = dtype_argument(dtype)
        m = n if m is None else m
        size = max(n, m)
        # a column of ones padded to width size+1, read row by row as size x size, puts a one every size+1 elements
        ones_column = cls.ones(size, 1, dtype=dtype, device=device)
        square = ones_column.pad(((0, 0), (0, size))).flatten().shrink(((0, size * size),)).reshape(size, size)
        return square.shrink(((0, n), (0, m)))

    @takes_requires_grad
    def empty_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return type(self).empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)

    @takes_requires_grad
    def full_like(
        self, fill_value: PythonScalar, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        dtype = dtype_argument(dtype)
        return type(self).full(self.shape, fill_value, dtype or self.dtype, device or self.device)

    def const_like(self, value: PythonScalar) -> Tensor:
        """A constant `value` of this tensor's shape, dtype and device (tinygrad's; a lazy constant, no storage)."""
        return self.full_like(value)

    @takes_requires_grad
    def zeros_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return self.full_like(0, dtype, device)

    @takes_requires_grad
    def ones_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return self.full_like(1, dtype, device)
