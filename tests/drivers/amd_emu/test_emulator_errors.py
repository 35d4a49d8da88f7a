"""The emulator fails loudly: an instruction it does not know, a runaway loop, an access to unmapped memory."""

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


def test_runaway_loop_is_stopped() -> None:
    with pytest.raises(RuntimeError, match=r"exceeded 1000 instructions in one wave, likely an infinite loop"):
        run_words([S_BRANCH_SELF], RDNA3Emulator(max_instructions_per_wave=1000))


STORE_ONE = kernels.kernel(
    "store_one",
    "ptr addrspace(1) %out",
    """
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 1, ptr addrspace(1) %p
  ret void""",
    local=32,
)


def test_store_to_unmapped_memory_is_a_gpu_fault() -> None:
    out = np.zeros(32, dtype=np.int32)
    run_kernel(STORE_ONE, [out], local=(32, 1, 1))  # mapped: fine
    with pytest.raises(GPUFault, match=r"write at 0x1000") as fault:
        run_kernel(STORE_ONE, [np.zeros(8, dtype=np.int32)], local=(32, 1, 1))  # 32 lanes, 8 ints mapped
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
