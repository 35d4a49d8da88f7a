"""What each ALU op computes on Python scalars: the one definition that constant folding, `sym_infer`, the
interval analysis tests and the Python emulator (tg.codegen.render.emulate) all agree on.

Integer `IDIV` and `MOD` truncate toward zero, as C does: `-7 // 2 == -3` and `-7 % 2 == -1` on UOps.
Results are converted to the op's dtype (ints wrap, floats round; `index` never wraps).

`EDGE_CASES` is the one table of what ops compute at the edges of their domain, where C leaves the result
undefined or hardware differs (division by zero, shifts past the width, NaN in max, pow out of range). `exec_alu`
applies it, every renderer must produce the same values, and tests/codegen/test_edge_cases.py checks each row
on constant folding, the PYTHON emulator and the compiled C.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
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


def _pow(a: float, b: float) -> float:
    """C's pow in double: overflow gives inf (with the sign of an odd power), a domain error NaN (0 ** -1: inf)."""
    a, b = float(a), float(b)
    try:
        return math.pow(a, b)
    except OverflowError:
        return math.inf if a > 0 or float(b).is_integer() and b % 2 == 0 else -math.inf
    except ValueError:
        return math.inf if a == 0 else math.nan


def multiply_add(a: Any, b: Any, c: Any, round_to_odd: bool = True) -> Any:
    """a * b + c rounded once (fused, as the FMA instruction and C's fma compute it). For floats the exact value
    is rounded to a double that is odd when inexact (round to odd), so the later rounding to float32 or float16
    (`truncate`) is the single correct rounding of the exact value; a float64 result (`round_to_odd=False`) is the
    nearest double itself."""
    if not all(isinstance(v, float) for v in (a, b, c)) or not all(math.isfinite(v) for v in (a, b, c)):
        return a * b + c
    if round_to_odd and _is_float32(a) and _is_float32(b) and _is_float32(c):
        return _float32_multiply_add(a, b, c)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    nearest = float(exact) if exact != 0 else a * b + c  # an exact zero keeps IEEE's sign rules
    if (
        round_to_odd
        and Fraction(nearest) != exact
        and math.isfinite(nearest)
        and int.from_bytes(struct.pack("<d", nearest), "little") & 1 == 0
    ):
        nearest = math.nextafter(nearest, math.inf if exact > nearest else -math.inf)
    return nearest


_FLOAT32 = struct.Struct("<f")
_FLOAT64 = struct.Struct("<d")


def _is_float32(x: float) -> bool:
    try:
        return _FLOAT32.unpack(_FLOAT32.pack(x))[0] == x
    except OverflowError:
        return False


def _float32_multiply_add(a: float, b: float, c: float) -> float:
    """`multiply_add` rounded to odd, for float32 operands without fractions (the emulator's software exp2/log2 run
    several per element): a * b is exact in double (48 bits), and the error of the double sum is exact (TwoSum),
    so the exact a * b + c is sum + error; rounding to odd means an inexact sum ends in a 1 bit."""
    product = a * b
    total = product + c
    back = total - product
    error = (product - (total - back)) + (c - back)
    if error != 0 and _FLOAT64.pack(total)[0] & 1 == 0:  # little-endian: the lowest mantissa bit is in byte 0
        total = math.nextafter(total, math.inf if error > 0 else -math.inf)
    return total


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
    Ops.MULACC: multiply_add,
    Ops.RECIPROCAL: _reciprocal,
    Ops.SQRT: _safe_sqrt,
    Ops.EXP2: _safe_exp2,
    Ops.LOG2: _safe_log2,
    Ops.SIN: _sin,
    Ops.TRUNC: _trunc,
    Ops.FDIV: lambda a, b: a / b
    if b != 0
    else (math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)),
    Ops.POW: _pow,
}


@dataclass(frozen=True)
class EdgeCase:
    """What `op` computes where C or the hardware leaves it open. `examples` are (dtype, operands, expected) rows
    that the tests run on every backend. When the op's own function (_ALU_FUNCTIONS) already computes the rule,
    `applies` is None; otherwise, where `applies(dtype, operands)`, the result is `result(dtype, operands)`."""

    name: str
    op: Ops
    examples: tuple[tuple[DType, tuple[Any, ...], Any], ...]
    applies: Callable[[DType, tuple[Any, ...]], bool] | None = None
    result: Callable[[DType, tuple[Any, ...]], Any] | None = None


def _integer(dtype: DType) -> bool:
    return dtype.kind in ("int", "uint")


def _shift_out_of_range(dtype: DType, x: tuple[Any, ...]) -> bool:
    return _integer(dtype) and not 0 <= x[1] < dtype.bitsize


EDGE_CASES: tuple[EdgeCase, ...] = (
    EdgeCase(
        "integer division by zero is 0 (C: undefined, x86: a trap)",
        Ops.IDIV,
        ((dtypes.int32, (7, 0), 0), (dtypes.uint8, (200, 0), 0), (dtypes.int64, (-5, 0), 0)),
        lambda dt, x: _integer(dt) and x[1] == 0,
        lambda dt, x: 0,
    ),
    EdgeCase(
        "integer remainder by zero is 0",
        Ops.MOD,
        ((dtypes.int32, (7, 0), 0), (dtypes.uint32, (9, 0), 0)),
        lambda dt, x: _integer(dt) and x[1] == 0,
        lambda dt, x: 0,
    ),
    EdgeCase(
        "INT_MIN / -1 wraps to INT_MIN (C: undefined, x86: a trap)",
        Ops.IDIV,
        ((dtypes.int32, (-(2**31), -1), -(2**31)), (dtypes.int64, (-(2**63), -1), -(2**63))),
    ),
    EdgeCase("INT_MIN % -1 is 0", Ops.MOD, ((dtypes.int32, (-(2**31), -1), 0),)),
    EdgeCase(
        "a shift by a negative amount or by the width or more is 0 (C: undefined, x86: the amount mod width)",
        Ops.SHL,
        ((dtypes.int32, (1, 32), 0), (dtypes.uint32, (3, 40), 0), (dtypes.uint8, (1, 8), 0)),
        _shift_out_of_range,
        lambda dt, x: 0,
    ),
    EdgeCase(
        "a right shift by the width or more is 0",
        Ops.SHR,
        ((dtypes.uint32, (0xFFFFFFFF, 32), 0), (dtypes.int32, (12345, 33), 0)),
        _shift_out_of_range,
        lambda dt, x: 0,
    ),
    EdgeCase(
        "float max propagates NaN from either operand (numpy's maximum; C's fmax would drop it)",
        Ops.MAX,
        ((dtypes.float32, (math.nan, 1.0), math.nan), (dtypes.float32, (1.0, math.nan), math.nan)),
    ),
    EdgeCase(
        "float division by zero is an infinity with the product of the signs, 0/0 is NaN",
        Ops.FDIV,
        ((dtypes.float32, (1.0, -0.0), -math.inf), (dtypes.float32, (0.0, 0.0), math.nan)),
    ),
    EdgeCase(
        "pow: overflow is an infinity, a negative base to a fractional power NaN, 0 to a negative power inf",
        Ops.POW,
        (
            (dtypes.float32, (10.0, 100.0), math.inf),
            (dtypes.float32, (-2.0, 0.5), math.nan),
            (dtypes.float32, (0.0, -1.0), math.inf),
            (dtypes.float32, (-10.0, 101.0), -math.inf),
        ),
    ),
    EdgeCase(
        "log2 of 0 is -inf, of a negative number NaN",
        Ops.LOG2,
        ((dtypes.float32, (0.0,), -math.inf), (dtypes.float32, (-1.0,), math.nan)),
    ),
    EdgeCase("sqrt of a negative number is NaN", Ops.SQRT, ((dtypes.float32, (-4.0,), math.nan),)),
    EdgeCase("exp2 overflow is inf", Ops.EXP2, ((dtypes.float32, (200.0,), math.inf),)),
    EdgeCase("reciprocal of -0.0 is -inf", Ops.RECIPROCAL, ((dtypes.float32, (-0.0,), -math.inf),)),
    EdgeCase("trunc keeps the sign of a zero result", Ops.TRUNC, ((dtypes.float32, (-0.5,), -0.0),)),
    EdgeCase(
        "a float multiply-add (MULACC, what sums of products become) rounds once, as an FMA does",
        Ops.MULACC,
        ((dtypes.float32, (1 + 2**-12, 1 + 2**-12, -(1 + 2**-11)), 2**-24),),
    ),
)
_EDGE_CASES_BY_OP: dict[Ops, tuple[EdgeCase, ...]] = {
    op: tuple(case for case in EDGE_CASES if case.op is op) for op in {case.op for case in EDGE_CASES}
}


def exec_alu(op: Ops, dtype: DType, operands: tuple[Any, ...]) -> Any:
    """The value of `op` on Python scalars, converted to `dtype` (bool for comparisons)."""
    function = _ALU_FUNCTIONS.get(op)
    if function is None:
        raise NotImplementedError(f"no Python semantics for {op!r}")
    for case in _EDGE_CASES_BY_OP.get(op, ()):
        if case.applies is not None and case.result is not None and case.applies(dtype, operands):
            return truncate(case.result(dtype, operands), dtype)
    if op is Ops.SHR and dtype.kind == "uint":
        operands = (truncate(operands[0], dtype) & ((1 << dtype.bitsize) - 1), operands[1])
    if op is Ops.MULACC and dtype.scalar() is dtypes.float64:
        result = multiply_add(operands[0], operands[1], operands[2], round_to_odd=False)
    else:
        result = function(*operands)
    if dtype.kind == "bool" or op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        return bool(result)
    return truncate(result, dtype if dtype.count == 1 else dtype.scalar())
