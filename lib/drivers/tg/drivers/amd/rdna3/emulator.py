"""The RDNA3 wave32 emulator: runs a `WaveLaunch` over a `GPUMemory` (tg.drivers.amd.iface.ShaderEngines).

Waves are built from the launch registers alone, as the hardware's shader-processor input does: s0.. hold
COMPUTE_USER_DATA (RSRC2.USER_SGPR_COUNT of them), the workgroup ids follow in the SGPRs RSRC2.TGID_{X,Y,Z}_EN
enable, v0 holds the packed workitem ids (x | y << 10 | z << 20), LDS is RSRC2.LDS_SIZE granules per workgroup.

Each instruction is decoded once and compiled to a closure over its operands, cached by its dwords (so the same
code at any address, and every wave, share it); a dispatch maps each PC to its closure on first execution. Vector
lanes are numpy arrays (uint32 per lane; VGPRs are a [registers, 32] array). The waves of a workgroup run in turn
until each reaches s_barrier or s_endpgm, then the barrier releases them.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..code_object import rsrc2_lds_bytes, rsrc2_user_sgpr_count, rsrc2_workgroup_id_enables
from ..iface import GPUFault, GPUMemory, WaveLaunch
from . import salu
from .decoder import EXEC_LO, LITERAL, NULL, SCC, VCC_LO, IllegalInstruction, Instruction, decode
from .valu import VOP_OPS, compare, float_source_bits, rounded_once

U32, U64 = np.uint32, np.uint64
WAVE = 32
LANE_IDS = np.arange(WAVE, dtype=U32)
ALL_LANES = 0xFFFFFFFF
NUM_VGPRS = 256
END, BARRIER = 1, 2
DEFAULT_MAX_INSTRUCTIONS = 1_000_000

# inline constants: integer codes and the float constants for each float width
_FLOAT_CONSTANTS = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
_INV_2PI = {32: 0x3E22F983, 64: 0x3FC45F306DC9C882, 16: 0x3118}


def inline_constant(code: int, bits: int = 32) -> int | None:
    """The bit pattern of an inline constant operand (None: not an inline constant)."""
    mask = (1 << bits) - 1
    if 128 <= code <= 192:
        return code - 128
    if 193 <= code <= 208:
        return (192 - code) & mask
    if code in _FLOAT_CONSTANTS:
        value = _FLOAT_CONSTANTS[code]
        fmt = {16: "<e", 32: "<f", 64: "<d"}[bits]
        return int.from_bytes(struct.pack(fmt, value), "little")
    if code == 248:
        return _INV_2PI[bits]
    return None


@dataclass
class Workgroup:
    lds: np.ndarray  # uint8
    waves: list[Wave] = field(default_factory=list)


class Wave:
    """One wave's architectural state."""

    __slots__ = ("s", "v", "scc", "pc", "exec_mask", "lanes", "full", "memory", "wg", "private", "count")

    def __init__(self, memory: GPUMemory, wg: Workgroup) -> None:
        self.s = [0] * 128
        self.v = np.zeros((NUM_VGPRS, WAVE), dtype=U32)
        self.scc = 0
        self.pc = 0
        self.memory = memory
        self.wg = wg
        self.private: dict[int, bytearray] = {}
        self.count = 0
        self.exec_mask = 0
        self.lanes = np.zeros(WAVE, dtype=bool)
        self.full = False
        self.set_exec(0)

    def set_exec(self, value: int) -> None:
        value &= ALL_LANES
        self.s[EXEC_LO] = value
        self.s[EXEC_LO + 1] = 0
        self.exec_mask = value
        self.full = value == ALL_LANES
        self.lanes = ((value >> LANE_IDS) & 1).astype(bool)

    def sget(self, code: int) -> int:
        if code == SCC:
            return self.scc
        if code == NULL:
            return 0
        if code == 251:  # VCCZ
            return int(self.s[VCC_LO] == 0)
        if code == 252:  # EXECZ
            return int(self.exec_mask == 0)
        return self.s[code]

    def sset(self, code: int, value: int) -> None:
        if code == EXEC_LO:
            self.set_exec(value)
        elif code == EXEC_LO + 1 or code == NULL:
            return
        else:
            self.s[code] = value & 0xFFFFFFFF

    def sget64(self, code: int) -> int:
        return self.sget(code) | self.sget(code + 1) << 32

    def sset64(self, code: int, value: int) -> None:
        self.sset(code, value & 0xFFFFFFFF)
        self.sset(code + 1, value >> 32)

    def vset(self, reg: int, value: np.ndarray | np.generic | int) -> None:
        if self.full:
            self.v[reg] = value
        else:
            np.copyto(self.v[reg], np.asarray(value, dtype=U32), where=self.lanes)

    def vset64(self, reg: int, value: np.ndarray) -> None:
        value = np.asarray(value, dtype=U64)
        self.vset(reg, (value & U64(0xFFFFFFFF)).astype(U32))
        self.vset(reg + 1, (value >> U64(32)).astype(U32))


Exec = Callable[[Wave], int | None]
Getter = Callable[[Wave], np.ndarray]


def _illegal(inst: Instruction, why: str = "not implemented by the emulator") -> IllegalInstruction:
    return IllegalInstruction(f"{inst.name} ({inst.encoding} opcode {inst.opcode}) {why}", inst.offset, inst.words)


# -- operand access --


def scalar_getter(code: int, width: int, literal: int | None, is_float: bool = False) -> Callable[[Wave], int]:
    """A scalar operand's value (an int of 32*width bits)."""
    if code == LITERAL:
        lit = literal or 0
        value = (lit << 32) if (width == 2 and is_float) else lit
        return lambda w: value
    const = inline_constant(code, 32 * width if is_float else 32)
    if const is not None:
        if width == 2 and not is_float and 193 <= code <= 208:
            const = (192 - code) & 0xFFFFFFFFFFFFFFFF
        return lambda w: const
    if width == 2:
        return lambda w: w.sget64(code)
    return lambda w: w.sget(code)


def vector_getter(code: int, width: int, literal: int | None, float_bits: int = 0) -> Getter:
    """A vector source operand as lanes: uint32 (width 1) or uint64 (width 2)."""
    if code >= 256:
        reg = code - 256
        if width == 2:
            return lambda w: w.v[reg].astype(U64) | (w.v[reg + 1].astype(U64) << U64(32))
        return lambda w: w.v[reg]
    if code in (233, 234, 250):
        raise ValueError("DPP operands are not supported")
    dtype = U64 if width == 2 else U32
    scalar = scalar_getter(code, width, literal, float_bits == 64)
    if code == LITERAL or inline_constant(code) is not None:
        if float_bits == 16 and code != LITERAL:
            const16 = inline_constant(code, 16)
            assert const16 is not None
            array = np.full(WAVE, const16, dtype=dtype)
        else:
            array = np.full(WAVE, scalar(None), dtype=dtype)  # type: ignore[arg-type]
        return lambda w: array
    return lambda w: np.full(WAVE, scalar(w), dtype=dtype)


def _modifier(getter: Getter, index: int, neg: int, abs_: int, sign_bit: int, width: int) -> Getter:
    is_abs, is_neg = abs_ >> index & 1, neg >> index & 1
    if not (is_abs or is_neg):
        return getter
    dtype = U64 if width == 2 else U32
    bit = dtype(1) << dtype(sign_bit)

    def modified(w: Wave) -> np.ndarray:
        x = getter(w)
        if is_abs:
            x = x & ~bit
        if is_neg:
            x = x ^ bit
        return x

    return modified


def lane_bits(mask: int) -> np.ndarray:
    return ((mask >> LANE_IDS) & 1).astype(bool)


def bits_of(lanes: np.ndarray) -> int:
    return int(np.packbits(lanes.astype(np.uint8), bitorder="little").view("<u4")[0])


# -- compilation of one instruction into a closure --


class Compiler:
    """Turns decoded instructions into closures, cached by their dwords."""

    def __init__(self) -> None:
        self.cache: dict[tuple[int, ...], Exec] = {}

    def compile(self, inst: Instruction) -> Exec:
        fn = self.cache.get(inst.words)
        if fn is None:
            handler = getattr(self, f"_{inst.encoding.lower()}", None)
            if handler is None:
                raise _illegal(inst, "has an encoding the emulator does not implement")
            try:
                fn = handler(inst)
            except ValueError as exc:
                raise _illegal(inst, str(exc)) from None
            self.cache[inst.words] = fn
        return fn

    # scalar

    def _sop2(self, inst: Instruction) -> Exec:
        f, name = inst.fields, inst.name
        if name in salu.CSELECT:
            width = salu.CSELECT[name]
            a, b = (scalar_getter(f[k], width, inst.literal) for k in ("src0", "src1"))
            dst = f["sdst"]
            setter = Wave.sset64 if width == 2 else Wave.sset
            return lambda w: setter(w, dst, a(w) if w.scc else b(w))
        if name not in salu.SOP2:
            raise _illegal(inst)
        op, (dw, w0, w1) = salu.SOP2[name]
        a, b = scalar_getter(f["src0"], w0, inst.literal), scalar_getter(f["src1"], w1, inst.literal)
        dst, setter = f["sdst"], (Wave.sset64 if dw == 2 else Wave.sset)
        carry = name in salu.CARRY_IN

        def run(w: Wave) -> None:
            result, scc = op(a(w), b(w), w.scc) if carry else op(a(w), b(w))
            setter(w, dst, result)
            if scc is not None:
                w.scc = scc

        return run

    def _sop1(self, inst: Instruction) -> Exec:
        f, name = inst.fields, inst.name
        dst = f["sdst"]
        if name == "s_getpc_b64":
            return lambda w: w.sset64(dst, w.pc)
        if name == "s_setpc_b64":
            src = scalar_getter(f["src0"], 2, inst.literal)

            def setpc(w: Wave) -> None:
                w.pc = src(w)

            return setpc
        if name == "s_swappc_b64":
            src = scalar_getter(f["src0"], 2, inst.literal)

            def swappc(w: Wave) -> None:
                target = src(w)
                w.sset64(dst, w.pc)
                w.pc = target

            return swappc
        if name.endswith("saveexec_b32"):
            op = salu.SAVEEXEC[name[2 : -len("_saveexec_b32")]]
            src = scalar_getter(f["src0"], 1, inst.literal)

            def saveexec(w: Wave) -> None:
                value, old = src(w), w.exec_mask
                w.sset(dst, old)
                w.set_exec(op(value, old))
                w.scc = int(w.exec_mask != 0)

            return saveexec
        if name in ("s_cmov_b32", "s_cmov_b64"):
            width = 2 if name.endswith("64") else 1
            src = scalar_getter(f["src0"], width, inst.literal)
            setter = Wave.sset64 if width == 2 else Wave.sset

            def cmov(w: Wave) -> None:
                if w.scc:
                    setter(w, dst, src(w))

            return cmov
        if name in ("s_bitset0_b32", "s_bitset1_b32"):
            src = scalar_getter(f["src0"], 1, inst.literal)
            one = name == "s_bitset1_b32"

            def bitset(w: Wave) -> None:
                bit = 1 << (src(w) & 31)
                w.sset(dst, (w.sget(dst) | bit) if one else (w.sget(dst) & ~bit))

            return bitset
        if name not in salu.SOP1:
            raise _illegal(inst)
        unary, (dw, sw) = salu.SOP1[name]
        src = scalar_getter(f["src0"], sw, inst.literal)
        setter = Wave.sset64 if dw == 2 else Wave.sset

        def run(w: Wave) -> None:
            result, scc = unary(src(w))
            setter(w, dst, result)
            if scc is not None:
                w.scc = scc

        return run

    def _sopc(self, inst: Instruction) -> Exec:
        if inst.name not in salu.SOPC:
            raise _illegal(inst)
        op, width = salu.SOPC[inst.name]
        wb = 1 if inst.name.startswith("s_bitcmp") else width
        a = scalar_getter(inst.fields["src0"], width, inst.literal)
        b = scalar_getter(inst.fields["src1"], wb, inst.literal)

        def run(w: Wave) -> None:
            w.scc = int(op(a(w), b(w)))

        return run

    def _sopk(self, inst: Instruction) -> Exec:
        name, dst, imm = inst.name, inst.fields["sdst"], inst.fields["simm16"]
        simm = imm - 0x10000 if imm & 0x8000 else imm
        if name == "s_movk_i32":
            return lambda w: w.sset(dst, simm)
        if name == "s_cmovk_i32":

            def cmovk(w: Wave) -> None:
                if w.scc:
                    w.sset(dst, simm)

            return cmovk
        if name == "s_addk_i32":

            def addk(w: Wave) -> None:
                result, scc = salu._add_i32(w.sget(dst), simm & 0xFFFFFFFF)
                w.sset(dst, result)
                w.scc = scc or 0

            return addk
        if name == "s_mulk_i32":
            return lambda w: w.sset(dst, salu.s32(w.sget(dst)) * simm)
        if name in salu.SOPK_CMP:
            op, signed = salu.SOPK_CMP[name]
            value = (simm & 0xFFFFFFFF) if signed else imm

            def cmpk(w: Wave) -> None:
                w.scc = int(op(w.sget(dst), value))

            return cmpk
        if name.startswith("s_waitcnt") or name in ("s_version", "s_setreg_b32", "s_setreg_imm32_b32"):
            return lambda w: None  # memory operations complete in order; MODE changes are not modelled
        if name == "s_getreg_b32":
            return lambda w: w.sset(dst, 0)
        raise _illegal(inst)

    def _sopp(self, inst: Instruction) -> Exec:
        name, imm = inst.name, inst.fields["simm16"]
        simm = imm - 0x10000 if imm & 0x8000 else imm
        if name == "s_endpgm":
            return lambda w: END
        if name == "s_barrier":
            return lambda w: BARRIER
        if name in _SOPP_NOPS:
            return lambda w: None
        if name == "s_code_end":
            raise _illegal(inst, "executed: the wave ran past the end of its program (the padding after s_endpgm)")
        if name in ("s_trap", "s_sethalt"):
            raise _illegal(inst, "(a trap or halt; the emulator has no trap handler)")
        if name in _BRANCH_CONDITIONS:
            cond = _BRANCH_CONDITIONS[name]
            delta = simm * 4

            def branch(w: Wave) -> None:
                if cond(w):
                    w.pc += delta

            return branch
        raise _illegal(inst)

    def _smem(self, inst: Instruction) -> Exec:
        f, name = inst.fields, inst.name
        if name in ("s_gl1_inv", "s_dcache_inv"):
            return lambda w: None
        if not name.startswith(("s_load_", "s_buffer_load_")):
            raise _illegal(inst)
        count = {"b32": 1, "b64": 2, "b128": 4, "b256": 8, "b512": 16}[name.rsplit("_", 1)[1]]
        sbase, sdata, offset, soffset = f["sbase"], f["sdata"], f["offset"], f["soffset"]
        buffer = name.startswith("s_buffer")

        def run(w: Wave) -> None:
            base = w.sget64(sbase)
            if buffer:
                base &= 0xFFFFFFFFFFFF
            address = (base + offset + (w.sget(soffset) if soffset != NULL else 0)) & ~3
            data = struct.unpack(f"<{count}I", w.memory.read(address, 4 * count))
            for i, value in enumerate(data):
                w.sset(sdata + i, value)

        return run

    # vector ALU

    def _sources(self, inst: Instruction, name: str, widths: tuple[int, ...], keys: tuple[str, ...]) -> list[Getter]:
        f = inst.fields
        getters = []
        for i, key in enumerate(keys):
            width = widths[i]
            code = f[key] if not key.startswith("v") else 256 + f[key]
            sign = float_source_bits(name, width)
            if inst.encoding in ("VOP1", "VOP2") and _operand_bits(name)[1] == 16:
                getters.append(_t16_source(code, inst.literal))
                continue
            getter = vector_getter(code, width, inst.literal, 64 if width == 2 else (16 if sign == 15 else 32))
            if inst.encoding == "VOP3":
                if f["opsel"] >> i & 1:
                    getter = _high_half(getter)
                getter = _modifier(getter, i, f["neg"], f["abs"], sign, width)
            elif inst.encoding == "VOP3SD":
                getter = _modifier(getter, i, f["neg"], 0, sign, width)
            getters.append(getter)
        return getters

    def _vop1(self, inst: Instruction) -> Exec:
        name, f = inst.name, inst.fields
        if name in ("v_nop", "v_pipeflush"):
            return lambda w: None
        if name == "v_readfirstlane_b32":
            src = vector_getter(f["src0"], 1, inst.literal)
            dst = f["vdst"]

            def readfirstlane(w: Wave) -> None:
                lanes = w.exec_mask
                lane = (lanes & -lanes).bit_length() - 1 if lanes else 0
                w.sset(dst, int(src(w)[lane]))

            return readfirstlane
        return self._vop(inst, name, ("src0",), f["vdst"])

    def _vop2(self, inst: Instruction) -> Exec:
        name, f = inst.name, inst.fields
        dst = f["vdst"]
        if name == "v_cndmask_b32":
            a, b = vector_getter(f["src0"], 1, inst.literal), vector_getter(256 + f["vsrc1"], 1, None)
            return _cndmask(a, b, lambda w: w.s[VCC_LO], dst)
        if name in _CARRY_OPS:
            a, b = vector_getter(f["src0"], 1, inst.literal), vector_getter(256 + f["vsrc1"], 1, None)
            return _carry_op(name, a, b, lambda w: w.s[VCC_LO], dst, VCC_LO)
        half = _is_16bit_op(name)
        a = _t16_source(f["src0"], inst.literal) if half else vector_getter(f["src0"], 1, inst.literal)
        b = _t16_source(256 + f["vsrc1"], None) if half else vector_getter(256 + f["vsrc1"], 1, None)
        if name in ("v_fmamk_f32", "v_fmamk_f16"):
            lit = np.full(WAVE, inst.literal or 0, dtype=U32)
            return self._vop_getters(inst, name, [a, lambda w: lit, b], dst)
        if name in ("v_fmaak_f32", "v_fmaak_f16"):
            lit = np.full(WAVE, inst.literal or 0, dtype=U32)
            return self._vop_getters(inst, name, [a, b, lambda w: lit], dst)
        if name in ("v_fmac_f32", "v_fmac_f16"):
            d = _t16_source(256 + dst, None) if half else vector_getter(256 + dst, 1, None)
            return self._vop_getters(inst, name, [a, b, d], dst)
        return self._vop(inst, name, ("src0", "vsrc1"), dst)

    def _vop(self, inst: Instruction, name: str, keys: tuple[str, ...], dst: int) -> Exec:
        if name not in VOP_OPS:
            raise _illegal(inst)
        _, widths, _ = VOP_OPS[name]
        if len(widths) != len(keys):
            raise _illegal(inst, f"expects {len(widths)} sources")
        return self._vop_getters(inst, name, self._sources(inst, name, widths, keys), dst)

    def _vop_getters(self, inst: Instruction, name: str, getters: list[Getter], dst: int) -> Exec:
        if name not in VOP_OPS:
            raise _illegal(inst)
        op, _, dst_width = VOP_OPS[name]
        post = _output_modifier(inst, name)
        if inst.encoding in ("VOP1", "VOP2") and _operand_bits(name)[0] == 16:
            write = _write16(dst & 0x7F, dst >= 0x80)  # true16: v128+ names the high half
            return lambda w: write(w, post(op(*[g(w) for g in getters])))
        if inst.encoding == "VOP3" and _is_16bit_result(name):
            write = _write16(dst, bool(inst.fields["opsel"] & 8))
            return lambda w: write(w, post(op(*[g(w) for g in getters])))
        if dst_width == 2:

            def run64(w: Wave) -> None:
                w.vset64(dst, post(op(*[g(w) for g in getters])))

            return run64
        if len(getters) == 1:
            (g0,) = getters
            return lambda w: w.vset(dst, post(op(g0(w))))
        if len(getters) == 2:
            g0, g1 = getters
            return lambda w: w.vset(dst, post(op(g0(w), g1(w))))

        def run(w: Wave) -> None:
            w.vset(dst, post(op(*[g(w) for g in getters])))

        return run

    def _vopc(self, inst: Instruction) -> Exec:
        f = inst.fields
        return self._compare(inst, vector_getter, f["src0"], 256 + f["vsrc1"], VCC_LO)

    def _compare(self, inst: Instruction, _getter: object, src0: int, src1: int, sdst: int) -> Exec:
        found = compare(inst.name)
        if found is None:
            raise _illegal(inst)
        cmp, (w0, w1) = found
        bits = _operand_bits(inst.name)[1]  # 16: inline constants are f16 and the sign (neg, abs) is bit 15
        a = vector_getter(src0, w0, inst.literal, 64 if w0 == 2 else bits)
        b = vector_getter(src1, w1, inst.literal, 64 if w1 == 2 else bits)
        if inst.encoding == "VOPC" and bits == 16:
            a, b = _t16_source(src0, inst.literal), _t16_source(src1, None)
        if inst.encoding == "VOP3" and inst.fields["opsel"]:
            if not _is_16bit_op(inst.name):
                raise _illegal(inst, "with op_sel on a 32-bit comparison is not implemented")
            a = _high_half(a) if inst.fields["opsel"] & 1 else a
            b = _high_half(b) if inst.fields["opsel"] & 2 else b
        if inst.encoding == "VOP3":
            f = inst.fields
            a = _modifier(a, 0, f["neg"], f["abs"], 63 if w0 == 2 else bits - 1, w0)
            b = _modifier(b, 1, f["neg"], f["abs"], 63 if w1 == 2 else bits - 1, w1)
        to_exec = inst.name.startswith("v_cmpx")

        def run(w: Wave) -> None:
            result = bits_of(cmp(a(w), b(w))) & w.exec_mask
            if to_exec:
                w.set_exec(result)
            else:
                w.sset(sdst, result)

        return run

    def _vop3(self, inst: Instruction) -> Exec:
        f, name = inst.fields, inst.name
        if inst.opcode < 256:  # VOPC promoted: the destination is an SGPR
            return self._compare(inst, vector_getter, f["src0"], f["src1"], f["vdst"])
        if f["opsel"] and not _is_16bit_op(name):
            raise _illegal(inst, "with op_sel on a 32-bit operation is not implemented")
        dst = f["vdst"]
        if name == "v_cndmask_b16":
            a = _modifier(_opsel_source(inst, 0), 0, f["neg"], f["abs"], 15, 1)
            b = _modifier(_opsel_source(inst, 1), 1, f["neg"], f["abs"], 15, 1)
            cond = scalar_getter(f["src2"], 1, inst.literal)
            write = _write16(dst, bool(f["opsel"] & 8))
            return lambda w: write(w, np.where(lane_bits(cond(w)), b(w), a(w)))
        if name == "v_cndmask_b32":
            a = _modifier(vector_getter(f["src0"], 1, inst.literal), 0, f["neg"], f["abs"], 31, 1)
            b = _modifier(vector_getter(f["src1"], 1, inst.literal), 1, f["neg"], f["abs"], 31, 1)
            cond = scalar_getter(f["src2"], 1, inst.literal)
            return _cndmask(a, b, cond, dst)
        if name == "v_readlane_b32":
            src, lane = vector_getter(f["src0"], 1, None), scalar_getter(f["src1"], 1, inst.literal)
            return lambda w: w.sset(dst, int(src(w)[lane(w) & 31]))
        if name == "v_writelane_b32":
            value, lane = scalar_getter(f["src0"], 1, inst.literal), scalar_getter(f["src1"], 1, inst.literal)

            def writelane(w: Wave) -> None:
                w.v[dst][lane(w) & 31] = value(w)

            return writelane
        if name in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
            mask_src = scalar_getter(f["src0"], 1, inst.literal) if f["src0"] < 256 else None
            vsrc0 = vector_getter(f["src0"], 1, inst.literal)
            acc = vector_getter(f["src1"], 1, inst.literal)
            hi = name == "v_mbcnt_hi_u32_b32"

            def mbcnt(w: Wave) -> None:
                if hi:  # wave32: no lanes above 31
                    w.vset(dst, acc(w))
                    return
                if mask_src is not None:
                    m = mask_src(w)
                    below = np.array([bin(m & ((1 << i) - 1)).count("1") for i in range(WAVE)], dtype=U32)
                else:
                    vals = vsrc0(w)
                    below = np.array([bin(int(vals[i]) & ((1 << i) - 1)).count("1") for i in range(WAVE)], dtype=U32)
                w.vset(dst, below + acc(w))

            return mbcnt
        if inst.opcode >= 384 and inst.opcode < 512 or (256 <= inst.opcode < 384 and name in VOP_OPS):
            count = len(VOP_OPS[name][1]) if name in VOP_OPS else 0
            if name in ("v_fmac_f32", "v_fmac_f16"):
                getters = self._sources(inst, name, (1, 1), ("src0", "src1"))
                getters.append(vector_getter(256 + dst, 1, None))
                return self._vop_getters(inst, name, getters, dst)
            return self._vop(inst, name, ("src0", "src1", "src2")[:count], dst)
        if name in VOP_OPS:
            count = len(VOP_OPS[name][1])
            return self._vop(inst, name, ("src0", "src1", "src2")[:count], dst)
        raise _illegal(inst)

    def _vop3sd(self, inst: Instruction) -> Exec:
        f, name = inst.fields, inst.name
        dst, sdst = f["vdst"], f["sdst"]
        if name in _CARRY_OPS:
            a = _modifier(vector_getter(f["src0"], 1, inst.literal), 0, f["neg"], 0, 31, 1)
            b = _modifier(vector_getter(f["src1"], 1, inst.literal), 1, f["neg"], 0, 31, 1)
            carry_in = scalar_getter(f["src2"], 1, inst.literal) if "_ci_" in name else (lambda w: 0)
            return _carry_op(name, a, b, carry_in, dst, sdst)
        if name in ("v_mad_u64_u32", "v_mad_i64_i32"):
            a = vector_getter(f["src0"], 1, inst.literal)
            b = vector_getter(f["src1"], 1, inst.literal)
            c = vector_getter(f["src2"], 2, inst.literal)
            signed = name == "v_mad_i64_i32"

            def mad64(w: Wave) -> None:
                x, y, z = a(w), b(w), c(w)
                if signed:
                    prod = [
                        int(p) * int(q) + (int(r) - (1 << 64) * (int(r) >> 63))
                        for p, q, r in zip(x.view(np.int32), y.view(np.int32), z, strict=True)
                    ]
                    result = np.array([p & 0xFFFFFFFFFFFFFFFF for p in prod], dtype=U64)
                    carry = bits_of(np.array([not -(2**63) <= p < 2**63 for p in prod]))
                else:
                    result = x.astype(U64) * y.astype(U64) + z  # wraps mod 2^64
                    carry = bits_of(result < z)
                w.vset64(dst, result)
                w.sset(sdst, carry & w.exec_mask)

            return mad64
        if name in ("v_div_scale_f32", "v_div_scale_f64"):
            # without the extreme-exponent scaling: D = S0, VCC = 0 (see the module's report of gaps)
            width = 2 if name.endswith("64") else 1
            bits = 64 if width == 2 else 32
            src = _modifier(vector_getter(f["src0"], width, inst.literal, bits), 0, f["neg"], 0, bits - 1, width)

            def div_scale(w: Wave) -> None:
                if width == 2:
                    w.vset64(dst, src(w))
                else:
                    w.vset(dst, src(w))
                w.sset(sdst, 0)

            return div_scale
        raise _illegal(inst)

    def _vopd(self, inst: Instruction) -> Exec:
        f = inst.fields
        x = self._vopd_half(inst, inst.name, f["srcx0"], f["vsrcx1"], f["vdstx"])
        y = self._vopd_half(inst, inst.name_y, f["srcy0"], f["vsrcy1"], f["vdsty"])

        def run(w: Wave) -> None:
            rx, ry = x(w), y(w)  # both halves read their sources before either writes
            w.vset(f["vdstx"], rx)
            w.vset(f["vdsty"], ry)

        return run

    def _vopd_half(self, inst: Instruction, name: str, src0: int, vsrc1: int, vdst: int) -> Getter:
        a = vector_getter(src0, 1, inst.literal)
        b = vector_getter(256 + vsrc1, 1, None)
        lit = np.full(WAVE, inst.literal or 0, dtype=U32)
        if name == "v_mov_b32":
            return a
        if name == "v_cndmask_b32":
            return lambda w: np.where(lane_bits(w.s[VCC_LO]), b(w), a(w))
        if name not in VOP_OPS:
            raise ValueError(f"VOPD operation {name} is not implemented")
        op = VOP_OPS[name][0]
        if name == "v_fmac_f32":
            d = vector_getter(256 + vdst, 1, None)
            return lambda w: op(a(w), b(w), d(w))
        if name == "v_fmamk_f32":
            return lambda w: op(a(w), lit, b(w))
        if name == "v_fmaak_f32":
            return lambda w: op(a(w), b(w), lit)
        return lambda w: op(a(w), b(w))

    def _vop3p(self, inst: Instruction) -> Exec:
        name = inst.name
        if name in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
            return _fma_mix(inst)
        if name in PACKED_16:
            return _packed16(inst, PACKED_16[name])
        raise _illegal(inst)

    # memory

    def _global(self, inst: Instruction) -> Exec:
        return _global_access(inst)

    def _flat(self, inst: Instruction) -> Exec:
        return _global_access(inst)

    def _scratch(self, inst: Instruction) -> Exec:
        return _scratch_access(inst)

    def _mubuf(self, inst: Instruction) -> Exec:
        if inst.name in ("buffer_gl0_inv", "buffer_gl1_inv"):
            return lambda w: None  # no caches: memory is coherent
        raise _illegal(inst)

    def _ds(self, inst: Instruction) -> Exec:
        return _ds_access(inst)


_SOPP_NOPS = frozenset(
    {
        "s_nop",
        "s_waitcnt",
        "s_delay_alu",
        "s_clause",
        "s_sendmsg",
        "s_set_inst_prefetch_distance",
        "s_sleep",
        "s_setprio",
        "s_waitcnt_depctr",
        "s_icache_inv",
        "s_wait_idle",
        "s_round_mode",
        "s_denorm_mode",
        "s_ttracedata",
    }
)
_BRANCH_CONDITIONS: dict[str, Callable[[Wave], bool]] = {
    "s_branch": lambda w: True,
    "s_cbranch_scc0": lambda w: w.scc == 0,
    "s_cbranch_scc1": lambda w: w.scc == 1,
    "s_cbranch_vccz": lambda w: w.s[VCC_LO] == 0,
    "s_cbranch_vccnz": lambda w: w.s[VCC_LO] != 0,
    "s_cbranch_execz": lambda w: w.exec_mask == 0,
    "s_cbranch_execnz": lambda w: w.exec_mask != 0,
}
_CARRY_OPS = frozenset(
    {"v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"}
)


def _cndmask(a: Getter, b: Getter, cond: Callable[[Wave], int], dst: int) -> Exec:
    def run(w: Wave) -> None:
        w.vset(dst, np.where(lane_bits(cond(w)), b(w), a(w)))

    return run


def _carry_op(name: str, a: Getter, b: Getter, carry_in: Callable[[Wave], int], dst: int, sdst: int) -> Exec:
    """V_ADD/SUB(REV)_CO(_CI)_U32: 32-bit add/subtract with a carry (borrow) out per lane into an SGPR mask."""
    subtract, reverse, with_carry = "_sub" in name, "subrev" in name, "_ci_" in name
    lane_shift = LANE_IDS.astype(U64)

    def run(w: Wave) -> None:
        x, y = a(w).astype(U64), b(w).astype(U64)
        if reverse:
            x, y = y, x
        if with_carry:  # x + (y + c) or x - (y + c): the carry in joins y
            y = y + ((np.uint64(carry_in(w)) >> lane_shift) & U64(1))
        full = x - y if subtract else x + y
        carry = (x < y) if subtract else (full > U64(0xFFFFFFFF))
        w.vset(dst, full.astype(U32))
        w.sset(sdst, bits_of(carry) & w.exec_mask)

    return run


def _output_modifier(inst: Instruction, name: str) -> Callable[[np.ndarray], np.ndarray]:
    f = inst.fields
    omod, clamp = f.get("omod", 0), f.get("clamp", 0)
    if not (omod or clamp):
        return _identity
    if not name.endswith("f32"):
        if clamp and name.endswith(("u32", "i32")):
            raise _illegal(inst, "with integer clamp is not implemented")
        if omod or clamp:
            raise _illegal(inst, "with an output modifier is not implemented")
    scale = {0: 1.0, 1: 2.0, 2: 4.0, 3: 0.5}[omod]

    def apply(bits: np.ndarray) -> np.ndarray:
        x = bits.view(np.float32) * np.float32(scale)
        if clamp:
            x = np.where(np.isnan(x), np.float32(0), np.clip(x, 0, 1)).astype(np.float32)
        return x.astype(np.float32).view(U32)

    return apply


_TYPE_TOKEN = re.compile(r"^[fiub](16|32|64)$")


def _is_16bit_op(name: str) -> bool:
    return "16" in name and "_pk_" not in name


def _is_16bit_result(name: str) -> bool:
    """The destination type (the first type in the name) is 16-bit: the result goes to one half of the VGPR."""
    types = [t for t in name.split("_")[1:] if _TYPE_TOKEN.match(t)]
    return bool(types) and types[0].endswith("16") and "_pk_" not in name


def _operand_bits(name: str) -> tuple[int, int]:
    """(destination bits, source bits) from the operation's name: v_cvt_<dst>_<src>, else one type for all."""
    types = [int(t[1:]) for t in name.split("_")[1:] if _TYPE_TOKEN.match(t)]
    if not types or "_pk_" in name:
        return 32, 32
    if name.startswith("v_cvt_") and len(types) >= 2:
        return types[0], types[1]
    return types[0], types[0]


def _t16_source(code: int, literal: int | None) -> Getter:
    """A 16-bit operand of a VOP1/VOP2/VOPC instruction (gfx11 true16): VGPR codes 384+ name the high half of
    v(code - 384), 256..383 the low half; SGPRs and constants give their low 16 bits."""
    if code >= 384:
        return _high_half(vector_getter(code - 128, 1, None))
    return vector_getter(code, 1, literal, 16)


def _high_half(getter: Getter) -> Getter:
    return lambda w: getter(w) >> U32(16)


def _opsel_source(inst: Instruction, index: int) -> Getter:
    getter = vector_getter(inst.fields[f"src{index}"], 1, inst.literal, 16)
    return _high_half(getter) if inst.fields["opsel"] >> index & 1 else getter


def _write16(dst: int, high: bool) -> Callable[[Wave, np.ndarray], None]:
    """Write 16-bit results into the low (or, op_sel[3], the high) half of a VGPR, keeping the other half."""

    def write(w: Wave, value: np.ndarray) -> None:
        half = np.asarray(value).astype(U32) & U32(0xFFFF)
        old = w.v[dst]
        w.vset(dst, (old & U32(0xFFFF)) | (half << U32(16)) if high else (old & U32(0xFFFF0000)) | half)

    return write


def _half_source(code: int, literal: int | None, as_f16: bool) -> Getter:
    """A VOP3P source's 32 raw bits per lane; an inline float constant is encoded as f16 (in both halves) when the
    operation reads it as f16, else as f32."""
    if code < 256 and code != LITERAL and inline_constant(code) is not None:
        if as_f16:
            c16 = inline_constant(code, 16)
            assert c16 is not None
            c16 &= 0xFFFF
            array = np.full(WAVE, c16 | c16 << 16, dtype=U32)
            return lambda w: array
    return vector_getter(code, 1, literal)


def _fma_mix(inst: Instruction) -> Exec:
    """V_FMA_MIX*: each source is f32, or f16 from the half opsel picks (opsel_hi bit set); neg / abs (neg_hi)
    modifiers; the FMA in f32, the result stored as f32, or as f16 into the low or high half."""
    f, name = inst.fields, inst.name
    sources = []
    for i in range(3):
        is_f16 = bool(f["opsel_hi"] >> i & 1)
        getter = _half_source(f[f"src{i}"], inst.literal, is_f16)
        sources.append((getter, is_f16, bool(f["opsel"] >> i & 1), bool(f["neg"] >> i & 1), bool(f["neg_hi"] >> i & 1)))
    dst = f["vdst"]

    def value(w: Wave, src: tuple[Getter, bool, bool, bool, bool]) -> np.ndarray:
        getter, is_f16, hi, neg, abs_ = src
        raw = getter(w)
        if is_f16:
            x = ((raw >> U32(16)) if hi else raw & U32(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float64)
        else:
            x = raw.view(np.float32).astype(np.float64)
        if abs_:
            x = np.abs(x)
        return -x if neg else x

    def run(w: Wave) -> None:
        a, b, c = (value(w, s) for s in sources)
        with np.errstate(all="ignore"):
            # one rounding, straight to the destination's type (not through f32 for an f16 result)
            result = rounded_once(a * b, c, np.float32 if name == "v_fma_mix_f32" else np.float16)
            if f["clamp"]:
                result = np.clip(result, 0, 1).astype(result.dtype)
            if name == "v_fma_mix_f32":
                w.vset(dst, result.view(U32))
                return
            half = result.view(np.uint16).astype(U32)
        old = w.v[dst]
        merged = (
            (old & U32(0xFFFF0000)) | half if name == "v_fma_mixlo_f16" else (old & U32(0xFFFF)) | (half << U32(16))
        )
        w.vset(dst, merged)

    return run


def _f16_op(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def op(*xs: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            halves = [x.astype(np.uint16).view(np.float16) for x in xs]
            return np.asarray(fn(*halves), dtype=np.float16).view(np.uint16).astype(U32)

    return op


def _u16_op(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda *xs: np.asarray(fn(*[x.astype(np.int64) for x in xs]), dtype=np.int64).astype(U32) & U32(0xFFFF)


def _i16_op(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def op(*xs: np.ndarray) -> np.ndarray:
        signed = [x.astype(np.uint16).view(np.int16).astype(np.int64) for x in xs]
        return np.asarray(fn(*signed), dtype=np.int64).astype(U32) & U32(0xFFFF)

    return op


# packed 16-bit operations: name -> (per-half operation on 16-bit lanes (as uint32 holding the half), float?)
PACKED_16: dict[str, tuple[Callable[..., np.ndarray], bool]] = {
    "v_pk_fma_f16": (
        _f16_op(lambda a, b, c: rounded_once(a.astype(np.float64) * b, c.astype(np.float64), np.float16)),
        True,
    ),
    "v_pk_add_f16": (_f16_op(lambda a, b: a + b), True),
    "v_pk_mul_f16": (_f16_op(lambda a, b: a * b), True),
    "v_pk_min_f16": (_f16_op(np.fmin), True),
    "v_pk_max_f16": (_f16_op(np.fmax), True),
    "v_pk_add_u16": (_u16_op(lambda a, b: a + b), False),
    "v_pk_sub_u16": (_u16_op(lambda a, b: a - b), False),
    "v_pk_add_i16": (_i16_op(lambda a, b: a + b), False),
    "v_pk_sub_i16": (_i16_op(lambda a, b: a - b), False),
    "v_pk_mul_lo_u16": (_u16_op(lambda a, b: a * b), False),
    "v_pk_mad_u16": (_u16_op(lambda a, b, c: a * b + c), False),
    "v_pk_mad_i16": (_i16_op(lambda a, b, c: a * b + c), False),
    "v_pk_max_u16": (_u16_op(np.maximum), False),
    "v_pk_min_u16": (_u16_op(np.minimum), False),
    "v_pk_max_i16": (_i16_op(np.maximum), False),
    "v_pk_min_i16": (_i16_op(np.minimum), False),
    "v_pk_lshlrev_b16": (_u16_op(lambda a, b: b << (a & 15)), False),
    "v_pk_lshrrev_b16": (_u16_op(lambda a, b: b >> (a & 15)), False),
    "v_pk_ashrrev_i16": (_i16_op(lambda a, b: b >> (a & 15)), False),
}


def _packed16(inst: Instruction, spec: tuple[Callable[..., np.ndarray], bool]) -> Exec:
    """Packed math: each half of the result from the halves op_sel (low) and op_sel_hi (high) pick; neg (low) and
    neg_hi (high) flip float signs."""
    op, is_float = spec
    f = inst.fields
    count = 3 if inst.name in ("v_pk_fma_f16", "v_pk_mad_u16", "v_pk_mad_i16") else 2
    getters = [_half_source(f[f"src{i}"], inst.literal, is_float) for i in range(count)]
    dst = f["vdst"]

    def half(raw: np.ndarray, high: bool, negate: bool) -> np.ndarray:
        h = (raw >> U32(16)) if high else (raw & U32(0xFFFF))
        return h ^ U32(0x8000) if negate and is_float else h

    def run(w: Wave) -> None:
        raws = [g(w) for g in getters]
        lo = op(*[half(r, bool(f["opsel"] >> i & 1), bool(f["neg"] >> i & 1)) for i, r in enumerate(raws)])
        hi = op(*[half(r, bool(f["opsel_hi"] >> i & 1), bool(f["neg_hi"] >> i & 1)) for i, r in enumerate(raws)])
        w.vset(dst, (lo & U32(0xFFFF)) | (hi << U32(16)))

    return run


def _identity(x: np.ndarray) -> np.ndarray:
    return x


# -- memory access --

_LOAD_FORMATS = {
    "u8": (1, np.uint8),
    "i8": (1, np.int8),
    "u16": (2, np.uint16),
    "i16": (2, np.int16),
    "b32": (4, np.uint32),
    "b64": (8, np.uint32),
    "b96": (12, np.uint32),
    "b128": (16, np.uint32),
    "b8": (1, np.uint8),
    "b16": (2, np.uint16),
}


def _gather(memory: GPUMemory, addresses: np.ndarray, size: int) -> bytes:
    """Read `size` bytes at each address (one read when the addresses are consecutive)."""
    n = len(addresses)
    if n == 0:
        return b""
    first = int(addresses[0])
    if n == 1 or bool(np.all(np.diff(addresses.astype(np.int64)) == size)):
        return memory.read(first, size * n)
    return b"".join(memory.read(int(a), size) for a in addresses)


def _scatter(memory: GPUMemory, addresses: np.ndarray, data: bytes, size: int) -> None:
    n = len(addresses)
    if n == 0:
        return
    if n == 1 or bool(np.all(np.diff(addresses.astype(np.int64)) == size)):
        memory.write(int(addresses[0]), data)
        return
    for i, a in enumerate(addresses):
        memory.write(int(a), data[i * size : (i + 1) * size])


def _unpack_to_regs(raw: bytes, size: int, dtype: type, lanes: int) -> np.ndarray:
    """[dwords, lanes] uint32 from raw per-lane data (sign/zero-extended for sub-dword loads)."""
    arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(lanes, -1)
    if size < 4:
        return arr.astype(np.int64).astype(U32).reshape(lanes, 1).T
    return arr.astype(U32).T


def _data_kind(name: str) -> str:
    return name.rsplit("_", 1)[1]


def _global_access(inst: Instruction) -> Exec:
    f, name = inst.fields, inst.name
    offset, saddr = f["offset"], f["saddr"]
    use_saddr = inst.encoding == "GLOBAL" and saddr not in (124, 125)
    vaddr = f["addr"]
    kind = _data_kind(name)

    def addresses(w: Wave) -> np.ndarray:
        if use_saddr:
            base = w.sget64(saddr)
            return (np.uint64(base) + w.v[vaddr].astype(U64) + np.uint64(offset & 0xFFFFFFFFFFFFFFFF)) & U64(
                0xFFFFFFFFFFFFFFFF
            )
        addr = w.v[vaddr].astype(U64) | (w.v[vaddr + 1].astype(U64) << U64(32))
        return addr + np.uint64(offset & 0xFFFFFFFFFFFFFFFF)

    if "_load_" in name and "d16" not in name:
        if kind not in _LOAD_FORMATS:
            raise _illegal(inst)
        size, dtype = _LOAD_FORMATS[kind]
        dst = f["vdst"]

        def load(w: Wave) -> None:
            active = np.flatnonzero(w.lanes)
            addr = addresses(w)[active]
            values = _unpack_to_regs(_gather(w.memory, addr, size), size, dtype, len(active))
            for i in range(values.shape[0]):
                w.v[dst + i][active] = values[i]

        return load
    if "_store_" in name and "d16" not in name:
        if kind not in _LOAD_FORMATS:
            raise _illegal(inst)
        size, _ = _LOAD_FORMATS[kind]
        data = f["data"]
        dwords = max(1, size // 4)

        def store(w: Wave) -> None:
            active = np.flatnonzero(w.lanes)
            addr = addresses(w)[active]
            regs = w.v[data : data + dwords][:, active].T.astype("<u4")
            raw = regs.tobytes() if size >= 4 else regs.astype({1: "<u1", 2: "<u2"}[size]).tobytes()
            _scatter(w.memory, addr, raw, size)

        return store
    if "d16" in name:
        return _d16_access(inst, addresses)
    if "_atomic_" in name:
        return _global_atomic(inst, addresses)
    raise _illegal(inst)


def _d16_access(inst: Instruction, addresses: Callable[[Wave], np.ndarray]) -> Exec:
    """D16 loads fill one half of the VGPR (low, or high for _hi), keeping the other; u8/i8 extend to 16 bits.
    D16_HI stores write the high half's low bytes."""
    f, name = inst.fields, inst.name
    kind = _data_kind(name)
    size = 1 if kind in ("u8", "i8", "b8") else 2
    high = "_hi_" in name
    if "_load_" in name:
        dst = f["vdst"]

        def load(w: Wave) -> None:
            active = np.flatnonzero(w.lanes)
            raw = _gather(w.memory, addresses(w)[active], size)
            if size == 2:
                values = np.frombuffer(raw, "<u2").astype(U32)
            elif kind == "i8":
                values = np.frombuffer(raw, np.int8).astype(np.int64).astype(U32) & U32(0xFFFF)
            else:
                values = np.frombuffer(raw, np.uint8).astype(U32)
            old = w.v[dst][active]
            w.v[dst][active] = (old & U32(0xFFFF)) | (values << U32(16)) if high else (old & U32(0xFFFF0000)) | values

        return load
    data = f["data"]

    def store(w: Wave) -> None:
        active = np.flatnonzero(w.lanes)
        values = w.v[data][active] >> U32(16) if high else w.v[data][active]
        raw = values.astype("<u2" if size == 2 else np.uint8).tobytes()
        _scatter(w.memory, addresses(w)[active], raw, size)

    return store


def _f32_binary_int(fn: Callable[[float, float], float]) -> Callable[[int, int], int]:
    def op(old: int, value: int) -> int:
        a, b = np.array([old, value], dtype=U32).view(np.float32)
        return int(np.array([fn(a, b)], dtype=np.float32).view(U32)[0])

    return op


_ATOMICS_32: dict[str, Callable[[int, int], int]] = {
    "min_f32": _f32_binary_int(lambda a, b: np.fmin(a, b)),
    "max_f32": _f32_binary_int(lambda a, b: np.fmax(a, b)),
    "add_u32": lambda old, v: old + v,
    "sub_u32": lambda old, v: old - v,
    "swap_b32": lambda old, v: v,
    "and_b32": lambda old, v: old & v,
    "or_b32": lambda old, v: old | v,
    "xor_b32": lambda old, v: old ^ v,
    "min_i32": lambda old, v: min(salu.s32(old), salu.s32(v)),
    "max_i32": lambda old, v: max(salu.s32(old), salu.s32(v)),
    "min_u32": min,
    "max_u32": max,
    "inc_u32": lambda old, v: 0 if old >= v else old + 1,
    "dec_u32": lambda old, v: v if old == 0 or old > v else old - 1,
    "add_f32": lambda old, v: int(
        np.array([np.uint32(old).view(np.float32) + np.uint32(v).view(np.float32)], dtype=np.float32).view(U32)[0]
    ),
}


def _global_atomic(inst: Instruction, addresses: Callable[[Wave], np.ndarray]) -> Exec:
    f, name = inst.fields, inst.name
    op_name = name.split("_atomic_", 1)[1]
    returns = bool(f["glc"])
    dst, data = f["vdst"], f["data"]
    if op_name == "cmpswap_b32":

        def cmpswap(w: Wave) -> None:
            addr = addresses(w)
            for lane in np.flatnonzero(w.lanes):
                a = int(addr[lane])
                old = struct.unpack("<I", w.memory.read(a, 4))[0]
                if old == int(w.v[data + 1][lane]):
                    w.memory.write(a, struct.pack("<I", int(w.v[data][lane])))
                if returns:
                    w.v[dst][lane] = old

        return cmpswap
    if op_name not in _ATOMICS_32:
        raise _illegal(inst)
    fn = _ATOMICS_32[op_name]

    def atomic(w: Wave) -> None:
        addr = addresses(w)
        for lane in np.flatnonzero(w.lanes):  # lanes in order, each a read-modify-write
            a = int(addr[lane])
            old = struct.unpack("<I", w.memory.read(a, 4))[0]
            w.memory.write(a, struct.pack("<I", fn(old, int(w.v[data][lane])) & 0xFFFFFFFF))
            if returns:
                w.v[dst][lane] = old

    return atomic


def _scratch_access(inst: Instruction) -> Exec:
    """Scratch (private) memory, kept per wave and lane in the emulator rather than in GPU memory."""
    f, name = inst.fields, inst.name
    kind = _data_kind(name)
    if kind not in _LOAD_FORMATS or "d16" in name:
        raise _illegal(inst)
    size, dtype = _LOAD_FORMATS[kind]
    offset, saddr, vaddr, sve = f["offset"], f["saddr"], f["addr"], f["sve"]

    def lane_offsets(w: Wave) -> np.ndarray:
        base = 0 if saddr in (124, 125) else w.sget(saddr)
        v = w.v[vaddr].astype(np.int64) if sve else np.zeros(WAVE, dtype=np.int64)
        return (v + base + offset) & 0xFFFFFFFF

    def buffer(w: Wave, lane: int, end: int) -> bytearray:
        buf = w.private.setdefault(lane, bytearray())
        if len(buf) < end:
            buf.extend(bytes(end - len(buf)))
        return buf

    if "_load_" in name:
        dst = f["vdst"]

        def load(w: Wave) -> None:
            offs = lane_offsets(w)
            for lane in np.flatnonzero(w.lanes):
                o = int(offs[lane])
                raw = bytes(buffer(w, int(lane), o + size)[o : o + size])
                vals = _unpack_to_regs(raw, size, dtype, 1)
                for i in range(vals.shape[0]):
                    w.v[dst + i][lane] = vals[i][0]

        return load
    data = f["data"]

    def store(w: Wave) -> None:
        offs = lane_offsets(w)
        for lane in np.flatnonzero(w.lanes):
            o = int(offs[lane])
            raw = w.v[data : data + max(1, size // 4), lane].astype("<u4").tobytes()[:size]
            buffer(w, int(lane), o + size)[o : o + size] = raw

    return store


def _ds_access(inst: Instruction) -> Exec:
    f, name = inst.fields, inst.name
    addr_reg, data0, data1, dst = f["addr"], f["data0"], f["data1"], f["vdst"]
    offset = f["offset1"] << 8 | f["offset0"]
    kind = _data_kind(name)
    if name in ("ds_bpermute_b32", "ds_permute_b32"):
        backward = name == "ds_bpermute_b32"

        def permute(w: Wave) -> None:
            lanes = ((w.v[addr_reg].astype(np.int64) + offset) >> 2) & 31
            src = np.where(w.lanes, w.v[data0], U32(0))
            if backward:
                w.vset(dst, src[lanes])
            else:
                out = np.zeros(WAVE, dtype=U32)
                for lane in np.flatnonzero(w.lanes):
                    out[lanes[lane]] = src[lane]
                w.vset(dst, out)

        return permute
    if "2addr" in name:
        size = 8 if kind == "b64" else 4
        stride = size * (64 if "stride64" in name else 1)
        o0, o1 = f["offset0"] * stride, f["offset1"] * stride
        if name.startswith("ds_load"):

            def load2(w: Wave) -> None:
                active = np.flatnonzero(w.lanes)
                base = w.v[addr_reg][active].astype(np.int64)
                for k, o in enumerate((o0, o1)):
                    vals = _lds_read(w, base + o, size)
                    for i in range(vals.shape[0]):
                        w.v[dst + k * (size // 4) + i][active] = vals[i]

            return load2

        def store2(w: Wave) -> None:
            active = np.flatnonzero(w.lanes)
            base = w.v[addr_reg][active].astype(np.int64)
            for data, o in ((data0, o0), (data1, o1)):
                _lds_write(w, base + o, w.v[data : data + size // 4][:, active], size)

        return store2
    if name.startswith("ds_load") and kind in _LOAD_FORMATS and "d16" not in name:
        size, dtype = _LOAD_FORMATS[kind]

        def load(w: Wave) -> None:
            active = np.flatnonzero(w.lanes)
            vals = _lds_read(w, w.v[addr_reg][active].astype(np.int64) + offset, size, dtype)
            for i in range(vals.shape[0]):
                w.v[dst + i][active] = vals[i]

        return load
    if name.startswith("ds_store") and kind in _LOAD_FORMATS and "d16" not in name:
        size, _ = _LOAD_FORMATS[kind]

        def store(w: Wave) -> None:
            active = np.flatnonzero(w.lanes)
            regs = w.v[data0 : data0 + max(1, size // 4)][:, active]
            _lds_write(w, w.v[addr_reg][active].astype(np.int64) + offset, regs, size)

        return store
    atomic = name.removeprefix("ds_").replace("_rtn", "")
    if atomic in _ATOMICS_32:
        fn, returns = _ATOMICS_32[atomic], "_rtn_" in name

        def lds_atomic(w: Wave) -> None:
            lds = w.wg.lds
            for lane in np.flatnonzero(w.lanes):
                a = int(w.v[addr_reg][lane]) + offset
                if a + 4 > len(lds):
                    continue
                old = int(lds[a : a + 4].view("<u4")[0])
                lds[a : a + 4] = np.array([fn(old, int(w.v[data0][lane])) & 0xFFFFFFFF], dtype="<u4").view(np.uint8)
                if returns:
                    w.v[dst][lane] = old

        return lds_atomic
    raise _illegal(inst)


def _lds_read(w: Wave, addrs: np.ndarray, size: int, dtype: type = np.uint32) -> np.ndarray:
    """[dwords, lanes] from LDS; addresses out of range read 0 (as the hardware's LDS bounds check does)."""
    lds = w.wg.lds
    n = len(addrs)
    nbytes = max(size, 4) if size >= 4 else size
    out = np.zeros((n, nbytes), dtype=np.uint8)
    ok = (addrs >= 0) & (addrs + size <= len(lds))
    if ok.any():
        idx = addrs[ok][:, None] + np.arange(size)[None, :]
        out[ok] = lds[idx]
    return _unpack_to_regs(out.tobytes(), size, dtype, n)


def _lds_write(w: Wave, addrs: np.ndarray, regs: np.ndarray, size: int) -> None:
    lds = w.wg.lds
    raw = np.ascontiguousarray(regs.T.astype("<u4")).view(np.uint8).reshape(len(addrs), -1)[:, :size]
    ok = (addrs >= 0) & (addrs + size <= len(lds))
    for i in np.flatnonzero(ok):  # in lane order, so the highest lane wins a conflict
        a = int(addrs[i])
        lds[a : a + size] = raw[i]


# -- dispatch --


class RDNA3Emulator:
    """ShaderEngines for gfx11 wave32: runs every workgroup of a dispatch to completion."""

    def __init__(self, max_instructions_per_wave: int = DEFAULT_MAX_INSTRUCTIONS, lds_bytes: int = 65536) -> None:
        self.max_instructions = max_instructions_per_wave
        self.lds_bytes = lds_bytes
        self.compiler = Compiler()
        self.instructions_executed = 0  # across all dispatches, for the benchmark

    def run_dispatch(self, memory: GPUMemory, launch: WaveLaunch) -> None:
        if not launch.wave32:
            raise RuntimeError("the RDNA3 emulator runs wave32 dispatches only (CS_W32_EN is clear)")
        lds_size = rsrc2_lds_bytes(launch.rsrc2)
        if lds_size > self.lds_bytes:
            raise RuntimeError(f"dispatch asks for {lds_size} bytes of LDS; the device has {self.lds_bytes}")
        program: dict[int, tuple[Exec, int]] = {}
        gx, gy, gz = launch.grid
        with np.errstate(all="ignore"):  # inf and NaN results are the hardware's answers
            for z in range(gz):
                for y in range(gy):
                    for x in range(gx):
                        self._run_workgroup(memory, launch, (x, y, z), lds_size, program)

    def _fetch(self, memory: GPUMemory, pc: int, program: dict[int, tuple[Exec, int]]) -> tuple[Exec, int]:
        code = b""
        for size in (12, 8, 4):  # the longest instruction; shorter near the end of a mapping
            try:
                code = memory.read(pc, size)
                break
            except GPUFault:
                if size == 4:
                    raise
        inst = decode(code, 0, address=pc)
        entry = (self.compiler.compile(inst), inst.size)
        program[pc] = entry
        return entry

    def _run_workgroup(
        self,
        memory: GPUMemory,
        launch: WaveLaunch,
        group: tuple[int, int, int],
        lds_size: int,
        program: dict[int, tuple[Exec, int]],
    ) -> None:
        wg = Workgroup(np.zeros(max(lds_size, 4), dtype=np.uint8))
        wx, wy, wz = launch.workgroup
        threads = wx * wy * wz
        user = rsrc2_user_sgpr_count(launch.rsrc2)
        enables = rsrc2_workgroup_id_enables(launch.rsrc2)
        for first in range(0, threads, WAVE):
            wave = Wave(memory, wg)
            for i in range(user):
                wave.s[i] = launch.user_data[i] & 0xFFFFFFFF if i < len(launch.user_data) else 0
            next_sgpr = user
            for axis in range(3):
                if enables[axis]:
                    wave.s[next_sgpr] = group[axis]
                    next_sgpr += 1
            tid = np.arange(first, first + WAVE, dtype=np.int64)
            ids = (tid % wx) | ((tid // wx) % wy) << 10 | (tid // (wx * wy)) << 20
            wave.v[0] = ids.astype(U32)
            wave.set_exec((1 << min(WAVE, threads - first)) - 1)
            wave.pc = launch.program_address
            wg.waves.append(wave)
        running = list(wg.waves)
        while running:
            at_barrier = [w for w in running if self._run_wave(w, program) == BARRIER]
            running = at_barrier  # finished waves leave; the barrier releases when every other wave reached it

    def _run_wave(self, w: Wave, program: dict[int, tuple[Exec, int]]) -> int:
        limit = self.max_instructions
        memory = w.memory
        count = w.count
        try:
            while True:
                entry = program.get(w.pc)
                if entry is None:
                    entry = self._fetch(memory, w.pc, program)
                fn, size = entry
                w.pc += size
                count += 1
                status = fn(w)
                if status:
                    return status
                if count > limit:
                    raise RuntimeError(
                        f"exceeded {limit} instructions in one wave, likely an infinite loop (pc 0x{w.pc:X})"
                    )
        finally:
            self.instructions_executed += count - w.count
            w.count = count


def describe_launch(launch: WaveLaunch) -> str:
    """A one-line summary of a launch (for error messages and DEBUG output)."""
    groups = math.prod(launch.grid)
    return (
        f"program 0x{launch.program_address:X}, {groups} workgroups of {launch.workgroup}, "
        f"{rsrc2_user_sgpr_count(launch.rsrc2)} user SGPRs, LDS {rsrc2_lds_bytes(launch.rsrc2)} bytes"
    )
