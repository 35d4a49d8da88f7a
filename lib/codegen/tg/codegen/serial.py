"""Safe, stable storage of tg IR: what k.pkl files, process-replay rows and captured schedules hold.

    data = dumps(ast)                       # bytes (a pickle restricted to tg IR)
    ast = loads(data)                       # refuses anything but tg IR types: never runs code
    write_file(path, value); read_file(path)  # the same with a header: codegen version, git commit, ...

Stable: every enum of the IR (Ops, OptOps, AxisType, AddrSpace) pickles by NAME (`enum_by_name` is their
`__reduce_ex__`), so a file written before an op was added or the op table reordered still loads; a name this tg
lacks is one IRFormatError naming it.

Safe: `loads` is a restricted unpickler. A pickle can name any importable callable and call it (a crafted
`__reduce__` returning `(os.system, ("cmd",))`); this one resolves only
  - builtin containers (tuple, list, dict, set, frozenset),
  - `enum_member` of this module (how enums are stored),
  - in tg.codegen modules: dataclasses, UOp, DType and PtrDType, renderer classes, and the dtype spec functions.
Anything else is refused with UnsafeIRError before it is called. An enum class named directly is refused too:
that is the old by-number form (`Ops(31)`), which would silently load the wrong op after a renumbering.

This module imports nothing of tg at module level: tg-replay loads this very file into a replay worker that runs
another version of tg.codegen, and every name it resolves must be that version's.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import importlib
import io
import os
import pickle
import subprocess
from collections.abc import Mapping
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

FORMAT = "tg-ir"
FORMAT_SCHEMA = 1
SAFE_BUILTINS = frozenset({"tuple", "list", "dict", "set", "frozenset"})
DTYPE_FUNCTIONS = frozenset({"_dtype_from_spec", "_ptr_from_spec"})
IR_CLASSES = frozenset({"UOp", "DType", "PtrDType"})


class IRLoadError(ValueError):
    """A file or row that cannot be loaded as tg IR; the message is one line that says why."""


class UnsafeIRError(IRLoadError):
    """The data names something other than tg IR (e.g. os.system): refused before it is called."""


class IRFormatError(IRLoadError):
    """The data is tg IR from another version that this one cannot read (an op or dtype it lacks)."""


def enum_member(module: str, qualname: str, name: str) -> Enum:
    """The member `name` of enum `module.qualname` (how enums are stored)."""
    enum_class = _tg_object(module, qualname)
    if not (isinstance(enum_class, type) and issubclass(enum_class, Enum)):
        raise UnsafeIRError(f"{module}.{qualname} is not an enum of tg IR")
    try:
        return enum_class[name]
    except KeyError:
        raise IRFormatError(
            f"{qualname}.{name} is not in this tg's {qualname} table (written by a tg with another {qualname} table)"
        ) from None


def enum_by_name(member: Enum) -> tuple[Any, tuple[str, str, str]]:
    """`__reduce_ex__` for IR enums: store the member's name, never its number."""
    cls = type(member)
    return (enum_member, (cls.__module__, cls.__qualname__, member.name))


def _tg_object(module: str, qualname: str) -> Any:
    if not module.startswith("tg.codegen.") or not all(part.isidentifier() for part in module.split(".")):
        raise UnsafeIRError(f"refused {module}.{qualname}: not a tg IR type")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise IRFormatError(f"{module}.{qualname} does not exist in this tg (written by another version)") from None
    return found


def _allowed_tg_object(module: str, qualname: str) -> Any:
    found = _tg_object(module, qualname)
    name = qualname.rsplit(".", 1)[-1]
    if isinstance(found, type) and issubclass(found, Enum):
        raise IRFormatError(
            f"{module}.{qualname} is stored by number (a pickle from an older tg): write it again with this tg"
        )
    if isinstance(found, type) and (dataclasses.is_dataclass(found) or name in IR_CLASSES or _is_renderer(found)):
        return found
    if module == "tg.codegen.dtype" and name in DTYPE_FUNCTIONS:
        return found
    raise UnsafeIRError(f"refused {module}.{qualname}: not a tg IR type")


def _is_renderer(cls: type) -> bool:
    from tg.codegen.render.base import Renderer

    return issubclass(cls, Renderer)


class _IRUnpickler(pickle.Unpickler):
    def __init__(self, data: io.BytesIO, allowed: Mapping[tuple[str, str], type]) -> None:
        super().__init__(data)
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.allowed:
            return self.allowed[(module, name)]
        if module == "builtins" and name in SAFE_BUILTINS:
            return getattr(builtins, name)
        if module == "tg.codegen.serial" and name == "enum_member":
            return enum_member  # this module's, wherever it was loaded from
        if module.startswith("tg.codegen."):
            return _allowed_tg_object(module, name)
        raise UnsafeIRError(f"refused {module}.{name}: not a tg IR type")


def dumps(value: Any) -> bytes:
    """`value` (UOps, opts, renderers, tuples of them...) as a pickle that `loads` reads."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes, allowed: Mapping[tuple[str, str], type] | None = None) -> Any:
    """The IR in `data`; raises UnsafeIRError for anything but tg IR types (nothing is called first) and
    IRFormatError for IR this version cannot read. `allowed` adds plain data classes of a caller's own, by
    (module, qualname) (a library above tg.codegen storing IR inside its records, e.g. tg.tensor.jit_pickle)."""
    try:
        return _IRUnpickler(io.BytesIO(data), allowed or {}).load()
    except IRLoadError:
        raise
    except RecursionError:
        raise IRLoadError("the IR is nested too deeply to load") from None
    except Exception as error:
        raise IRLoadError(f"not a tg IR pickle ({type(error).__name__}: {error})") from None


# ---------------------------------------------------------------------------------------------------- provenance


@cache
def codegen_version() -> str:
    """A hash of tg.codegen's Python sources: it changes whenever the code that makes kernels changes (part of the
    BEAM cache key and of every file's header)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@cache
def git_state() -> tuple[str, bool]:
    """(commit, dirty) of the checkout tg.codegen was loaded from ("unknown", False outside git)."""
    folder = str(Path(__file__).resolve().parent)
    try:
        head = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20)
        if head.returncode != 0:
            return "unknown", False
        status = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", False
    return head.stdout.strip(), bool(status.stdout.strip())


def provenance(**extra: str) -> dict[str, str]:
    """Where stored IR came from: codegen version, git commit and whether the tree was dirty, plus `extra`
    (e.g. compiler=...)."""
    commit, dirty = git_state()
    return {"codegen_version": codegen_version(), "commit": commit, "dirty": "yes" if dirty else "no", **extra}


def write_file(path: str | os.PathLike[str], value: Any, **extra: str) -> None:
    """Write `value` with a header (format, schema, provenance) atomically."""
    document = {"format": FORMAT, "schema": FORMAT_SCHEMA, "provenance": provenance(**extra), "value": value}
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as out:
        out.write(dumps(document))
    os.replace(tmp, path)


def read_file(path: str | os.PathLike[str]) -> tuple[Any, dict[str, str]]:
    """(value, provenance) of a file `write_file` wrote; a bare IR pickle (no header) has empty provenance."""
    with open(path, "rb") as source:
        document = loads(source.read())
    if isinstance(document, dict) and document.get("format") == FORMAT:
        if document.get("schema") != FORMAT_SCHEMA:
            raise IRFormatError(f"{FORMAT} schema {document.get('schema')}; this tg reads schema {FORMAT_SCHEMA}")
        return document.get("value"), dict(document.get("provenance") or {})
    return document, {}
