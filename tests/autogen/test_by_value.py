"""Records passed and returned by value: gcc compiles the callee, so a wrong register choice shows as garbage."""

from __future__ import annotations

import ctypes

import pytest

from tg.drivers import cabi

HEADER = """
struct mixed { float a; double b; };
struct tail_float { double d; float f; };
struct small { char c; short s; };
struct three_ints { int x, y, z; };
struct nested { struct small inner; float f; int n; };
struct __attribute__((packed)) packed_aligned { int a; int b; };
struct __attribute__((packed)) packed_unaligned { char c; int i; };
struct big { long values[5]; };
struct bits { unsigned lo : 4, hi : 12; float f; };
union number { int i; float f; };
union wide { double d; long l; };
struct holds_union { union number n; float g; };
struct ld { long double x; };
double sum_mixed(struct mixed m);
struct mixed make_mixed(float a, double b);
double sum_tail(struct tail_float t);
struct tail_float make_tail(double d, float f);
int sum_small(struct small s);
struct small make_small(char c, short s);
int sum_three(struct three_ints t);
struct three_ints make_three(int x, int y, int z);
double sum_nested(struct nested n);
struct nested make_nested(char c, short s, float f, int n);
int sum_packed(struct packed_aligned p);
int sum_unaligned(struct packed_unaligned p);
struct packed_unaligned make_unaligned(char c, int i);
long sum_big(struct big b);
struct big make_big(long first);
double sum_bits(struct bits b);
float union_float(union number n);
union number make_number(float f);
double wide_double(union wide w);
double sum_holds_union(struct holds_union h);
long double ld_twice(struct ld v);
struct ld make_ld(long double x);
double many(struct mixed a, struct mixed b, struct mixed c, struct mixed d, struct mixed e, double last);
"""

SOURCE = """
double sum_mixed(struct mixed m) { return m.a + m.b; }
struct mixed make_mixed(float a, double b) { struct mixed m = {a, b}; return m; }
double sum_tail(struct tail_float t) { return t.d + t.f; }
struct tail_float make_tail(double d, float f) { struct tail_float t = {d, f}; return t; }
int sum_small(struct small s) { return s.c + s.s; }
struct small make_small(char c, short s) { struct small r = {c, s}; return r; }
int sum_three(struct three_ints t) { return t.x + 10 * t.y + 100 * t.z; }
struct three_ints make_three(int x, int y, int z) { struct three_ints t = {x, y, z}; return t; }
double sum_nested(struct nested n) { return n.inner.c + n.inner.s + n.f + n.n; }
struct nested make_nested(char c, short s, float f, int n) { struct nested r = {{c, s}, f, n}; return r; }
int sum_packed(struct packed_aligned p) { return p.a - p.b; }
int sum_unaligned(struct packed_unaligned p) { return p.c * 1000 + p.i; }
struct packed_unaligned make_unaligned(char c, int i) { struct packed_unaligned p = {c, i}; return p; }
long sum_big(struct big b) { long s = 0; for (int i = 0; i < 5; i++) s += b.values[i] * (i + 1); return s; }
struct big make_big(long first) { struct big b; for (int i = 0; i < 5; i++) b.values[i] = first + i; return b; }
double sum_bits(struct bits b) { return b.lo + b.hi + b.f; }
float union_float(union number n) { return n.f; }
union number make_number(float f) { union number n; n.f = f; return n; }
double wide_double(union wide w) { return w.d; }
double sum_holds_union(struct holds_union h) { return h.n.f + h.g; }
long double ld_twice(struct ld v) { return v.x * 2; }
struct ld make_ld(long double x) { struct ld v = {x}; return v; }
double many(struct mixed a, struct mixed b, struct mixed c, struct mixed d, struct mixed e, double last)
{ return a.a + b.b + c.a + d.b + e.a + e.b + last; }
"""


@pytest.fixture(scope="module")
def api(bind_once):
    return bind_once(HEADER, SOURCE).module


def test_float_and_double_travel_in_vector_registers(api):
    assert api.sum_mixed(api.struct_mixed(1.25, 2.5)) == 3.75
    made = api.make_mixed(0.5, -8.25)
    assert (made.a, made.b) == (0.5, -8.25)
    assert api.sum_tail(api.struct_tail_float(1.5, 0.25)) == 1.75
    made = api.make_tail(3.0, 1.5)
    assert (made.d, made.f) == (3.0, 1.5)


def test_small_and_three_int_records(api):
    assert api.sum_small(api.struct_small(b"\x05", -300)) == -295
    small = api.make_small(b"\x07", 1234)
    assert (small.c, small.s) == (b"\x07", 1234)
    assert api.sum_three(api.struct_three_ints(1, 2, 3)) == 321
    three = api.make_three(4, 5, 6)
    assert (three.x, three.y, three.z) == (4, 5, 6)


def test_nested_records(api):
    assert api.sum_nested(api.struct_nested(api.struct_small(b"\x01", 2), 0.5, 40)) == 43.5
    made = api.make_nested(b"\x03", 4, 2.5, -6)
    assert (made.inner.c, made.inner.s, made.f, made.n) == (b"\x03", 4, 2.5, -6)


def test_packed_records(api):
    assert api.sum_packed(api.struct_packed_aligned(10, 3)) == 7
    assert api.sum_unaligned(api.struct_packed_unaligned(b"\x02", 345)) == 2345
    made = api.make_unaligned(b"\x09", -77)
    assert (made.c, made.i) == (b"\x09", -77)


def test_records_larger_than_two_eightbytes(api):
    assert api.sum_big(api.struct_big((1, 2, 3, 4, 5))) == 1 + 4 + 9 + 16 + 25
    assert list(api.make_big(10).values) == [10, 11, 12, 13, 14]


def test_bitfields_by_value(api):
    record = api.struct_bits(f=0.5)
    record.lo, record.hi = 9, 1000
    assert api.sum_bits(record) == 1009.5


def test_unions_by_value(api):
    number = api.union_number()
    number.f = 2.5
    assert api.union_float(number) == 2.5
    assert api.make_number(-1.5).f == -1.5
    wide = api.union_wide()
    wide.d = 6.25
    assert api.wide_double(wide) == 6.25
    holds = api.struct_holds_union(g=1.0)
    holds.n.f = 0.5
    assert api.sum_holds_union(holds) == 1.5


def test_long_double_record(api):
    assert api.ld_twice(api.struct_ld(1.25)) == 2.5
    assert api.make_ld(3.5).x == 3.5


def test_records_past_the_registers_go_on_the_stack(api):
    ms = [api.struct_mixed(float(i), float(10 * i)) for i in range(1, 6)]
    assert api.many(*ms, 0.125) == 1 + 20 + 3 + 40 + 5 + 50 + 0.125


def test_classification_follows_the_psabi(api):
    assert cabi.classify(api.struct_mixed) == [cabi.SSE, cabi.SSE]
    assert cabi.classify(api.struct_tail_float) == [cabi.SSE, cabi.SSE]
    assert cabi.classify(api.union_number) == [cabi.INTEGER]
    assert cabi.classify(api.struct_packed_unaligned) is None
    assert cabi.classify(api.struct_big) is None


def test_a_wrong_argument_type_is_a_type_error(api):
    with pytest.raises(TypeError):
        api.sum_mixed(api.struct_small())


def test_plain_ctypes_structure_layout_is_unchanged_by_the_shadow(api):
    assert ctypes.sizeof(api.struct_mixed) == 16


CALLBACKS = """
struct mixed { float a; double b; };
union number { int i; float f; };
typedef double (*visit_mixed)(struct mixed m, int k);
typedef float (*visit_number)(union number n);
double apply_mixed(visit_mixed f, float a, double b);
float apply_number(visit_number f, float x);
visit_mixed get_scaler(void);
"""

CALLBACKS_SOURCE = """
double apply_mixed(visit_mixed f, float a, double b) { struct mixed m = {a, b}; return f(m, 3); }
float apply_number(visit_number f, float x) { union number n; n.f = x; return f(n); }
static double scale(struct mixed m, int k) { return (m.a + m.b) * k; }
visit_mixed get_scaler(void) { return scale; }
"""


def test_callbacks_receive_records_by_value(bind):
    api = bind(CALLBACKS, CALLBACKS_SOURCE).module
    seen = []

    def visit(m, k):
        seen.append((m.a, m.b, k))
        return m.a * 10 + m.b + k

    assert api.apply_mixed(api.visit_mixed(visit), 1.5, 0.25) == 15 + 0.25 + 3
    assert seen == [(1.5, 0.25, 3)]
    assert api.apply_number(api.visit_number(lambda n: n.f * 2), 1.25) == 2.5
    # A C function pointer of the same prototype takes records by value from Python.
    assert api.get_scaler()(api.struct_mixed(1.0, 2.5), 2) == 7.0


def test_the_module_says_to_call_by_value_records_through_its_functions(bind_once):
    """ctypes' own by-value passing misplaces some of these classes (struct mixed's padding is a byte array that
    ctypes classifies as C does not), so the generated file documents its functions as the way to call."""
    source = bind_once(HEADER, SOURCE).generated.source
    assert source.count("# Records passed or returned by value: call the functions bound here") == 1
    assert source.index("# Records passed or returned by value") < source.index('sum_mixed = dll.function("sum_mixed"')
    assert (
        "Records passed or returned by value"
        not in bind_once("int plain(int x);\n", "int plain(int x) { return x; }\n").generated.source
    )
