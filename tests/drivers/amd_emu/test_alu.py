"""ALU semantics of the emulator checked lane by lane against Python integers and numpy (the oracles of spec hcq
§3.8 item 5): carries, bit counts, field extracts, IEEE rounding of f32 arithmetic."""

from fractions import Fraction

import numpy as np
import pytest

from tg.drivers.amd.rdna3 import salu
from tg.drivers.amd.rdna3.decoder import decode
from tg.drivers.amd.rdna3.emulator import Wave, Workgroup, _carry_op, _fma_mix
from tg.drivers.amd.rdna3.valu import VOP_OPS

RNG = np.random.default_rng(3)


def lanes(*edge: int) -> np.ndarray:
    values = RNG.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    values[: len(edge)] = edge
    return values


@pytest.mark.parametrize(
    "name",
    ["v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"],
)
def test_carry_operations(name: str) -> None:
    wave = Wave(None, Workgroup(np.zeros(4, np.uint8)))  # type: ignore[arg-type]
    wave.set_exec(0xFFFFFFFF)
    x, y = lanes(0, 0xFFFFFFFF, 5, 0, 0xFFFFFFFF), lanes(0, 1, 5, 0xFFFFFFFF, 0xFFFFFFFF)
    carry_in = 0b10110 | int(RNG.integers(0, 2**32)) << 5 & 0xFFFFFFFF
    _carry_op(name, lambda w: x, lambda w: y, lambda w: carry_in, 10, 20)(wave)
    for lane in range(32):
        a, b = int(x[lane]), int(y[lane])
        if "subrev" in name:
            a, b = b, a
        c = (carry_in >> lane) & 1 if "_ci_" in name else 0
        full = a - b - c if "_sub" in name else a + b + c
        assert int(wave.v[10][lane]) == full & 0xFFFFFFFF
        assert (wave.s[20] >> lane) & 1 == int(not 0 <= full <= 0xFFFFFFFF)


def test_scalar_count_leading_sign_bits() -> None:
    op = salu.SOP1["s_cls_i32"][0]
    assert op(0x40000000)[0] == 1
    assert op(0x00000001)[0] == 31
    assert op(0xC0000000)[0] == 2
    assert op(0)[0] == op(0xFFFFFFFF)[0] == 0xFFFFFFFF
    assert salu.SOP1["s_cls_i32_i64"][0](1)[0] == 63
    values = lanes(0x40000000, 1, 0xC0000000, 0, 0xFFFFFFFF)
    vector = VOP_OPS["v_cls_i32"][0](values)
    assert [int(v) for v in vector] == [op(int(v))[0] for v in values]


def test_scalar_add_carry_and_overflow() -> None:
    assert salu.SOP2["s_add_u32"][0](0xFFFFFFFF, 2) == (1, 1)
    assert salu.SOP2["s_add_i32"][0](0x7FFFFFFF, 1) == (0x80000000, 1)
    assert salu.SOP2["s_sub_u32"][0](1, 2) == (0xFFFFFFFF, 1)
    assert salu.SOP2["s_addc_u32"][0](0xFFFFFFFF, 0, 1) == (0, 1)
    assert salu.SOP2["s_bfe_i32"][0](0x0000F000, 12 | 4 << 16) == (0xFFFFFFFF, 1)  # 4 bits at 12, sign-extended


def test_vector_bit_field_extract() -> None:
    value, offset, width = lanes(0xDEADBEEF), lanes(4), lanes(12)
    offset &= 31
    width &= 31
    for signed in (False, True):
        got = VOP_OPS["v_bfe_i32" if signed else "v_bfe_u32"][0](value, offset, width)
        for lane in range(32):
            v, o, w = int(value[lane]), int(offset[lane]), int(width[lane])
            field = (v >> o) & ((1 << w) - 1)
            if signed and w and field >> (w - 1):
                field -= 1 << w
            assert int(got[lane]) == (field & 0xFFFFFFFF if w else 0)


@pytest.mark.parametrize("name, fn", [("v_add_f32", np.add), ("v_mul_f32", np.multiply), ("v_sub_f32", np.subtract)])
def test_f32_arithmetic_rounds_to_nearest_even_with_denormals(name: str, fn) -> None:  # noqa: ANN001
    a = RNG.standard_normal(32).astype(np.float32) * np.float32(1e-38)  # includes denormal results
    b = RNG.standard_normal(32).astype(np.float32)
    got = VOP_OPS[name][0](a.view(np.uint32), b.view(np.uint32)).view(np.float32)
    np.testing.assert_array_equal(got, fn(a, b))
    fma = VOP_OPS["v_fma_f32"][0](a.view(np.uint32), b.view(np.uint32), b.view(np.uint32)).view(np.float32)
    np.testing.assert_array_equal(fma, (a.astype(np.float64) * b + b).astype(np.float32))


def rounded_exactly(value: Fraction, precision: int, min_exponent: int) -> float:
    """The oracle: an exact rational rounded to nearest even with `precision` significant bits, subnormals below
    2**min_exponent (f32: 24, -126; f16: 11, -14), by integer arithmetic."""
    if value == 0:
        return 0.0
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1
    ulp = Fraction(2) ** (max(exponent, min_exponent) - precision + 1)
    steps, rest = divmod(magnitude, ulp)
    if 2 * rest > ulp or (2 * rest == ulp and steps % 2 == 1):
        steps += 1
    return float(steps * ulp) * (1 if value > 0 else -1)


def fma_cases(dtype: type[np.floating], count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Products just off the result type's rounding midpoints, cancellation, and operands far apart in size."""
    a = (1 + RNG.integers(0, 2**8, count) / 2**12).astype(dtype)
    b = (1 + RNG.integers(0, 2**8, count) / 2**12).astype(dtype)
    c = (RNG.choice([-1, 1], count) * 2.0 ** RNG.integers(-40 if dtype == np.float32 else -20, 2, count)).astype(dtype)
    c[: count // 4] = -(a[: count // 4].astype(np.float64) * b[: count // 4]).astype(dtype)  # cancellation
    return a, b, c


def test_an_f32_fma_is_rounded_once_like_the_fused_hardware_operation() -> None:
    one = np.float32(1 + 2**-12)
    tiny = np.float32(2**-80)  # (1 + 2**-12)**2 + 2**-80 lies just above an f32 midpoint
    a, b, c = (np.full(32, x, dtype=np.float32) for x in (one, one, tiny))
    exact = Fraction(float(one)) ** 2 + Fraction(float(tiny))
    twice_rounded = (a.astype(np.float64) * b + c).astype(np.float32)
    assert twice_rounded[0] != np.float32(rounded_exactly(exact, 24, -126))  # the premise: rounding twice is wrong
    got = VOP_OPS["v_fma_f32"][0](a.view(np.uint32), b.view(np.uint32), c.view(np.uint32)).view(np.float32)
    assert got[0] == np.float32(rounded_exactly(exact, 24, -126))
    for _ in range(40):
        a, b, c = fma_cases(np.float32, 32)
        got = VOP_OPS["v_fma_f32"][0](a.view(np.uint32), b.view(np.uint32), c.view(np.uint32)).view(np.float32)
        for lane in range(32):
            exact = Fraction(float(a[lane])) * Fraction(float(b[lane])) + Fraction(float(c[lane]))
            assert got[lane] == np.float32(rounded_exactly(exact, 24, -126)), (a[lane], b[lane], c[lane])


def test_v_fma_mixlo_f16_rounds_its_f32_sources_fma_once_to_f16() -> None:
    """(1 + 2**-11) * 1 + 2**-40 lies just above an f16 midpoint: rounded through f32 first it lands on the midpoint
    and rounds to even (1.0); the hardware's single rounding gives 1 + 2**-10."""
    word = bytes([0x03, 0x00, 0x21, 0xCC, 0x00, 0x03, 0x0A, 0x04])  # v_fma_mixlo_f16 v3, v0, v1, v2 (llvm-mc-19)
    inst = decode(word, 0)
    assert inst.name == "v_fma_mixlo_f16"
    wave = Wave(None, Workgroup(np.zeros(4, np.uint8)))  # type: ignore[arg-type]
    wave.set_exec(0xFFFFFFFF)
    for reg, value in enumerate((1 + 2**-11, 1.0, 2**-40)):
        wave.v[reg] = np.full(32, value, dtype=np.float32).view(np.uint32)
    wave.v[3] = 0xABCD0000
    _fma_mix(inst)(wave)
    exact = Fraction(1 + 2**-11) + Fraction(2**-40)
    assert np.float16(float(np.float32(1 + 2**-11 + 2**-40))) == np.float16(1.0)  # the premise: through f32, 1.0
    assert all(wave.v[3] >> 16 == 0xABCD)  # the high half is kept
    halves = (wave.v[3] & 0xFFFF).astype(np.uint16).view(np.float16)
    np.testing.assert_array_equal(halves, np.float16(rounded_exactly(exact, 11, -14)))


def test_an_f64_fma_is_rounded_once() -> None:
    """Cancellation (c = -round(a*b) leaves the product's low half, which only a fused FMA keeps), operands far apart,
    signed zeros and overflow, against exact rationals."""
    a = RNG.standard_normal(32) * 2.0 ** RNG.integers(-30, 30, 32)
    b = RNG.standard_normal(32)
    c = -(a * b)
    c[16:] = RNG.standard_normal(16) * 2.0 ** RNG.integers(-120, 60, 16)
    a[28:], b[28:], c[28:] = [-0.0, 0.0, 1e300, 3.0], [0.0, 5.0, 1e10, 2**-1074], [-0.0, -0.0, 1.0, 0.0]
    got = VOP_OPS["v_fma_f64"][0](a.view(np.uint64), b.view(np.uint64), c.view(np.uint64)).view(np.float64)
    for lane in range(28):
        assert got[lane] == float(Fraction(a[lane]) * Fraction(b[lane]) + Fraction(c[lane])), lane
    assert got[:16].any()  # the premise: the low halves are not all zero
    assert str(got[28]) == "-0.0" and str(got[29]) == "0.0" and got[30] == np.inf and got[31] == 3 * 2**-1074
