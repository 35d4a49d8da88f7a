"""C integer arithmetic for the function-like macros tg-autogen translates.

Python integers have no width and no signedness, so a macro such as `((Elf32_Word) -((Elf32_Sword)(tag) << 1 >> 1)
- 1)` gives -2 in Python where C gives 4294967294. Generated macro functions therefore compute with `CInt`, an
`int` that carries its C type (LP64: int 32 bits, long and long long 64) and applies C's rules on every operation:
integer promotion, the usual arithmetic conversions, wrap-around to the type's width, division that truncates
toward zero, and casts. A `CInt` is still an `int`, so callers can use results as plain numbers.

Equality (`==`, `!=`) and hashing stay Python's, so `CInt` values behave as dictionary keys; ordering comparisons
convert both sides as C does (`-1 < 1U` is false).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CType:
    """An integer type of the LP64 C ABI: its spelling, width in bits, signedness and conversion rank."""

    name: str
    bits: int
    signed: bool
    rank: int

    def wrap(self, value: int) -> int:
        """VALUE converted to this type (two's complement wrap-around, as gcc does)."""
        value &= (1 << self.bits) - 1
        if self.signed and value >> (self.bits - 1):
            value -= 1 << self.bits
        return value

    def holds(self, value: int) -> bool:
        return self.wrap(value) == value


def _types(*specs: tuple[str, int, bool, int]) -> dict[str, CType]:
    return {name: CType(name, bits, signed, rank) for name, bits, signed, rank in specs}


C_TYPES = _types(
    ("_Bool", 8, False, 0),
    ("char", 8, True, 1),
    ("signed char", 8, True, 1),
    ("unsigned char", 8, False, 1),
    ("short", 16, True, 2),
    ("unsigned short", 16, False, 2),
    ("int", 32, True, 3),
    ("unsigned int", 32, False, 3),
    ("long", 64, True, 4),
    ("unsigned long", 64, False, 4),
    ("long long", 64, True, 5),
    ("unsigned long long", 64, False, 5),
)
INT, UINT, LONG, ULONG = C_TYPES["int"], C_TYPES["unsigned int"], C_TYPES["long"], C_TYPES["unsigned long"]


class CInt(int):
    """An integer with a C type; arithmetic with other integers follows C's conversions and widths."""

    ctype: CType

    def __new__(cls, value: int, ctype: CType) -> CInt:
        obj = super().__new__(cls, ctype.wrap(int(value)))
        obj.ctype = ctype
        return obj

    def __repr__(self) -> str:
        return f"CInt({int(self)}, {self.ctype.name!r})"

    __str__ = int.__repr__  # str() is the plain number, as for any int

    # arithmetic -------------------------------------------------------------------------------------------------
    def _binary(self, other: Any, operation: Callable[[int, int], int], reflected: bool = False) -> Any:
        if isinstance(other, float) or not isinstance(other, int):
            return NotImplemented
        common = common_type(self.ctype, type_of(other))
        a, b = common.wrap(int(self)), common.wrap(int(other))
        if reflected:
            a, b = b, a
        return CInt(operation(a, b), common)

    def __add__(self, other: Any) -> Any:
        return self._binary(other, int.__add__)

    def __radd__(self, other: Any) -> Any:
        return self._binary(other, int.__add__, True)

    def __sub__(self, other: Any) -> Any:
        return self._binary(other, int.__sub__)

    def __rsub__(self, other: Any) -> Any:
        return self._binary(other, int.__sub__, True)

    def __mul__(self, other: Any) -> Any:
        return self._binary(other, int.__mul__)

    def __rmul__(self, other: Any) -> Any:
        return self._binary(other, int.__mul__, True)

    def __floordiv__(self, other: Any) -> Any:
        return self._binary(other, c_divide)

    def __rfloordiv__(self, other: Any) -> Any:
        return self._binary(other, c_divide, True)

    def __mod__(self, other: Any) -> Any:
        return self._binary(other, c_remainder)

    def __rmod__(self, other: Any) -> Any:
        return self._binary(other, c_remainder, True)

    def __and__(self, other: Any) -> Any:
        return self._binary(other, int.__and__)

    def __rand__(self, other: Any) -> Any:
        return self._binary(other, int.__and__, True)

    def __or__(self, other: Any) -> Any:
        return self._binary(other, int.__or__)

    def __ror__(self, other: Any) -> Any:
        return self._binary(other, int.__or__, True)

    def __xor__(self, other: Any) -> Any:
        return self._binary(other, int.__xor__)

    def __rxor__(self, other: Any) -> Any:
        return self._binary(other, int.__xor__, True)

    # shifts: the result has the promoted type of the left operand --------------------------------------------
    def __lshift__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        return CInt(int(self) << int(other), promote(self.ctype))

    def __rlshift__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        return CInt(int(other) << int(self), promote(type_of(other)))

    def __rshift__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        return CInt(int(self) >> int(other), promote(self.ctype))

    def __rrshift__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        return CInt(int(other) >> int(self), promote(type_of(other)))

    # unary --------------------------------------------------------------------------------------------------
    def __neg__(self) -> CInt:
        return CInt(-int(self), promote(self.ctype))

    def __pos__(self) -> CInt:
        return CInt(int(self), promote(self.ctype))

    def __invert__(self) -> CInt:
        return CInt(~int(self), promote(self.ctype))

    # ordering (equality stays Python's, see the module docstring) --------------------------------------------
    def _compare(self, other: Any, operation: Callable[[int, int], bool]) -> Any:
        if isinstance(other, float) or not isinstance(other, int):
            return NotImplemented
        common = common_type(self.ctype, type_of(other))
        return operation(common.wrap(int(self)), common.wrap(int(other)))

    def __lt__(self, other: Any) -> Any:
        return self._compare(other, int.__lt__)

    def __le__(self, other: Any) -> Any:
        return self._compare(other, int.__le__)

    def __gt__(self, other: Any) -> Any:
        return self._compare(other, int.__gt__)

    def __ge__(self, other: Any) -> Any:
        return self._compare(other, int.__ge__)

    __hash__ = int.__hash__


def c_divide(a: int, b: int) -> int:
    """C division: the quotient truncated toward zero."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def c_remainder(a: int, b: int) -> int:
    """C's %: the remainder has the sign of the dividend."""
    return a - b * c_divide(a, b)


def type_of(value: int) -> CType:
    """The C type of VALUE: its own for a CInt; for a plain Python int, the first of int, long, unsigned long
    that holds it (the type C gives a decimal constant)."""
    if isinstance(value, CInt):
        return value.ctype
    for ctype in (INT, LONG, ULONG):
        if ctype.holds(int(value)):
            return ctype
    return ULONG


def promote(ctype: CType) -> CType:
    """Integer promotion: types narrower than int compute as int."""
    return INT if ctype.rank < INT.rank else ctype


def common_type(a: CType, b: CType) -> CType:
    """The usual arithmetic conversions of C for two integer types."""
    a, b = promote(a), promote(b)
    if a == b:
        return a
    if a.signed == b.signed:
        return a if a.rank > b.rank else b
    unsigned, signed = (a, b) if not a.signed else (b, a)
    if unsigned.rank >= signed.rank:
        return unsigned
    if signed.bits > unsigned.bits:
        return signed
    return C_TYPES["unsigned " + signed.name]


def c_literal(value: int, suffix: str = "", decimal: bool = True) -> CInt:
    """An integer constant with C's type: the first type of its suffix's list (C11 6.4.4.1) that holds VALUE."""
    suffix = suffix.lower()
    unsigned, longs = "u" in suffix, suffix.count("l")
    if unsigned:
        candidates = [UINT, ULONG] if longs == 0 else [ULONG]
    elif decimal:
        candidates = [INT, LONG] if longs == 0 else [LONG]
    else:
        candidates = [INT, UINT, LONG, ULONG] if longs == 0 else [LONG, ULONG]
    if longs == 2:
        candidates = (
            [C_TYPES["unsigned long long"]] if unsigned else [C_TYPES["long long"], C_TYPES["unsigned long long"]]
        )
    for ctype in candidates:
        if ctype.holds(value):
            return CInt(value, ctype)
    return CInt(value, candidates[-1])


def c_typed(value: Any, type_name: str) -> Any:
    """VALUE (a macro's value) as the C type TYPE_NAME; non-integers are returned unchanged."""
    if isinstance(value, int) and not isinstance(value, bool):
        return CInt(value, C_TYPES[type_name])
    return value


def c_cast(ctype: Any, value: Any) -> Any:
    """C's `(T)value` for a ctypes type T: integers wrap to T's width, pointers become unsigned long addresses."""
    if ctype in (ctypes.c_float, ctypes.c_double, ctypes.c_longdouble):
        return float(value)
    integer = int(value) if not isinstance(value, float) else int(value)  # C truncates floats toward zero
    if ctype is ctypes.c_bool:
        return CInt(1 if value else 0, C_TYPES["_Bool"])
    code = getattr(ctype, "_type_", None)  # a simple ctypes type's format letter (typeshed does not declare it)
    if (
        isinstance(ctype, type)
        and issubclass(ctype, ctypes._SimpleCData)
        and isinstance(code, str)
        and code in "bBhHiIlLqQc"
    ):
        signed = code in "bhilqc"
        bits = ctypes.sizeof(ctype) * 8
        return CInt(integer, _type_for(bits, signed))
    return CInt(integer, ULONG)  # pointers, function pointers, records used as addresses


def _type_for(bits: int, signed: bool) -> CType:
    for ctype in C_TYPES.values():
        if ctype.bits == bits and ctype.signed == signed and ctype.rank > 0:
            return ctype
    raise ValueError(f"no C integer type of {bits} bits")


def c_sizeof(ctype: Any) -> CInt:
    """sizeof, which is a size_t (unsigned long) in C."""
    return CInt(ctypes.sizeof(ctype), ULONG)


def c_truth(value: Any) -> CInt:
    """The int 1 or 0 that C's `!`, `&&` and `||` give."""
    return CInt(1 if value else 0, INT)


def c_macro(function: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a translated function-like macro so that plain integer arguments enter as C constants would."""

    def call(*args: Any) -> Any:
        typed = [CInt(a, type_of(a)) if isinstance(a, int) and not isinstance(a, CInt) else a for a in args]
        return function(*typed)

    call.__wrapped__ = function  # type: ignore[attr-defined]
    return call
