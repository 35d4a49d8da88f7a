"""Exact C values of object-like macros, computed by libclang itself in a generated translation unit.

Python integers have no width, so a translated macro can differ from C (`~0U` is 4294967295 in C and -1 in
Python), and many macros cannot be translated at all (`_IOR('K', 1, struct args *)`, values from headers outside
the target, token pasting). For every object-like macro whose body could be an expression, the generator asks
clang to evaluate `static const __auto_type v = (MACRO);`: an integer constant gives its value and C type, and a
pointer constant (`((void *) -1)`) gives its address through a second unit that casts it to unsigned long.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_VALUE, _ADDRESS = "tg_autogen_value_", "tg_autogen_address_"
_EVAL_INT = 1
_MAIN = "tg_autogen_values.c"
# Bodies that cannot be an expression (or would derail the parser for the declarations after them).
_NOT_AN_EXPRESSION = re.compile(r'[{};#"]|^\s*$')


# What a C file that uses these macros has in scope: offsetof (stddef.h) and, on Linux, the _IO* ioctl helpers that
# uapi headers use without including (their users include <sys/ioctl.h>). Included after the headers, so the
# headers themselves parse exactly as they do alone.
_USE_SITE = """#include <stddef.h>
#if __has_include(<linux/ioctl.h>)
#include <linux/ioctl.h>
#endif
"""


@dataclass(frozen=True)
class CValue:
    """The value of a macro in C: an integer with its C type, or a pointer with its libclang type."""

    value: int
    type_name: str  # canonical C spelling without qualifiers ("unsigned int"); "pointer" for pointers
    pointer_type: Any = None  # the libclang pointer type, for the generator to translate


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


def could_be_expression(body: str) -> bool:
    """Whether BODY is worth handing to clang: no braces, semicolons, strings or unbalanced parentheses."""
    if _NOT_AN_EXPRESSION.search(body):
        return False
    depth = 0
    for ch in body:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _parse(headers: Sequence[str], args: Sequence[str], declarations: str) -> Any:
    from clang import cindex

    main = _MAIN
    source = "".join(f'#include "{Path(h).resolve()}"\n' for h in headers) + _USE_SITE + declarations
    return cindex.Index.create().parse(main, args=[*args, "-ferror-limit=0"], unsaved_files=[(main, source)])


def _evaluated(unit: Any, prefix: str) -> dict[int, tuple[Any, int | None]]:
    """For each VAR_DECL named PREFIX<i>: its canonical type and its integer value (None when not an integer)."""
    from clang import cindex

    lib = _library()
    # clang recovers from an error with a partial value (`(1 2)` evaluates to 1): lines with errors are left out.
    broken = {
        d.location.line
        for d in unit.diagnostics
        if d.severity >= 3 and d.location.file and d.location.file.name == _MAIN
    }
    found: dict[int, tuple[Any, int | None]] = {}
    for cursor in unit.cursor.get_children():
        spelling = cursor.spelling
        if cursor.kind != cindex.CursorKind.VAR_DECL or not spelling.startswith(prefix):
            continue
        if cursor.location.line in broken:
            continue
        value = None
        result = lib.clang_Cursor_Evaluate(cursor)
        if result:
            try:
                if lib.clang_EvalResult_getKind(result) == _EVAL_INT:
                    unsigned = lib.clang_EvalResult_isUnsignedInt(result)
                    getter = lib.clang_EvalResult_getAsUnsigned if unsigned else lib.clang_EvalResult_getAsLongLong
                    value = int(getter(result))
            finally:
                lib.clang_EvalResult_dispose(result)
        found[int(spelling[len(prefix) :])] = (cursor.type.get_canonical(), value)
    return found


class MacroValues:
    """Evaluates macros NAMES of HEADERS; keeps the translation units alive while their types are in use."""

    def __init__(self, headers: Sequence[str], args: Sequence[str], names: Sequence[str]) -> None:
        from clang import cindex

        self.values: dict[str, CValue] = {}
        if not names:
            return
        declarations = "".join(f"static const __auto_type {_VALUE}{i} = ({name});\n" for i, name in enumerate(names))
        self.unit = _parse(headers, args, declarations)
        pointers: dict[int, Any] = {}
        for index, (ctype, value) in _evaluated(self.unit, _VALUE).items():
            if ctype.kind == cindex.TypeKind.POINTER:
                pointers[index] = ctype
            elif value is not None:
                type_name = ctype.spelling.replace("const ", "").replace(" const", "").strip()
                self.values[names[index]] = CValue(value, type_name)
        if pointers:
            casts = "".join(
                f"static const unsigned long {_ADDRESS}{i} = (unsigned long)({names[i]});\n" for i in pointers
            )
            self.pointer_unit = _parse(headers, args, casts)
            for index, (_, value) in _evaluated(self.pointer_unit, _ADDRESS).items():
                if value is not None:
                    self.values[names[index]] = CValue(value, "pointer", pointers[index])
