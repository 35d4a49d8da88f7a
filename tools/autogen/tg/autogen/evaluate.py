"""Exact C values of integer macros, computed by libclang itself.

Python integers have no width, so a translated macro can differ from C: `~0U` is 4294967295 in C and -1 in
Python; `1 << 31` is INT_MIN in C. For every integer macro that is not a plain literal, the generator asks
clang to evaluate `static const __auto_type v = (MACRO);` and, where the values differ, emits clang's value.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_PREFIX = "tg_autogen_value_"
_EVAL_INT = 1


def _library() -> Any:
    from clang import cindex

    lib = cindex.conf.lib
    if not getattr(lib, "_tg_evaluate_ready", False):
        lib.clang_Cursor_Evaluate.argtypes = [cindex.Cursor]
        lib.clang_Cursor_Evaluate.restype = ctypes.c_void_p
        lib.clang_EvalResult_getKind.argtypes = [ctypes.c_void_p]
        lib.clang_EvalResult_getKind.restype = ctypes.c_int
        lib.clang_EvalResult_isUnsignedInt.argtypes = [ctypes.c_void_p]
        lib.clang_EvalResult_isUnsignedInt.restype = ctypes.c_uint
        lib.clang_EvalResult_getAsUnsigned.argtypes = [ctypes.c_void_p]
        lib.clang_EvalResult_getAsUnsigned.restype = ctypes.c_ulonglong
        lib.clang_EvalResult_getAsLongLong.argtypes = [ctypes.c_void_p]
        lib.clang_EvalResult_getAsLongLong.restype = ctypes.c_longlong
        lib.clang_EvalResult_dispose.argtypes = [ctypes.c_void_p]
        lib.clang_EvalResult_dispose.restype = None
        lib._tg_evaluate_ready = True
    return lib


def c_integer_values(headers: Sequence[str], args: Sequence[str], names: Sequence[str]) -> dict[str, int]:
    """The C value of each macro in NAMES that clang can evaluate as an integer constant."""
    if not names:
        return {}
    from clang import cindex

    main = "tg_autogen_values.c"
    source = "".join(f'#include "{Path(h).resolve()}"\n' for h in headers)
    source += "".join(f"static const __auto_type {_PREFIX}{i} = ({name});\n" for i, name in enumerate(names))
    unit = cindex.Index.create().parse(main, args=list(args), unsaved_files=[(main, source)])
    lib = _library()
    values: dict[str, int] = {}
    for cursor in unit.cursor.get_children():
        spelling = cursor.spelling
        if cursor.kind != cindex.CursorKind.VAR_DECL or not spelling.startswith(_PREFIX):
            continue
        result = lib.clang_Cursor_Evaluate(cursor)
        if not result:
            continue
        try:
            if lib.clang_EvalResult_getKind(result) == _EVAL_INT:
                unsigned = lib.clang_EvalResult_isUnsignedInt(result)
                getter = lib.clang_EvalResult_getAsUnsigned if unsigned else lib.clang_EvalResult_getAsLongLong
                values[names[int(spelling[len(_PREFIX) :])]] = int(getter(result))
        finally:
            lib.clang_EvalResult_dispose(result)
    return values
