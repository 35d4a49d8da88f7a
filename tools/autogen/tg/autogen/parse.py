"""Parsing headers with libclang (the pinned `libclang` wheel), including finding the builtin headers."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tg.autogen.errors import AutogenError

__all__ = ["AutogenError", "builtin_include_dir", "clang_args", "diagnostics", "parse_headers"]


@functools.cache
def builtin_include_dir() -> str | None:
    """The compiler's own include folder (stddef.h, stdarg.h, xmmintrin.h, ...), which the libclang wheel lacks.

    clang's resource folder comes first: gcc's intrinsics headers define functions that clang has as builtins,
    so headers that include them (CL/cl_platform.h includes xmmintrin.h) parse only with clang's. gcc's folder is
    the fallback on machines without clang. These headers are not recorded in generated files (see
    generate.include_comments): which compiler provides them must not change the output.
    """
    for clang in ("clang", "clang-19", "clang-18", "clang-20", "clang-17", "clang-16", "clang-15", "clang-14"):
        if shutil.which(clang):
            out = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True, check=False)
            folder = Path(out.stdout.strip()) / "include"
            if out.returncode == 0 and (folder / "stddef.h").is_file():
                return str(folder)
    if shutil.which("gcc"):
        out = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True, text=True, check=False)
        folder = Path(out.stdout.strip())
        if out.returncode == 0 and (folder / "stddef.h").is_file():
            return str(folder)
    return None


def clang_args(include_dirs: Sequence[str] = (), defines: Sequence[str] = (), extra: Sequence[str] = ()) -> list[str]:
    """The full argument list for libclang: C by default, the builtin folder, then the user's -I/-D/extra."""
    args = ["-x", "c"]
    builtin = builtin_include_dir()
    if builtin:
        args += ["-isystem", builtin]
    args += [f"-I{folder}" for folder in include_dirs]
    args += [f"-D{define}" for define in defines]
    return args + list(extra)


def parse_headers(headers: Sequence[str], args: Sequence[str]) -> Any:
    """Parse HEADERS as one translation unit (a generated file that includes each) and return it."""
    from clang import cindex

    source = "".join(f'#include "{Path(header).resolve()}"\n' for header in headers)
    options = (
        cindex.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD | cindex.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES
    )
    try:
        unit = cindex.Index.create().parse(
            "tg_autogen_input.c", args=list(args), unsaved_files=[("tg_autogen_input.c", source)], options=options
        )
    except cindex.TranslationUnitLoadError as exc:
        raise AutogenError(f"libclang could not parse {', '.join(headers)}: {exc}") from exc
    return unit


def diagnostics(unit: Any) -> list[str]:
    """Errors libclang reported (missing includes and the like); the generator carries on past them."""
    return [str(d) for d in unit.diagnostics if d.severity >= 3]
