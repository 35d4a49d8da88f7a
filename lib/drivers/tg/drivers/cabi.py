"""How records cross a C function call by value on x86-64 System V (and why a shadow type is needed).

Generated records place every member at libclang's offset, with explicit padding bytes and bitfield storage
bytes. libffi classifies a struct argument from its ctypes members, so those padding bytes would turn an SSE
eightbyte into an INTEGER one (`struct {float a; double b;}` would travel in a general register), and ctypes
refuses unions by value altogether. So calls never hand a record to libffi: each record passed or returned by
value gets a *shadow* structure whose members make libffi choose exactly the registers (or the stack) that the
ABI chooses for the C type, computed here from the record's real members. The record's bytes are copied into
the shadow for the call and out of it for the result.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

INTEGER, SSE, X87, NONE = "INTEGER", "SSE", "X87", "NONE"
_MACHINE = platform.machine().lower()
_GENERAL_REGISTERS, _VECTOR_REGISTERS = 6, 8


@dataclass(frozen=True)
class Leaf:
    """A scalar inside a record: its byte offset, size, ABI class and natural alignment (1 for bitfield bytes)."""

    offset: int
    size: int
    kind: str
    align: int
    bitfield: bool = False


def is_record(ctype: Any) -> bool:
    from tg.drivers.cbind import _Record

    return isinstance(ctype, type) and issubclass(ctype, _Record)


def leaves(ctype: Any, base: int = 0) -> list[Leaf]:
    """Every scalar of CTYPE (records and arrays flattened), at its offset from BASE."""
    from tg.drivers.cbind import Anonymous, BitField, layout_of

    if is_record(ctype):
        found: list[Leaf] = []
        members = layout_of(ctype)
        if not members:  # a record without a layout: its bytes are all we know
            return [Leaf(base, ctypes.sizeof(ctype), INTEGER, 1)] if ctypes.sizeof(ctype) else []
        for member in members:
            if isinstance(member, BitField):
                storage = (member.bit + member.width + 7) // 8
                found.append(Leaf(base + member.offset, storage, INTEGER, 1, bitfield=True))
            elif isinstance(member, Anonymous):
                found += leaves(member.ctype, base + member.offset)
            else:
                found += leaves(member.ctype, base + member.offset)
        return found
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        element: Any = ctype._type_
        count: int = ctype._length_  # type: ignore[assignment]  # (typeshed types the class attribute as a property)
        step = ctypes.sizeof(element)
        return [leaf for i in range(count) for leaf in leaves(element, base + i * step)]
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure | ctypes.Union):
        return [
            leaf
            for name, *_ in getattr(ctype, "_fields_", ())
            for leaf in leaves(_field_type(ctype, name), base + getattr(ctype, name).offset)
        ]
    size = ctypes.sizeof(ctype)
    kind = SSE if ctype in (ctypes.c_float, ctypes.c_double) else X87 if ctype is ctypes.c_longdouble else INTEGER
    return [Leaf(base, size, kind, ctypes.alignment(ctype))]


def _field_type(ctype: Any, name: str) -> Any:
    return next(f[1] for f in ctype._fields_ if f[0] == name)


def classify(record: Any) -> list[str] | None:
    """The class of each eightbyte of RECORD when passed by value, or None for MEMORY (the stack / a hidden
    pointer). Follows the System V x86-64 psABI section 3.2.3."""
    size = ctypes.sizeof(record)
    if size > 16 or size == 0:
        return None
    classes = [NONE] * ((size + 7) // 8)
    found = leaves(record)
    if any(leaf.kind == X87 for leaf in found):
        return [X87] if len(found) == 1 and size == 16 else None
    for leaf in found:
        if leaf.offset % leaf.align:
            return None  # an unaligned member puts the whole record in memory
        for eightbyte in range(leaf.offset // 8, (leaf.offset + leaf.size - 1) // 8 + 1):
            current = classes[eightbyte]
            classes[eightbyte] = leaf.kind if current in (NONE, leaf.kind) else INTEGER
    while classes and classes[-1] == NONE:  # trailing padding travels in no register
        classes.pop()
    return [INTEGER if c == NONE else c for c in classes]


def shadow_type(record: Any, alignment: int = 8) -> Any:
    """A ctypes structure that libffi passes and returns exactly as the C ABI does RECORD."""
    cached = record.__dict__.get("_abi_shadow_")
    if cached is not None:
        return cached
    classes = classify(record)
    if classes == [X87]:
        # A lone long double travels like a long double (returned in st0); libffi only knows that for the scalar.
        # A subclass keeps ctypes from converting the result to a Python float, so no precision is lost.
        shadow = type(f"{record.__name__}_abi", (ctypes.c_longdouble,), {"_small_memory_": False})
        record._abi_shadow_ = shadow
        return shadow
    if classes is not None:
        fields: list[tuple[str, Any]] = [
            (f"eightbyte{i}", ctypes.c_double if c == SSE else ctypes.c_uint64) for i, c in enumerate(classes)
        ]
    else:
        # More than 16 bytes is MEMORY for libffi as well; a smaller record that the ABI puts in memory (unaligned
        # members) is padded past 16 bytes, which is exact for returns and checked by `plan_call` for arguments.
        words = max(3, (ctypes.sizeof(record) + 7) // 8)
        first = ctypes.c_longdouble if alignment >= 16 else ctypes.c_uint64
        fields = [("first", first), ("rest", ctypes.c_uint64 * (words - ctypes.sizeof(first) // 8))]
    small_memory = classes is None and ctypes.sizeof(record) <= 16
    record._abi_shadow_ = type(
        f"{record.__name__}_abi", (ctypes.Structure,), {"_fields_": fields, "_small_memory_": small_memory}
    )
    return record._abi_shadow_


def _registers(ctype: Any) -> tuple[int, int] | None:
    """(general, vector) registers an argument of CTYPE needs, or None when it goes on the stack."""
    if is_record(ctype):
        classes = classify(ctype)
        if classes is None or classes == [X87]:
            return None
        return classes.count(INTEGER), classes.count(SSE)
    if ctype in (ctypes.c_float, ctypes.c_double):
        return 0, 1
    if ctype is ctypes.c_longdouble:
        return None
    return 1, 0


def _check_stack_order(restype: Any, argtypes: Sequence[Any]) -> None:
    """Refuse a call where a padded small in-memory record would shift later stack arguments."""
    general = _GENERAL_REGISTERS - (1 if is_record(restype) and classify(restype) is None else 0)
    vector = _VECTOR_REGISTERS
    padded_before = None
    for index, argtype in enumerate(argtypes):
        needs = _registers(argtype)
        on_stack = needs is None or needs[0] > general or needs[1] > vector
        if on_stack and padded_before is not None:
            raise TypeError(
                f"argument {padded_before} (a record the ABI passes in memory) precedes stack argument {index}; "
                "libffi cannot place it exactly"
            )
        if needs is not None and not on_stack:
            general, vector = general - needs[0], vector - needs[1]
        if is_record(argtype) and shadow_type(argtype)._small_memory_:
            padded_before = index


@dataclass(frozen=True)
class CallPlan:
    """What libffi sees for a function with records by value, and how to convert to and from it."""

    restype: Any
    argtypes: list[Any]
    convert_args: Callable[[Sequence[Any]], list[Any]]
    convert_result: Callable[[Any], Any]


def needs_plan(restype: Any, argtypes: Sequence[Any] | None) -> bool:
    """Whether a call passes or returns a record by value. The classification here is x86-64 System V's; on other
    machines records are handed to ctypes as they are."""
    if _MACHINE not in ("x86_64", "amd64"):
        return False
    return is_record(restype) or any(is_record(a) for a in argtypes or ())


def plan_call(restype: Any, argtypes: Sequence[Any]) -> CallPlan:
    """Replace every record passed or returned by value with its shadow type."""
    _check_stack_order(restype, argtypes)
    shadows = [shadow_type(a, _alignment(a)) if is_record(a) else None for a in argtypes]

    def convert_args(args: Sequence[Any]) -> list[Any]:
        converted = list(args)
        for index, shadow in enumerate(shadows):
            if shadow is not None and index < len(converted):
                converted[index] = _to_shadow(converted[index], argtypes[index], shadow)
        return converted

    def convert_result(value: Any) -> Any:
        if not is_record(restype):
            return value
        result = restype()
        ctypes.memmove(ctypes.addressof(result), ctypes.addressof(value), ctypes.sizeof(restype))
        return result

    ffi_restype = shadow_type(restype, _alignment(restype)) if is_record(restype) else restype
    ffi_argtypes = [shadow if shadow is not None else a for shadow, a in zip(shadows, argtypes, strict=True)]
    return CallPlan(ffi_restype, ffi_argtypes, convert_args, convert_result)


def _alignment(record: Any) -> int:
    return record.__dict__.get("_c_align_", max((leaf.align for leaf in leaves(record)), default=1))


def _to_shadow(value: Any, record: Any, shadow: type) -> Any:
    if not isinstance(value, record):
        raise TypeError(f"expected {record.__name__} by value, got {type(value).__name__}")
    copy = shadow()
    ctypes.memmove(ctypes.addressof(copy), ctypes.addressof(value), ctypes.sizeof(record))
    return copy
