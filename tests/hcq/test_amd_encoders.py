"""Golden dwords of the AMD device's PM4 and SDMA encoders (spec hcq §1.14, §3.5).

The expected words are built here from the packet layouts the specification and the hardware's PM4/SDMA documents
give (type-3 header `(3 << 30) | (count << 16) | (opcode << 8)`, the field positions of each packet), with the
opcodes and registers written out as numbers, not taken from the encoders' own constants.
"""

from __future__ import annotations

import pytest

from tg.hcq.devices import amd_pm4 as pm4
from tg.hcq.devices import amd_sdma as sdma

# opcodes (PM4 IT_* of gfx10+, SDMA 6.0 ops)
SET_SH_REG, SET_UCONFIG_REG, WAIT_REG_MEM, ACQUIRE_MEM = 0x76, 0x79, 0x3C, 0x58
RELEASE_MEM, DISPATCH_DIRECT, EVENT_WRITE, INDIRECT_BUFFER, WRITE_DATA = 0x49, 0x15, 0x46, 0x3F, 0x37
SDMA_COPY, SDMA_WRITE, SDMA_FENCE, SDMA_TRAP, SDMA_POLL_REGMEM, SDMA_TIMESTAMP = 1, 2, 5, 6, 8, 13

ADDRESS = 0x0000_7F12_3456_7800  # a GPU address with a non-zero high dword
LO, HI = 0x3456_7800, 0x0000_7F12


def header(opcode: int, body_dwords: int) -> int:
    return (3 << 30) | ((body_dwords - 1) << 16) | (opcode << 8)


# --- PM4 ---


def test_pkt3_header_counts_body_dwords_minus_one() -> None:
    assert pm4.pkt3(DISPATCH_DIRECT, 4, 5, 6, 7) == [0xC0031500, 4, 5, 6, 7]
    assert pm4.pkt3(EVENT_WRITE, 0x407) == [header(EVENT_WRITE, 1), 0x407]
    with pytest.raises(ValueError, match="at least one body dword"):
        pm4.pkt3(EVENT_WRITE)


def test_wreg_picks_set_sh_reg_for_the_sh_range() -> None:
    # COMPUTE_PGM_RSRC1 is SH register 0x2E12: the body's first dword is its offset from 0x2C00
    assert pm4.wreg(0x2E12, 0xAA, 0xBB) == [header(SET_SH_REG, 3), 0x212, 0xAA, 0xBB]
    assert pm4.wreg(0x2C00, 1) == [header(SET_SH_REG, 2), 0, 1]


def test_wreg_picks_set_uconfig_reg_for_the_uconfig_range() -> None:
    assert pm4.wreg(0xC010, 7) == [header(SET_UCONFIG_REG, 2), 0x10, 7]


@pytest.mark.parametrize(
    "reg, values, named",
    [
        (0x1000, (1,), "register 0x1000"),
        (0x2FFF, (1, 2), "register 0x2fff"),  # starts in the SH range but runs past its end
        (0x0106, (1,), "BIF_BX_PF0_GPU_HDP_FLUSH_REQ (0x106)"),  # an NBIO register: not writable by SET_*_REG
    ],
)
def test_wreg_refuses_registers_outside_both_ranges(reg: int, values: tuple[int, ...], named: str) -> None:
    with pytest.raises(RuntimeError) as raised:
        pm4.wreg(reg, *values)
    assert str(raised.value).startswith(f"Cannot set {named} via pm4 packet")


def test_wait_reg_mem_memory_form() -> None:
    # control: function GE (5) [2:0], mem space memory (1) [4], operation wait (0) [7:6]
    words = pm4.wait_reg_mem(9, mem=ADDRESS)
    assert words == [header(WAIT_REG_MEM, 6), 0x15, LO, HI, 9, 0xFFFFFFFF, 4]
    words = pm4.wait_reg_mem(0x10, mask=0x10, mem=ADDRESS, op=pm4.p.CompareFunction.EQ)
    assert words == [header(WAIT_REG_MEM, 6), 0x13, LO, HI, 0x10, 0x10, 4]


def test_wait_reg_mem_register_write_then_wait_form() -> None:
    # control: function EQ (3), register space (0), operation write-then-wait (1 << 6)
    words = pm4.wait_reg_mem(0xFFFFFFFF, reg=0x106, reg_done=0x107, op=pm4.p.CompareFunction.EQ)
    assert words == [header(WAIT_REG_MEM, 6), 0x43, 0x106, 0x107, 0xFFFFFFFF, 0xFFFFFFFF, 4]
    with pytest.raises(ValueError, match="exactly one of mem"):
        pm4.wait_reg_mem(1, mem=ADDRESS, reg=0x106)


def test_acquire_mem_gfx10_gcr_flags() -> None:
    # GCR_CNTL: GLI_INV [1:0], GLM_WB 4, GLM_INV 5, GLK_WB 6, GLK_INV 7, GLV_INV 8, GL1_INV 9, GL2_INV 14, GL2_WB 15
    everything = 1 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 14 | 1 << 15
    assert everything == 0xC3F1
    assert pm4.acquire_mem() == [header(ACQUIRE_MEM, 7), 0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0xA, everything]
    # what a kernel launch invalidates: not the instruction cache, not L2
    assert pm4.acquire_mem(gli=0, gl2=0)[-1] == 0x3F0
    assert pm4.acquire_mem(ADDRESS, 0x1000, gli=0, glm=0, glk=0, glv=1, gl1=0, gl2=0) == [
        header(ACQUIRE_MEM, 7), 0, 0x1000, 0, LO, HI, 0xA, 1 << 8,
    ]  # fmt: skip


def test_release_mem_signal_writes_32_bits_and_interrupts_after_write_confirm() -> None:
    # dw1: event CACHE_FLUSH_AND_INV_TS_EVENT (0x14), index 5 << 8, cache write-back/invalidate: GLM_WB 12, GLM_INV 13,
    #      GLV_INV 14, GL1_INV 15, GL2_INV 20, GL2_WB 21, SEQ 22
    # dw2: data_sel 1 (32-bit value) << 29, int_sel 2 (after write confirm) << 24, dst_sel 0 << 16
    flush = 1 << 12 | 1 << 13 | 1 << 14 | 1 << 15 | 1 << 20 | 1 << 21 | 1 << 22
    assert pm4.signal(ADDRESS, 0x1_2345_6789) == [
        header(RELEASE_MEM, 7), 0x514 | flush, 1 << 29 | 2 << 24, LO, HI, 0x2345_6789, 1, 0,
    ]  # fmt: skip


def test_release_mem_timestamp_selects_the_gpu_clock_without_interrupt() -> None:
    assert pm4.timestamp(ADDRESS) == [header(RELEASE_MEM, 7), 0x514, 3 << 29, LO, HI, 0, 0, 0]


def test_release_mem_64_bit_value_and_context_id() -> None:
    words = pm4.release_mem(ADDRESS, 0xDEAD_BEEF_0000_0001, pm4.p.ReleaseMemDataSel.VALUE_64,
                            pm4.p.ReleaseMemIntSel.SEND_INTERRUPT_ONLY, ctxid=77)  # fmt: skip
    assert words == [header(RELEASE_MEM, 7), 0x514, 2 << 29 | 1 << 24, LO, HI, 1, 0xDEAD_BEEF, 77]


def test_memory_barrier_is_an_hdp_flush_then_a_full_invalidate() -> None:
    # NBIO 4.3 BIF_BX_PF0_GPU_HDP_FLUSH_REQ / _DONE are dword registers 0x106 / 0x107
    hdp = [header(WAIT_REG_MEM, 6), 0x43, 0x106, 0x107, 0xFFFFFFFF, 0xFFFFFFFF, 4]
    assert pm4.memory_barrier() == hdp + pm4.acquire_mem()


def test_wait_is_a_memory_wait_greater_or_equal() -> None:
    assert pm4.wait(ADDRESS, 5) == [header(WAIT_REG_MEM, 6), 0x15, LO, HI, 5, 0xFFFFFFFF, 4]


def test_write_data_to_memory_with_write_confirm() -> None:
    # control: dst_sel memory (5) << 8, wr_confirm 1 << 20
    assert pm4.write_data(ADDRESS, 0x42, 0x43) == [header(WRITE_DATA, 5), 5 << 8 | 1 << 20, LO, HI, 0x42, 0x43]


def test_indirect_buffer_packet_and_its_size_limit() -> None:
    assert pm4.indirect_buffer(ADDRESS, 300) == [header(INDIRECT_BUFFER, 3), LO, HI, 300 | 1 << 23]
    assert pm4.indirect_buffer(ADDRESS, (1 << 20) - 1)[-1] == ((1 << 20) - 1) | 1 << 23
    for size in (0, 1 << 20):
        with pytest.raises(ValueError, match="an indirect buffer holds 1 to 1048575 dwords"):
            pm4.indirect_buffer(ADDRESS, size)
    with pytest.raises(ValueError, match="dword aligned"):
        pm4.indirect_buffer(ADDRESS + 2, 4)


def test_program_writes_the_compute_registers_in_order() -> None:
    code = 0x0000_7F00_0000_1100
    kernargs = 0x0000_7E00_0000_0040
    dispatch = pm4.Dispatch(
        program_address=code, rsrc1=0x11, rsrc2=0x22, rsrc3=0x33, user_data=(kernargs & 0xFFFFFFFF, kernargs >> 32),
        global_size=(4, 2, 1), local_size=(32, 1, 1), wave32=True,
    )  # fmt: skip

    def sh(reg: int, *values: int) -> list[int]:
        return [header(SET_SH_REG, len(values) + 1), reg - 0x2C00, *values]

    expected = [header(ACQUIRE_MEM, 7), 0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0xA, 0x3F0]
    expected += sh(0x2E0C, (code >> 8) & 0xFFFFFFFF, code >> 40)  # COMPUTE_PGM_LO/HI: the address in 256 bytes
    expected += sh(0x2E12, 0x11, 0x22)  # COMPUTE_PGM_RSRC1, RSRC2
    expected += sh(0x2E28, 0x33)  # COMPUTE_PGM_RSRC3
    expected += sh(0x2E18, 0)  # COMPUTE_TMPRING_SIZE: no scratch
    expected += sh(0x2E1B, 0, 0, 0)  # COMPUTE_RESTART_X/Y/Z
    expected += sh(0x2E40, 0x40, 0x7E00)  # COMPUTE_USER_DATA_0/1: the kernarg pointer
    expected += sh(0x2E15, 0)  # COMPUTE_RESOURCE_LIMITS
    expected += sh(0x2E04, 0, 0, 0, 32, 1, 1)  # COMPUTE_START_X/Y/Z, COMPUTE_NUM_THREAD_X/Y/Z
    # DISPATCH_DIRECT: workgroups, initiator CS_W32_EN (15) | FORCE_START_AT_000 (2) | COMPUTE_SHADER_EN (0)
    expected += [header(DISPATCH_DIRECT, 4), 4, 2, 1, 1 << 15 | 1 << 2 | 1]
    expected += [header(EVENT_WRITE, 1), 0x07 | 4 << 8]  # CS_PARTIAL_FLUSH, event index 4
    assert pm4.program(dispatch) == expected


def test_program_with_scratch_sets_the_dispatch_scratch_base() -> None:
    scratch = 0x0000_7D00_0001_0000
    dispatch = pm4.Dispatch(0x1000, 0, 0, 0, (), (1, 1, 1), (1, 1, 1), wave32=False, tmpring_size=0x4C00,
                            scratch_base=scratch)  # fmt: skip
    words = pm4.program(dispatch)
    tmpring = [header(SET_SH_REG, 2), 0x218, 0x4C00]
    base = [header(SET_SH_REG, 3), 0x210, (scratch >> 8) & 0xFFFFFFFF, scratch >> 40]
    assert _contains(words, tmpring + base)  # TMPRING_SIZE, then the scratch base, in 256-byte units
    assert words[-7:-2] == [header(DISPATCH_DIRECT, 4), 1, 1, 1, 1 << 2 | 1]  # wave64: no CS_W32_EN


def test_program_checks_alignment_and_user_sgpr_count() -> None:
    with pytest.raises(ValueError, match="256-byte aligned"):
        pm4.program(pm4.Dispatch(0x1010, 0, 0, 0, (), (1, 1, 1), (1, 1, 1)))
    with pytest.raises(ValueError, match="17 user SGPRs"):
        pm4.program(pm4.Dispatch(0x1000, 0, 0, 0, tuple(range(17)), (1, 1, 1), (1, 1, 1)))


def _contains(words: list[int], run: list[int]) -> bool:
    return any(words[i : i + len(run)] == run for i in range(len(words) - len(run) + 1))


# --- SDMA ---


def test_sdma_copy_linear_packet() -> None:
    # header: op COPY (1), sub-op COPY_LINEAR (0) << 8; count = bytes - 1; parameter 0; src lo/hi; dst lo/hi
    assert sdma.copy(dest=0x2000, src=ADDRESS, size=8) == [SDMA_COPY, 7, 0, LO, HI, 0x2000, 0]


def test_sdma_copy_chunks_at_0x400000_before_sdma_5() -> None:
    chunk = 0x400000
    words = sdma.copy(dest=0x1_0000_0000, src=0x2000, size=2 * chunk + 5, max_copy_size=chunk)
    assert len(words) == 3 * 7
    packets = [words[i : i + 7] for i in range(0, len(words), 7)]
    assert [pk[1] for pk in packets] == [chunk - 1, chunk - 1, 4]
    assert [pk[3] for pk in packets] == [0x2000, 0x2000 + chunk, 0x2000 + 2 * chunk]
    assert [(pk[5], pk[6]) for pk in packets] == [(0, 1), (chunk, 1), (2 * chunk, 1)]
    assert sdma.copy(0, 0, chunk, max_copy_size=chunk)[1] == chunk - 1  # exactly one chunk: one packet
    assert len(sdma.copy(0, 0, chunk, max_copy_size=chunk)) == 7


def test_sdma_copy_chunks_at_0x40000000_and_carries_into_the_high_dword() -> None:
    chunk = 0x40000000
    src = 0xC000_0000  # the second chunk's source crosses 4 GiB
    assert len(sdma.copy(0, src, chunk)) == 7
    words = sdma.copy(dest=0x10, src=src, size=chunk + 1)
    assert words == [
        SDMA_COPY, chunk - 1, 0, 0xC000_0000, 0, 0x10, 0,
        SDMA_COPY, 0, 0, 0x0000_0000, 1, 0x10 + chunk, 0,
    ]  # fmt: skip
    assert sdma.copy(0, 0, 0) == []


def test_sdma_fence_trap_and_signal() -> None:
    fence = [SDMA_FENCE | 3 << 16, LO, HI, 0x1234]  # mtype UC (3) in header bits [18:16]
    assert sdma.fence(ADDRESS, 0x1_0000_1234) == fence
    assert sdma.trap() == [SDMA_TRAP, 0]
    assert sdma.signal(ADDRESS, 0x1234) == fence + [SDMA_TRAP, 0]


def test_sdma_poll_regmem() -> None:
    # header: func [30:28], mem_poll [31]; dw5: interval 4 [15:0] | retry count 0xfff [27:16]
    assert sdma.wait(ADDRESS, 3) == [SDMA_POLL_REGMEM | 5 << 28 | 1 << 31, LO, HI, 3, 0xFFFFFFFF, 0x0FFF_0004]
    poll = sdma.poll_regmem(ADDRESS, 0, 0x10, pm4.p.CompareFunction.EQ)
    assert poll == [SDMA_POLL_REGMEM | 3 << 28 | 1 << 31, LO, HI, 0, 0x10, 0x0FFF_0004]


def test_sdma_timestamp_write_and_nop() -> None:
    assert sdma.timestamp(ADDRESS) == [SDMA_TIMESTAMP | 2 << 8, LO, HI]  # sub-op GET_GLOBAL
    assert sdma.write(ADDRESS, 5, 6, 7) == [SDMA_WRITE, LO, HI, 2, 5, 6, 7]  # count = dwords - 1
    assert sdma.nop() == [0]


@pytest.mark.parametrize(
    "put, size, ring, expected",
    [
        (0, 64, 128, (0, 0)),
        (78, 50, 128, (0, 78)),  # ends exactly at the ring's end: fits
        (100, 50, 128, (28, 128)),  # 28 bytes of zeros at the tail, then the packets from the ring's start
        (3 * 128 + 120, 16, 128, (8, 4 * 128)),  # the write pointer keeps growing across wraps
        (128, 128, 128, (0, 128)),
    ],
)
def test_sdma_ring_wrap_zeroes_the_tail(put: int, size: int, ring: int, expected: tuple[int, int]) -> None:
    assert sdma.ring_placement(put, size, ring) == expected


def test_sdma_ring_rejects_a_submission_larger_than_the_ring() -> None:
    with pytest.raises(ValueError, match="does not fit in a ring"):
        sdma.ring_placement(0, 129, 128)
