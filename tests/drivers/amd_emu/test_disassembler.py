"""The RDNA3 decoder and disassembler against LLVM's own disassembler (llvm-objdump-19 --mcpu=gfx1100), instruction
by instruction, on every code object these tests compile; see objdump.py for the spelling normalised."""

import pytest

from tg.drivers.amd.rdna3 import IllegalInstruction, decode

from . import kernels
from .llvm_kernels import compile_ir
from .objdump import compare, normalise, objdump_path
from .test_code_object import ADD_ONE, LDS_KERNEL

CODE_OBJECTS = {**kernels.ALL, "add_one": ADD_ONE, "uses_lds": LDS_KERNEL.format(n=200)}


@pytest.mark.parametrize("name", sorted(CODE_OBJECTS))
def test_disassembly_matches_llvm_objdump(name: str) -> None:
    if objdump_path() is None:
        pytest.skip("missing llvm-objdump: llvm-objdump-19 is not installed (apt-get install llvm-19)")
    compared, skipped, mismatches = compare(compile_ir(CODE_OBJECTS[name]))
    assert compared > 10
    assert not mismatches
    assert all("16" in text.split()[0] for text in skipped), skipped  # only true16 forms LLVM 19 cannot print


def test_normalisation_still_tells_operands_apart() -> None:
    # the comparison is not vacuous: a different register, constant or modifier is a mismatch
    assert normalise("v_add_f32_e32 v1, 1.0, v1") == normalise("v_add_f32 v1, 1.0, v1")
    assert normalise("s_load_b32 s2, s[0:1], 0x18") == normalise("s_load_b32 s2, s[0:1], 24")
    assert normalise("v_add_f32_e32 v1, 1.0, v1") != normalise("v_add_f32_e32 v1, 2.0, v1")
    assert normalise("v_fma_f64 v[8:9], -v[4:5], v[6:7], 0.5") != normalise("v_fma_f64 v[8:9], v[4:5], v[6:7], 0.5")
    assert normalise("global_load_b32 v2, v[2:3], off offset:16") != normalise("global_load_b32 v2, v[2:3], off")


def test_unknown_opcode_is_named() -> None:
    vop1_unused = (0x3F << 25) | (200 << 9) | 0x100  # VOP1 opcode 200 does not exist on gfx1100
    with pytest.raises(IllegalInstruction, match=r"unknown VOP1 opcode 200 .*dwords 7E019100"):
        decode(vop1_unused.to_bytes(4, "little"), 0)
    image_sample = 0xF0000000  # MIMG: no image instructions in compute kernels
    with pytest.raises(IllegalInstruction, match=r"MIMG .*F0000000"):
        decode(image_sample.to_bytes(4, "little") + bytes(8), 0)
