"""Macros carry C's values: function-like macros compute with C integer types (gcc computes the expected
values), object-like macros the translator cannot handle get clang's value, pointer macros are pointers, strings
are bytes, and records declared inside records are laid out."""

from __future__ import annotations

import ctypes

import pytest

from tg.drivers import cint

FUNCTION_MACROS = """
#include <stdint.h>
typedef uint32_t word_t;
typedef int32_t sword_t;
#define EXTRA(tag) ((word_t)-((sword_t)(tag) << 1 >> 1) - 1)
#define NOT_ZERO(x) (~(x))
#define NOT_ZERO_U(x) (~(x##U))
#define MASK 0xFFFF0000U
#define CLEAR(x) ((x) & ~MASK)
#define DIV(a, b) ((a) / (b))
#define MOD(a, b) ((a) % (b))
#define LESS(a) ((a) < 1U)
#define BOTH(a, b) ((a) && (b))
#define NOT(a) (!(a))
#define TO_CHAR(x) ((unsigned char)(x))
#define TO_SCHAR(x) ((signed char)(x))
#define HIGH_BIT(n) (1U << (n))
#define WIDE(n) (1UL << (n))
#define NEGATE_U(x) (-(unsigned)(x))
#define SIZE_TIMES(n) (sizeof(uint16_t) * (n))
#define BIG_HEX(x) ((x) + 0x80000000)
"""

# (expression as Python calls, the same expression in C)
CASES = [
    ("EXTRA(1)", "EXTRA(1)"),
    ("EXTRA(5)", "EXTRA(5)"),
    ("NOT_ZERO(0)", "NOT_ZERO(0)"),
    ("CLEAR(0x12345678)", "CLEAR(0x12345678)"),
    ("CLEAR(-1)", "CLEAR(-1)"),
    ("DIV(-7, 2)", "DIV(-7, 2)"),
    ("MOD(-7, 2)", "MOD(-7, 2)"),
    ("DIV(-7, cbind.c_typed(MASK, 'unsigned int'))", "DIV(-7, MASK)"),  # typed, as C passes MASK
    ("LESS(-1)", "LESS(-1)"),
    ("BOTH(3, 5)", "BOTH(3, 5)"),
    ("NOT(7)", "NOT(7)"),
    ("TO_CHAR(300)", "TO_CHAR(300)"),
    ("TO_SCHAR(200)", "TO_SCHAR(200)"),
    ("HIGH_BIT(31)", "HIGH_BIT(31)"),
    ("WIDE(40)", "WIDE(40)"),
    ("NEGATE_U(1)", "NEGATE_U(1)"),
    ("SIZE_TIMES(-1)", "SIZE_TIMES(-1)"),
    ("BIG_HEX(1)", "BIG_HEX(1)"),
]


def test_function_like_macros_compute_what_gcc_computes(bind, c_program_output):
    bound = bind(FUNCTION_MACROS)
    lines = "".join(f'  printf("%lld\\n", (long long)({c}));\n' for _, c in CASES)
    program = f'#include <stdio.h>\n#include "{bound.header}"\nint main(void) {{\n{lines}  return 0;\n}}\n'
    expected = [int(v) for v in c_program_output(program).split()]
    namespace = vars(bound.module)
    produced = [eval(python, namespace) for python, _ in CASES]  # noqa: S307 (the expressions are ours)
    mask = (1 << 64) - 1
    assert [p & mask for p in produced] == [e & mask for e in expected]
    assert bound.module.EXTRA(1) == 4294967294  # the example: Python semantics gave -2


def test_macro_results_are_still_plain_numbers(bind):
    api = bind(FUNCTION_MACROS).module
    value = api.HIGH_BIT(3)
    assert isinstance(value, int) and value == 8 and {value: "x"}[8] == "x"


def test_cint_usual_arithmetic_conversions():
    unsigned = cint.c_literal(1, "u")
    assert (-1 < unsigned) is False  # -1 converts to UINT_MAX
    assert cint.CInt(-1, cint.LONG) < unsigned  # long holds every unsigned int
    assert cint.common_type(cint.INT, cint.UINT) == cint.UINT
    assert cint.common_type(cint.LONG, cint.UINT) == cint.LONG
    assert cint.common_type(cint.LONG, cint.ULONG) == cint.ULONG
    assert int(cint.c_literal(0x80000000, "", decimal=False).ctype.name == "unsigned int")
    assert cint.c_literal(2147483648, "", decimal=True).ctype == cint.LONG
    assert cint.c_cast(ctypes.c_uint16, 70000) == 70000 - 65536


OBJECT_MACROS = """
#include <stdint.h>
struct args { uint32_t a; uint64_t b; };
#define _IOC_WRITE_LOCAL 1U
#define GET_ARGS _IOR('Q', 1, struct args *)
#define GET_ARRAY _IOR('Q', 2, char[16])
#define GET_NAME(len) _IOC(_IOC_READ, 'Q', 3, len)
#define PASTED_(x) (1u << x##_SHIFT)
#define SPEED_SHIFT 4
#define SPEED PASTED_(SPEED)
#define FROM_OTHER_HEADER INT32_MAX
#define NEGATIVE_UNSIGNED (-1U)
#define HUGE_SHIFT (1ULL << 63)
#define POINTER ((void *) -1)
typedef void (*destructor)(void *);
#define DESTRUCTOR ((destructor) -1)
#define GREETING "hi\\n"
#include <linux/ioctl.h>
"""


def test_object_macros_get_c_values_where_translation_fails(bind, c_program_output):
    bound = bind(OBJECT_MACROS)
    names = ["GET_ARGS", "GET_ARRAY", "SPEED", "FROM_OTHER_HEADER", "NEGATIVE_UNSIGNED", "HUGE_SHIFT"]
    lines = "".join(f'  printf("%llu\\n", (unsigned long long)({n}));\n' for n in [*names, "GET_NAME(32)"])
    program = f'#include <stdio.h>\n#include "{bound.header}"\nint main(void) {{\n{lines}  return 0;\n}}\n'
    expected = [int(v) for v in c_program_output(program).split()]
    api = bound.module
    produced = [getattr(api, n) for n in names] + [api.GET_NAME(32)]
    assert produced == expected


def test_pointer_and_string_macros(bind):
    api = bind(OBJECT_MACROS).module
    assert isinstance(api.POINTER, ctypes.c_void_p) and api.POINTER.value == 2**64 - 1
    assert ctypes.cast(api.DESTRUCTOR, ctypes.c_void_p).value == 2**64 - 1
    assert api.GREETING == b"hi\n"


NESTED = """
struct index_info {
    int count;
    struct index_constraint { int column; unsigned char op; unsigned char usable; int offset; } *constraints;
    struct index_order { int column; unsigned char desc; } *order;
};
"""


def test_records_declared_inside_records_are_laid_out(bind, c_program_output):
    bound = bind(NESTED)
    api = bound.module
    program = (
        f'#include <stdio.h>\n#include <stddef.h>\n#include "{bound.header}"\n'
        'int main(void) { printf("%zu %zu %zu\\n", sizeof(struct index_constraint), '
        "offsetof(struct index_constraint, offset), sizeof(struct index_order)); return 0; }\n"
    )
    size, offset, order = (int(v) for v in c_program_output(program).split())
    assert ctypes.sizeof(api.struct_index_constraint) == size
    assert api.struct_index_constraint.offset.offset == offset
    assert ctypes.sizeof(api.struct_index_order) == order
    # Indexing through the pointer reaches the right element (a size-0 class aliased every element to the first).
    items = (api.struct_index_constraint * 4)()
    items[3].column = 33
    info = api.struct_index_info(count=4, constraints=ctypes.cast(items, ctypes.POINTER(api.struct_index_constraint)))
    assert info.constraints[3].column == 33 and info.constraints[0].column == 0


def test_record_defined_in_another_header_is_opaque_with_a_note(tmp_path, bind):
    other = tmp_path / "other.h"
    other.write_text("struct defined_elsewhere { int x; };\n")
    bound = bind(f'#include "{other}"\nstruct user {{ struct defined_elsewhere *p; struct never_defined *q; }};\n')
    api = bound.module
    assert any("struct_defined_elsewhere" in n and str(other) in n for n in bound.generated.notes)
    with pytest.raises(TypeError, match="opaque"):
        api.struct_defined_elsewhere()
    with pytest.raises(TypeError, match="opaque"):
        api.struct_never_defined()
    assert api.struct_user().p is not None  # pointers to opaque records still work
