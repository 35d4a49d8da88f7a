"""PM4 encoders for the AMD compute queue (gfx10+, written for gfx11 / Navi31): pure functions returning dwords.

Each function returns the packet(s) as a list of 32-bit words; the queue concatenates them into an indirect buffer
(IB) and the ring carries only an INDIRECT_BUFFER packet pointing at it (`indirect_buffer`). The opcode, register
and field constants are tg.drivers.amd.packets', which the simulated command processor decodes with, so the two sides
cannot drift apart.

    pkt3(op, *body)                    header PACKET3(op, len(body) - 1), then the body
    wreg(reg, *values)                 SET_SH_REG or SET_UCONFIG_REG by the register's range
    wait_reg_mem(value, mem=addr)      halt until (mem & mask) >= value (or another compare)
    acquire_mem(...) / release_mem(...) cache invalidation before / end-of-pipe write (+ interrupt) after
    memory_barrier()                   HDP flush (host writes reach memory) + full cache invalidate
    program(...)                       the register writes and DISPATCH_DIRECT of one kernel launch
"""

from __future__ import annotations

from dataclasses import dataclass

from tg.drivers.amd import packets as p

U32 = 0xFFFFFFFF
POLL_INTERVAL = 4  # WAIT_REG_MEM re-check interval (clocks x 16 on hardware)
ACQUIRE_MEM_POLL_INTERVAL = 0x0A
ALL_MEMORY = (1 << 64) - 1  # ACQUIRE_MEM range that covers everything
SH_RANGE = f"{p.SH_REG_START:#x}-{p.SH_REG_END - 1:#x}"
UCONFIG_RANGE = f"{p.UCONFIG_REG_START:#x}-{p.UCONFIG_REG_END - 1:#x}"


def lo32(value: int) -> int:
    return value & U32


def hi32(value: int) -> int:
    return (value >> 32) & U32


def pkt3(op: int, *body: int) -> list[int]:
    """A type-3 packet: header PACKET3(op, count = body dwords - 1) followed by the body."""
    if not body:
        raise ValueError(f"a PM4 type-3 packet needs at least one body dword (opcode {op:#x})")
    return [p.packet3_header(op, len(body) - 1), *(v & U32 for v in body)]


def register_name(reg: int) -> str:
    """The name tg.drivers.amd.packets gives register `reg`, with its number ("COMPUTE_PGM_LO (0x2e0c)")."""
    for name, value in vars(p).items():
        if name.startswith("reg") and value == reg:
            return f"{name[3:]} ({reg:#x})"
    return f"register {reg:#x}"


def wreg(reg: int, *values: int) -> list[int]:
    """Write `values` to consecutive registers from `reg`: SET_SH_REG in the SH range, SET_UCONFIG_REG in the UCONFIG
    range; any other register cannot be written by the compute queue."""
    if not values:
        raise ValueError(f"wreg of {register_name(reg)} needs at least one value")
    if p.SH_REG_START <= reg and reg + len(values) <= p.SH_REG_END:
        return pkt3(p.PM4.SET_SH_REG, reg - p.SH_REG_START, *values)
    if p.UCONFIG_REG_START <= reg and reg + len(values) <= p.UCONFIG_REG_END:
        return pkt3(p.PM4.SET_UCONFIG_REG, reg - p.UCONFIG_REG_START, *values)
    raise RuntimeError(
        f"Cannot set {register_name(reg)} via pm4 packet: only SH registers {SH_RANGE} and UCONFIG registers "
        f"{UCONFIG_RANGE} can be written"
    )


def wait_reg_mem(
    value: int,
    mask: int = U32,
    mem: int | None = None,
    reg: int | None = None,
    reg_done: int = 0,
    op: p.CompareFunction = p.CompareFunction.GE,
) -> list[int]:
    """Halt the queue until `(word & mask) op value`, where the word is the u32 at address `mem` or register `reg`.
    With `reg_done` (register form) the CP first writes `value` to `reg` and then polls `reg_done` (an HDP flush:
    write the request register, wait for the done register)."""
    if (mem is None) == (reg is None):
        raise ValueError("wait_reg_mem needs exactly one of mem (an address) or reg (a register)")
    if mem is not None:
        control = (op << p.WAIT_REG_MEM_FUNCTION_SHIFT) | (
            p.WAIT_REG_MEM_SPACE_MEMORY << p.WAIT_REG_MEM_MEM_SPACE_SHIFT
        )
        control |= p.WAIT_REG_MEM_OPERATION_WAIT << p.WAIT_REG_MEM_OPERATION_SHIFT
        return pkt3(p.PM4.WAIT_REG_MEM, control, lo32(mem), hi32(mem), value, mask, POLL_INTERVAL)
    operation = p.WAIT_REG_MEM_OPERATION_WRITE_WAIT if reg_done else p.WAIT_REG_MEM_OPERATION_WAIT
    control = (op << p.WAIT_REG_MEM_FUNCTION_SHIFT) | (p.WAIT_REG_MEM_SPACE_REGISTER << p.WAIT_REG_MEM_MEM_SPACE_SHIFT)
    control |= operation << p.WAIT_REG_MEM_OPERATION_SHIFT
    assert reg is not None
    return pkt3(p.PM4.WAIT_REG_MEM, control, reg, reg_done, value, mask, POLL_INTERVAL)


def acquire_mem_gcr(gli: int = 1, glm: int = 1, glk: int = 1, glv: int = 1, gl1: int = 1, gl2: int = 1) -> int:
    """The gfx10+ GCR_CNTL word of ACQUIRE_MEM: which caches to invalidate (and write back) before what follows.
    gli: instruction cache, glm: metadata, glk: scalar cache, glv: vector L0, gl1, gl2."""
    gcr = (gli & 3) << p.ACQUIRE_MEM_GCR_CNTL_GLI_INV_SHIFT
    if glm:
        gcr |= p.ACQUIRE_MEM_GCR_CNTL_GLM_INV | p.ACQUIRE_MEM_GCR_CNTL_GLM_WB
    if glk:
        gcr |= p.ACQUIRE_MEM_GCR_CNTL_GLK_INV | p.ACQUIRE_MEM_GCR_CNTL_GLK_WB
    if glv:
        gcr |= p.ACQUIRE_MEM_GCR_CNTL_GLV_INV
    if gl1:
        gcr |= p.ACQUIRE_MEM_GCR_CNTL_GL1_INV
    if gl2:
        gcr |= p.ACQUIRE_MEM_GCR_CNTL_GL2_INV | p.ACQUIRE_MEM_GCR_CNTL_GL2_WB
    return gcr


def acquire_mem(
    addr: int = 0, size: int = ALL_MEMORY, gli: int = 1, glm: int = 1, glk: int = 1, glv: int = 1, gl1: int = 1,
    gl2: int = 1,
) -> list[int]:  # fmt: skip
    """ACQUIRE_MEM (gfx10+): invalidate the chosen caches over [addr, addr + size) before the following commands."""
    gcr = acquire_mem_gcr(gli, glm, glk, glv, gl1, gl2)
    return pkt3(p.PM4.ACQUIRE_MEM, 0, lo32(size), hi32(size), lo32(addr), hi32(addr), ACQUIRE_MEM_POLL_INTERVAL, gcr)


RELEASE_MEM_CACHE_FLUSH = (
    p.RELEASE_MEM_GCR_SEQ | p.RELEASE_MEM_GCR_GL2_WB | p.RELEASE_MEM_GCR_GL2_INV | p.RELEASE_MEM_GCR_GLM_WB
    | p.RELEASE_MEM_GCR_GLM_INV | p.RELEASE_MEM_GCR_GLV_INV | p.RELEASE_MEM_GCR_GL1_INV
)  # fmt: skip


def release_mem(
    address: int,
    value: int,
    data_sel: p.ReleaseMemDataSel,
    int_sel: p.ReleaseMemIntSel,
    ctxid: int = 0,
    cache_flush: bool = False,
) -> list[int]:
    """RELEASE_MEM: at end of pipe (every earlier dispatch finished), optionally write back and invalidate the caches,
    write `value` (or the GPU clock, by data_sel) at `address`, and optionally raise an interrupt (int_sel)."""
    event = (p.EventType.CACHE_FLUSH_AND_INV_TS_EVENT << p.RELEASE_MEM_EVENT_TYPE_SHIFT) | (
        p.EVENT_INDEX_END_OF_PIPE << p.RELEASE_MEM_EVENT_INDEX_SHIFT
    )
    if cache_flush:
        event |= RELEASE_MEM_CACHE_FLUSH
    selects = (data_sel << p.RELEASE_MEM_DATA_SEL_SHIFT) | (int_sel << p.RELEASE_MEM_INT_SEL_SHIFT)
    selects |= p.ReleaseMemDstSel.MEMORY_CONTROLLER << p.RELEASE_MEM_DST_SEL_SHIFT
    return pkt3(p.PM4.RELEASE_MEM, event, selects, lo32(address), hi32(address), lo32(value), hi32(value), ctxid)


def signal(address: int, value: int) -> list[int]:
    """Set a signal: the low 32 bits of `value` at `address` once everything before finished, caches written back,
    then an interrupt (which wakes a host waiting in the driver)."""
    return release_mem(
        address, value, p.ReleaseMemDataSel.VALUE_32, p.ReleaseMemIntSel.SEND_INTERRUPT_AFTER_WRITE_CONFIRM,
        cache_flush=True,
    )  # fmt: skip


def timestamp(address: int) -> list[int]:
    """The 64-bit GPU clock (100 ticks/us) at `address` once everything before finished."""
    return release_mem(address, 0, p.ReleaseMemDataSel.GPU_CLOCK, p.ReleaseMemIntSel.NONE)


def wait(address: int, value: int) -> list[int]:
    """Halt until the u32 signal value at `address` is >= value."""
    return wait_reg_mem(value, mem=address, op=p.CompareFunction.GE)


def memory_barrier() -> list[int]:
    """Make host writes visible to what follows: an HDP flush (write the NBIO flush request register, wait for the done
    register to match) and an invalidate of every cache."""
    hdp = wait_reg_mem(
        U32, reg=p.regBIF_BX_PF0_GPU_HDP_FLUSH_REQ, reg_done=p.regBIF_BX_PF0_GPU_HDP_FLUSH_DONE, op=p.CompareFunction.EQ
    )
    return hdp + acquire_mem()


def write_data(address: int, *words: int) -> list[int]:
    """WRITE_DATA: store `words` at `address` (memory, write-confirmed) when the CP reaches the packet."""
    control = (p.WRITE_DATA_DST_SEL_MEMORY << p.WRITE_DATA_DST_SEL_SHIFT) | p.WRITE_DATA_WR_CONFIRM
    return pkt3(p.PM4.WRITE_DATA, control, lo32(address), hi32(address), *words)


def event_write(event: p.EventType, index: int) -> list[int]:
    return pkt3(p.PM4.EVENT_WRITE, (event << p.EVENT_TYPE_SHIFT) | (index << p.EVENT_INDEX_SHIFT))


def indirect_buffer(address: int, size_dwords: int) -> list[int]:
    """The ring packet that runs `size_dwords` dwords of PM4 at `address` (dword aligned, fewer than 2**20 dwords)."""
    if not 0 < size_dwords < p.INDIRECT_BUFFER_MAX_DWORDS:
        raise ValueError(f"an indirect buffer holds 1 to {p.INDIRECT_BUFFER_MAX_DWORDS - 1} dwords, got {size_dwords}")
    if address % 4:
        raise ValueError(f"an indirect buffer must be dword aligned, got {address:#x}")
    return pkt3(p.PM4.INDIRECT_BUFFER, lo32(address), hi32(address), size_dwords | p.INDIRECT_BUFFER_VALID)


@dataclass(frozen=True)
class Dispatch:
    """What one kernel launch programs: the code address, the PGM_RSRC registers from the kernel descriptor, the user
    SGPRs (COMPUTE_USER_DATA_*), scratch, and the grid (workgroups) and workgroup size (threads)."""

    program_address: int
    rsrc1: int
    rsrc2: int
    rsrc3: int
    user_data: tuple[int, ...]
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int]
    wave32: bool = True
    tmpring_size: int = 0
    scratch_base: int = 0


def dispatch_initiator(wave32: bool) -> int:
    initiator = p.DISPATCH_INITIATOR_FORCE_START_AT_000 | p.DISPATCH_INITIATOR_COMPUTE_SHADER_EN
    return initiator | (p.DISPATCH_INITIATOR_CS_W32_EN if wave32 else 0)


def program(d: Dispatch) -> list[int]:
    """The launch of one kernel, in the order the hardware driver programs it: invalidate the caches the kernel reads
    through (not the instruction cache or L2), the code address, PGM_RSRC1/2/3, scratch, RESTART, the user SGPRs,
    resource limits, START/NUM_THREAD, DISPATCH_DIRECT and a CS partial flush (the next packet waits for the
    dispatch)."""
    if len(d.user_data) > p.COMPUTE_USER_DATA_COUNT:
        raise ValueError(f"{len(d.user_data)} user SGPRs, the hardware has {p.COMPUTE_USER_DATA_COUNT}")
    if d.program_address & 0xFF:
        raise ValueError(f"kernel code must be 256-byte aligned, got {d.program_address:#x}")
    words = acquire_mem(gli=0, gl2=0)
    words += wreg(p.regCOMPUTE_PGM_LO, lo32(d.program_address >> 8), lo32(d.program_address >> 40))
    words += wreg(p.regCOMPUTE_PGM_RSRC1, d.rsrc1, d.rsrc2)
    words += wreg(p.regCOMPUTE_PGM_RSRC3, d.rsrc3)
    words += wreg(p.regCOMPUTE_TMPRING_SIZE, d.tmpring_size)
    if d.scratch_base:
        words += wreg(p.regCOMPUTE_DISPATCH_SCRATCH_BASE_LO, lo32(d.scratch_base >> 8), lo32(d.scratch_base >> 40))
    words += wreg(p.regCOMPUTE_RESTART_X, 0, 0, 0)
    if d.user_data:
        words += wreg(p.regCOMPUTE_USER_DATA_0, *d.user_data)
    words += wreg(p.regCOMPUTE_RESOURCE_LIMITS, 0)
    words += wreg(p.regCOMPUTE_START_X, 0, 0, 0, *d.local_size)
    words += pkt3(p.PM4.DISPATCH_DIRECT, *d.global_size, dispatch_initiator(d.wave32))
    words += event_write(p.EventType.CS_PARTIAL_FLUSH, p.EVENT_INDEX_PARTIAL_FLUSH)
    return words
