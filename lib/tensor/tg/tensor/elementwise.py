"""Elementwise ops: arithmetic, comparisons, `where`, `maximum`/`minimum` and bitwise ops, with broadcasting.

Operands are first promoted to one dtype (see tg.tensor.promotion) and broadcast to one shape; then each op is one
ALU node, or a few when the IR's primitive differs from numpy's meaning: integer `//` and `%` floor (the IR
truncates) and guard division by zero. Unary math functions live in tg.tensor.unary.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from tg.codegen import DType, Ops, UOp, dtypes, least_upper_dtype
from tg.tensor.base import Operand, TensorBase, as_tensor
from tg.tensor.creation import const_of_shape
from tg.tensor.errors import ArgumentError
from tg.tensor.fp8 import is_fp8
from tg.tensor.promotion import broadcast_shapes, check_scalar_fits, dtype_name, is_python_scalar, result_dtype
from tg.tensor.symbolic import is_symbolic_shape

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def alu(op: Ops, *operands: TensorBase) -> Tensor:
    """One ALU node over operands that already share a shape (and a dtype, except WHERE's condition)."""
    for operand in operands:  # (a loop, not any(): alu runs for every op of every graph)
        if is_fp8(operand.dtype):
            return _fp8_alu(op, *operands)
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        dtype = dtypes.bool
    elif op is Ops.WHERE:
        dtype = operands[1].dtype
    else:
        dtype = operands[0].dtype
    first = operands[0]
    return first._wrap(UOp(op, dtype, tuple([operand.uop for operand in operands])))


def _fp8_alu(op: Ops, *operands: TensorBase) -> Tensor:
    """fp8 arithmetic in float32 (exact for every fp8 input), rounded back once: renderers have no fp8 ALU."""
    fp8_dtype = next(operand.dtype for operand in operands if is_fp8(operand.dtype))
    result = alu(op, *(operand.float() if is_fp8(operand.dtype) else operand for operand in operands))
    return result if result.dtype is dtypes.bool else result.cast(fp8_dtype)


def _as_tensor(value: Operand, like: Tensor, dtype: DType) -> Tensor:
    """`value` as a tensor of `dtype` on `like`'s device (a Python scalar becomes a lazy constant)."""
    if is_python_scalar(value):
        check_scalar_fits(value, dtype)
        return like._wrap(const_of_shape(value, (), dtype, like.device))
    if value.device != like.device:
        raise ValueError(f"operands are on different devices: {like.device} and {value.device}")
    return value.cast(dtype)


def broadcast(*operands: Operand, dtype: DType | None = None, like: Tensor | None = None) -> list[Tensor]:
    """Operands as tensors of one dtype (the promoted one unless `dtype` is given) and one broadcast shape.

    Python scalars stay weak in the promotion; other non-tensors (lists, numpy arrays) become tensors first.
    `like` gives the device when every operand is a Python scalar.
    """
    if _tensors_of_one_kind(operands, dtype):
        shape = operands[0].shape
        if all(operand.shape == shape for operand in operands[1:]):
            return list(operands)
        shape = broadcast_shapes(*(operand.shape for operand in operands))
        return [operand.expand(shape) if operand.shape != shape else operand for operand in operands]
    if len(operands) == 2 and (pair := _tensor_and_scalar(operands, dtype)) is not None:
        return pair
    tensors_seen = [operand for operand in operands if hasattr(operand, "uop")]
    like = tensors_seen[0] if tensors_seen else like
    assert like is not None, "broadcast needs a tensor operand or `like`"
    operands = tuple(
        operand if is_python_scalar(operand) or hasattr(operand, "uop") else type(like)(operand, device=like.device)
        for operand in operands
    )
    common = result_dtype(*operands) if dtype is None else dtype
    tensors = [_as_tensor(operand, like, common) for operand in operands]
    shape = broadcast_shapes(*(tensor.shape for tensor in tensors))
    return [tensor.expand(shape) if tensor.shape != shape else tensor for tensor in tensors]


def _tensors_of_one_kind(operands: tuple[Operand, ...], dtype: DType | None) -> bool:
    """Whether the operands are tensors of one dtype (`dtype`, when given) and device: what `a * b` on two tensors
    usually is. The general path would leave them as they are and only broadcast their shapes."""
    first = operands[0]
    if not hasattr(first, "uop") or (dtype is not None and first.dtype is not dtype):
        return False
    return all(
        hasattr(operand, "uop") and operand.dtype is first.dtype and operand.device == first.device
        for operand in operands[1:]
    )


_PLAIN_SCALARS = (bool, int, float)


def _tensor_and_scalar(operands: tuple[Operand, Operand], dtype: DType | None) -> list[Tensor] | None:
    """`broadcast` of a tensor and a plain Python scalar that does not change the tensor's dtype (`x * 2`, `x + 1.0`:
    most of a model's scalars), built directly: the constant expanded to the tensor's shape, the same nodes the
    general path makes, without its per-operand conversions, casts and shape checks (about 10x less Python).
    None when the general path is needed: a symbolic or numpy scalar, a promotion, a symbolic shape, or no_grad
    (where every step of the general path adds its own DETACH)."""
    first, second = operands
    scalar_first = type(first) in _PLAIN_SCALARS
    tensor, scalar = (second, first) if scalar_first else (first, second)
    if type(scalar) not in _PLAIN_SCALARS or not hasattr(tensor, "uop") or tensor.no_grad:
        return None
    common = result_dtype(tensor, scalar) if dtype is None else dtype
    shape = tensor.shape
    if common is not tensor.dtype or is_symbolic_shape(shape):
        return None
    check_scalar_fits(scalar, common)
    constant = tensor._wrap(expanded_constant(repr(scalar), scalar, shape, common, tensor.device))
    return [constant, tensor] if scalar_first else [tensor, constant]


@functools.lru_cache(maxsize=1024)
def expanded_constant(text: str, value: bool | int | float, shape: tuple[int, ...], dtype: DType, device: str) -> UOp:
    """const_of_shape, kept for the constants a model uses again on every call (`text`, the value's repr, keys it:
    0.0 and -0.0, or 1 and True, are equal in Python but distinct constants). The nodes hold no buffer."""
    return const_of_shape(value, shape, dtype, device)


_BITWISE_NAMES = {
    Ops.AND: "bitwise and (&)",
    Ops.OR: "bitwise or (|)",
    Ops.XOR: "bitwise xor (^)",
    Ops.SHL: "<<",
    Ops.SHR: ">>",
}


def _operands(tensor: TensorBase, other: Operand, reverse: bool) -> list[Tensor]:
    """`tensor op other` (or `other op tensor` for the reflected operators) as two broadcast tensors."""
    return broadcast(other, tensor) if reverse else broadcast(tensor, other)


def _require(condition: bool, what: str, *dtypes_seen: DType) -> None:
    if not condition:
        names = " and ".join(dtype_name(dt) for dt in dtypes_seen)
        raise TypeError(f"{what} is not supported for {names}")


def in_float32_when_half(x: TensorBase, compute: Callable[[Tensor], Tensor]) -> Tensor:
    """Apply `compute` to a float tensor; 16-bit floats go through float32 and round once at the end."""
    tensor = as_tensor(x) if dtypes.is_float(x.dtype) else x.cast(dtypes.default_float)
    if tensor.dtype in (dtypes.float16, dtypes.bfloat16):
        return compute(tensor.cast(dtypes.float32)).cast(tensor.dtype)
    return compute(tensor)


class ElementwiseOps(TensorBase):
    """Arithmetic (`+ - * / // % **`), comparisons, `where`, `maximum`/`minimum`, bitwise and logical ops."""

    # -------------------------------------------------------------------------------- arithmetic

    def add(self, other: Operand, reverse: bool = False) -> Tensor:
        a, b = _operands(self, other, reverse)
        if a.dtype is dtypes.bool:  # numpy: adding bools is logical or
            return alu(Ops.OR, a, b)
        return alu(Ops.ADD, a, b)

    def sub(self, other: Operand, reverse: bool = False) -> Tensor:
        a, b = _operands(self, other, reverse)
        _require(a.dtype is not dtypes.bool, "subtraction", a.dtype, b.dtype)
        return alu(Ops.SUB, a, b)

    def mul(self, other: Operand, reverse: bool = False) -> Tensor:
        a, b = _operands(self, other, reverse)
        if a.dtype is dtypes.bool:  # numpy: multiplying bools is logical and
            return alu(Ops.AND, a, b)
        return alu(Ops.MUL, a, b)

    def div(self, other: Operand, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """True division; integer operands divide as the default float. `rounding_mode` (torch's): "trunc" rounds
        the quotient toward zero, "floor" toward -inf (integers stay integers then, as in torch)."""
        if rounding_mode is not None:
            return _rounded_div(as_tensor(self), other, reverse, rounding_mode)
        a, b = _operands(self, other, reverse)
        if not dtypes.is_float(a.dtype):
            a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
        return alu(Ops.FDIV, a, b)

    def floordiv(self, other: Operand, reverse: bool = False) -> Tensor:
        """Floor division as numpy: rounds toward -inf; an integer divided by zero gives 0."""
        a, b = _operands(self, other, reverse)
        _require(a.dtype is not dtypes.bool, "//", a.dtype, b.dtype)
        if dtypes.is_float(a.dtype):  # 16-bit floats in float32, rounded once (as numpy)
            return in_float32_when_half(a, lambda x: _float_floordiv(x, b.cast(x.dtype)))
        return _int_divmod(a, b)[0]

    def mod(self, other: Operand, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor, as numpy; an integer modulo zero gives 0."""
        a, b = _operands(self, other, reverse)
        _require(a.dtype is not dtypes.bool, "%", a.dtype, b.dtype)
        if dtypes.is_float(a.dtype):
            return in_float32_when_half(a, lambda x: _float_mod(x, b.cast(x.dtype)))
        return _int_divmod(a, b)[1]

    def fmod(self, other: Operand) -> Tensor:
        """Remainder with the sign of the dividend (C's fmod, torch.fmod), where `mod` takes the divisor's.

        Floats: |a| mod |b| carries a's sign (exact for the common cases; NaN for b == 0 or an infinite a, a itself
        for an infinite b). Integers: the truncating remainder; modulo zero gives 0, as numpy."""
        a, b = _operands(self, other, False)
        _require(a.dtype is not dtypes.bool, "fmod", a.dtype, b.dtype)
        if dtypes.is_float(a.dtype):
            return in_float32_when_half(a, lambda x: _float_mod(x.abs(), b.cast(x.dtype).abs()).copysign(x))
        remainder = _int_divmod(a, b)[1]
        if dtypes.is_unsigned(a.dtype):
            return remainder
        takes_divisor_sign = (remainder != 0) & ((remainder < 0) != (a < 0))
        return takes_divisor_sign.where(remainder - b, remainder)

    def neg(self) -> Tensor:
        if self.dtype is dtypes.bool:
            return self.logical_not()
        return alu(Ops.NEG, self)

    def pow(self, exponent: Operand, reverse: bool = False) -> Tensor:
        base, power = _operands(self, exponent, reverse)
        _require(base.dtype is not dtypes.bool, "**", base.dtype)
        if dtypes.is_int(base.dtype):
            if isinstance(exponent, int) and not reverse:
                return _int_pow_by_constant(base, exponent)
            return _int_pow(base, power)
        return in_float32_when_half(base, lambda x: alu(Ops.POW, x, power.cast(x.dtype)))

    if TYPE_CHECKING:  # (the operators are the methods above; typed here as binary, as `x += y` needs them)

        def __add__(self, other: Operand) -> Tensor: ...
        def __sub__(self, other: Operand) -> Tensor: ...
        def __mul__(self, other: Operand) -> Tensor: ...
        def __truediv__(self, other: Operand) -> Tensor: ...
        def __floordiv__(self, other: Operand) -> Tensor: ...
        def __mod__(self, other: Operand) -> Tensor: ...
        def __pow__(self, other: Operand) -> Tensor: ...
        def __neg__(self) -> Tensor: ...

    else:
        __add__ = add
        __sub__ = sub
        __mul__ = mul
        __truediv__ = div
        __floordiv__ = floordiv
        __mod__ = mod
        __pow__ = pow
        __neg__ = neg

    def __radd__(self, other: Operand) -> Tensor:
        return self.add(other, reverse=True)

    def __rsub__(self, other: Operand) -> Tensor:
        return self.sub(other, reverse=True)

    def __rmul__(self, other: Operand) -> Tensor:
        return self.mul(other, reverse=True)

    def __rtruediv__(self, other: Operand) -> Tensor:
        return self.div(other, reverse=True)

    def __rfloordiv__(self, other: Operand) -> Tensor:
        return self.floordiv(other, reverse=True)

    def __rmod__(self, other: Operand) -> Tensor:
        return self.mod(other, reverse=True)

    def __rpow__(self, other: Operand) -> Tensor:
        return self.pow(other, reverse=True)

    # -------------------------------------------------------------------------------- comparisons and selection

    def _comparison_operands(self, other: Operand) -> list[Tensor]:
        """Both operands in one dtype; a Python int beyond the tensor's int dtype compares in a wider type."""
        try:
            return broadcast(self, other)
        except OverflowError:
            wider = dtypes.int64 if dtypes.min(dtypes.int64) <= other <= dtypes.max(dtypes.int64) else dtypes.float64
            return broadcast(self, other, dtype=least_upper_dtype(self.dtype, wider))

    def __lt__(self, other: Operand) -> Tensor:
        return alu(Ops.CMPLT, *self._comparison_operands(other))

    def __gt__(self, other: Operand) -> Tensor:
        a, b = self._comparison_operands(other)
        return alu(Ops.CMPLT, b, a)

    def __le__(self, other: Operand) -> Tensor:
        a, b = self._comparison_operands(other)  # not (b < a) would call NaN <= 1 true; IEEE says false
        return alu(Ops.OR, alu(Ops.CMPLT, a, b), alu(Ops.CMPEQ, a, b))

    def __ge__(self, other: Operand) -> Tensor:
        a, b = self._comparison_operands(other)
        return alu(Ops.OR, alu(Ops.CMPLT, b, a), alu(Ops.CMPEQ, a, b))

    def __eq__(self, other: Operand) -> Tensor:  # type: ignore[override]
        return alu(Ops.CMPEQ, *self._comparison_operands(other))

    def __ne__(self, other: Operand) -> Tensor:  # type: ignore[override]
        return alu(Ops.CMPNE, *self._comparison_operands(other))

    def eq(self, other: Operand) -> Tensor:
        return self == other

    def ne(self, other: Operand) -> Tensor:
        return self != other

    def where(self, x: Operand, y: Operand) -> Tensor:
        """`x` where this (as bool) is true, else `y`; x and y promote together, all three broadcast."""
        x, y = broadcast(x, y, like=as_tensor(self))
        condition = self.cast(dtypes.bool)
        if condition.shape != x.shape:  # (the common case, a condition of the branches' shape, needs no expand)
            shape = broadcast_shapes(condition.shape, x.shape)
            condition, x, y = (t.expand(shape) if t.shape != shape else t for t in (condition, x, y))
        return alu(Ops.WHERE, condition, x, y)

    def maximum(self, other: Operand) -> Tensor:
        """The larger of two values; NaN wins, as in numpy. Equal values split the gradient evenly (as torch)."""
        a, b = broadcast(self, other)
        a_wins = alu(Ops.CMPLT, b, a)
        if dtypes.is_float(a.dtype):
            a_wins = alu(Ops.OR, a_wins, a.isnan())
        return alu(Ops.WHERE, a_wins, a, _tie_goes_to_b(a, b))

    def minimum(self, other: Operand) -> Tensor:
        """The smaller of two values; NaN wins, as in numpy. Equal values split the gradient evenly (as torch)."""
        a, b = broadcast(self, other)
        a_wins = alu(Ops.CMPLT, a, b)
        if dtypes.is_float(a.dtype):
            a_wins = alu(Ops.OR, a_wins, a.isnan())
        return alu(Ops.WHERE, a_wins, a, _tie_goes_to_b(a, b))

    def clip(self, min_: Operand | None = None, max_: Operand | None = None) -> Tensor:
        """Values below min_ become min_, above max_ max_, NaN stays; the gradient passes at the bounds (torch's
        clamp; relu6 and hardtanh, whose gradient is 0 there, are written separately)."""
        if min_ is None and max_ is None:
            raise ArgumentError("clip needs min_ or max_ (or both), as torch.clamp")
        result = as_tensor(self) if min_ is None else (self < min_).where(min_, self)
        return result if max_ is None else (result > max_).where(max_, result)

    clamp = clip

    def relu(self) -> Tensor:
        """max(x, 0) with NaN kept (as torch): `(x > 0).where(x, 0)` would turn NaN into 0."""
        return (self <= 0).where(0, self)

    # -------------------------------------------------------------------------------- bitwise and logical

    def _bitwise(self, op: Ops, other: Operand, reverse: bool) -> Tensor:
        a, b = _operands(self, other, reverse)
        _require(not dtypes.is_float(a.dtype), _BITWISE_NAMES[op], a.dtype)
        return alu(op, a, b)

    def bitwise_and(self, other: Operand, reverse: bool = False) -> Tensor:
        return self._bitwise(Ops.AND, other, reverse)

    def bitwise_or(self, other: Operand, reverse: bool = False) -> Tensor:
        return self._bitwise(Ops.OR, other, reverse)

    def bitwise_xor(self, other: Operand, reverse: bool = False) -> Tensor:
        return self._bitwise(Ops.XOR, other, reverse)

    def lshift(self, other: Operand, reverse: bool = False) -> Tensor:
        _require(not dtypes.is_float(self.dtype) and self.dtype is not dtypes.bool, "<<", self.dtype)
        return self._bitwise(Ops.SHL, other, reverse)

    def rshift(self, other: Operand, reverse: bool = False) -> Tensor:
        _require(not dtypes.is_float(self.dtype) and self.dtype is not dtypes.bool, ">>", self.dtype)
        return self._bitwise(Ops.SHR, other, reverse)

    def bitwise_not(self) -> Tensor:
        _require(not dtypes.is_float(self.dtype), "~", self.dtype)
        if self.dtype is dtypes.bool:
            return self.logical_not()
        all_ones = dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1
        return alu(Ops.XOR, *broadcast(self, all_ones))

    def logical_not(self) -> Tensor:
        return alu(Ops.CMPEQ, *broadcast(self, False if self.dtype is dtypes.bool else 0))

    if TYPE_CHECKING:  # (as the arithmetic operators above)

        def __and__(self, other: Operand) -> Tensor: ...
        def __or__(self, other: Operand) -> Tensor: ...
        def __xor__(self, other: Operand) -> Tensor: ...
        def __lshift__(self, other: Operand) -> Tensor: ...
        def __rshift__(self, other: Operand) -> Tensor: ...
        def __invert__(self) -> Tensor: ...

    else:
        __and__ = bitwise_and
        __or__ = bitwise_or
        __xor__ = bitwise_xor
        __lshift__ = lshift
        __rshift__ = rshift
        __invert__ = bitwise_not

    def __rand__(self, other: Operand) -> Tensor:
        return self.bitwise_and(other, reverse=True)

    def __ror__(self, other: Operand) -> Tensor:
        return self.bitwise_or(other, reverse=True)

    def __rxor__(self, other: Operand) -> Tensor:
        return self.bitwise_xor(other, reverse=True)

    def __rlshift__(self, other: Operand) -> Tensor:
        return self.lshift(other, reverse=True)

    def __rrshift__(self, other: Operand) -> Tensor:
        return self.rshift(other, reverse=True)

    def isnan(self) -> Tensor:
        return alu(Ops.CMPNE, self, self)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """Where the value is inf (if `detect_positive`) or -inf (if `detect_negative`)."""
        found = self.zeros_like(dtype=dtypes.bool)
        if not dtypes.is_float(self.dtype):
            return found
        if detect_positive:
            found = found | (self == math.inf)
        if detect_negative:
            found = found | (self == -math.inf)
        return found

    def isfinite(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self.ones_like(dtype=dtypes.bool)
        return (self - self) == 0  # inf - inf and NaN - NaN are NaN, which equals nothing


def _tie_goes_to_b(a: Tensor, b: Tensor) -> Tensor:
    """b, written so that where a == b the gradient splits half and half: b - (b - a) / 2 is b exactly at a tie
    (b - a is +0.0 there), and its derivatives are 1/2 for each. A tie of infinities (inf - inf is NaN) takes b
    itself. Integers need no gradient and take b."""
    if not dtypes.is_float(a.dtype):
        return b
    half_gap = (b - a) * 0.5
    half_gap = half_gap.isnan().where(0.0, half_gap)
    return alu(Ops.WHERE, alu(Ops.CMPEQ, a, b), b - half_gap, b)


def _rounded_div(tensor: Tensor, other: Operand, reverse: bool, rounding_mode: str) -> Tensor:
    if rounding_mode == "floor":
        return tensor.floordiv(other, reverse)
    if rounding_mode != "trunc":
        raise ValueError(f"div rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = _operands(tensor, other, reverse)
    if dtypes.is_float(a.dtype):
        return tensor.div(other, reverse).trunc()
    quotient = a.floordiv(b)
    rounded_down = (a.fmod(b) != 0) & ((a < 0) != (b < 0))  # floor went one below the truncated quotient
    return rounded_down.where(quotient + 1, quotient)


def _float_floordiv(a: Tensor, b: Tensor) -> Tensor:
    """floor(a / b), with numpy's answers where its remainder-based definition differs: a finite non-zero
    dividend over an infinite divisor of the other sign gives -1, an infinite dividend over a non-zero divisor NaN."""
    quotient = alu(Ops.FDIV, a, b).floor()
    below_zero = b.isinf() & a.isfinite() & (a != 0) & ((a < 0) != (b < 0))
    quotient = below_zero.where(-1, quotient)
    return (a.isinf() & (b != 0)).where(math.nan, quotient)


def _float_mod(a: Tensor, b: Tensor) -> Tensor:
    """a - b * floor(a / b): the remainder takes the divisor's sign, as numpy's.

    An infinite divisor would make that inf * 0: numpy keeps a finite dividend of the divisor's sign (or zero)
    and gives the divisor's infinity for one of the other sign."""
    remainder = a - b * alu(Ops.FDIV, a, b).floor()
    keeps_dividend = (a == 0) | ((a < 0) == (b < 0))
    return (b.isinf() & a.isfinite()).where(keeps_dividend.where(a, b), remainder)


def _int_divmod(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """numpy's floor division and remainder of integers, built on the IR's truncating IDIV and MOD.

    Division by zero gives 0 for both (as numpy, without its warning). For signed types, dividing by -1 is done as a
    negation: INT_MIN / -1 traps in C on x86, while numpy wraps to INT_MIN.
    """
    divides_by_zero = b == 0
    unsafe = divides_by_zero
    signed = not dtypes.is_unsigned(a.dtype)
    if signed:
        divides_by_minus_one = b == -1
        unsafe = divides_by_zero | divides_by_minus_one
    safe_b = unsafe.where(1, b)
    quotient, remainder = alu(Ops.IDIV, a, safe_b), alu(Ops.MOD, a, safe_b)
    if signed:
        rounds_wrong_way = (remainder != 0) & ((remainder < 0) != (safe_b < 0))
        quotient = rounds_wrong_way.where(quotient - 1, quotient)
        remainder = rounds_wrong_way.where(remainder + safe_b, remainder)
        quotient = divides_by_minus_one.where(-a, quotient)
    return divides_by_zero.where(0, quotient), divides_by_zero.where(0, remainder)


def _int_pow(base: Tensor, power: Tensor) -> Tensor:
    """Exact integer power by repeated squaring (wrapping like numpy); negative powers give 1/base truncated."""
    result = base.ones_like()
    square = base
    for bit in range(power.dtype.bitsize - 1 if not dtypes.is_unsigned(power.dtype) else power.dtype.bitsize):
        bit_set = (power & (1 << bit)) != 0
        result = bit_set.where(result * square, result)
        square = square * square
    if dtypes.is_unsigned(power.dtype):
        return result
    # base ** -n is 0 unless base is 1 (gives 1) or -1 (gives -1 for odd n)
    negative_result = (base == 1).where(1, (base == -1).where(((power & 1) != 0).where(-1, 1), 0)).cast(base.dtype)
    return (power < 0).where(negative_result, result)


def _int_pow_by_constant(base: Tensor, exponent: int) -> Tensor:
    """`base ** exponent` for a Python int exponent: a chain of multiplications by repeated squaring."""
    if exponent < 0:
        raise ValueError(f"integers to negative integer powers are not allowed (exponent {exponent})")
    result = None
    square = base
    while exponent:
        if exponent & 1:
            result = square if result is None else result * square
        exponent >>= 1
        if exponent:
            square = square * square
    return base.ones_like() if result is None else result
