"""ABI oracle: for every struct and union in every committed binding module, gcc compiles a program that prints
sizeof, each field's offset and size, and the byte image of each bitfield set to all ones; the generated module
must agree on every number. A second oracle prints the value of every integer constant (macros and enums)."""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

import pytest

from tg.autogen.regen import missing_headers
from tg.autogen.targets import TARGETS, Target
from tg.drivers import cbind

NAMES = sorted(TARGETS)


@dataclass(frozen=True)
class Check:
    """One number (or byte image) that C prints and Python computes."""

    c_format: str
    c_expression: str
    python_value: str
    setup: str = ""


def target_module(name: str) -> tuple[Target, ModuleType]:
    target = TARGETS[name]
    missing = missing_headers(target)
    if missing:
        pytest.skip(f"headers not installed here: {missing}")
    return target, importlib.import_module(f"tg.drivers.autogen.{name}")


def c_flags(target: Target) -> list[str]:
    return [f"-D{d}" for d in target.defines] + [f"-I{folder}" for folder in target.resolved_include_dirs()]


def c_prologue(target: Target) -> str:
    includes = "".join(f'#include "{h.path}"\n' for h in target.headers if h.include)
    return f"#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n{includes}"


def records(module: ModuleType) -> list[type]:
    """Laid-out records of MODULE that have a C name (their docstring)."""
    found = []
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, cbind.Struct | cbind.Union) and value.__doc__:
            if value.__module__ == module.__name__ and cbind.layout_of(value) and value not in found:
                found.append(value)
    return found


def record_checks(record: type) -> list[Check]:
    c_type = record.__doc__
    checks = [Check("%zu", f"sizeof({c_type})", str(ctypes.sizeof(record)))]
    checks += member_checks(record, record, c_type, "", 0)
    return checks


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


def c_program(prologue: str, checks: list[Check]) -> str:
    lines = [
        prologue,
        "static void dump(const void *p, size_t n) {",
        '  for (size_t i = 0; i < n; i++) printf("%02x", ((const unsigned char *)p)[i]);',
        '  printf("\\n");',
        "}",
        "int main(void) {",
    ]
    for check in checks:
        if check.setup:
            lines.append("  " + check.setup)
        else:
            lines.append(f'  printf("{check.c_format}\\n", (size_t)({check.c_expression}));')
    return "\n".join(lines + ["  return 0;", "}", ""])


@pytest.mark.parametrize("name", NAMES)
def test_record_layouts_match_gcc(name, c_program_output):
    target, module = target_module(name)
    checks: list[Check] = []
    for record in records(module):
        checks += record_checks(record)
    if not checks:
        assert not [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, cbind.Struct)]
        return
    output = c_program_output(c_program(c_prologue(target), checks), c_flags(target))
    produced = output.splitlines()
    assert len(produced) == len(checks)
    mismatches = [
        (check.c_expression or check.setup, c_value, check.python_value)
        for check, c_value in zip(checks, produced, strict=True)
        if c_value != check.python_value
    ]
    assert not mismatches, mismatches[:10]


def integer_constants(module: ModuleType) -> dict[str, int]:
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, int) and not isinstance(value, bool) and name.isidentifier()
    }


@pytest.mark.parametrize("name", NAMES)
def test_integer_constants_match_gcc(name, c_program_output):
    target, module = target_module(name)
    constants = integer_constants(module)
    assert constants
    body = "".join(f'  printf("%llu\\n", (unsigned long long)({n}));\n' for n in constants)
    program = f"{c_prologue(target)}int main(void) {{\n{body}  return 0;\n}}\n"
    produced = [int(v) for v in c_program_output(program, c_flags(target)).split()]
    mask = (1 << 64) - 1
    mismatches = [(n, v, c) for (n, v), c in zip(constants.items(), produced, strict=True) if v & mask != c]
    assert not mismatches, mismatches[:10]


TRICKY = """
#include <stdint.h>
struct __attribute__((aligned(16))) aligned16 { char c; };
struct holds_aligned { char a; struct aligned16 b; char c; };
struct wide { long double ld; __int128 big; char tail; };
struct matrix { int cells[3][4]; struct aligned16 row[2]; };
typedef void (*handler)(int);
struct table { handler handlers[4]; const volatile int flags; struct table *next; };
union mixed { struct { uint8_t lo : 4, hi : 4; }; uint64_t all; double d; };
struct __attribute__((packed)) misaligned { uint8_t tag; uint64_t value; union mixed m; };
struct bits_across { uint32_t a : 30; uint32_t b : 4; uint64_t c : 33, d : 31; int8_t e : 3; };
struct zero_width { uint8_t a : 3; uint32_t : 0; uint8_t b : 2; };
typedef struct outer { struct inner { short s[3]; } in; struct { int x; } anon_named[2]; } outer_t;
struct with_flex { uint16_t n; struct inner items[]; };
enum __attribute__((packed)) small_enum { SMALL_A, SMALL_B = 200 };
struct enum_holder { enum small_enum e; char c; };
"""


def test_tricky_layouts_match_gcc(tmp_path, c_program_output):
    from tg.autogen.generate import Options, generate

    header = tmp_path / "tricky.h"
    header.write_text(TRICKY)
    module_path = tmp_path / "tricky.py"
    module_path.write_text(generate(Options(name="tricky", headers=(str(header),))).source)
    namespace = importlib.util.module_from_spec(importlib.util.spec_from_file_location("tricky", module_path))
    namespace.__loader__.exec_module(namespace)
    checks: list[Check] = []
    for record in records(namespace):
        checks += record_checks(record)
    assert len(records(namespace)) >= 12
    prologue = f'#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n#include "{header}"\n'
    produced = c_program_output(c_program(prologue, checks)).splitlines()
    mismatches = [
        (check.c_expression or check.setup, c_value, check.python_value)
        for check, c_value in zip(checks, produced, strict=True)
        if c_value != check.python_value
    ]
    assert not mismatches, mismatches[:10]
