"""Exact Python semantics for the ops of a linear program: what the PYTHON device computes.

Every value is a Python bool, int or float holding exactly what the dtype holds: each op computes in Python
(ints exactly, floats in double) and converts the result to its dtype with the codegen conversion helpers (ints
wrap, floats round to nearest even; one double-precision step then one rounding is exact for + - * / sqrt of
float32 and float16). Op semantics, edge cases included (integer division by 0 gives 0, float MAX propagates
NaN, ...), are tg.codegen.uop.alu's: one table (EDGE_CASES) that the C renderer follows too.

Buffers are `TypedMemory`: element reads and writes with bounds checks, so a wrong index in a kernel raises
here instead of reading garbage.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from tg.codegen.dtype import DType, decode, dtypes, encode, truncate
from tg.codegen.uop.alu import exec_alu, multiply_add, trunc_div, trunc_mod
from tg.codegen.uop.ops import Ops

_UNSIGNED_FORMATS = {1: "B", 2: "H", 4: "I", 8: "Q"}


class TypedMemory:
    """`memory` (bytes-like, writable) seen as an array of scalar `dtype`, with bounds-checked elements."""

    def __init__(self, memory: memoryview, dtype: DType) -> None:
        self.memory = memory
        self.dtype = dtype
        self.itemsize = dtype.itemsize
        self.native = dtype.fmt is not None
        self.format = "<" + (dtype.fmt if dtype.fmt is not None else _UNSIGNED_FORMATS[dtype.itemsize])
        self.length = memory.nbytes // dtype.itemsize

    def _check(self, i: int) -> None:
        if not 0 <= i < self.length:
            raise IndexError(f"kernel accessed element {i} of a {self.dtype!r} buffer of {self.length} elements")

    def __getitem__(self, i: int) -> Any:
        self._check(i)
        (value,) = struct.unpack_from(self.format, self.memory, i * self.itemsize)
        return value if self.native else decode(value, self.dtype)

    def __setitem__(self, i: int, value: Any) -> None:
        self._check(i)
        raw = value if self.native else encode(value, self.dtype)
        struct.pack_into(self.format, self.memory, i * self.itemsize, raw)


def alu(op: Ops, dtype: DType, *operands: Any) -> Any:
    """The value of `op` on `operands`, converted to `dtype`: exactly tg.codegen.uop.alu's (its EDGE_CASES
    included), which is also what the C renderer's code computes."""
    return exec_alu(op, dtype, operands)


def cast(dtype: DType, value: Any) -> Any:
    return truncate(value, dtype)


def bitcast(dtype: DType, source_dtype: DType, value: Any) -> Any:
    return decode(encode(value, source_dtype), dtype)


# ---------------------------------------------------------------------------------------------------- fast paths
# The Python renderer writes the common ops as plain Python arithmetic followed by a conversion to the dtype:
# exactly what `exec_alu` computes (Python numbers, then `truncate`), without its dispatch.

_FLOAT32 = struct.Struct("<f")
_FLOAT16 = struct.Struct("<e")
_INT32 = struct.Struct("<i")


def float32_bits(value: float) -> int:
    """bitcast float32 -> int32 (what the software exp2/log2 use), without `bitcast`'s generic encode/decode."""
    return _INT32.unpack(_FLOAT32.pack(value))[0]


def float32_from_bits(value: int) -> float:
    """bitcast int32 -> float32."""
    return _FLOAT32.unpack(_INT32.pack(value))[0]


def _packed_rounder(packer: struct.Struct, dtype: DType) -> Any:
    def round_to(x: float) -> float:
        try:
            return packer.unpack(packer.pack(x))[0]  # C's double -> float conversion: nearest, ties to even
        except OverflowError:  # rounds to +-inf; struct refuses, truncate does not
            return truncate(x, dtype)

    return round_to


def _int_wrapper(dtype: DType) -> Any:
    mask, sign = (1 << dtype.bitsize) - 1, 1 << (dtype.bitsize - 1)
    if dtype.kind == "uint":
        return lambda x: x & mask
    return lambda x: ((x + sign) & mask) - sign


def converter_name(dtype: DType) -> str:
    """The name under which the emulator's namespace holds the conversion of a Python number to `dtype`."""
    return f"to_{dtype.name}"


def _converters() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for dtype in dtypes.all():
        if dtype is dtypes.float32:
            function = _packed_rounder(_FLOAT32, dtype)
        elif dtype is dtypes.float16:
            function = _packed_rounder(_FLOAT16, dtype)
        elif dtype is dtypes.float64:
            function = float
        elif dtype.kind in ("int", "uint"):
            function = _int_wrapper(dtype)
        else:
            function = lambda x, dt=dtype: truncate(x, dt)  # noqa: E731
        found[converter_name(dtype)] = function
    return found


NAMESPACE: dict[str, Any] = {
    **_converters(),
    "trunc_div": trunc_div,
    "trunc_mod": trunc_mod,
    "alu": alu,
    "cast": cast,
    "bitcast": bitcast,
    "float32_bits": float32_bits,
    "float32_from_bits": float32_from_bits,
    "multiply_add": multiply_add,
    "TypedMemory": TypedMemory,
    "Ops": Ops,
    "dtypes": dtypes,
    "math": math,
}


def load_function(source: str, name: str) -> Any:
    """The Python kernel function `name` defined by `source` (as the Python renderer writes it)."""
    scope = dict(NAMESPACE)
    exec(compile(source, f"<kernel {name}>", "exec"), scope)  # noqa: S102 - the source is our own renderer's
    return scope[name]
