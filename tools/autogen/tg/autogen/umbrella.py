"""Umbrella headers: a header that declares nothing itself and only includes others (`CL/opencl.h`): no declarations
and no macro but its include guard.

Binding only the declarations written in such a header gives an empty module. So the headers it includes from its
own folder (or below it) are bound with it, and so on through umbrellas among those. Headers it reaches in other
folders are not: they are usually the C library or another project, which the user names when they want them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Cursor kinds that make a header more than an umbrella (as does a macro other than its include guard).
_DECLARATION_KINDS = ("STRUCT_DECL", "UNION_DECL", "ENUM_DECL", "TYPEDEF_DECL", "FUNCTION_DECL", "VAR_DECL")


@dataclass(frozen=True)
class Expansion:
    """What umbrella headers add: more headers to bind, a note per umbrella, and what stays unbound."""

    added: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # umbrella -> the headers it includes from other folders (for the error when nothing could be bound)
    elsewhere: tuple[tuple[str, tuple[str, ...]], ...] = ()


def direct_includes(unit: Any) -> dict[str, list[str]]:
    """Real path of each file -> the real paths it includes directly, in order, once each."""
    graph: dict[str, list[str]] = {}
    for inclusion in unit.get_includes():
        if inclusion.source is None:
            continue
        source, included = os.path.realpath(inclusion.source.name), os.path.realpath(inclusion.include.name)
        children = graph.setdefault(source, [])
        if included not in children:
            children.append(included)
    return graph


def files_with_content(unit: Any, wanted: Iterable[str] | None = None) -> set[str]:
    """Real paths of the files that hold a top-level declaration or a macro other than an include guard; with
    WANTED, stop once all of those are found."""
    from clang import cindex

    kinds = {getattr(cindex.CursorKind, name) for name in _DECLARATION_KINDS}
    macro_kind = cindex.CursorKind.MACRO_DEFINITION
    remaining = set(wanted) if wanted is not None else None
    found: set[str] = set()
    texts: dict[str, bytes] = {}
    real_paths: dict[str, str] = {}
    for cursor in unit.cursor.get_children():
        kind = cursor.kind
        if kind not in kinds and kind != macro_kind:
            continue
        location_file = cursor.location.file
        if location_file is None:
            continue
        name = location_file.name
        if name not in real_paths:
            real_paths[name] = os.path.realpath(name)
        path = real_paths[name]
        if kind == macro_kind and _is_guard(cursor, path, texts):
            continue
        found.add(path)
        if remaining is not None:
            remaining.discard(path)
            if not remaining:
                break
    return found


def _is_guard(cursor: Any, path: str, texts: dict[str, bytes]) -> bool:
    """Whether macro CURSOR is an include guard's kind: `#define NAME` or `#define NAME 1` (no value to bind)."""
    start, end = cursor.extent.start.offset, cursor.extent.end.offset
    name_length = len(cursor.spelling)
    if end - start <= name_length:
        return True
    if end - start > name_length + 8:  # longer than `NAME 1` with some spacing: a real definition
        return False
    if path not in texts:
        texts[path] = Path(path).read_bytes()
    return texts[path][start + name_length : end].strip() == b"1"


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def expand(unit: Any, headers: Sequence[str], builtin_dir: str | None) -> Expansion:
    """The headers that umbrella headers among HEADERS bring in (see the module docstring)."""
    requested = [os.path.realpath(h) for h in headers]
    declaring = files_with_content(unit, requested)
    umbrellas = [h for h in requested if h not in declaring]
    if not umbrellas:
        return Expansion()
    graph = direct_includes(unit)
    declaring = files_with_content(unit)
    added: list[str] = []
    notes: list[str] = []
    elsewhere: list[tuple[str, tuple[str, ...]]] = []
    chosen = set(requested)
    for umbrella in umbrellas:
        folder = os.path.dirname(umbrella)
        own, other = _reachable(umbrella, folder, graph, declaring, builtin_dir)
        fresh = [path for path in own if path not in chosen]
        chosen.update(fresh)
        added += fresh
        if fresh:
            binding = " ".join(fresh)
            notes.append(f"{umbrella} declares nothing itself: binding what it includes from {folder}: {binding}")
        if other:
            elsewhere.append((umbrella, tuple(other)))
    return Expansion(tuple(added), tuple(notes), tuple(elsewhere))


def _reachable(
    umbrella: str, folder: str, graph: dict[str, list[str]], declaring: set[str], builtin_dir: str | None
) -> tuple[list[str], list[str]]:
    """Headers UMBRELLA brings in from FOLDER (through nested umbrellas), and those it includes from elsewhere."""
    own: list[str] = []
    other: list[str] = []
    stack, visited = [umbrella], {umbrella}
    while stack:
        current = stack.pop(0)
        for included in graph.get(current, []):
            if included in visited or (builtin_dir and _under(included, builtin_dir)):
                continue
            visited.add(included)
            if not _under(included, folder):
                other.append(included)
                continue
            own.append(included)
            if included not in declaring:  # an umbrella inside the umbrella: follow it too
                stack.append(included)
    return own, other
