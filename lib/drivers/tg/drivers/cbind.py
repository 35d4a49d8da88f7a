"""Runtime support for the ctypes bindings that tg-autogen writes into tg.drivers.autogen.

Generated modules import only this module and ctypes. It provides:

- `Struct` / `Union` with `layout()`, which places every field at the byte offset libclang computed, so the
  Python layout is the C compiler's layout by construction (ctypes' own layout rules are never trusted);
- `BitField`, a descriptor that reads and writes a bitfield through the record's bytes (exact, signedness aware);
- `DLL`, a lazily loaded shared library whose functions resolve on first call, with errno support; records
  passed or returned by value travel as the C ABI classifies them (see tg.drivers.cabi);
- `Opaque` records (declared, never laid out here), which cannot be instantiated by mistake;
- C integer semantics for translated macros (`c_macro`, `c_cast`, ... from tg.drivers.cint);
- `_IO`, `_IOR`, `_IOW`, `_IOWR`, `_IOC`: Linux ioctl request numbers that can also be called to run the ioctl.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tg.drivers.cabi import leaves as record_leaves
from tg.drivers.cint import CInt, c_cast, c_literal, c_macro, c_sizeof, c_truth, c_typed

__all__ = ["CInt", "c_cast", "c_literal", "c_macro", "c_sizeof", "c_truth", "c_typed", "record_leaves"]

# --------------------------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class Field:
    """A plain member at a byte offset."""

    name: str
    ctype: Any
    offset: int


@dataclass(frozen=True)
class BitField:
    """A bitfield: `width` bits starting `bit` bits after byte `offset`, of the declared integer type `ctype`."""

    name: str
    ctype: Any
    offset: int
    bit: int
    width: int


@dataclass(frozen=True)
class Anonymous:
    """An anonymous struct or union member; its fields read as fields of the enclosing record."""

    name: str
    ctype: Any
    offset: int


Member = Field | BitField | Anonymous


def _is_signed(ctype: Any) -> bool:
    if ctype in (ctypes.c_bool, ctypes.c_char):
        return False
    return ctype(-1).value == -1


class _BitFieldAccess:
    """Descriptor that reads and writes one bitfield through the bytes of the record that holds it."""

    def __init__(self, field: BitField) -> None:
        self.field = field
        self.nbytes = (field.bit + field.width + 7) // 8
        self.mask = (1 << field.width) - 1
        self.signed = _is_signed(field.ctype)

    def _raw(self, record: Any) -> memoryview:
        return memoryview(record).cast("B")[self.field.offset : self.field.offset + self.nbytes]

    def __get__(self, record: Any, owner: type | None = None) -> Any:
        if record is None:
            return self
        value = (int.from_bytes(self._raw(record), "little") >> self.field.bit) & self.mask
        if self.signed and value >> (self.field.width - 1):
            value -= 1 << self.field.width
        return bool(value) if self.field.ctype is ctypes.c_bool else value

    def __set__(self, record: Any, value: int) -> None:
        raw = self._raw(record)
        word = int.from_bytes(raw, "little") & ~(self.mask << self.field.bit)
        word |= (int(value) & self.mask) << self.field.bit
        raw[:] = word.to_bytes(self.nbytes, "little")


class _Forward:
    """Descriptor that forwards a name to a member of an anonymous struct or union."""

    def __init__(self, anonymous: str, name: str) -> None:
        self.anonymous, self.name = anonymous, name

    def __get__(self, record: Any, owner: type | None = None) -> Any:
        if record is None:
            return self
        return getattr(getattr(record, self.anonymous), self.name)

    def __set__(self, record: Any, value: Any) -> None:
        setattr(getattr(record, self.anonymous), self.name, value)


class _Record:
    """Shared behaviour of Struct and Union: keyword construction, `layout()`, a readable repr."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        opaque = type(self).__dict__.get("_opaque_")
        if opaque is not None:
            raise TypeError(f"{type(self).__name__} is opaque here ({opaque}); use it only through pointers")
        super().__init__()
        names = member_names(type(self))
        for name, value in zip(names, args, strict=False):
            setattr(self, name, value)
        for name, value in kwargs.items():
            if name not in names:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            setattr(self, name, value)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in member_names(type(self))[:8])
        return f"{type(self).__name__}({shown})"

    @classmethod
    def opaque(cls, reason: str) -> None:
        """Mark the record as opaque: known by name only (REASON says why), usable through pointers only."""
        _set_class_attribute(cls, "_opaque_", reason)

    @classmethod
    def layout(cls, size: int, members: Sequence[Member], align: int | None = None) -> None:
        """Give the record its C layout: SIZE bytes with every member at the offset libclang reported.

        ALIGN, the C alignment, is given when it exceeds 8 (it decides stack slots of by-value arguments).
        """
        if align is not None:
            _set_class_attribute(cls, "_c_align_", align)
        is_union = issubclass(cls, ctypes.Union)
        fields, packed = _ctypes_fields(members, size, is_union)
        if packed:
            _set_class_attribute(cls, "_pack_", 1)
        _set_class_attribute(cls, "_anonymous_", tuple(m.name for m in members if isinstance(m, Anonymous)))
        record: Any = cls  # a ctypes Structure or Union subclass: _fields_ and sizeof are ctypes' (not _Record's)
        record._fields_ = fields  # through ctypes' metaclass, which computes the layout
        names: list[str] = []
        for member in members:
            if isinstance(member, BitField):
                _set_class_attribute(cls, member.name, _BitFieldAccess(member))
                names.append(member.name)
            elif isinstance(member, Anonymous):
                for inner in member_names(member.ctype):
                    if not isinstance(cls.__dict__.get(inner), _ctypes_field_type):
                        _set_class_attribute(cls, inner, _Forward(member.name, inner))
                    names.append(inner)
            else:
                names.append(member.name)
        _set_class_attribute(cls, "_members_", tuple(members))
        _set_class_attribute(cls, "_member_names_", tuple(names))
        if ctypes.sizeof(record) != size:
            raise TypeError(f"{cls.__name__}: ctypes size {ctypes.sizeof(record)} differs from the C size {size}")


_ctypes_field_type = type(vars(type("_Probe", (ctypes.Structure,), {"_fields_": [("x", ctypes.c_int)]}))["x"])


def _set_class_attribute(cls: type, name: str, value: Any) -> None:
    # ctypes' metaclasses (CPython 3.11) set class attributes with PyObject_GenericSetAttr, which does not
    # invalidate the type attribute cache: a name looked up on the class before it is set would keep reading
    # as missing. So this module never looks a name up on a record class before setting it (it reads
    # cls.__dict__ instead), and sets attributes only here.
    setattr(cls, name, value)


def member_names(cls: type) -> tuple[str, ...]:
    """The C-visible member names of a laid-out record (those of anonymous members included)."""
    return cls.__dict__.get("_member_names_", ())


def layout_of(cls: type) -> tuple[Member, ...]:
    """The members passed to layout(), in order (empty for an opaque record)."""
    return cls.__dict__.get("_members_", ())


def _ctypes_fields(members: Sequence[Member], size: int, is_union: bool) -> tuple[list[tuple[str, Any]], bool]:
    """Return ctypes `_fields_` (with explicit padding) and whether `_pack_ = 1` is needed to hit the offsets."""
    fields: list[tuple[str, Any]] = []
    packed = False
    cursor = 0
    max_align = 1
    for index, member in enumerate(members):
        if isinstance(member, BitField):
            ctype: Any = ctypes.c_ubyte * ((member.bit + member.width + 7) // 8)
            name = f"_bits{index}_"
        else:
            ctype, name = member.ctype, member.name
        start = 0 if is_union else cursor
        if member.offset < start:
            if not isinstance(member, BitField):
                raise TypeError(f"field {member.name} overlaps the previous field")
            # Bitfields sharing bytes with the previous one: widen the previous storage instead.
            fields, cursor = _merge_bits(fields, member, cursor)
            continue
        if member.offset > start and not is_union:
            fields.append((f"_pad{index}_", ctypes.c_ubyte * (member.offset - start)))
        if is_union and member.offset:
            raise TypeError(f"union member {member.name} is not at offset 0")
        align = max(1, ctypes.alignment(ctype))  # an empty struct reports alignment 0
        packed = packed or member.offset % align != 0
        max_align = max(max_align, align)
        fields.append((name, ctype))
        end = member.offset + ctypes.sizeof(ctype)
        cursor = max(cursor, end)
    if cursor < size:
        # A union's members all start at 0, so its size filler must span the whole union.
        filler = size if is_union else size - cursor
        fields.append(("_tail_", ctypes.c_ubyte * filler))
    packed = packed or size % max_align != 0
    return fields, packed


def _merge_bits(fields: list[tuple[str, Any]], member: BitField, cursor: int) -> tuple[list[tuple[str, Any]], int]:
    name, previous = fields[-1]
    end = member.offset + (member.bit + member.width + 7) // 8
    if end > cursor:
        fields[-1] = (name, ctypes.c_ubyte * (ctypes.sizeof(previous) + end - cursor))
    return fields, max(cursor, end)


class Struct(_Record, ctypes.Structure):
    """Base of generated structs; call `layout()` once the member types exist."""


class Union(_Record, ctypes.Union):
    """Base of generated unions; call `layout()` once the member types exist."""


# --------------------------------------------------------------------------------------------------------------
# shared libraries

_ELF_MAGIC = b"\x7fELF"


def _library_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    multiarch = f"{os.uname().machine}-linux-gnu"
    for root in ("/usr/local/lib", "/usr/lib", "/lib", "/usr/lib64", "/lib64"):
        dirs += [Path(root) / multiarch, Path(root)]
    return dirs


def find_library(name: str) -> str | None:
    """Path of lib<name>.so (or its highest lib<name>.so.N), skipping linker scripts such as libc.so."""
    override = os.environ.get(f"{name.upper().replace('-', '_').replace('.', '_')}_PATH")
    if override:
        return override
    for folder in _library_dirs():
        candidates = [folder / f"lib{name}.so"] + sorted(folder.glob(f"lib{name}.so.*"), reverse=True)
        for path in candidates:
            if path.is_file() and path.open("rb").read(4) == _ELF_MAGIC:
                return str(path)
    return None


class DLL:
    """A shared library loaded on first use, so importing a binding never fails for a missing library."""

    def __init__(self, name: str, use_errno: bool = False, path: str | None = None) -> None:
        """NAME is found as lib<NAME>.so (see find_library) unless PATH names the file."""
        self.name, self.use_errno, self.path = name, use_errno, path
        self._handle: ctypes.CDLL | None = None

    @property
    def handle(self) -> ctypes.CDLL:
        if self._handle is None:
            path = self.path or find_library(self.name)
            if path is None:
                hint = f"{self.name.upper().replace('-', '_').replace('.', '_')}_PATH"
                raise OSError(f"cannot find library {self.name!r}; set {hint} to its path")
            self._handle = ctypes.CDLL(path, use_errno=self.use_errno)
        return self._handle

    def function(self, name: str, restype: Any, argtypes: Sequence[Any] | None) -> Callable[..., Any]:
        """A callable for C function `name`; the symbol is looked up on the first call."""
        return _LazyFunction(self, name, restype, argtypes)


class _LazyFunction:
    def __init__(self, dll: DLL, name: str, restype: Any, argtypes: Sequence[Any] | None) -> None:
        self.dll, self.__name__, self.restype, self.argtypes = dll, name, restype, argtypes
        self._function: Any = None
        self._plan: Any = None

    def resolve(self) -> Any:
        if self._function is None:
            function = getattr(self.dll.handle, self.__name__)
            restype, argtypes = self.restype, self.argtypes
            from tg.drivers import cabi

            if cabi.needs_plan(restype, argtypes):
                plan = cabi.plan_call(restype, list(argtypes or ()))
                restype, argtypes = plan.restype, plan.argtypes
                self._plan = plan
            function.restype = restype
            if argtypes is not None:
                function.argtypes = list(argtypes)
            self._function = function
        return self._function

    def __call__(self, *args: Any) -> Any:
        function = self.resolve()
        plan = self._plan
        if plan is None:
            return function(*args)
        return plan.convert_result(function(*plan.convert_args(args)))

    def __repr__(self) -> str:
        return f"<C function {self.__name__} in lib{self.dll.name}>"


def CFUNCTYPE(restype: Any, *argtypes: Any) -> type:  # noqa: N802
    """ctypes.CFUNCTYPE, except that records passed by value travel as the C ABI passes them (see cabi).

    Python callbacks of such a prototype receive real records; calling a C function pointer of it takes them.
    ctypes callbacks cannot return records, so a prototype that returns one is a TypeError here.
    """
    from tg.drivers import cabi

    if not cabi.needs_plan(restype, argtypes):
        return ctypes.CFUNCTYPE(restype, *argtypes)
    if cabi.is_record(restype):
        raise TypeError(f"a callback cannot return {restype.__name__} by value (ctypes callbacks return scalars)")
    plan = cabi.plan_call(restype, list(argtypes))
    base = ctypes.CFUNCTYPE(plan.restype, *plan.argtypes)

    def from_shadow(value: Any, record: Any) -> Any:
        if not cabi.is_record(record):
            return value
        copy = record()
        ctypes.memmove(ctypes.addressof(copy), ctypes.addressof(value), ctypes.sizeof(record))
        return copy

    class RecordPrototype(base):  # type: ignore[valid-type, misc]
        # ctypes' metaclass reads these from the class itself, not from its base.
        _argtypes_, _restype_, _flags_ = base._argtypes_, base._restype_, base._flags_

        def __new__(cls, *args: Any) -> Any:
            if len(args) == 1 and callable(args[0]):
                function = args[0]

                def trampoline(*raw: Any) -> Any:
                    return function(*(from_shadow(v, t) for v, t in zip(raw, argtypes, strict=True)))

                return super().__new__(cls, trampoline)
            return super().__new__(cls, *args)

        def __init__(self, *args: Any) -> None:
            pass

        def __call__(self, *args: Any) -> Any:
            return plan.convert_result(super().__call__(*plan.convert_args(args)))

    return RecordPrototype


get_errno = ctypes.get_errno
set_errno = ctypes.set_errno


# --------------------------------------------------------------------------------------------------------------
# ioctl request numbers (include/uapi/asm-generic/ioctl.h)

_IOC_NONE, _IOC_WRITE, _IOC_READ = 0, 1, 2
_IOC_NRBITS, _IOC_TYPEBITS, _IOC_SIZEBITS, _IOC_DIRBITS = 8, 8, 14, 2
_IOC_NRSHIFT, _IOC_TYPESHIFT, _IOC_SIZESHIFT, _IOC_DIRSHIFT = 0, 8, 16, 30
_IOC_NRMASK, _IOC_TYPEMASK, _IOC_SIZEMASK, _IOC_DIRMASK = 0xFF, 0xFF, 0x3FFF, 0x3


class Ioctl(int):
    """An ioctl request number; calling it on a file descriptor runs the ioctl with its argument struct."""

    argtype: Any = None

    def __call__(self, fd: int, *args: Any, **fields: Any) -> Any:
        import fcntl

        if self.argtype is None:
            return fcntl.ioctl(fd, int(self))
        argument = self.argtype(*args, **fields)
        rc = fcntl.ioctl(fd, int(self), argument, True)
        if rc != 0:
            raise OSError(f"ioctl {int(self):#x} returned {rc}")
        return argument


def _nr(value: int | str) -> int:
    return ord(value) if isinstance(value, str) else int(value)


def _IOC(direction: int, kind: int | str, nr: int, size: int | Any) -> Ioctl:  # noqa: N802
    """The request number of asm-generic/ioctl.h; SIZE may be a byte count or the argument's ctypes type."""
    argtype = None
    if not isinstance(size, int):
        argtype, size = size, ctypes.sizeof(size)
    request = Ioctl((direction << 30) | (size << 16) | (_nr(kind) << 8) | _nr(nr))
    request.argtype = argtype
    return request


def _IO(kind: int | str, nr: int) -> Ioctl:  # noqa: N802
    return _IOC(_IOC_NONE, kind, nr, 0)


def _argument_size(argtype: Any) -> Any:
    """_IOR/_IOW/_IOWR take a type (C's sizeof(T)); given an integer expression, C takes sizeof of its type."""
    if isinstance(argtype, int):
        from tg.drivers.cint import type_of

        return type_of(argtype).bits // 8
    return argtype


def _IOR(kind: int | str, nr: int, argtype: Any) -> Ioctl:  # noqa: N802
    return _IOC(_IOC_READ, kind, nr, _argument_size(argtype))


def _IOW(kind: int | str, nr: int, argtype: Any) -> Ioctl:  # noqa: N802
    return _IOC(_IOC_WRITE, kind, nr, _argument_size(argtype))


def _IOWR(kind: int | str, nr: int, argtype: Any) -> Ioctl:  # noqa: N802
    return _IOC(_IOC_READ | _IOC_WRITE, kind, nr, _argument_size(argtype))
