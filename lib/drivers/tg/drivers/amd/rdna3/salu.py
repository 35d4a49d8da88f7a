"""Scalar ALU semantics on Python ints: each operation maps its sources to (result, SCC) where SCC is None when the
operation leaves it unchanged. 64-bit operands are single ints of 64 bits."""

from __future__ import annotations

from collections.abc import Callable

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
Result = tuple[int, int | None]


def s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x & 0x80000000 else x


def s64(x: int) -> int:
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def _nz(x: int) -> Result:
    return x, int(x != 0)


def _bfe(value: int, spec: int, bits: int, signed: bool) -> int:
    offset, width = spec & (bits - 1), (spec >> 16) & 0x7F
    if width == 0:
        return 0
    field = (value >> offset) & ((1 << width) - 1)
    if signed and width < 64 and field >> (width - 1) & 1:
        field -= 1 << width
    return field & (M32 if bits == 32 else M64)


def _add_i32(a: int, b: int) -> Result:
    r = s32(a) + s32(b)
    return r & M32, int(not -(2**31) <= r < 2**31)


def _sub_i32(a: int, b: int) -> Result:
    r = s32(a) - s32(b)
    return r & M32, int(not -(2**31) <= r < 2**31)


def _lshl_add(n: int) -> Callable[[int, int], Result]:
    def op(a: int, b: int) -> Result:
        r = ((a << n) & M32) + b
        return r & M32, int(r > M32)

    return op


def _brev(x: int, bits: int) -> int:
    return int(f"{x:0{bits}b}"[::-1], 2)


def _ctz(x: int, bits: int) -> int:
    return (x & -x).bit_length() - 1 if x else M32


def _clz(x: int, bits: int) -> int:
    return bits - x.bit_length() if x else M32


def _cls(x: int, bits: int) -> int:
    """Leading bits equal to the sign bit, the sign bit included; -1 when every bit is (0 or -1)."""
    mask = (1 << bits) - 1
    x &= mask
    if x in (0, mask):
        return M32
    if x >> (bits - 1):
        x = ~x & mask
    return bits - x.bit_length()


# name -> (operation on (src0, src1[, scc]), operand widths (dst, src0, src1))
SOP2: dict[str, tuple[Callable[..., Result], tuple[int, int, int]]] = {
    "s_add_u32": (lambda a, b: ((a + b) & M32, int(a + b > M32)), (1, 1, 1)),
    "s_sub_u32": (lambda a, b: ((a - b) & M32, int(b > a)), (1, 1, 1)),
    "s_add_i32": (_add_i32, (1, 1, 1)),
    "s_sub_i32": (_sub_i32, (1, 1, 1)),
    "s_addc_u32": (lambda a, b, c: ((a + b + c) & M32, int(a + b + c > M32)), (1, 1, 1)),
    "s_subb_u32": (lambda a, b, c: ((a - b - c) & M32, int(b + c > a)), (1, 1, 1)),
    "s_absdiff_i32": (lambda a, b: _nz(abs(s32(a) - s32(b)) & M32), (1, 1, 1)),
    "s_lshl_b32": (lambda a, b: _nz((a << (b & 31)) & M32), (1, 1, 1)),
    "s_lshl_b64": (lambda a, b: _nz((a << (b & 63)) & M64), (2, 2, 1)),
    "s_lshr_b32": (lambda a, b: _nz(a >> (b & 31)), (1, 1, 1)),
    "s_lshr_b64": (lambda a, b: _nz(a >> (b & 63)), (2, 2, 1)),
    "s_ashr_i32": (lambda a, b: _nz((s32(a) >> (b & 31)) & M32), (1, 1, 1)),
    "s_ashr_i64": (lambda a, b: _nz((s64(a) >> (b & 63)) & M64), (2, 2, 1)),
    "s_lshl1_add_u32": (_lshl_add(1), (1, 1, 1)),
    "s_lshl2_add_u32": (_lshl_add(2), (1, 1, 1)),
    "s_lshl3_add_u32": (_lshl_add(3), (1, 1, 1)),
    "s_lshl4_add_u32": (_lshl_add(4), (1, 1, 1)),
    "s_min_i32": (lambda a, b: (a, 1) if s32(a) < s32(b) else (b, 0), (1, 1, 1)),
    "s_min_u32": (lambda a, b: (a, 1) if a < b else (b, 0), (1, 1, 1)),
    "s_max_i32": (lambda a, b: (a, 1) if s32(a) > s32(b) else (b, 0), (1, 1, 1)),
    "s_max_u32": (lambda a, b: (a, 1) if a > b else (b, 0), (1, 1, 1)),
    "s_and_b32": (lambda a, b: _nz(a & b), (1, 1, 1)),
    "s_and_b64": (lambda a, b: _nz(a & b), (2, 2, 2)),
    "s_or_b32": (lambda a, b: _nz(a | b), (1, 1, 1)),
    "s_or_b64": (lambda a, b: _nz(a | b), (2, 2, 2)),
    "s_xor_b32": (lambda a, b: _nz(a ^ b), (1, 1, 1)),
    "s_xor_b64": (lambda a, b: _nz(a ^ b), (2, 2, 2)),
    "s_nand_b32": (lambda a, b: _nz(~(a & b) & M32), (1, 1, 1)),
    "s_nand_b64": (lambda a, b: _nz(~(a & b) & M64), (2, 2, 2)),
    "s_nor_b32": (lambda a, b: _nz(~(a | b) & M32), (1, 1, 1)),
    "s_nor_b64": (lambda a, b: _nz(~(a | b) & M64), (2, 2, 2)),
    "s_xnor_b32": (lambda a, b: _nz(~(a ^ b) & M32), (1, 1, 1)),
    "s_xnor_b64": (lambda a, b: _nz(~(a ^ b) & M64), (2, 2, 2)),
    "s_and_not1_b32": (lambda a, b: _nz(a & ~b & M32), (1, 1, 1)),
    "s_and_not1_b64": (lambda a, b: _nz(a & ~b & M64), (2, 2, 2)),
    "s_or_not1_b32": (lambda a, b: _nz((a | ~b) & M32), (1, 1, 1)),
    "s_or_not1_b64": (lambda a, b: _nz((a | ~b) & M64), (2, 2, 2)),
    "s_bfe_u32": (lambda a, b: _nz(_bfe(a, b, 32, False)), (1, 1, 1)),
    "s_bfe_i32": (lambda a, b: _nz(_bfe(a, b, 32, True)), (1, 1, 1)),
    "s_bfe_u64": (lambda a, b: _nz(_bfe(a, b, 64, False)), (2, 2, 1)),
    "s_bfe_i64": (lambda a, b: _nz(_bfe(a, b, 64, True)), (2, 2, 1)),
    "s_bfm_b32": (lambda a, b: ((((1 << (a & 31)) - 1) << (b & 31)) & M32, None), (1, 1, 1)),
    "s_bfm_b64": (lambda a, b: ((((1 << (a & 63)) - 1) << (b & 63)) & M64, None), (2, 1, 1)),
    "s_mul_i32": (lambda a, b: ((s32(a) * s32(b)) & M32, None), (1, 1, 1)),
    "s_mul_hi_u32": (lambda a, b: ((a * b) >> 32, None), (1, 1, 1)),
    "s_mul_hi_i32": (lambda a, b: (((s32(a) * s32(b)) >> 32) & M32, None), (1, 1, 1)),
    "s_pack_ll_b32_b16": (lambda a, b: ((a & 0xFFFF) | (b & 0xFFFF) << 16, None), (1, 1, 1)),
    "s_pack_lh_b32_b16": (lambda a, b: ((a & 0xFFFF) | (b & 0xFFFF0000), None), (1, 1, 1)),
    "s_pack_hh_b32_b16": (lambda a, b: ((a >> 16) | (b & 0xFFFF0000), None), (1, 1, 1)),
    "s_pack_hl_b32_b16": (lambda a, b: ((a >> 16) | (b & 0xFFFF) << 16, None), (1, 1, 1)),
}
# s_cselect reads SCC and leaves it
CSELECT = {"s_cselect_b32": 1, "s_cselect_b64": 2}
CARRY_IN = frozenset({"s_addc_u32", "s_subb_u32"})

SOP1: dict[str, tuple[Callable[[int], Result], tuple[int, int]]] = {
    "s_mov_b32": (lambda a: (a, None), (1, 1)),
    "s_mov_b64": (lambda a: (a, None), (2, 2)),
    "s_not_b32": (lambda a: _nz(~a & M32), (1, 1)),
    "s_not_b64": (lambda a: _nz(~a & M64), (2, 2)),
    "s_brev_b32": (lambda a: (_brev(a, 32), None), (1, 1)),
    "s_brev_b64": (lambda a: (_brev(a, 64), None), (2, 2)),
    "s_ctz_i32_b32": (lambda a: (_ctz(a, 32), None), (1, 1)),
    "s_ctz_i32_b64": (lambda a: (_ctz(a, 64), None), (1, 2)),
    "s_clz_i32_u32": (lambda a: (_clz(a, 32), None), (1, 1)),
    "s_clz_i32_u64": (lambda a: (_clz(a, 64), None), (1, 2)),
    "s_cls_i32": (lambda a: (_cls(a, 32), None), (1, 1)),
    "s_cls_i32_i64": (lambda a: (_cls(a, 64), None), (1, 2)),
    "s_sext_i32_i8": (lambda a: ((a & 0xFF) - ((a & 0x80) << 1) & M32, None), (1, 1)),
    "s_sext_i32_i16": (lambda a: ((a & 0xFFFF) - ((a & 0x8000) << 1) & M32, None), (1, 1)),
    "s_abs_i32": (lambda a: _nz(abs(s32(a)) & M32), (1, 1)),
    "s_bcnt0_i32_b32": (lambda a: _nz(32 - bin(a).count("1")), (1, 1)),
    "s_bcnt0_i32_b64": (lambda a: _nz(64 - bin(a).count("1")), (1, 2)),
    "s_bcnt1_i32_b32": (lambda a: _nz(bin(a).count("1")), (1, 1)),
    "s_bcnt1_i32_b64": (lambda a: _nz(bin(a).count("1")), (1, 2)),
}
# saveexec: D = EXEC; EXEC = op(S0, EXEC); SCC = EXEC != 0
SAVEEXEC: dict[str, Callable[[int, int], int]] = {
    "and": lambda s, e: s & e,
    "or": lambda s, e: s | e,
    "xor": lambda s, e: s ^ e,
    "nand": lambda s, e: ~(s & e),
    "nor": lambda s, e: ~(s | e),
    "xnor": lambda s, e: ~(s ^ e),
    "and_not0": lambda s, e: ~s & e,
    "or_not0": lambda s, e: ~s | e,
    "and_not1": lambda s, e: s & ~e,
    "or_not1": lambda s, e: s | ~e,
}

SOPC: dict[str, tuple[Callable[[int, int], bool], int]] = {
    "s_cmp_eq_i32": (lambda a, b: a == b, 1),
    "s_cmp_lg_i32": (lambda a, b: a != b, 1),
    "s_cmp_gt_i32": (lambda a, b: s32(a) > s32(b), 1),
    "s_cmp_ge_i32": (lambda a, b: s32(a) >= s32(b), 1),
    "s_cmp_lt_i32": (lambda a, b: s32(a) < s32(b), 1),
    "s_cmp_le_i32": (lambda a, b: s32(a) <= s32(b), 1),
    "s_cmp_eq_u32": (lambda a, b: a == b, 1),
    "s_cmp_lg_u32": (lambda a, b: a != b, 1),
    "s_cmp_gt_u32": (lambda a, b: a > b, 1),
    "s_cmp_ge_u32": (lambda a, b: a >= b, 1),
    "s_cmp_lt_u32": (lambda a, b: a < b, 1),
    "s_cmp_le_u32": (lambda a, b: a <= b, 1),
    "s_bitcmp0_b32": (lambda a, b: not (a >> (b & 31)) & 1, 1),
    "s_bitcmp1_b32": (lambda a, b: bool((a >> (b & 31)) & 1), 1),
    "s_bitcmp0_b64": (lambda a, b: not (a >> (b & 63)) & 1, 2),
    "s_bitcmp1_b64": (lambda a, b: bool((a >> (b & 63)) & 1), 2),
    "s_cmp_eq_u64": (lambda a, b: a == b, 2),
    "s_cmp_lg_u64": (lambda a, b: a != b, 2),
}

SOPK_CMP: dict[str, tuple[Callable[[int, int], bool], bool]] = {
    f"s_cmpk_{name[6:]}": (fn, name.endswith("i32"))
    for name, (fn, _) in SOPC.items()
    if name.startswith("s_cmp_") and name.endswith("32")
}
