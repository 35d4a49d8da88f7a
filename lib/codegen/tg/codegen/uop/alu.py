"""What each ALU op computes on Python scalars: the one definition that constant folding, `sym_infer`, the
interval analysis tests and the Python emulator all agree on.

Integer `IDIV` and `MOD` truncate toward zero, as C does: `-7 // 2 == -3` and `-7 % 2 == -1` on UOps.
Results are converted to the op's dtype (ints wrap, floats round; `index` never wraps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tg.codegen.dtype import DType, dtypes, truncate
from tg.codegen.uop.ops import Ops


def trunc_div(a: int, b: int) -> int:
    """Integer division rounding toward zero (C semantics)."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def trunc_mod(a: int, b: int) -> int:
    """The remainder that goes with `trunc_div`: it has the sign of `a`."""
    return a - b * trunc_div(a, b)


def _idiv(a: Any, b: Any) -> Any:
    if isinstance(a, float) or isinstance(b, float):
        return math.trunc(a / b)
    return trunc_div(a, b)


def _mod(a: Any, b: Any) -> Any:
    if isinstance(a, float) or isinstance(b, float):
        return math.fmod(a, b)
    return trunc_mod(a, b)


def _safe_log2(x: float) -> float:
    if x < 0 or math.isnan(x):
        return math.nan
    return -math.inf if x == 0 else math.log2(x)


def _safe_sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


def _safe_exp2(x: float) -> float:
    try:
        return 2.0**x
    except OverflowError:
        return math.inf


def _reciprocal(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x)
    return 1.0 / x


def _sin(x: float) -> float:
    return math.nan if math.isinf(x) else math.sin(x)


def _shl(a: int, b: int) -> int:
    return a << b


def _shr(a: int, b: int) -> int:
    return a >> b


def _maximum(a: Any, b: Any) -> Any:
    """IEEE-style max that propagates NaN from either operand (as the C renderer's code does)."""
    for x in (a, b):
        if isinstance(x, float) and math.isnan(x):
            return x
    return b if b > a else a


def _trunc(x: float) -> float:
    """C's trunc: infinities and NaN stay, and a zero result keeps the sign (trunc(-0.5) is -0.0)."""
    if not math.isfinite(x):
        return x
    return math.copysign(float(math.trunc(x)), x)


_ALU_FUNCTIONS: dict[Ops, Callable[..., Any]] = {
    Ops.ADD: lambda a, b: a + b,
    Ops.SUB: lambda a, b: a - b,
    Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: _idiv,
    Ops.MOD: _mod,
    Ops.MAX: _maximum,
    Ops.CMPLT: lambda a, b: a < b,
    Ops.CMPNE: lambda a, b: a != b,
    Ops.CMPEQ: lambda a, b: a == b,
    Ops.AND: lambda a, b: a & b,
    Ops.OR: lambda a, b: a | b,
    Ops.XOR: lambda a, b: a ^ b,
    Ops.SHL: _shl,
    Ops.SHR: _shr,
    Ops.NEG: lambda a: not a if isinstance(a, bool) else -a,
    Ops.WHERE: lambda c, a, b: a if c else b,
    Ops.MULACC: lambda a, b, c: a * b + c,
    Ops.RECIPROCAL: _reciprocal,
    Ops.SQRT: _safe_sqrt,
    Ops.EXP2: _safe_exp2,
    Ops.LOG2: _safe_log2,
    Ops.SIN: _sin,
    Ops.TRUNC: _trunc,
    Ops.FDIV: lambda a, b: a / b
    if b != 0
    else (math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)),
}


def exec_alu(op: Ops, dtype: DType, operands: tuple[Any, ...]) -> Any:
    """The value of `op` on Python scalars, converted to `dtype` (bool for comparisons)."""
    function = _ALU_FUNCTIONS.get(op)
    if function is None:
        raise NotImplementedError(f"no Python semantics for {op!r}")
    if op is Ops.SHR and dtype.kind == "uint":
        operands = (truncate(operands[0], dtype) & ((1 << dtype.bitsize) - 1), operands[1])
    result = function(*operands)
    if dtype.kind == "bool" or op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        return bool(result)
    return truncate(result, dtype if dtype.count == 1 else dtype.scalar())


def is_int_like(dt: DType) -> bool:
    return dtypes.is_int(dt)
