"""Data types: scalars, vectors and pointers, type promotion, and bit-exact value conversion.

A `DType` is interned: `dtypes.float.vec(4) is dtypes.float.vec(4)`, so comparing and hashing dtypes is an identity
check (the UOp cache hashes one on every node it creates). Pickling goes through `_dtype_from_spec`, so an unpickled
dtype is the same object as the live one.

Value conversion (`encode`, `decode`, `truncate`) is done in Python with exact integer arithmetic: rounding is
round-to-nearest-even, subnormals are kept, and each fp8 flavour follows its own rules (see `FloatFormat`). The rules
match ml_dtypes' conversions, which the tests use as the oracle.
"""

from __future__ import annotations

import builtins
import functools
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tg.codegen.serial import enum_by_name


class AddrSpace(Enum):
    """Where a pointer points: device memory, workgroup-shared memory, or registers."""

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return enum_by_name(self)  # by name, never by number: stored IR survives a new or reordered member

    GLOBAL = "global"
    LOCAL = "local"
    REG = "reg"

    def __repr__(self) -> str:
        return f"AddrSpace.{self.name}"


@dataclass(frozen=True)
class FloatFormat:
    """Bit layout and special-value rules of a binary floating point format.

    `flavour` picks how the top of the range is used:
      "ieee": all-ones exponent holds inf (mantissa 0) and NaN; overflow rounds to inf.
      "fn":   (OCP e4m3) no inf; only all-ones exponent and mantissa is NaN; overflow and inf become NaN.
      "fnuz": no inf, no negative zero; the pattern 0x80 (sign set, rest zero) is the only NaN; overflow becomes NaN.
    """

    exponent_bits: int
    mantissa_bits: int
    bias: int
    flavour: str = "ieee"

    @property
    def total_bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def max_exponent_field(self) -> int:
        """The largest exponent field that holds finite numbers."""
        all_ones = (1 << self.exponent_bits) - 1
        return all_ones - 1 if self.flavour == "ieee" else all_ones

    @property
    def max_finite_bits(self) -> int:
        """The bit pattern (without sign) of the largest finite value."""
        all_mantissa = (1 << self.mantissa_bits) - 1
        if self.flavour == "fn":
            return (self.max_exponent_field << self.mantissa_bits) | (all_mantissa - 1)
        return (self.max_exponent_field << self.mantissa_bits) | all_mantissa

    def nan_bits(self, negative: bool = False) -> int:
        if self.flavour == "fnuz":
            return 1 << (self.total_bits - 1)
        sign = (1 << (self.total_bits - 1)) if negative else 0
        all_ones_exponent = ((1 << self.exponent_bits) - 1) << self.mantissa_bits
        if self.flavour == "fn":
            return sign | all_ones_exponent | ((1 << self.mantissa_bits) - 1)
        return sign | all_ones_exponent | (1 << (self.mantissa_bits - 1))  # the canonical quiet NaN


class DType:
    """A scalar or vector element type. Interned: build them only through `DType.new`, `.vec` and `.ptr`."""

    __slots__ = ("name", "bitsize", "count", "fmt", "priority", "kind", "float_format", "_scalar", "__weakref__")
    _interned: dict[tuple, DType] = {}

    name: str
    bitsize: int  # bits of one scalar element
    count: int  # vector width
    fmt: str | None  # the struct/memoryview format character, None where Python has none (bfloat16, fp8)
    priority: int  # order used by promotion
    kind: str  # "void", "bool", "int", "uint", "float", "index"
    float_format: FloatFormat | None
    _scalar: DType | None

    @staticmethod
    def new(
        priority: int, bitsize: int, name: str, fmt: str | None, kind: str, float_format: FloatFormat | None = None
    ) -> DType:
        return DType._intern(("scalar", name), lambda d: d._init(name, bitsize, 1, fmt, priority, kind, float_format))

    @staticmethod
    def _intern(key: tuple, init: Any) -> DType:
        found = DType._interned.get(key)
        if found is None:
            found = object.__new__(DType) if key[0] != "ptr" else object.__new__(PtrDType)
            init(found)
            DType._interned[key] = found
        return found

    def _init(self, name: str, bitsize: int, count: int, fmt, priority: int, kind: str, float_format) -> None:
        for slot, value in (("name", name), ("bitsize", bitsize), ("count", count), ("fmt", fmt)):
            object.__setattr__(self, slot, value)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "float_format", float_format)
        object.__setattr__(self, "_scalar", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("DType is immutable")

    @property
    def itemsize(self) -> int:
        """Bytes of the whole (vector) value."""
        return (self.bitsize + 7) // 8 * self.count

    def scalar(self) -> DType:
        return self if self._scalar is None else self._scalar

    def vec(self, count: int) -> DType:
        """This scalar type as a vector of `count` elements (`vec(1)` is the scalar itself)."""
        if self.count != 1:
            raise ValueError(f"cannot vectorize {self!r}, it is already a vector")
        if count == 1 or self.kind == "void":
            return self
        if count < 1:
            raise ValueError(f"vector width must be positive, got {count}")

        def init(d: DType) -> None:
            d._init(f"{self.name}{count}", self.bitsize, count, None, self.priority, self.kind, self.float_format)
            object.__setattr__(d, "_scalar", self)

        return DType._intern(("vec", self.name, count), init)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to `size` elements of this type (-1: size unknown) in `addrspace`."""

        def init(d: PtrDType) -> None:
            d._init(f"{self.name}*", 64, 1, None, self.priority, "ptr", None)
            object.__setattr__(d, "base", self)
            object.__setattr__(d, "size", size)
            object.__setattr__(d, "addrspace", addrspace)

        return DType._intern(("ptr", self, size, addrspace), init)  # type: ignore[return-value]

    @property
    def min(self) -> int | float:
        """The smallest value of this type (-inf for floats), as `dtypes.min(self)`."""
        return dtypes.min(self)

    @property
    def max(self) -> int | float:
        """The largest value of this type (inf for floats), as `dtypes.max(self)`."""
        return dtypes.max(self)

    def __repr__(self) -> str:
        if self._scalar is not None:
            return f"{self._scalar!r}.vec({self.count})"
        return f"dtypes.{self.name}"

    def __reduce__(self) -> tuple:
        if self._scalar is not None:
            return (_dtype_from_spec, (self._scalar.name, self.count))
        return (_dtype_from_spec, (self.name, 1))


class PtrDType(DType):
    """A pointer: `base` is the element type, `size` the element count (-1 unknown), `addrspace` where it lives."""

    __slots__ = ("base", "size", "addrspace")
    base: DType
    size: int
    addrspace: AddrSpace

    @property
    def itemsize(self) -> int:
        return 8

    def vec(self, count: int) -> DType:
        raise ValueError("vectors of pointers are not supported")

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        raise ValueError("pointers to pointers are not supported")

    def __repr__(self) -> str:
        args = [] if self.size == -1 else [str(self.size)]
        if self.addrspace is not AddrSpace.GLOBAL:
            args.append(f"addrspace={self.addrspace!r}")
        return f"{self.base!r}.ptr({', '.join(args)})"

    def __reduce__(self) -> tuple:
        return (_ptr_from_spec, (self.base, self.size, self.addrspace))


def _dtype_from_spec(name: str, count: int) -> DType:
    return dtypes.by_name(name).vec(count)


def _ptr_from_spec(base: DType, size: int, addrspace: AddrSpace) -> PtrDType:
    return base.ptr(size, addrspace)


FLOAT16_FORMAT = FloatFormat(5, 10, 15)
BFLOAT16_FORMAT = FloatFormat(8, 7, 127)
FLOAT32_FORMAT = FloatFormat(8, 23, 127)
FLOAT64_FORMAT = FloatFormat(11, 52, 1023)
FP8E4M3_FORMAT = FloatFormat(4, 3, 7, "fn")
FP8E5M2_FORMAT = FloatFormat(5, 2, 15, "ieee")
FP8E4M3FNUZ_FORMAT = FloatFormat(4, 3, 8, "fnuz")
FP8E5M2FNUZ_FORMAT = FloatFormat(5, 2, 16, "fnuz")


class dtypes:  # noqa: N801 - the namespace reads as `dtypes.float`, as in tinygrad and numpy
    """Every dtype by name, plus predicates and limits."""

    void = DType.new(-1, 0, "void", None, "void")
    index = DType.new(-1, 64, "index", None, "index")  # symbolic index arithmetic: unbounded ints, never wraps
    bool = DType.new(0, 8, "bool", "?", "bool")
    int8 = DType.new(1, 8, "char", "b", "int")
    uint8 = DType.new(2, 8, "uchar", "B", "uint")
    int16 = DType.new(3, 16, "short", "h", "int")
    uint16 = DType.new(4, 16, "ushort", "H", "uint")
    int32 = DType.new(5, 32, "int", "i", "int")
    uint32 = DType.new(6, 32, "uint", "I", "uint")
    int64 = DType.new(7, 64, "long", "q", "int")
    uint64 = DType.new(8, 64, "ulong", "Q", "uint")
    fp8e4m3 = DType.new(9, 8, "fp8e4m3", None, "float", FP8E4M3_FORMAT)
    fp8e5m2 = DType.new(10, 8, "fp8e5m2", None, "float", FP8E5M2_FORMAT)
    fp8e4m3fnuz = DType.new(11, 8, "fp8e4m3fnuz", None, "float", FP8E4M3FNUZ_FORMAT)
    fp8e5m2fnuz = DType.new(12, 8, "fp8e5m2fnuz", None, "float", FP8E5M2FNUZ_FORMAT)
    float16 = DType.new(13, 16, "half", "e", "float", FLOAT16_FORMAT)
    bfloat16 = DType.new(14, 16, "bfloat16", None, "float", BFLOAT16_FORMAT)
    float32 = DType.new(15, 32, "float", "f", "float", FLOAT32_FORMAT)
    float64 = DType.new(16, 64, "double", "d", "float", FLOAT64_FORMAT)

    # aliases
    char, uchar, short, ushort, int, uint, long, ulong = int8, uint8, int16, uint16, int32, uint32, int64, uint64
    half, float, double = float16, float32, float64

    default_int: DType = int32
    default_float: DType = float32  # tg.tensor sets it from its DEFAULT_FLOAT flag

    @staticmethod
    def by_name(name: str) -> DType:
        """Look up a dtype by its name or alias: 'float32', 'float', 'half', 'HALF', 'uchar', ..."""
        found = getattr(dtypes, name.lower(), None)
        if not isinstance(found, DType):
            raise ValueError(f"unknown dtype name {name!r}")
        return found

    @staticmethod
    def all() -> tuple[DType, ...]:
        """Every scalar dtype that can hold data (not void, not index)."""
        return ALL_SCALARS

    @staticmethod
    def is_float(dt: DType) -> builtins.bool:
        return dt.kind == "float"

    @staticmethod
    def is_int(dt: DType) -> builtins.bool:
        """Signed, unsigned and index integers (bool is not an int)."""
        return dt.kind in ("int", "uint", "index")

    @staticmethod
    def is_unsigned(dt: DType) -> builtins.bool:
        return dt.kind == "uint"

    @staticmethod
    def is_bool(dt: DType) -> builtins.bool:
        return dt.kind == "bool"

    @staticmethod
    def min(dt: DType) -> builtins.int | builtins.float:
        """The smallest value of `dt` (-inf for floats)."""
        dt = dt.scalar()
        if dt.kind == "bool":
            return False
        if dt.kind == "uint":
            return 0
        if dt.kind in ("int", "index"):
            return -(1 << (dt.bitsize - 1))
        if dt.kind == "float":
            return -math.inf
        raise TypeError(f"{dt!r} has no minimum")

    @staticmethod
    def max(dt: DType) -> builtins.int | builtins.float:
        """The largest value of `dt` (inf for floats)."""
        dt = dt.scalar()
        if dt.kind == "bool":
            return True
        if dt.kind == "uint":
            return (1 << dt.bitsize) - 1
        if dt.kind in ("int", "index"):
            return (1 << (dt.bitsize - 1)) - 1
        if dt.kind == "float":
            return math.inf
        raise TypeError(f"{dt!r} has no maximum")

    @staticmethod
    def finite_max(dt: DType) -> builtins.float:
        """The largest finite value of a float dtype."""
        fmt = dt.scalar().float_format
        if fmt is None:
            raise TypeError(f"{dt!r} is not a float dtype")
        return decode(fmt.max_finite_bits, dt.scalar())


def to_dtype(dtype: DType | str) -> DType:
    """`dtype` itself, or the dtype a name stands for ("int32", "float", "half"): public APIs accept both."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return dtypes.by_name(dtype)
    raise TypeError(f"expected a DType or a dtype name, got {dtype!r}")


ALL_SCALARS: tuple[DType, ...] = tuple(
    sorted(
        (v for v in vars(dtypes).values() if isinstance(v, DType) and v.kind not in ("void", "index")),
        key=lambda d: d.priority,
    )
)
ALL_SCALARS = tuple(dict.fromkeys(ALL_SCALARS))  # aliases appear twice in vars(); keep one of each

# the groups tinygrad names, in promotion order
dtypes.fp8s = tuple(d for d in ALL_SCALARS if d.kind == "float" and d.bitsize == 8)  # type: ignore[attr-defined]
dtypes.floats = tuple(d for d in ALL_SCALARS if d.kind == "float")  # type: ignore[attr-defined]
dtypes.uints = tuple(d for d in ALL_SCALARS if d.kind == "uint")  # type: ignore[attr-defined]
dtypes.sints = tuple(d for d in ALL_SCALARS if d.kind == "int")  # type: ignore[attr-defined]
dtypes.ints = dtypes.uints + dtypes.sints  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------- promotion

# Each dtype lists the dtypes it promotes to directly. The least upper bound of a set of dtypes is the
# lowest-priority dtype reachable from all of them (numpy/torch-like: mixing ints and floats gives the float,
# signed and unsigned of the same width go to the next wider signed type, int64 with uint64 goes to float).
_PROMOTES_TO: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz),
    dtypes.fp8e4m3: (dtypes.float16, dtypes.bfloat16),
    dtypes.fp8e5m2: (dtypes.float16, dtypes.bfloat16),
    dtypes.fp8e4m3fnuz: (dtypes.float16, dtypes.bfloat16),
    dtypes.fp8e5m2fnuz: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


def _reachable(dt: DType) -> set[DType]:
    seen = {dt}
    todo = [dt]
    while todo:
        for parent in _PROMOTES_TO[todo.pop()]:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


_REACHABLE = {dt: _reachable(dt) for dt in _PROMOTES_TO}


@functools.lru_cache(maxsize=1024)  # asked at every Tensor op (a sum's accumulator, two operands' common dtype)
def least_upper_dtype(*dts: DType) -> DType:
    """The smallest dtype that all of `dts` promote to (index with other ints stays index)."""
    if not dts:
        raise ValueError("least_upper_dtype needs at least one dtype")
    scalars = [d.scalar() for d in dts]
    if dtypes.index in scalars:
        if all(d.kind in ("index", "int", "uint", "bool") for d in scalars):
            return dtypes.index
        scalars = [d for d in scalars if d is not dtypes.index]
    common = set.intersection(*(_REACHABLE[d] for d in scalars))
    found = min(common, key=lambda d: d.priority)
    if dtypes.is_float(found) and not any(dtypes.is_float(d) for d in scalars):
        return dtypes.float64  # int64 with uint64: no int holds both, so take the float that holds most (as numpy)
    return found


def least_upper_float(dt: DType) -> DType:
    """`dt` if it is a float, else the default float (what true division of ints produces)."""
    return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


# ---------------------------------------------------------------------------------------------------- conversion


def encode_float(value: float, fmt: FloatFormat, saturate: bool = False) -> int:
    """The bit pattern of `value` rounded (nearest, ties to even) into `fmt`.

    With `saturate`, finite values beyond the largest finite number clamp to it instead of becoming inf/NaN
    (the "satfinite" conversion that hardware offers for fp8).
    """
    sign_bit = 1 << (fmt.total_bits - 1)
    if math.isnan(value):
        return fmt.nan_bits(negative=math.copysign(1.0, value) < 0)
    negative = math.copysign(1.0, value) < 0
    sign = sign_bit if negative else 0
    magnitude = abs(value)
    if math.isinf(magnitude):
        if saturate:
            return sign | fmt.max_finite_bits
        return _overflow_bits(fmt, sign)
    bits = _round_magnitude(magnitude, fmt)
    if bits > fmt.max_finite_bits:
        return (sign | fmt.max_finite_bits) if saturate else _overflow_bits(fmt, sign)
    if bits == 0 and fmt.flavour == "fnuz":
        return 0  # fnuz has no negative zero
    return sign | bits


def _overflow_bits(fmt: FloatFormat, sign: int) -> int:
    if fmt.flavour == "ieee":
        return sign | (((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits)
    return fmt.nan_bits(negative=bool(sign))


def _round_magnitude(magnitude: float, fmt: FloatFormat) -> int:
    """Exponent and mantissa bits of a finite non-negative value, rounded to nearest even; may exceed the range."""
    if magnitude == 0.0:
        return 0
    min_exponent = 1 - fmt.bias  # exponent of the smallest normal number
    _, frexp_exponent = math.frexp(magnitude)  # magnitude = m * 2**e with 0.5 <= m < 1
    exponent = max(frexp_exponent - 1, min_exponent)
    # scaling by a power of two is exact, and round() on a float rounds half to even exactly
    mantissa = round(math.ldexp(magnitude, fmt.mantissa_bits - exponent))
    if mantissa >= 1 << (fmt.mantissa_bits + 1):  # rounding carried into the next binade
        mantissa >>= 1
        exponent += 1
    if mantissa < 1 << fmt.mantissa_bits:  # subnormal: exponent field 0
        return mantissa
    exponent_field = exponent + fmt.bias
    return (exponent_field << fmt.mantissa_bits) | (mantissa - (1 << fmt.mantissa_bits))


def decode_float(bits: int, fmt: FloatFormat) -> float:
    """The value of the bit pattern `bits` in `fmt`."""
    sign_bit = 1 << (fmt.total_bits - 1)
    negative = bool(bits & sign_bit)
    exponent_field = (bits >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa = bits & ((1 << fmt.mantissa_bits) - 1)
    if fmt.flavour == "fnuz" and bits == sign_bit:
        return math.nan
    if (
        fmt.flavour == "fn"
        and exponent_field == (1 << fmt.exponent_bits) - 1
        and mantissa == (1 << fmt.mantissa_bits) - 1
    ):
        return -math.nan if negative else math.nan
    if fmt.flavour == "ieee" and exponent_field == (1 << fmt.exponent_bits) - 1:
        if mantissa:
            return -math.nan if negative else math.nan
        return -math.inf if negative else math.inf
    if exponent_field == 0:
        value = math.ldexp(mantissa, 1 - fmt.bias - fmt.mantissa_bits)
    else:
        value = math.ldexp(mantissa | (1 << fmt.mantissa_bits), exponent_field - fmt.bias - fmt.mantissa_bits)
    return -value if negative else value


def encode(value: Any, dt: DType, saturate: bool = False) -> int:
    """The bits of `value` stored as scalar `dt` (an unsigned int of `dt.bitsize` bits)."""
    dt = dt.scalar()
    if dt.float_format is not None:
        return encode_float(float(value), dt.float_format, saturate)
    return int(truncate(value, dt)) & ((1 << dt.bitsize) - 1)


def decode(bits: int, dt: DType) -> Any:
    """The Python value (bool, int or float) of the bit pattern `bits` read as scalar `dt`."""
    dt = dt.scalar()
    if dt.float_format is not None:
        return decode_float(bits, dt.float_format)
    if dt.kind == "bool":
        return bits != 0
    return _wrap_int(bits, dt)


def _wrap_int(value: int, dt: DType) -> int:
    """Two's-complement wrap of `value` into the range of int dtype `dt` (index does not wrap)."""
    if dt.kind == "index":
        return value
    value &= (1 << dt.bitsize) - 1
    if dt.kind == "int" and value >= 1 << (dt.bitsize - 1):
        value -= 1 << dt.bitsize
    return value


def truncate(value: Any, dt: DType) -> Any:
    """`value` converted to what scalar `dt` holds: ints wrap, floats round to the format, bools test non-zero.

    Float to int conversion truncates toward zero (as C casts do); NaN and inf, undefined in C, become 0.
    """
    dt = dt.scalar()
    if dt.kind == "bool":
        return bool(value)
    if dt.kind in ("int", "uint", "index"):
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                return 0
            value = math.trunc(value)
        return _wrap_int(int(value), dt)
    if dt.float_format is not None:
        if dt is dtypes.float64:
            return float(value)
        return decode_float(encode_float(float(value), dt.float_format), dt.float_format)
    raise TypeError(f"cannot convert a value to {dt!r}")


# ---------------------------------------------------------------------------------------------------- numpy


def to_numpy(dt: DType) -> Any:
    """The numpy dtype for `dt`; bfloat16 and fp8 need ml_dtypes installed."""
    import numpy as np

    dt = dt.scalar()
    if dt.fmt is not None:
        return np.dtype(dt.fmt)
    if dt.float_format is not None:
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(f"numpy has no {dt!r}; install ml_dtypes for it") from None
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES_NAMES[dt.name]))
    raise TypeError(f"{dt!r} has no numpy equivalent")


_ML_DTYPES_NAMES = {
    "bfloat16": "bfloat16",
    "fp8e4m3": "float8_e4m3fn",
    "fp8e5m2": "float8_e5m2",
    "fp8e4m3fnuz": "float8_e4m3fnuz",
    "fp8e5m2fnuz": "float8_e5m2fnuz",
}


def from_numpy(np_dtype: Any) -> DType:
    """The dtype for a numpy dtype (ml_dtypes' bfloat16 and fp8 types included)."""
    import numpy as np

    np_dtype = np.dtype(np_dtype)
    for dt in ALL_SCALARS:
        if dt.fmt is not None and np.dtype(dt.fmt) == np_dtype:
            return dt
    for name, ml_name in _ML_DTYPES_NAMES.items():
        if np_dtype.name == ml_name:
            return dtypes.by_name(name)
    raise TypeError(f"numpy dtype {np_dtype} has no tg dtype")


# the largest finite value of each fp8 format (tinygrad's constants)
FP8E4M3_MAX = dtypes.finite_max(dtypes.fp8e4m3)
FP8E5M2_MAX = dtypes.finite_max(dtypes.fp8e5m2)
FP8E4M3FNUZ_MAX = dtypes.finite_max(dtypes.fp8e4m3fnuz)
FP8E5M2FNUZ_MAX = dtypes.finite_max(dtypes.fp8e5m2fnuz)
