"""RDNA3 disassembly in LLVM's syntax (what `llvm-objdump -d --mcpu=gfx1100` prints), from decoded instructions.

Spelling follows LLVM's AMDGPU printer closely enough to compare instruction by instruction: mnemonics carry the
`_e32`/`_e64` suffix where LLVM prints one, register ranges print as `v[0:1]`, literals in hex, inline integer
constants in decimal, inline float constants as `1.0`, `0.15915494`."""

from __future__ import annotations

import re

from .decoder import LITERAL, VOP3SD_NAMES, Instruction, decode_program
from .opcodes import OPERAND_WIDTHS

FLOAT_CONSTANTS = {240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0", 245: "-2.0", 246: "4.0", 247: "-4.0"}
SPECIAL_OPERANDS = {
    124: "null",
    125: "m0",
    235: "src_shared_base",
    236: "src_shared_limit",
    237: "src_private_base",
    238: "src_private_limit",
    239: "src_pops_exiting_wave_id",
    248: "0.15915494",
    251: "src_vccz",
    252: "src_execz",
    253: "src_scc",
    254: "src_lds_direct",
}
DELAY_IDS = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_2"]
DELAY_IDS += ["TRANS32_DEP_3", "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2", "SALU_CYCLE_3"]
DELAY_SKIPS = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"]
NO_OPERAND_SOPP = frozenset({"s_endpgm", "s_code_end", "s_barrier", "s_wakeup", "s_icache_inv", "s_wait_idle"})
NO_OPERAND_SOPP |= {"s_endpgm_saved", "s_ttracedata", "s_set_gpr_idx_off"}
BRANCHES = frozenset(
    {
        "s_branch",
        "s_cbranch_scc0",
        "s_cbranch_scc1",
        "s_cbranch_vccz",
        "s_cbranch_vccnz",
        "s_cbranch_execz",
        "s_cbranch_execnz",
    }
)
# VOP1/VOP2/VOPC opcodes LLVM prints without the _e32 suffix (they have no VOP3 form)
NO_E32_SUFFIX = frozenset({"v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16", "v_nop", "v_pipeflush"})
NO_E32_SUFFIX |= {"v_dot2acc_f32_f16", "v_pk_fmac_f16", "v_swap_b32", "v_swaprel_b32", "v_permlane64_b32"}


def operand(code: int, width: int = 1, literal: int | None = None) -> str:
    """An operand as LLVM prints it: a register (range), an inline constant, or the literal."""
    if code >= 256:
        return f"v{code - 256}" if width <= 1 else f"v[{code - 256}:{code - 256 + width - 1}]"
    if code <= 105:
        return f"s{code}" if width <= 1 else f"s[{code}:{code + width - 1}]"
    if code in (106, 126) and width == 2:
        return "vcc" if code == 106 else "exec"
    named = {106: "vcc_lo", 107: "vcc_hi", 126: "exec_lo", 127: "exec_hi"}
    if code in named:
        return named[code]
    if 108 <= code <= 123:
        return f"ttmp{code - 108}" if width <= 1 else f"ttmp[{code - 108}:{code - 108 + width - 1}]"
    if 128 <= code <= 192:
        return str(code - 128)
    if 193 <= code <= 208:
        return str(192 - code)
    if code in FLOAT_CONSTANTS:
        return FLOAT_CONSTANTS[code]
    if code == LITERAL:
        return f"0x{literal or 0:x}"
    return SPECIAL_OPERANDS.get(code, f"<operand {code}>")


_TYPE = re.compile(r"^[fiub](16|32|64)$")


def operand_bits(name: str) -> tuple[int, int]:
    """(destination bits, source bits) of a VALU operation from its name (v_cvt_<dst>_<src>, else one type)."""
    types = [int(t[1:]) for t in name.split("_")[1:] if _TYPE.match(t)]
    if not types or "_pk_" in name:
        return 32, 32
    if name.startswith("v_cvt_") and len(types) >= 2:
        return types[0], types[1]
    return types[0], types[0]


def true16(code: int, literal: int | None = None) -> str:
    """A 16-bit VOP1/VOP2/VOPC operand (gfx11 true16): v[256..383] low halves `vN.l`, v[384..] high halves `vN.h`."""
    if code >= 384:
        return f"v{code - 384}.h"
    if code >= 256:
        return f"v{code - 256}.l"
    return operand(code, 1, literal)


def _widths(name: str, count: int) -> tuple[int, ...]:
    widths = OPERAND_WIDTHS.get(name, ())
    return tuple(widths[i] if i < len(widths) and widths[i] else 1 for i in range(count))


def _modified(text: str, index: int, neg: int, abs_: int) -> str:
    if abs_ >> index & 1:
        text = f"|{text}|"
    if neg >> index & 1:
        text = f"-{text}"
    return text


def disassemble_instruction(inst: Instruction) -> str:
    """One instruction in LLVM's syntax."""
    formatter = _FORMATTERS.get(inst.encoding)
    if formatter is None:
        return f"<{inst.encoding} {inst.name}>"
    text = formatter(inst)
    return text.rstrip()


def _sop1(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    w = _widths(name, 2)
    if name == "s_getpc_b64":
        return f"{name} {operand(f['sdst'], 2)}"
    if name in ("s_setpc_b64", "s_rfe_b64"):
        return f"{name} {operand(f['src0'], 2, inst.literal)}"
    return f"{name} {operand(f['sdst'], w[0])}, {operand(f['src0'], w[1], inst.literal)}"


def _sop2(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    w = _widths(name, 3)
    srcs = ", ".join(operand(f[k], w[i + 1], inst.literal) for i, k in enumerate(("src0", "src1")))
    return f"{name} {operand(f['sdst'], w[0])}, {srcs}"


def _sopc(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    w = _widths(name, 2)
    return f"{name} {operand(f['src0'], w[0], inst.literal)}, {operand(f['src1'], w[1], inst.literal)}"


def _sopk(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    if name in ("s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt"):
        return f"{name} {operand(f['sdst'])}, 0x{f['simm16']:x}"
    if name == "s_call_b64":
        return f"{name} {operand(f['sdst'], 2)}, {_signed16(f['simm16'])}"
    return f"{name} {operand(f['sdst'])}, 0x{f['simm16']:x}"


def _signed16(value: int) -> int:
    return value - 0x10000 if value & 0x8000 else value


def _sopp(inst: Instruction) -> str:
    name, imm = inst.name, inst.fields["simm16"]
    if name in NO_OPERAND_SOPP:
        return name
    if name in BRANCHES:
        return f"{name} {imm}"  # LLVM prints the 16-bit offset unsigned
    if name == "s_waitcnt_depctr":
        return f"{name} {depctr_text(imm)}"
    if name == "s_waitcnt":
        return f"{name} {waitcnt_text(imm)}"
    if name == "s_delay_alu":
        return f"{name} {delay_alu_text(imm)}"
    if name == "s_sendmsg":
        return f"{name} {sendmsg_text(imm)}"
    if name in ("s_nop", "s_sleep", "s_setprio", "s_trap"):
        return f"{name} {imm}"
    return f"{name} 0x{imm:x}"


# s_waitcnt_depctr fields: (name, low bit, width); a field at its maximum is not waited on and not printed
DEPCTR_FIELDS = (
    ("depctr_va_vdst", 12, 4),
    ("depctr_va_sdst", 9, 3),
    ("depctr_va_ssrc", 8, 1),
    ("depctr_hold_cnt", 7, 1),
    ("depctr_vm_vsrc", 2, 3),
    ("depctr_va_vcc", 1, 1),
    ("depctr_sa_sdst", 0, 1),
)


def depctr_text(imm: int) -> str:
    parts = []
    for name, lo, width in DEPCTR_FIELDS:
        value = (imm >> lo) & ((1 << width) - 1)
        if value != (1 << width) - 1:
            parts.append(f"{name}({value})")
    return " ".join(parts) if parts else f"0x{imm:x}"


def waitcnt_text(imm: int) -> str:
    vm, exp, lgkm = (imm >> 10) & 0x3F, imm & 7, (imm >> 4) & 0x3F
    parts = [f"vmcnt({vm})"] if vm != 0x3F else []
    parts += [f"expcnt({exp})"] if exp != 7 else []
    parts += [f"lgkmcnt({lgkm})"] if lgkm != 0x3F else []
    return " ".join(parts) if parts else f"vmcnt({vm}) expcnt({exp}) lgkmcnt({lgkm})"


def delay_alu_text(imm: int) -> str:
    id0, skip, id1 = imm & 0xF, (imm >> 4) & 7, (imm >> 7) & 0xF

    def name(index: int) -> str:
        return DELAY_IDS[index] if index < len(DELAY_IDS) else str(index)

    parts = [f"instid0({name(id0)})"] if id0 else []
    parts += [f"instskip({DELAY_SKIPS[skip] if skip < len(DELAY_SKIPS) else skip})"] if skip else []
    parts += [f"instid1({name(id1)})"] if id1 else []
    return " | ".join(parts) if parts else "0"


def sendmsg_text(imm: int) -> str:
    messages = {3: "MSG_DEALLOC_VGPRS", 1: "MSG_INTERRUPT", 2: "MSG_GS", 10: "MSG_GET_DOORBELL"}
    if imm & 0xFF in messages and imm >> 8 == 0:
        return f"sendmsg({messages[imm & 0xFF]})"
    return f"sendmsg({imm & 0xFF}, {(imm >> 4) & 7}, {(imm >> 8) & 3})"


def _smem(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    if name in ("s_gl1_inv", "s_dcache_inv"):
        return name
    count = {"b32": 1, "b64": 2, "b128": 4, "b256": 8, "b512": 16}[name.rsplit("_", 1)[1]]
    base = operand(f["sbase"], 4 if "buffer" in name else 2)
    offset = f"0x{f['offset'] & 0x1FFFFF:x}" if f["offset"] >= 0 else f"-0x{-f['offset']:x}"
    if f["offset"] == 0:
        tail = operand(f["soffset"])
    elif f["soffset"] == 124:
        tail = offset
    else:
        tail = f"{operand(f['soffset'])} offset:{offset}"
    mods = (" glc" if f["glc"] else "") + (" dlc" if f["dlc"] else "")
    return f"{name} {operand(f['sdata'], count)}, {base}, {tail}{mods}"


def _vop1(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    if name in ("v_nop", "v_pipeflush"):
        return name
    w = _widths(name, 2)
    dst = operand(f["vdst"], w[0]) if name == "v_readfirstlane_b32" else operand(256 + f["vdst"], w[0])
    suffix = "" if name in NO_E32_SUFFIX else "_e32"
    dst_bits, src_bits = operand_bits(name)
    if dst_bits == 16:
        dst = true16(256 + f["vdst"])
    src = true16(f["src0"], inst.literal) if src_bits == 16 else operand(f["src0"], w[1], inst.literal)
    return f"{name}{suffix} {dst}, {src}"


def _vop2(inst: Instruction) -> str:
    f, name, lit = inst.fields, inst.name, inst.literal
    w = _widths(name, 3)
    dst, src0, src1 = operand(256 + f["vdst"], w[0]), operand(f["src0"], w[1], lit), operand(256 + f["vsrc1"], w[2])
    if operand_bits(name) == (16, 16):
        dst, src0, src1 = true16(256 + f["vdst"]), true16(f["src0"], lit), true16(256 + f["vsrc1"])
    suffix = "" if name in NO_E32_SUFFIX else "_e32"
    if name in ("v_fmamk_f32", "v_fmamk_f16"):
        return f"{name} {dst}, {src0}, 0x{lit or 0:x}, {src1}"
    if name in ("v_fmaak_f32", "v_fmaak_f16"):
        return f"{name} {dst}, {src0}, {src1}, 0x{lit or 0:x}"
    if name == "v_cndmask_b32":
        return f"{name}{suffix} {dst}, {src0}, {src1}, vcc_lo"
    if name in ("v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"):
        return f"{name}{suffix} {dst}, vcc_lo, {src0}, {src1}, vcc_lo"
    return f"{name}{suffix} {dst}, {src0}, {src1}"


def _cmp_widths(name: str) -> int:
    return 2 if name.endswith(("64",)) and not name.startswith("v_cmp_class") else 1


def _vopc(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    w = _widths(name, 3)
    src0, src1 = operand(f["src0"], w[-2], inst.literal), operand(256 + f["vsrc1"], w[-1])
    if operand_bits(name)[1] == 16:
        src0, src1 = true16(f["src0"], inst.literal), true16(256 + f["vsrc1"])
    if name.startswith("v_cmpx"):
        return f"{name}_e32 {src0}, {src1}"
    return f"{name}_e32 vcc_lo, {src0}, {src1}"


def _omod_clamp(f: dict[str, int]) -> str:
    text = " clamp" if f.get("clamp") else ""
    return text + {0: "", 1: " mul:2", 2: " mul:4", 3: " div:2"}[f.get("omod", 0)]


def _vop3(inst: Instruction) -> str:
    f, name, lit = inst.fields, inst.name, inst.literal
    promoted = inst.opcode < 512  # VOPC (0..255), VOP2 (256..383), VOP1 (384..511) in the VOP3 encoding
    nsrc = _source_count(name)
    widths = OPERAND_WIDTHS.get(name, ())
    abs_, neg = f.get("abs", 0), f["neg"]
    srcs = []
    for i in range(nsrc):
        width = widths[i + 1] if i + 1 < len(widths) and widths[i + 1] else 1
        srcs.append(_modified(operand(f[f"src{i}"], width, lit), i, neg, abs_))
    dst_width = widths[0] if widths and widths[0] else 1
    suffix = "_e64" if promoted and name not in NO_E32_SUFFIX else ""
    if name.startswith("v_cmpx"):
        operands = srcs
    elif name.startswith("v_cmp") or name in ("v_readlane_b32", "v_readfirstlane_b32"):
        operands = [operand(f["vdst"]), *srcs]
    else:
        operands = [operand(256 + f["vdst"], dst_width), *srcs]
    text = f"{name}{suffix} {', '.join(operands)}"
    if f.get("opsel"):
        bits = [(f["opsel"] >> i) & 1 for i in range(nsrc)] + [(f["opsel"] >> 3) & 1]
        text += f" op_sel:[{','.join(map(str, bits))}]"
    return text + _omod_clamp(f)


def _source_count(name: str) -> int:
    widths = OPERAND_WIDTHS.get(name)
    if name.startswith("v_cmpx"):
        return 2
    if name.startswith("v_cmp"):
        return 2
    if name in ("v_cndmask_b32", "v_cndmask_b16"):
        return 3
    if name in VOP3SD_NAMES:
        return len(widths) - 2 if widths else 2
    if widths is None:
        return 2
    return len(widths) - 1


# VOP3SD: (destination width, source widths)
VOP3SD_WIDTHS = {
    "v_add_co_ci_u32": (1, (1, 1, 1)),
    "v_sub_co_ci_u32": (1, (1, 1, 1)),
    "v_subrev_co_ci_u32": (1, (1, 1, 1)),
    "v_add_co_u32": (1, (1, 1)),
    "v_sub_co_u32": (1, (1, 1)),
    "v_subrev_co_u32": (1, (1, 1)),
    "v_div_scale_f32": (1, (1, 1, 1)),
    "v_div_scale_f64": (2, (2, 2, 2)),
    "v_mad_u64_u32": (2, (1, 1, 2)),
    "v_mad_i64_i32": (2, (1, 1, 2)),
}


def _vop3sd(inst: Instruction) -> str:
    f, name, lit = inst.fields, inst.name, inst.literal
    dst_width, src_widths = VOP3SD_WIDTHS[name]
    srcs = [_modified(operand(f[f"src{i}"], w, lit), i, f["neg"], 0) for i, w in enumerate(src_widths)]
    suffix = "_e64" if inst.opcode < 512 else ""
    dst = f"{operand(256 + f['vdst'], dst_width)}, {operand(f['sdst'])}"
    return f"{name}{suffix} {dst}, {', '.join(srcs)}" + _omod_clamp(f)


def _vop3p(inst: Instruction) -> str:
    f, name, lit = inst.fields, inst.name, inst.literal
    nsrc = 3 if any(k in name for k in ("fma", "mad", "dot", "wmma")) else 2
    widths = OPERAND_WIDTHS.get(name, (1, 1, 1, 1))
    srcs = [operand(f[f"src{i}"], (widths[i + 1] if i + 1 < len(widths) else 1) or 1, lit) for i in range(nsrc)]
    text = f"{name} {operand(256 + f['vdst'], widths[0])}, {', '.join(srcs)}"
    opsel = [(f["opsel"] >> i) & 1 for i in range(nsrc)]
    opsel_hi = [(f["opsel_hi"] >> i) & 1 for i in range(nsrc)]
    if any(opsel):
        text += f" op_sel:[{','.join(map(str, opsel))}]"
    if not all(opsel_hi):
        text += f" op_sel_hi:[{','.join(map(str, opsel_hi))}]"
    neg_lo = [(f["neg"] >> i) & 1 for i in range(nsrc)]
    neg_hi = [(f["neg_hi"] >> i) & 1 for i in range(nsrc)]
    if any(neg_lo):
        text += f" neg_lo:[{','.join(map(str, neg_lo))}]"
    if any(neg_hi):
        text += f" neg_hi:[{','.join(map(str, neg_hi))}]"
    return text + (" clamp" if f["clamp"] else "")


def _vopd_half(name: str, dst: int, src0: int, vsrc1: int, literal: int | None) -> str:
    dual = name.replace("v_", "v_dual_", 1)
    d, s0, s1 = operand(256 + dst), operand(src0, 1, literal), operand(256 + vsrc1)
    if name == "v_mov_b32":
        return f"{dual} {d}, {s0}"
    if name in ("v_fmamk_f32",):
        return f"{dual} {d}, {s0}, 0x{literal or 0:x}, {s1}"
    if name in ("v_fmaak_f32",):
        return f"{dual} {d}, {s0}, {s1}, 0x{literal or 0:x}"
    return f"{dual} {d}, {s0}, {s1}"


def _vopd(inst: Instruction) -> str:
    f = inst.fields
    x = _vopd_half(inst.name, f["vdstx"], f["srcx0"], f["vsrcx1"], inst.literal)
    y = _vopd_half(inst.name_y, f["vdsty"], f["srcy0"], f["vsrcy1"], inst.literal)
    return f"{x} :: {y}"


def _data_width(name: str) -> int:
    for suffix, width in (("b128", 4), ("b96", 3), ("b64", 2), ("u64", 2), ("i64", 2), ("f64", 2)):
        if suffix in name.split("_")[-1] or name.endswith(suffix):
            return width
    return 1


def _ds(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    width = _data_width(name)
    addr, vdst = operand(256 + f["addr"]), 256 + f["vdst"]
    data0, data1 = operand(256 + f["data0"], width), operand(256 + f["data1"], width)
    gds = " gds" if f["gds"] else ""
    if "2addr" in name:
        offsets = (f" offset0:{f['offset0']}" if f["offset0"] else "") + (
            f" offset1:{f['offset1']}" if f["offset1"] else ""
        )
        if name.startswith("ds_load"):
            return f"{name} {operand(vdst, 2 * width)}, {addr}{offsets}{gds}"
        return f"{name} {addr}, {data0}, {data1}{offsets}{gds}"
    offset = f["offset1"] << 8 | f["offset0"]
    off = f" offset:{offset}" if offset else ""
    if name in ("ds_nop",):
        return name
    if name.startswith("ds_load") or name.startswith("ds_read"):
        return f"{name} {operand(vdst, width)}, {addr}{off}{gds}"
    if name in ("ds_bpermute_b32", "ds_permute_b32"):
        return f"{name} {operand(vdst)}, {addr}, {data0}{off}{gds}"
    if name.startswith("ds_store") or name.startswith("ds_write"):
        return f"{name} {addr}, {data0}{off}{gds}"
    if "_rtn_" in name:
        return f"{name} {operand(vdst, width)}, {addr}, {data0}{off}{gds}"
    return f"{name} {addr}, {data0}{off}{gds}"


def _flat(inst: Instruction) -> str:
    f, name = inst.fields, inst.name
    width = _data_width(name)
    saddr_off = f["saddr"] in (124, 125)  # 'off'
    if inst.encoding == "SCRATCH":
        vaddr = operand(256 + f["addr"]) if f["sve"] else "off"
        saddr = "off" if saddr_off else operand(f["saddr"])
    elif inst.encoding == "GLOBAL":
        vaddr = operand(256 + f["addr"], 2 if saddr_off else 1)
        saddr = "off" if saddr_off else operand(f["saddr"], 2)
    else:
        vaddr, saddr = operand(256 + f["addr"], 2), ""
    tail = f", {saddr}" if saddr else ""
    mods = (f" offset:{f['offset']}" if f["offset"] else "") + (" glc" if f["glc"] else "")
    mods += (" slc" if f["slc"] else "") + (" dlc" if f["dlc"] else "")
    vdst, data = operand(256 + f["vdst"], width), operand(256 + f["data"], width)
    if "_load_" in name:
        return f"{name} {vdst}, {vaddr}{tail}{mods}"
    if "_store_" in name:
        return f"{name} {vaddr}, {data}{tail}{mods}"
    if f["glc"]:  # atomic returning the old value
        return f"{name} {vdst}, {vaddr}, {data}{tail}{mods}"
    return f"{name} {vaddr}, {data}{tail}{mods}"


_FORMATTERS = {
    "SOP1": _sop1,
    "SOP2": _sop2,
    "SOPC": _sopc,
    "SOPK": _sopk,
    "SOPP": _sopp,
    "SMEM": _smem,
    "VOP1": _vop1,
    "VOP2": _vop2,
    "VOPC": _vopc,
    "VOP3": _vop3,
    "VOP3SD": _vop3sd,
    "VOP3P": _vop3p,
    "VOPD": _vopd,
    "DS": _ds,
    "FLAT": _flat,
    "GLOBAL": _flat,
    "SCRATCH": _flat,
    "MUBUF": lambda inst: inst.name,
}


def disassemble(code: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, str]]:
    """(offset, text) for each instruction from `start` (a linear sweep, stopping at s_code_end)."""
    return [(inst.offset, disassemble_instruction(inst)) for inst in decode_program(code, start, end)]
