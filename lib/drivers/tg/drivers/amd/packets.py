"""PM4 and SDMA packet facts for gfx11 (Navi31), stated once: opcodes, header layouts, field positions, registers.

The encoders (tg.hcq's AMD device) and the decoders (the simulated Navi31's command processors) both read these
names, so the two sides cannot drift apart. The values are the hardware's: the Linux amdgpu driver's PM4 definitions
for gfx10+ (nvd.h), its SDMA 6.0 packet layouts and the gc_11_0_0 / nbio_4_3_0 register offsets. Only constants
live here; no encoder, no decoder.

Register numbers are dword addresses in the GC register space (the MMIO byte offset / 4, with the IP block's base
already added), the unit SET_SH_REG / SET_UCONFIG_REG and WAIT_REG_MEM use.
"""

from __future__ import annotations

import enum

# ---------------------------------------------------------------------------------------------------------------
# PM4 type-3 packet header: [31:30] type (3), [29:16] count (body dwords - 1), [15:8] opcode, [1] shader type
# (1 = compute; the MEC accepts either), [0] predicate.
# ---------------------------------------------------------------------------------------------------------------
PACKET_TYPE3 = 3
PACKET3_TYPE_SHIFT = 30
PACKET3_COUNT_SHIFT = 16
PACKET3_COUNT_MASK = 0x3FFF
PACKET3_OPCODE_SHIFT = 8
PACKET3_OPCODE_MASK = 0xFF
PACKET3_SHADER_TYPE_COMPUTE = 1 << 1


def packet3_header(opcode: int, count: int) -> int:
    """The header dword of a type-3 packet whose body is `count + 1` dwords (count is the body length - 1)."""
    return (
        (PACKET_TYPE3 << PACKET3_TYPE_SHIFT)
        | ((opcode & PACKET3_OPCODE_MASK) << PACKET3_OPCODE_SHIFT)
        | ((count & PACKET3_COUNT_MASK) << PACKET3_COUNT_SHIFT)
    )


def packet_type(header: int) -> int:
    return (header >> PACKET3_TYPE_SHIFT) & 3


def packet3_opcode(header: int) -> int:
    return (header >> PACKET3_OPCODE_SHIFT) & PACKET3_OPCODE_MASK


def packet3_count(header: int) -> int:
    """Body dwords - 1 (the packet is count + 2 dwords long, header included)."""
    return (header >> PACKET3_COUNT_SHIFT) & PACKET3_COUNT_MASK


class PM4(enum.IntEnum):
    """PM4 type-3 opcodes (IT_* / PACKET3_*)."""

    NOP = 0x10
    DISPATCH_DIRECT = 0x15
    WRITE_DATA = 0x37
    WAIT_REG_MEM = 0x3C
    INDIRECT_BUFFER = 0x3F
    EVENT_WRITE = 0x46
    RELEASE_MEM = 0x49
    ACQUIRE_MEM = 0x58
    SET_SH_REG = 0x76
    SET_UCONFIG_REG = 0x79


# Register ranges addressed by SET_SH_REG / SET_UCONFIG_REG: the packet's first body dword is `reg - START`.
SH_REG_START = 0x2C00
SH_REG_END = 0x3000
UCONFIG_REG_START = 0xC000
UCONFIG_REG_END = 0xC400

# ---------------------------------------------------------------------------------------------------------------
# INDIRECT_BUFFER (count 2): ib address lo (dword aligned), hi, control = size in dwords [19:0] | VALID [23] |
# vmid [27:24] (0 for a user queue; KFD supplies the VMID) | cache policy [29:28].
# ---------------------------------------------------------------------------------------------------------------
INDIRECT_BUFFER_SIZE_MASK = (1 << 20) - 1
INDIRECT_BUFFER_VALID = 1 << 23
INDIRECT_BUFFER_VMID_SHIFT = 24
INDIRECT_BUFFER_CACHE_POLICY_SHIFT = 28
INDIRECT_BUFFER_MAX_DWORDS = 1 << 20  # an IB must be shorter than this

# ---------------------------------------------------------------------------------------------------------------
# WAIT_REG_MEM (count 5): control, poll address lo (or register), address hi (or the register written first by
# write-then-wait), reference, mask, poll interval [15:0].
# control: function [2:0], mem space [4] (0 register, 1 memory), operation [7:6], engine [9:8].
# The condition is `(value & mask) FUNCTION reference`.
# ---------------------------------------------------------------------------------------------------------------
WAIT_REG_MEM_FUNCTION_SHIFT = 0
WAIT_REG_MEM_MEM_SPACE_SHIFT = 4
WAIT_REG_MEM_OPERATION_SHIFT = 6
WAIT_REG_MEM_ENGINE_SHIFT = 8
WAIT_REG_MEM_SPACE_REGISTER = 0
WAIT_REG_MEM_SPACE_MEMORY = 1
WAIT_REG_MEM_OPERATION_WAIT = 0
WAIT_REG_MEM_OPERATION_WRITE_WAIT = 1  # register space: write the reference to the dw2 register, then poll dw3's
WAIT_REG_MEM_POLL_INTERVAL_MASK = 0xFFFF


class CompareFunction(enum.IntEnum):
    """The compare of WAIT_REG_MEM.function and SDMA POLL_REGMEM.func (same encoding)."""

    ALWAYS = 0
    LT = 1
    LE = 2
    EQ = 3
    NE = 4
    GE = 5
    GT = 6


# ---------------------------------------------------------------------------------------------------------------
# RELEASE_MEM (count 6): dw1 event / cache actions, dw2 selects, address lo, address hi, data lo, data hi, int ctxid.
# dw1: event type [5:0], event index [11:8], GCR cache actions [22:12], cache policy [26:25], execute [28].
# dw2: dst_sel [17:16], int_sel [26:24], data_sel [31:29].
# ---------------------------------------------------------------------------------------------------------------
RELEASE_MEM_EVENT_TYPE_SHIFT = 0
RELEASE_MEM_EVENT_INDEX_SHIFT = 8
RELEASE_MEM_GCR_GLM_WB = 1 << 12
RELEASE_MEM_GCR_GLM_INV = 1 << 13
RELEASE_MEM_GCR_GLV_INV = 1 << 14
RELEASE_MEM_GCR_GL1_INV = 1 << 15
RELEASE_MEM_GCR_GL2_US = 1 << 16
RELEASE_MEM_GCR_GL2_RANGE = 1 << 17
RELEASE_MEM_GCR_GL2_DISCARD = 1 << 19
RELEASE_MEM_GCR_GL2_INV = 1 << 20
RELEASE_MEM_GCR_GL2_WB = 1 << 21
RELEASE_MEM_GCR_SEQ = 1 << 22
RELEASE_MEM_CACHE_POLICY_SHIFT = 25
RELEASE_MEM_EXECUTE = 1 << 28
RELEASE_MEM_DST_SEL_SHIFT = 16
RELEASE_MEM_INT_SEL_SHIFT = 24
RELEASE_MEM_DATA_SEL_SHIFT = 29


class ReleaseMemDataSel(enum.IntEnum):
    NONE = 0
    VALUE_32 = 1  # the low 32 bits of data
    VALUE_64 = 2
    GPU_CLOCK = 3  # the 64-bit GPU clock counter at end of pipe
    CP_PERFCOUNTER = 4
    GDS = 5


class ReleaseMemIntSel(enum.IntEnum):
    NONE = 0
    SEND_INTERRUPT_ONLY = 1
    SEND_INTERRUPT_AFTER_WRITE_CONFIRM = 2
    SEND_DATA_AFTER_WRITE_CONFIRM = 3


class ReleaseMemDstSel(enum.IntEnum):
    MEMORY_CONTROLLER = 0
    TC_L2 = 1


# ---------------------------------------------------------------------------------------------------------------
# ACQUIRE_MEM on gfx10+ (count 6): coher_cntl (0), coher size lo, size hi, coher base lo, base hi, poll interval,
# GCR_CNTL. GCR_CNTL fields (gfx11):
# ---------------------------------------------------------------------------------------------------------------
ACQUIRE_MEM_GCR_CNTL_GLI_INV_SHIFT = 0  # 2 bits
ACQUIRE_MEM_GCR_CNTL_GL1_RANGE_SHIFT = 2  # 2 bits
ACQUIRE_MEM_GCR_CNTL_GLM_WB = 1 << 4
ACQUIRE_MEM_GCR_CNTL_GLM_INV = 1 << 5
ACQUIRE_MEM_GCR_CNTL_GLK_WB = 1 << 6
ACQUIRE_MEM_GCR_CNTL_GLK_INV = 1 << 7
ACQUIRE_MEM_GCR_CNTL_GLV_INV = 1 << 8
ACQUIRE_MEM_GCR_CNTL_GL1_INV = 1 << 9
ACQUIRE_MEM_GCR_CNTL_GL2_US = 1 << 10
ACQUIRE_MEM_GCR_CNTL_GL2_RANGE_SHIFT = 11  # 2 bits
ACQUIRE_MEM_GCR_CNTL_GL2_DISCARD = 1 << 13
ACQUIRE_MEM_GCR_CNTL_GL2_INV = 1 << 14
ACQUIRE_MEM_GCR_CNTL_GL2_WB = 1 << 15
ACQUIRE_MEM_GCR_CNTL_SEQ_SHIFT = 16  # 2 bits
ACQUIRE_MEM_GCR_RANGE_IS_PA = 1 << 18

# ---------------------------------------------------------------------------------------------------------------
# EVENT_WRITE (count 0 for CS_PARTIAL_FLUSH): event type [5:0] | event index [11:8].
# ---------------------------------------------------------------------------------------------------------------
EVENT_TYPE_SHIFT = 0
EVENT_INDEX_SHIFT = 8


class EventType(enum.IntEnum):
    """VGT_EVENT_TYPE values the compute path uses."""

    CS_PARTIAL_FLUSH = 0x07
    CACHE_FLUSH_AND_INV_TS_EVENT = 0x14
    BOTTOM_OF_PIPE_TS = 0x28


EVENT_INDEX_PARTIAL_FLUSH = 4
EVENT_INDEX_END_OF_PIPE = 5  # RELEASE_MEM's event index for CACHE_FLUSH_AND_INV_TS_EVENT

# ---------------------------------------------------------------------------------------------------------------
# WRITE_DATA (count 2 + n): control, address lo, address hi, n data dwords.
# control: dst_sel [11:8], addr_incr [16] (1 = do not increment), wr_confirm [20], cache policy [26:25], engine [31:30]
# ---------------------------------------------------------------------------------------------------------------
WRITE_DATA_DST_SEL_SHIFT = 8
WRITE_DATA_DST_SEL_REGISTER = 0
WRITE_DATA_DST_SEL_TC_L2 = 2
WRITE_DATA_DST_SEL_MEMORY = 5
WRITE_DATA_NO_ADDR_INCREMENT = 1 << 16
WRITE_DATA_WR_CONFIRM = 1 << 20
WRITE_DATA_CACHE_POLICY_SHIFT = 25
WRITE_DATA_ENGINE_SEL_SHIFT = 30

# ---------------------------------------------------------------------------------------------------------------
# gc_11_0_0 compute (SH) registers, dword addresses (GC base 0x1260 + the header's offset).
# ---------------------------------------------------------------------------------------------------------------
GC_BASE_SEG0 = 0x1260
regCOMPUTE_DISPATCH_INITIATOR = 0x2E00
regCOMPUTE_DIM_X = 0x2E01
regCOMPUTE_DIM_Y = 0x2E02
regCOMPUTE_DIM_Z = 0x2E03
regCOMPUTE_START_X = 0x2E04
regCOMPUTE_START_Y = 0x2E05
regCOMPUTE_START_Z = 0x2E06
regCOMPUTE_NUM_THREAD_X = 0x2E07
regCOMPUTE_NUM_THREAD_Y = 0x2E08
regCOMPUTE_NUM_THREAD_Z = 0x2E09
regCOMPUTE_PIPELINESTAT_ENABLE = 0x2E0A
regCOMPUTE_PERFCOUNT_ENABLE = 0x2E0B
regCOMPUTE_PGM_LO = 0x2E0C
regCOMPUTE_PGM_HI = 0x2E0D
regCOMPUTE_DISPATCH_PKT_ADDR_LO = 0x2E0E
regCOMPUTE_DISPATCH_PKT_ADDR_HI = 0x2E0F
regCOMPUTE_DISPATCH_SCRATCH_BASE_LO = 0x2E10
regCOMPUTE_DISPATCH_SCRATCH_BASE_HI = 0x2E11
regCOMPUTE_PGM_RSRC1 = 0x2E12
regCOMPUTE_PGM_RSRC2 = 0x2E13
regCOMPUTE_VMID = 0x2E14
regCOMPUTE_RESOURCE_LIMITS = 0x2E15
regCOMPUTE_STATIC_THREAD_MGMT_SE0 = 0x2E16
regCOMPUTE_STATIC_THREAD_MGMT_SE1 = 0x2E17
regCOMPUTE_TMPRING_SIZE = 0x2E18
regCOMPUTE_STATIC_THREAD_MGMT_SE2 = 0x2E19
regCOMPUTE_STATIC_THREAD_MGMT_SE3 = 0x2E1A
regCOMPUTE_RESTART_X = 0x2E1B
regCOMPUTE_RESTART_Y = 0x2E1C
regCOMPUTE_RESTART_Z = 0x2E1D
regCOMPUTE_THREAD_TRACE_ENABLE = 0x2E1E
regCOMPUTE_PGM_RSRC3 = 0x2E28
regCOMPUTE_USER_DATA_0 = 0x2E40
COMPUTE_USER_DATA_COUNT = 16  # COMPUTE_USER_DATA_0..15

# COMPUTE_DISPATCH_INITIATOR fields
DISPATCH_INITIATOR_COMPUTE_SHADER_EN = 1 << 0
DISPATCH_INITIATOR_FORCE_START_AT_000 = 1 << 2
DISPATCH_INITIATOR_USE_THREAD_DIMENSIONS = 1 << 5
DISPATCH_INITIATOR_CS_W32_EN = 1 << 15

# COMPUTE_RESOURCE_LIMITS.WAVES_PER_SH [9:0]
RESOURCE_LIMITS_WAVES_PER_SH_MASK = 0x3FF

# COMPUTE_TMPRING_SIZE on gfx11: WAVES [11:0], WAVESIZE [24:12] in 256-byte units per wave
TMPRING_SIZE_WAVES_MASK = 0xFFF
TMPRING_SIZE_WAVESIZE_SHIFT = 12
TMPRING_SIZE_WAVESIZE_MASK = 0x1FFF
TMPRING_SIZE_WAVESIZE_UNIT = 256

# NBIO 4.3.0 (Navi31) HDP flush request/done registers (dword addresses), polled by the memory barrier.
regBIF_BX_PF0_GPU_HDP_FLUSH_REQ = 0x0106
regBIF_BX_PF0_GPU_HDP_FLUSH_DONE = 0x0107

# ---------------------------------------------------------------------------------------------------------------
# SDMA 6.0 packets. Header: op [7:0], sub_op [15:8]; the rest of the header is per packet.
# ---------------------------------------------------------------------------------------------------------------
SDMA_HEADER_OP_MASK = 0xFF
SDMA_HEADER_SUB_OP_SHIFT = 8
SDMA_HEADER_SUB_OP_MASK = 0xFF


class SDMA(enum.IntEnum):
    """SDMA opcodes."""

    NOP = 0
    COPY = 1
    WRITE = 2
    FENCE = 5
    TRAP = 6
    POLL_REGMEM = 8
    ATOMIC = 10
    CONST_FILL = 11
    TIMESTAMP = 13
    GCR_REQ = 17


SDMA_SUBOP_COPY_LINEAR = 0
SDMA_SUBOP_WRITE_LINEAR = 0
SDMA_SUBOP_TIMESTAMP_SET = 0
SDMA_SUBOP_TIMESTAMP_GET = 1
SDMA_SUBOP_TIMESTAMP_GET_GLOBAL = 2


def sdma_header(op: int, sub_op: int = 0) -> int:
    return (op & SDMA_HEADER_OP_MASK) | ((sub_op & SDMA_HEADER_SUB_OP_MASK) << SDMA_HEADER_SUB_OP_SHIFT)


# NOP: header count [29:16] = further dwords to skip.
SDMA_NOP_COUNT_SHIFT = 16
SDMA_NOP_COUNT_MASK = 0x3FFF

# COPY LINEAR (7 dwords): header (tmz [18]), count (bytes - 1, [29:0] on SDMA >= 5), parameter (swaps),
# src lo, src hi, dst lo, dst hi.
SDMA_COPY_LINEAR_DWORDS = 7
SDMA_COPY_COUNT_MASK = (1 << 30) - 1
SDMA_COPY_TMZ = 1 << 18
SDMA_MAX_COPY_SIZE = 0x40000000  # bytes per COPY_LINEAR on SDMA IP >= 5 (0x400000 before)
SDMA_MAX_COPY_SIZE_PRE5 = 0x400000

# WRITE LINEAR (4 + n dwords): header, dst lo, dst hi, count (dwords - 1, [19:0]), n data dwords.
SDMA_WRITE_COUNT_MASK = (1 << 20) - 1

# FENCE (4 dwords): header, addr lo, addr hi, data. Header: mtype [18:16], gcc [19], sys [20], snp [22], gpa [23],
# l2 policy [25:24], llc policy [26], cpv [28].
SDMA_FENCE_DWORDS = 4
SDMA_FENCE_MTYPE_SHIFT = 16
SDMA_FENCE_MTYPE_MASK = 0x7
SDMA_FENCE_MTYPE_UC = 3  # what the driver uses on gfx10+

# TRAP (2 dwords): header, int context [27:0].
SDMA_TRAP_DWORDS = 2
SDMA_TRAP_INT_CONTEXT_MASK = (1 << 28) - 1

# POLL_REGMEM (6 dwords): header, addr lo, addr hi, value, mask, dw5 = interval [15:0] | retry count [27:16].
# Header: hdp_flush [26], func [30:28] (CompareFunction), mem_poll [31] (1 = memory, 0 = register).
SDMA_POLL_REGMEM_DWORDS = 6
SDMA_POLL_REGMEM_HDP_FLUSH = 1 << 26
SDMA_POLL_REGMEM_FUNC_SHIFT = 28
SDMA_POLL_REGMEM_FUNC_MASK = 0x7
SDMA_POLL_REGMEM_MEM_POLL = 1 << 31
SDMA_POLL_REGMEM_INTERVAL_MASK = 0xFFFF
SDMA_POLL_REGMEM_RETRY_COUNT_SHIFT = 16
SDMA_POLL_REGMEM_RETRY_COUNT_MASK = 0xFFF

# TIMESTAMP GET_GLOBAL (3 dwords): header, addr lo, addr hi: writes the 64-bit global GPU clock at addr.
SDMA_TIMESTAMP_DWORDS = 3

# The GPU clock both engines read: 100 ticks per microsecond (AMDDevice.timestamp_divider).
GPU_CLOCK_TICKS_PER_US = 100
