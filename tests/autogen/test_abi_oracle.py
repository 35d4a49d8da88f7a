"""ABI oracle: for every struct and union in every committed binding module, gcc compiles a program that prints
sizeof, each field's offset and size, and the byte image of each bitfield set to all ones; the generated module
must agree on every number. A second oracle prints the value of every integer constant (macros and enums)."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import pytest

from tg.autogen import oracle
from tg.autogen.regen import missing_headers
from tg.autogen.targets import TARGETS, Target
from tg.drivers import cbind

NAMES = sorted(TARGETS)


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


@pytest.mark.parametrize("name", NAMES)
def test_record_layouts_match_gcc(name, tmp_path):
    target, module = target_module(name)
    checks = [check for record in oracle.records(module) for check in oracle.record_checks(record)]
    if not checks:
        assert not [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, cbind.Struct)]
        return
    outcome = oracle.run_checks(checks, c_prologue(target), c_flags(target), tmp_path)
    assert outcome.checked == len(checks) and not outcome.dropped, outcome.dropped[:10]
    assert not outcome.mismatches, outcome.mismatches[:10]


@pytest.mark.parametrize("name", NAMES)
def test_integer_constants_match_gcc(name, tmp_path):
    target, module = target_module(name)
    checks = oracle.constant_checks(module)
    assert checks
    outcome = oracle.run_checks(checks, c_prologue(target), c_flags(target), tmp_path)
    assert outcome.checked == len(checks) and not outcome.dropped, outcome.dropped[:10]
    assert not outcome.mismatches, outcome.mismatches[:10]


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


def test_tricky_layouts_match_gcc(tmp_path):
    from tg.autogen.generate import Options, generate

    header = tmp_path / "tricky.h"
    header.write_text(TRICKY)
    module_path = tmp_path / "tricky.py"
    module_path.write_text(generate(Options(name="tricky", headers=(str(header),))).source)
    namespace = importlib.util.module_from_spec(importlib.util.spec_from_file_location("tricky", module_path))
    namespace.__loader__.exec_module(namespace)
    assert len(oracle.records(namespace)) >= 12
    checks = [check for record in oracle.records(namespace) for check in oracle.record_checks(record)]
    prologue = f'#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n#include "{header}"\n'
    outcome = oracle.run_checks(checks, prologue, [], tmp_path)
    assert outcome.checked == len(checks) and not outcome.mismatches, outcome.mismatches[:10]
    calls = oracle.call_checks(namespace, prologue, [], tmp_path)
    assert calls.checked and not calls.mismatches and not calls.dropped, (calls.mismatches, calls.dropped)
