"""gcc as the oracle for a generated module: layouts, integer constants, macro functions and by-value calls.

Every check is one line of a C program (or one function of a C library) that gcc compiles; what C prints is
compared with what the generated Python computes. A line gcc rejects (a macro that needs a pointer, a constant
defined only for clang) is dropped with gcc's message and the program is compiled again, so one odd declaration
does not hide all the others; the dropped lines are part of the outcome for the caller to judge.
"""

from __future__ import annotations

import ctypes
import re
import struct
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tg.drivers import cbind

MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Check:
    """One number (or byte image) that C prints and Python computes."""

    c_format: str
    c_expression: str
    python_value: str
    setup: str = ""

    @property
    def label(self) -> str:
        return self.c_expression or self.setup


@dataclass
class Outcome:
    checked: int = 0
    mismatches: list[tuple[str, str, str]] = field(default_factory=list)  # (check, C value, Python value)
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (check, gcc's error)


# ---------------------------------------------------------------------------------------------------- layouts


def records(module: ModuleType) -> list[type]:
    """Laid-out records of MODULE that have a C name (their docstring)."""
    found: list[type] = []
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, cbind.Struct | cbind.Union) and value.__doc__:
            if value.__module__ == module.__name__ and cbind.layout_of(value) and value not in found:
                found.append(value)
    return found


def record_checks(record: type) -> list[Check]:
    c_type = record.__doc__ or ""
    checks = [Check("%zu", f"sizeof({c_type})", str(ctypes.sizeof(record)))]
    return checks + member_checks(record, record, c_type, "", 0)


def member_checks(root: type, record: type, c_type: str, prefix: str, base: int) -> list[Check]:
    """Checks for the members of RECORD, which sits at BASE inside ROOT (reached through PREFIX in C)."""
    checks = []
    for member in cbind.layout_of(record):
        if isinstance(member, cbind.Anonymous):
            checks += member_checks(root, member.ctype, c_type, prefix, base + member.offset)
        elif isinstance(member, cbind.BitField):
            checks.append(bitfield_check(root, c_type, prefix, member))
        else:
            designator = prefix + member.name
            checks.append(Check("%zu", f"offsetof({c_type}, {designator})", str(base + member.offset)))
            if ctypes.sizeof(member.ctype):
                size = f"sizeof((({c_type} *)0)->{designator})"
                checks.append(Check("%zu", size, str(ctypes.sizeof(member.ctype))))
            inner = member.ctype
            if isinstance(inner, type) and issubclass(inner, cbind.Struct | cbind.Union) and not inner.__doc__:
                checks += member_checks(root, inner, c_type, designator + ".", base + member.offset)
    return checks


def bitfield_check(root: type, c_type: str, prefix: str, member: cbind.BitField) -> Check:
    """Set the bitfield to all ones in a zeroed ROOT record and compare the bytes of the whole record."""
    py_value: int
    if member.ctype is ctypes.c_bool:
        c_value, py_value = "1", True
    elif member.ctype(-1).value == -1:
        c_value, py_value = "-1", -1
    else:
        c_value, py_value = "~0ULL", (1 << member.width) - 1
    image = image_with(root, prefix, member.name, py_value)
    setup = f"{{ {c_type} v; memset(&v, 0, sizeof v); v.{prefix}{member.name} = {c_value}; dump(&v, sizeof v); }}"
    return Check("", "", image, setup)


def image_with(record: type, prefix: str, name: str, value: object) -> str:
    instance = record()
    target = instance
    for part in filter(None, prefix.split(".")):
        target = getattr(target, part)
    setattr(target, name, value)
    return bytes(instance).hex()


# ---------------------------------------------------------------------------------------------------- values


def integer_constants(module: ModuleType) -> dict[str, int]:
    """Module-level integers (macros, enum constants, static consts) under their C names."""
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, int) and not isinstance(value, bool) and name.isidentifier() and not name.endswith("_")
    }


def constant_checks(module: ModuleType) -> list[Check]:
    return [
        Check("%llu", f"(unsigned long long)({name})", str(value & MASK64))
        for name, value in integer_constants(module).items()
    ]


MACRO_SAMPLES = ((3, 5, 7, 9), (200, 17, 4, 1))


def macro_functions(module: ModuleType) -> dict[str, Callable[..., Any]]:
    """Function-like macros of MODULE (the lambdas wrapped in cbind.c_macro)."""
    return {
        name: value
        for name, value in vars(module).items()
        if callable(value) and hasattr(value, "__wrapped__") and getattr(value, "__module__", "") == "tg.drivers.cint"
    }


def macro_checks(module: ModuleType) -> tuple[list[Check], list[str]]:
    """Checks that call every macro function with integer samples, and the macros Python could not evaluate."""
    checks, unevaluated = [], []
    for name, function in macro_functions(module).items():
        count = getattr(function, "__wrapped__").__code__.co_argcount  # noqa: B009 (the wrapper functools set)
        for sample in MACRO_SAMPLES:
            arguments = sample[:count] if count <= len(sample) else None
            if arguments is None:
                continue
            try:
                value = function(*arguments)
            except Exception:  # needs a type or a pointer, not integers
                unevaluated.append(name)
                break
            if isinstance(value, int) and not isinstance(value, bool):
                call = f"{name}({', '.join(map(str, arguments))})"
                checks.append(Check("%llu", f"(unsigned long long)({call})", str(value & MASK64)))
    return checks, unevaluated


_LINE_MARKER = re.compile(r'^# \d+ "([^"]+)"')
_DEFINE = re.compile(r"^#define ([A-Za-z_]\w*)(?![\w(])")


def object_macros_defined_in(header: Path, prologue: str, flags: Sequence[str], folder: Path) -> list[str]:
    """The object-like macros whose active definition is in HEADER, from `gcc -E -dD` (so a `#define` skipped by
    an `#if` there, or defined by another header first, does not count)."""
    source = folder / "macros.c"
    source.write_text(prologue)
    done = subprocess.run(["gcc", "-E", "-dD", str(source), *flags], capture_output=True, text=True, check=True)
    names, current, target = [], "", str(header)
    for line in done.stdout.splitlines():
        marker = _LINE_MARKER.match(line)
        if marker:
            current = marker.group(1)
            continue
        define = _DEFINE.match(line)
        if define and current == target:
            names.append(define.group(1))
    return sorted(set(names))


def integer_constant_macros(header: Path, prologue: str, flags: Sequence[str], folder: Path) -> list[str]:
    """The object-like macros defined in HEADER that gcc accepts as integer constant expressions: each is tried
    as a `case` label, which C allows only for those."""
    import keyword

    names = [n for n in object_macros_defined_in(header, prologue, flags, folder) if not keyword.iskeyword(n)]

    def build(items: Sequence[str]) -> tuple[str, int]:
        head = [prologue.rstrip("\n")]
        body = [
            f"void tg_probe_{i}(unsigned long long x) {{ switch (x) {{ case ({name}): break; }} }}"
            for i, name in enumerate(items)
        ]
        return "\n".join(head + body + [""]), len("\n".join(head).splitlines()) + 1

    kept, _ = compile_dropping_errors(build, names, ["-c", "-o", str(folder / "probe.o"), *flags], folder / "probe.c")
    return kept


# ---------------------------------------------------------------------------------------------------- running


def c_program(prologue: str, checks: Sequence[Check]) -> tuple[str, int]:
    """The program text and the line number (1-based) of the first check; each check is one line."""
    head = [
        prologue.rstrip("\n"),
        "static void dump(const void *p, size_t n) {",
        '  for (size_t i = 0; i < n; i++) printf("%02x", ((const unsigned char *)p)[i]);',
        '  printf("\\n");',
        "}",
        "int main(void) {",
    ]
    body = [
        "  " + check.setup if check.setup else f'  printf("{check.c_format}\\n", ({check.c_expression}));'
        for check in checks
    ]
    text = "\n".join(head + body + ["  return 0;", "}", ""])
    return text, len("\n".join(head).splitlines()) + 1


_ERROR_LINE = re.compile(r"^[^:\n]+\.c:(\d+):\d+: error: (.*)$", re.MULTILINE)


def compile_dropping_errors(
    build: Callable[[Sequence[Any]], tuple[str, int]], items: list[Any], gcc_args: Sequence[str], source: Path
) -> tuple[list[Any], list[tuple[Any, str]]]:
    """Compile BUILD(items) with gcc, dropping the items whose lines gcc rejects; return (kept, dropped)."""
    dropped: list[tuple[Any, str]] = []
    for _ in range(12):
        text, first = build(items)
        source.write_text(text)
        # A call of an undeclared function (a macro whose helper the header does not define) must fail here, on
        # its line, not at link time.
        strict = ["-Werror=implicit-function-declaration", "-Werror=int-conversion"]
        done = subprocess.run(["gcc", str(source), *strict, *gcc_args], capture_output=True, text=True)
        if done.returncode == 0:
            return items, dropped
        bad: dict[int, str] = {}
        for match in _ERROR_LINE.finditer(done.stderr):
            index = int(match.group(1)) - first
            if 0 <= index < len(items):
                bad.setdefault(index, match.group(2))
        if not bad:
            raise RuntimeError(f"gcc failed outside the checks:\n{done.stderr[:2000]}")
        dropped += [(items[i], message) for i, message in bad.items()]
        items = [item for i, item in enumerate(items) if i not in bad]
    raise RuntimeError("gcc kept failing after dropping lines")


def run_checks(checks: list[Check], prologue: str, flags: Sequence[str], folder: Path) -> Outcome:
    """Compile and run the checks; compare what C prints with what Python computed."""
    source = folder / "oracle.c"
    binary = folder / "oracle"
    kept, dropped = compile_dropping_errors(
        lambda items: c_program(prologue, items), checks, ["-o", str(binary), *flags], source
    )
    printed = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines()
    outcome = Outcome(len(kept), dropped=[(c.label, m) for c, m in dropped])
    if len(printed) != len(kept):
        raise RuntimeError(f"the oracle printed {len(printed)} lines for {len(kept)} checks")
    outcome.mismatches = [
        (c.label, v, c.python_value) for c, v in zip(kept, printed, strict=True) if v != c.python_value
    ]
    return outcome


# ---------------------------------------------------------------------------------------------------- calls


def significant_offsets(record: type) -> list[int]:
    """Byte offsets that carry a value through a copy: every leaf but bitfields, 10 bytes of a long double."""
    offsets: set[int] = set()
    for leaf in cbind.record_leaves(record):
        if not leaf.bitfield:
            offsets.update(range(leaf.offset, leaf.offset + (10 if leaf.kind == "X87" else leaf.size)))
    return sorted(offsets)


def fill(record: type, seed: int) -> Any:
    """An instance of RECORD with a distinct value in every leaf (valid floats where floats are)."""
    value = record()
    raw = (ctypes.c_ubyte * ctypes.sizeof(record)).from_buffer(value)
    for index, leaf in enumerate(cbind.record_leaves(record)):
        if leaf.bitfield:
            continue
        if leaf.kind == "SSE":
            data = struct.pack("<f" if leaf.size == 4 else "<d", seed + index + 0.5)
        elif leaf.kind == "X87":
            data = bytes(ctypes.c_longdouble(seed + index + 0.25))
        elif leaf.size == 1 and index % 2:
            data = bytes([index & 1])  # small values: _Bool leaves stay valid
        else:
            data = bytes((seed * 31 + index * 7 + j * 13 + 1) & 0xFF for j in range(leaf.size))
        memoryview(raw).cast("B")[leaf.offset : leaf.offset + leaf.size] = data
    return value


def fnv(data: bytes) -> int:
    digest = 0xCBF29CE484222325
    for byte in data:
        digest = ((digest ^ byte) * 0x100000001B3) & MASK64
    return digest


def expected_digest(significant: bytes, d: int, k: int) -> int:
    """What tg_digest_i(d, v, k) returns for a record whose significant bytes are SIGNIFICANT."""
    return (((fnv(significant) ^ k) * 0x100000001B3) + d) & MASK64


def by_value_library(prologue: str, eligible: list[type]) -> Callable[[Sequence[type]], tuple[str, int]]:
    """C text of a library with, for record i: `T tg_echo_i(T v)` (returns V) and
    `unsigned long long tg_digest_i(double d, T v, int k)` (FNV-1a of V's significant bytes, then K)."""

    def build(items: Sequence[type]) -> tuple[str, int]:
        head = [prologue.rstrip("\n"), "typedef unsigned long long u64;"]
        lines = []
        for record in items:
            number = eligible.index(record)
            c_type = record.__doc__
            offsets = ",".join(map(str, significant_offsets(record))) or "0"
            count = len(significant_offsets(record))
            lines.append(
                f"{c_type} tg_echo_{number}({c_type} v) {{ return v; }} "
                f"u64 tg_digest_{number}(double d, {c_type} v, int k) {{ "
                f"static const unsigned offsets[] = {{{offsets}}}; const unsigned char *p = (const unsigned char *)&v; "
                f"u64 h = 0xcbf29ce484222325ULL; for (unsigned i = 0; i < {count}u; i++) "
                f"h = (h ^ p[offsets[i]]) * 0x100000001b3ULL; return (h ^ (unsigned)k) * 0x100000001b3ULL + (u64)d; }}"
            )
        return "\n".join(head + lines + [""]), len("\n".join(head).splitlines()) + 1

    return build


def call_checks(module: ModuleType, prologue: str, flags: Sequence[str], folder: Path, limit: int = 80) -> Outcome:
    """Pass every laid-out record of MODULE (up to LIMIT) by value to gcc-compiled functions and back."""
    eligible = [r for r in records(module) if 0 < ctypes.sizeof(r) <= 64][:limit]
    library = folder / "libtgoracle.so"
    kept, dropped = compile_dropping_errors(
        by_value_library(prologue, eligible),
        list(eligible),
        ["-shared", "-fPIC", "-O1", "-o", str(library), *flags],
        folder / "oracle_lib.c",
    )
    dll = cbind.DLL("tgoracle", path=str(library))
    outcome = Outcome(dropped=[(r.__doc__ or r.__name__, m) for r, m in dropped])
    for record in kept:
        number = eligible.index(record)
        value = fill(record, number)
        offsets = significant_offsets(record)
        original = bytes(value)
        echo = dll.function(f"tg_echo_{number}", record, [record])
        digest = dll.function(f"tg_digest_{number}", ctypes.c_ulonglong, [ctypes.c_double, record, ctypes.c_int])
        expected = expected_digest(bytes(original[i] for i in offsets), 2, 7)
        got = digest(2.0, value, 7)
        outcome.checked += 2
        if got != expected:
            outcome.mismatches.append((f"digest({record.__doc__})", hex(got), hex(expected)))
        returned = bytes(echo(value))
        if any(returned[i] != original[i] for i in offsets):
            outcome.mismatches.append((f"echo({record.__doc__})", returned.hex(), original.hex()))
    return outcome
