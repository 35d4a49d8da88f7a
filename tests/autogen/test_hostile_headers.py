"""tg-autogen under hostile headers: memory and work stay linear in the header's size.

A 2.4 MB header of 20,000 records, each pointing to the previous one, once took 19.5 GB: ctypes copies the
pointee's buffer format string into each new pointer type, so pointers made after their record's layout nested
every earlier format. Growth is checked by sizes (Python's traced peak memory) and work (function calls), at two
scales four times apart, never by wall time.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from tg.autogen.generate import Options, generate


def pointer_chain(count: int) -> str:
    """COUNT records, each holding a pointer to the one before it (the shape that exhausted memory)."""
    lines = ["struct r0 { int v; };"]
    lines += [f"struct r{i} {{ struct r{i - 1} *prev; int v; }};" for i in range(1, count)]
    return "\n".join(lines) + "\n"


def typedef_pointer_chain(count: int) -> str:
    """The same chain spelled through typedefs, with a function taking the last one (pointers made in three places)."""
    lines = ["typedef struct n0 { int v; } n0_t;"]
    lines += [f"typedef struct n{i} {{ n{i - 1}_t *prev; n{i - 1}_t *list[2]; }} n{i}_t;" for i in range(1, count)]
    lines.append(f"typedef n{count - 1}_t *last_p;")
    return "\n".join(lines) + "\n"


def _write(folder: Path, text: str, count: int) -> Path:
    header = folder / f"hostile{count}.h"
    header.write_text(text)
    return header


def peak_traced_bytes(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def calls_made(action: Callable[[], object]) -> int:
    """Python and builtin function calls ACTION makes: a quadratic loop anywhere in Python shows up here."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return count


SMALL, LARGE = 200, 800  # four times apart: linear growth is about 4x, quadratic about 16x


def _per_record_ratio(measure: Callable[[int], int]) -> float:
    """How much the cost per record grows from SMALL to LARGE records (1.0 when the cost is linear)."""
    return (measure(LARGE) / LARGE) / (measure(SMALL) / SMALL)


@pytest.mark.parametrize("shape", [pointer_chain, typedef_pointer_chain])
def test_generation_memory_is_linear_in_records(tmp_path: Path, shape: Callable[[int], str]) -> None:
    generate(Options("warm", (str(_write(tmp_path, shape(3), 3)),)))  # imports and libclang loading are not counted

    def measure(count: int) -> int:
        header = _write(tmp_path, shape(count), count)
        return peak_traced_bytes(lambda: generate(Options("chain", (str(header),))))

    # Before the fix the ratio was 2.2 for the plain chain (and growing with the count); linear stays near 1.
    assert _per_record_ratio(measure) < 1.3


def test_generation_work_is_linear_in_records(tmp_path: Path) -> None:
    generate(Options("warm", (str(_write(tmp_path, pointer_chain(3), 3)),)))

    def measure(count: int) -> int:
        header = _write(tmp_path, pointer_chain(count), count)
        return calls_made(lambda: generate(Options("chain", (str(header),))))

    assert _per_record_ratio(measure) < 1.3


def test_generated_module_imports_in_linear_memory(tmp_path: Path) -> None:
    """The generated file makes each pointer type before its record's layout too, so importing it stays linear."""

    def measure(count: int) -> int:
        source = generate(Options("chain", (str(_write(tmp_path, pointer_chain(count), count)),))).source
        code = compile(source, "<chain>", "exec")
        return peak_traced_bytes(lambda: exec(code, {}))

    assert _per_record_ratio(measure) < 1.3


def test_the_chain_still_binds_correctly(tmp_path: Path) -> None:
    import ctypes

    source = generate(Options("chain", (str(_write(tmp_path, pointer_chain(50), 50)),))).source
    module: dict[str, object] = {}
    exec(compile(source, "<chain>", "exec"), module)
    first, second = module["struct_r0"], module["struct_r1"]
    head = first(v=7)  # type: ignore[operator]
    link = second(prev=ctypes.pointer(head), v=8)  # type: ignore[operator]
    assert link.prev.contents.v == 7
    assert ctypes.sizeof(module["struct_r49"]) == 16  # type: ignore[arg-type]  # pointer + int + padding on LP64
