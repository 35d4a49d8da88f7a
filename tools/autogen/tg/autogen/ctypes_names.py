"""Tables from C types (libclang TypeKind names) and well-known typedef names to ctypes spellings."""

from __future__ import annotations

# libclang TypeKind name -> ctypes type. `char` maps to c_char so that char arrays read as bytes.
BUILTIN_KINDS = {
    "BOOL": "ctypes.c_bool",
    "CHAR_S": "ctypes.c_char",
    "CHAR_U": "ctypes.c_char",
    "SCHAR": "ctypes.c_byte",
    "UCHAR": "ctypes.c_ubyte",
    "SHORT": "ctypes.c_short",
    "USHORT": "ctypes.c_ushort",
    "INT": "ctypes.c_int",
    "UINT": "ctypes.c_uint",
    "LONG": "ctypes.c_long",
    "ULONG": "ctypes.c_ulong",
    "LONGLONG": "ctypes.c_longlong",
    "ULONGLONG": "ctypes.c_ulonglong",
    "FLOAT": "ctypes.c_float",
    "DOUBLE": "ctypes.c_double",
    "LONGDOUBLE": "ctypes.c_longdouble",
    "WCHAR": "ctypes.c_wchar",
}

# Typedefs from headers outside the target that have an exact ctypes name; printing the name keeps the
# generated code readable (`ctypes.c_uint32` rather than `ctypes.c_uint`). The ABI is the same either way.
_FIXED_WIDTH = {
    f"{prefix}int{bits}_t": f"ctypes.c_{prefix}int{bits}" for prefix in ("", "u") for bits in (8, 16, 32, 64)
}
_KERNEL = {
    f"__{sign}{bits}": f"ctypes.c_{'u' if sign == 'u' else ''}int{bits}" for sign in "us" for bits in (8, 16, 32, 64)
}
_KERNEL |= {f"__{end}{bits}": f"ctypes.c_uint{bits}" for end in ("le", "be") for bits in (16, 32, 64)}
WELL_KNOWN_TYPEDEFS = {
    **_FIXED_WIDTH,
    **_KERNEL,
    "size_t": "ctypes.c_size_t",
    "ssize_t": "ctypes.c_ssize_t",
    "uintptr_t": "ctypes.c_size_t",
    "intptr_t": "ctypes.c_ssize_t",
    "off_t": "ctypes.c_int64",
    "pid_t": "ctypes.c_int",
}
