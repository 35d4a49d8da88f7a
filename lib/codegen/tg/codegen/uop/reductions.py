"""What every stage that builds or lowers a reduction needs to know about it."""

from __future__ import annotations

from tg.codegen.dtype import DType, dtypes
from tg.codegen.uop.ops import Ops


def reduce_identity(op: Ops, dtype: DType) -> object:
    """The value a reduction starts from (and what it gives over zero elements)."""
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    if op is Ops.MAX:
        return dtypes.min(dtype)
    raise ValueError(f"no reduction with {op!r}")
