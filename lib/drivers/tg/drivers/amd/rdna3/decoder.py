"""RDNA3 (gfx1100) instruction decoding: the encoding from the first dword's prefix, the fields, a trailing 32-bit
literal when an operand asks for one.

Operand codes (the 9-bit source space; scalar encodings use its low 256 values): 0..105 SGPRs, 106/107 VCC_LO/HI,
108..123 TTMP, 124 NULL, 125 M0, 126/127 EXEC_LO/HI, 128..192 integers 0..64, 193..208 integers -1..-16,
240..248 float constants, 253 SCC, 255 a literal dword, 256..511 VGPRs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from . import opcodes

LITERAL = 255
VCC_LO, VCC_HI, NULL, M0, EXEC_LO, EXEC_HI, SCC = 106, 107, 124, 125, 126, 127, 253
VGPR0 = 256


class IllegalInstruction(RuntimeError):
    """An instruction the decoder or emulator does not know: names the opcode, the encoding and the dwords."""

    def __init__(self, message: str, offset: int, words: tuple[int, ...]) -> None:
        dwords = " ".join(f"{w:08X}" for w in words)
        super().__init__(f"illegal instruction at 0x{offset:X}: {message} (dwords {dwords})")
        self.offset = offset
        self.words = words


@dataclass(frozen=True, eq=False)
class Instruction:
    """One decoded instruction. `fields` holds the encoding's named fields; `literal` the trailing dword if any."""

    offset: int  # byte offset in the code
    encoding: str  # SOP1, SOP2, SOPC, SOPK, SOPP, SMEM, VOP1, VOP2, VOPC, VOP3, VOP3SD, VOP3P, VOPD, DS, FLAT, ...
    opcode: int
    name: str
    words: tuple[int, ...]
    fields: dict[str, int] = field(default_factory=dict)
    literal: int | None = None
    name_y: str = ""  # VOPD: the second operation

    @property
    def size(self) -> int:
        return 4 * len(self.words)


# VOP3 opcodes that use the VOP3SD layout (an SGPR destination for carry/VCC instead of abs/opsel)
VOP3SD_NAMES = frozenset(
    {
        "v_add_co_ci_u32",
        "v_sub_co_ci_u32",
        "v_subrev_co_ci_u32",
        "v_div_scale_f32",
        "v_div_scale_f64",
        "v_mad_u64_u32",
        "v_mad_i64_i32",
        "v_add_co_u32",
        "v_sub_co_u32",
        "v_subrev_co_u32",
    }
)
# instructions that always carry a literal constant
ALWAYS_LITERAL = frozenset({"v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16", "s_setreg_imm32_b32"})
SOPK_NO_DEST = frozenset({"s_setreg_imm32_b32", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt"})

FLAT_SEGMENTS = {0: ("FLAT", opcodes.FLAT), 1: ("SCRATCH", opcodes.SCRATCH), 2: ("GLOBAL", opcodes.GLOBAL)}


def _bits(word: int, lo: int, width: int) -> int:
    return (word >> lo) & ((1 << width) - 1)


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def _name(table: dict[int, str], encoding: str, opcode: int, offset: int, words: tuple[int, ...]) -> str:
    if opcode not in table:
        raise IllegalInstruction(f"unknown {encoding} opcode {opcode} (0x{opcode:X})", offset, words)
    return table[opcode]


def decode(code: bytes | memoryview, offset: int, address: int | None = None) -> Instruction:
    """Decode the instruction at byte `offset` of `code`; `address` (default: `offset`) is where it lives, for the
    instruction's `offset` and error messages."""
    where = offset if address is None else address
    if offset + 4 > len(code):
        raise IllegalInstruction("instruction runs past the end of the code", where, ())
    w0 = struct.unpack_from("<I", code, offset)[0]
    w1 = struct.unpack_from("<I", code, offset + 4)[0] if offset + 8 <= len(code) else 0
    encoding, opcode, fields, nwords, table = _fields(w0, w1)
    words: tuple[int, ...] = (w0, w1)[:nwords]
    name = _name(table, encoding, opcode, where, words)
    name_y = ""
    if encoding == "VOP3" and name in VOP3SD_NAMES:
        encoding = "VOP3SD"
        fields = _vop3sd_fields(w0, w1)
    if encoding == "VOPD":
        name_y = _name(opcodes.VOPDY, "VOPD_Y", fields["opy"], where, words)
    if encoding == "SMEM":
        fields["offset"] = _sext(fields["offset"], 21)
    if encoding in ("FLAT", "GLOBAL", "SCRATCH"):
        fields["offset"] = _sext(fields["offset"], 13)
    srcs = [v for k, v in fields.items() if k.startswith("src")]
    literal = None
    if (
        LITERAL in srcs
        or name in ALWAYS_LITERAL
        or name_y in ALWAYS_LITERAL
        or (encoding == "VOPD" and name in ALWAYS_LITERAL)
    ):
        if offset + 4 * nwords + 4 > len(code):
            raise IllegalInstruction(f"{name}: literal runs past the end of the code", where, words)
        literal = struct.unpack_from("<I", code, offset + 4 * nwords)[0]
        words = (*words, literal)
    return Instruction(where, encoding, opcode, name, words, fields, literal, name_y)


def _fields(w0: int, w1: int) -> tuple[str, int, dict[str, int], int, dict[int, str]]:
    """(encoding, opcode, fields, dwords before any literal, opcode table) for the first two dwords."""
    top9 = w0 >> 23
    if top9 == 0x17D:
        return "SOP1", _bits(w0, 8, 8), {"sdst": _bits(w0, 16, 7), "src0": _bits(w0, 0, 8)}, 1, opcodes.SOP1
    if top9 == 0x17E:
        return "SOPC", _bits(w0, 16, 7), {"src0": _bits(w0, 0, 8), "src1": _bits(w0, 8, 8)}, 1, opcodes.SOPC
    if top9 == 0x17F:
        return "SOPP", _bits(w0, 16, 7), {"simm16": _bits(w0, 0, 16)}, 1, opcodes.SOPP
    if w0 >> 28 == 0xB:
        return "SOPK", _bits(w0, 23, 5), {"sdst": _bits(w0, 16, 7), "simm16": _bits(w0, 0, 16)}, 1, opcodes.SOPK
    if w0 >> 30 == 0b10:
        fields = {"sdst": _bits(w0, 16, 7), "src0": _bits(w0, 0, 8), "src1": _bits(w0, 8, 8)}
        return "SOP2", _bits(w0, 23, 7), fields, 1, opcodes.SOP2
    top7 = w0 >> 25
    if top7 == 0x3F:
        return "VOP1", _bits(w0, 9, 8), {"vdst": _bits(w0, 17, 8), "src0": _bits(w0, 0, 9)}, 1, opcodes.VOP1
    if top7 == 0x3E:
        return "VOPC", _bits(w0, 17, 8), {"src0": _bits(w0, 0, 9), "vsrc1": _bits(w0, 9, 8)}, 1, opcodes.VOPC
    if w0 >> 31 == 0:
        return "VOP2", _bits(w0, 25, 6), _vop2_fields(w0), 1, opcodes.VOP2
    top6 = w0 >> 26
    if top6 == 0x3D:
        fields = {
            "sbase": _bits(w0, 0, 6) * 2,
            "sdata": _bits(w0, 6, 7),
            "dlc": _bits(w0, 13, 1),
            "glc": _bits(w0, 14, 1),
            "offset": _bits(w1, 0, 21),
            "soffset": _bits(w1, 25, 7),
        }
        return "SMEM", _bits(w0, 18, 8), fields, 2, opcodes.SMEM
    if top6 == 0x35:
        return "VOP3", _bits(w0, 16, 10), _vop3_fields(w0, w1), 2, opcodes.VOP3
    if w0 >> 24 == 0xCC:
        fields = _vop3_fields(w0, w1)
        fields["neg_hi"] = fields.pop("abs")
        fields["opsel"] = _bits(w0, 11, 3)
        fields["opsel_hi"] = _bits(w1, 27, 2) | _bits(w0, 14, 1) << 2
        fields.pop("omod")
        return "VOP3P", _bits(w0, 16, 7), fields, 2, opcodes.VOP3P
    if top6 == 0x32:
        vdstx = _bits(w1, 24, 8)
        fields = {
            "opx": _bits(w0, 22, 4),
            "opy": _bits(w0, 17, 5),
            "srcx0": _bits(w0, 0, 9),
            "vsrcx1": _bits(w0, 9, 8),
            "srcy0": _bits(w1, 0, 9),
            "vsrcy1": _bits(w1, 9, 8),
            "vdstx": vdstx,
            "vdsty": (_bits(w1, 17, 7) << 1) | ((vdstx & 1) ^ 1),
        }
        return "VOPD", fields["opx"], fields, 2, opcodes.VOPDX
    if top6 == 0x36:
        fields = {
            "offset0": _bits(w0, 0, 8),
            "offset1": _bits(w0, 8, 8),
            "gds": _bits(w0, 17, 1),
            "addr": _bits(w1, 0, 8),
            "data0": _bits(w1, 8, 8),
            "data1": _bits(w1, 16, 8),
            "vdst": _bits(w1, 24, 8),
        }
        return "DS", _bits(w0, 18, 8), fields, 2, opcodes.DS
    if top6 == 0x37:
        encoding, table = FLAT_SEGMENTS.get(_bits(w0, 16, 2), ("FLAT", {}))
        fields = {
            "offset": _bits(w0, 0, 13),
            "dlc": _bits(w0, 13, 1),
            "glc": _bits(w0, 14, 1),
            "slc": _bits(w0, 15, 1),
            "addr": _bits(w1, 0, 8),
            "data": _bits(w1, 8, 8),
            "saddr": _bits(w1, 16, 7),
            "sve": _bits(w1, 23, 1),
            "vdst": _bits(w1, 24, 8),
        }
        return encoding, _bits(w0, 18, 7), fields, 2, table
    if top6 == 0x38:
        return "MUBUF", _bits(w0, 18, 8), {}, 2, opcodes.MUBUF
    names = {0x3A: "MTBUF", 0x3C: "MIMG", 0x3E: "EXP", 0x33: "VINTERP/LDSDIR"}
    return names.get(top6, f"unknown encoding prefix 0x{top6:X}"), 0, {}, 1, {}


def _vop2_fields(w0: int) -> dict[str, int]:
    return {"vdst": _bits(w0, 17, 8), "src0": _bits(w0, 0, 9), "vsrc1": _bits(w0, 9, 8)}


def _vop3_fields(w0: int, w1: int) -> dict[str, int]:
    return {
        "vdst": _bits(w0, 0, 8),
        "abs": _bits(w0, 8, 3),
        "opsel": _bits(w0, 11, 4),
        "clamp": _bits(w0, 15, 1),
        "src0": _bits(w1, 0, 9),
        "src1": _bits(w1, 9, 9),
        "src2": _bits(w1, 18, 9),
        "omod": _bits(w1, 27, 2),
        "neg": _bits(w1, 29, 3),
    }


def _vop3sd_fields(w0: int, w1: int) -> dict[str, int]:
    fields = _vop3_fields(w0, w1)
    fields["sdst"] = _bits(w0, 8, 7)
    for key in ("abs", "opsel"):
        fields.pop(key)
    return fields


def decode_program(code: bytes | memoryview, start: int = 0, end: int | None = None) -> list[Instruction]:
    """Decode instructions from `start` to `end` (a linear sweep, for disassembly); without `end`, until the first
    s_code_end or the end of the code. The emulator decodes lazily by PC instead."""
    out = []
    offset = start
    stop = len(code) if end is None else end
    while offset < stop:
        inst = decode(code, offset)
        out.append(inst)
        if inst.name == "s_code_end" and end is None:
            break
        offset += inst.size
    return out
