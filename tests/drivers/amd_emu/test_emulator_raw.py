"""The emulator on raw instruction words and small kernels: it fails loudly (an instruction it does not know, a runaway
loop, an access to unmapped memory, running past the program) and executes hand-assembled VOPD pairs."""

import struct

import numpy as np
import pytest

from tg.drivers.amd.iface import GPUFault, WaveLaunch
from tg.drivers.amd.rdna3 import IllegalInstruction, RDNA3Emulator

from . import kernels
from .harness import FlatMemory, run_kernel

S_ENDPGM = 0xBFB00000
S_BRANCH_SELF = 0xBFA0FFFF  # s_branch -1: jumps back to itself
V_MOV_B32_V1_1 = 0x7E020281  # v_mov_b32 v1, 1


def run_words(words: list[int], emulator: RDNA3Emulator | None = None) -> FlatMemory:
    memory = FlatMemory()
    program = memory.alloc(4 * len(words) + 64, struct.pack(f"<{len(words)}I", *words))
    launch = WaveLaunch(program, rsrc1=0, rsrc2=0, rsrc3=0, user_data=(), grid=(1, 1, 1), workgroup=(32, 1, 1))
    (emulator or RDNA3Emulator()).run_dispatch(memory, launch)
    return memory


def test_straight_line_code_runs_to_s_endpgm() -> None:
    run_words([V_MOV_B32_V1_1, S_ENDPGM])


def test_an_instruction_the_emulator_does_not_know_names_itself() -> None:
    # v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7] (llvm-mc-19's encoding): valid on gfx1100, not
    # implemented by the emulator
    message = r"at 0x100000004: v_wmma_f32_16x16x16_f16 \(VOP3P opcode 64\).*dwords CC404000 1C022108"
    with pytest.raises(IllegalInstruction, match=message):
        run_words([V_MOV_B32_V1_1, 0xCC404000, 0x1C022108, S_ENDPGM])


def test_an_undefined_opcode_names_its_encoding_and_dwords() -> None:
    with pytest.raises(IllegalInstruction, match=r"at 0x100000004: unknown SOP1 opcode 255.*dwords BE80FF00"):
        run_words([V_MOV_B32_V1_1, 0xBE80FF00, S_ENDPGM])


def test_running_past_s_endpgm_into_the_padding_is_an_error() -> None:
    with pytest.raises(IllegalInstruction, match=r"s_code_end .*executed: the wave ran past the end of its program"):
        run_words([V_MOV_B32_V1_1, 0xBF9F0000])  # s_code_end: what LLVM pads the code with


def test_runaway_loop_is_stopped() -> None:
    with pytest.raises(RuntimeError, match=r"exceeded 1000 instructions in one wave, likely an infinite loop"):
        run_words([S_BRANCH_SELF], RDNA3Emulator(max_instructions_per_wave=1000))


def test_store_to_unmapped_memory_is_a_gpu_fault() -> None:
    out = np.zeros(32, dtype=np.int32)
    run_kernel(kernels.STORE_ONE, [out], local=(32, 1, 1))  # mapped: fine
    with pytest.raises(GPUFault, match=r"write at 0x1000") as fault:
        run_kernel(kernels.STORE_ONE, [np.zeros(8, dtype=np.int32)], local=(32, 1, 1))  # 32 lanes, 8 ints mapped
    assert fault.value.access == "write"


def test_load_from_unmapped_memory_is_a_gpu_fault() -> None:
    memory = FlatMemory()
    # s_load_b32 s2, s[0:1], 0x0 with s[0:1] = 0 (no user SGPRs): address 0 is not mapped
    program = memory.alloc(64, struct.pack("<3I", 0xF4000080, 0xF8000000, S_ENDPGM))
    launch = WaveLaunch(program, rsrc1=0, rsrc2=0, rsrc3=0, user_data=(), grid=(1, 1, 1), workgroup=(32, 1, 1))
    with pytest.raises(GPUFault, match=r"read at 0x0 is not mapped"):
        RDNA3Emulator().run_dispatch(memory, launch)


def test_wave64_dispatch_is_refused() -> None:
    launch = WaveLaunch(0, rsrc1=0, rsrc2=0, rsrc3=0, user_data=(), grid=(1, 1, 1), workgroup=(64, 1, 1), wave32=False)
    with pytest.raises(RuntimeError, match="wave32"):
        RDNA3Emulator().run_dispatch(FlatMemory(), launch)


def test_vopd_pairs_read_both_sources_before_writing() -> None:
    """Hand-assembled VOPD (the dwords are llvm-mc-19's encodings) in the spirit of the seed's RDNA4 VOPD tests:
    dual moves from SGPRs, a pair whose Y half overwrites a register the X half reads, arithmetic pairs, a literal."""
    code = [
        0xCA100001, 0x01020002,  # v_dual_mov_b32 v1, s1 :: v_dual_mov_b32 v2, s2
        0xCA100102, 0x03020101,  # v_dual_mov_b32 v3, v2 :: v_dual_mov_b32 v2, v1  (v3 gets the old v2)
        0xC9060501, 0x04040702,  # v_dual_add_f32 v4, v1, v2 :: v_dual_mul_f32 v5, v2, v3
        0xC84A0501, 0x06060702, 0x40000000,  # v_dual_fmaak_f32 v6, v1, v2, 2.0 :: v_dual_sub_f32 v7, v2, v3
        0xDC760000, 0x00040200,  # global_store_b128 v0, v[2:5], s[4:5]
        0xDC720010, 0x00040500,  # global_store_b96 v0, v[5:7], s[4:5] offset:16
        S_ENDPGM,
    ]  # fmt: skip
    memory = FlatMemory()
    program = memory.alloc(4 * len(code), struct.pack(f"<{len(code)}I", *code))
    out = memory.alloc(28)
    seven, nine = (int(np.float32(v).view(np.uint32)) for v in (7.0, 9.0))
    user = (0, seven, nine, 0, out & 0xFFFFFFFF, out >> 32)
    launch = WaveLaunch(program, rsrc1=0, rsrc2=6 << 1, rsrc3=0, user_data=user, grid=(1, 1, 1), workgroup=(1, 1, 1))
    RDNA3Emulator().run_dispatch(memory, launch)
    got = np.frombuffer(memory.read(out, 28), np.float32)
    np.testing.assert_array_equal(got, [7, 9, 14, 63, 63, 51, -2])
