"""The packet constants against header words known from the hardware documentation."""

from tg.drivers.amd import packets as p


def test_packet3_header_layout() -> None:
    # The CP's canonical filler NOP, PACKET3(NOP, 0x3FFF), is the dword 0xFFFF1000.
    assert p.packet3_header(p.PM4.NOP, 0x3FFF) == 0xFFFF1000
    # SET_SH_REG with a two-dword body (register offset + one value): type 3, count 1, opcode 0x76.
    header = p.packet3_header(p.PM4.SET_SH_REG, 1)
    assert header == 0xC0017600
    assert (p.packet_type(header), p.packet3_opcode(header), p.packet3_count(header)) == (3, 0x76, 1)


def test_compute_registers_lie_in_the_sh_range() -> None:
    regs = [p.regCOMPUTE_PGM_LO, p.regCOMPUTE_PGM_RSRC3, p.regCOMPUTE_USER_DATA_0 + 15, p.regCOMPUTE_DISPATCH_INITIATOR]
    assert all(p.SH_REG_START <= r < p.SH_REG_END for r in regs)
    # The header offset plus the GC base: COMPUTE_PGM_LO is 0x1BAC in gc_11_0_0_offset.h.
    assert p.regCOMPUTE_PGM_LO == p.GC_BASE_SEG0 + 0x1BAC


def test_sdma_header() -> None:
    assert p.sdma_header(p.SDMA.TIMESTAMP, p.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL) == 0x020D
    assert p.sdma_header(p.SDMA.COPY, p.SDMA_SUBOP_COPY_LINEAR) == 1
