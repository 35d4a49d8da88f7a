"""The register map of the simulated Navi31's PCI side, and the formats its BARs carry: one table that both the
simulator (tg.drivers.amd.sim_am) and the userspace driver (tg.drivers.amd.am_driver) read, so they cannot drift.

The names follow the AMD register names where one exists (SCRATCH_REG*, GCVM_*, IH_RB_*, CP_HQD_*, SDMA0_QUEUE0_*,
MP0/MP1 C2PMSG mailboxes); the numbers are this project's (spec hcq §3.4 "the project owns the numeric map of the
sim"), except the HDP flush pair, which the PM4/SDMA memory barrier names by the hardware's number (packets.py).
Offsets are dword addresses: BAR5 byte offset = 4 * address, the unit WAIT_REG_MEM and SET_*_REG use.

Formats (all little-endian):
- page-table entries (`PTE_*`): four levels of 512 u64 entries, 4 KiB pages, 48-bit virtual addresses; a PDB0 entry
  with `PDE_IS_PTE` maps a 2 MiB page;
- the IP discovery table at `vram_size - DISCOVERY_RESERVED` (`DISCOVERY_*`), with the GC info the driver turns into
  the device's properties;
- firmware blobs (`FIRMWARE_*`): a header naming the component, the payload's size and its sha256, then the payload;
- interrupt-handler ring entries (`IH_ENTRY_*`): 8 dwords each.
"""

from __future__ import annotations

import enum
import hashlib
import struct

from tg.drivers.amd import packets as pk

# fmt: off
REGISTERS: dict[str, int] = {
    # NBIO: HDP flush (the hardware's numbers: PM4/SDMA barriers poll these), SR-IOV identity
    "BIF_BX_PF0_GPU_HDP_FLUSH_REQ": pk.regBIF_BX_PF0_GPU_HDP_FLUSH_REQ,
    "BIF_BX_PF0_GPU_HDP_FLUSH_DONE": pk.regBIF_BX_PF0_GPU_HDP_FLUSH_DONE,
    "RCC_IOV_FUNC_IDENTIFIER": 0x0D00,
    # GC: status, soft reset, scratch registers (boot-state flags that survive driver instances, not resets)
    "GRBM_STATUS": 0x2004,
    "GRBM_SOFT_RESET": 0x2008,
    "GRBM_GFX_CNTL": 0x200C,  # selects the compute queue the CP_HQD_* registers address
    **{f"SCRATCH_REG{i}": 0x2040 + i for i in range(8)},
    # GMC: VM context 0 and its TLB invalidation engine, the protection-fault latch
    "GCVM_CONTEXT0_CNTL": 0x2100,
    "GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32": 0x2101,
    "GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32": 0x2102,
    "GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32": 0x2103,
    "GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32": 0x2104,
    "GCVM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32": 0x2105,
    "GCVM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32": 0x2106,
    "GCVM_INVALIDATE_ENG0_REQ": 0x2110,
    "GCVM_INVALIDATE_ENG0_ACK": 0x2111,
    "GCVM_L2_PROTECTION_FAULT_STATUS": 0x2120,
    "GCVM_L2_PROTECTION_FAULT_ADDR_LO32": 0x2121,
    "GCVM_L2_PROTECTION_FAULT_ADDR_HI32": 0x2122,
    # OSSSYS: the interrupt-handler ring (in VRAM, physical addresses)
    "IH_RB_CNTL": 0x2200,
    "IH_RB_BASE": 0x2201,
    "IH_RB_BASE_HI": 0x2202,
    "IH_RB_RPTR": 0x2203,
    "IH_RB_WPTR": 0x2204,
    # MEC: halt, and the hardware queue descriptor of the queue GRBM_GFX_CNTL selects
    "CP_MEC_CNTL": 0x2300,
    "CP_HQD_ACTIVE": 0x2310,
    "CP_HQD_PQ_BASE": 0x2311,
    "CP_HQD_PQ_BASE_HI": 0x2312,
    "CP_HQD_PQ_CONTROL": 0x2313,
    "CP_HQD_PQ_RPTR_REPORT_ADDR": 0x2314,
    "CP_HQD_PQ_RPTR_REPORT_ADDR_HI": 0x2315,
    "CP_HQD_PQ_WPTR_POLL_ADDR": 0x2316,
    "CP_HQD_PQ_WPTR_POLL_ADDR_HI": 0x2317,
    "CP_HQD_PQ_DOORBELL_CONTROL": 0x2318,
    "CP_HQD_DEQUEUE_REQUEST": 0x2319,
    # SDMA0: queue n's registers are queue 0's plus n * SDMA_QUEUE_STRIDE
    "SDMA0_QUEUE0_RB_CNTL": 0x2400,
    "SDMA0_QUEUE0_RB_BASE": 0x2401,
    "SDMA0_QUEUE0_RB_BASE_HI": 0x2402,
    "SDMA0_QUEUE0_RB_RPTR_ADDR_LO": 0x2403,
    "SDMA0_QUEUE0_RB_RPTR_ADDR_HI": 0x2404,
    "SDMA0_QUEUE0_RB_WPTR_POLL_ADDR_LO": 0x2405,
    "SDMA0_QUEUE0_RB_WPTR_POLL_ADDR_HI": 0x2406,
    "SDMA0_QUEUE0_DOORBELL": 0x2407,
    "SDMA0_QUEUE0_DOORBELL_OFFSET": 0x2408,
    # MP0 (PSP) bootloader/SOS mailbox, MP1 (SMU) message mailbox
    "MP0_SMN_C2PMSG_35": 0x2500,  # command (driver) / READY | status (PSP)
    "MP0_SMN_C2PMSG_36": 0x2501,  # firmware address in VRAM, low
    "MP0_SMN_C2PMSG_37": 0x2502,  # firmware address in VRAM, high
    "MP0_SMN_C2PMSG_38": 0x2503,  # firmware size in bytes
    "MP0_SMN_C2PMSG_81": 0x2504,  # SOS version: non-zero once SOS runs
    "MP1_SMN_C2PMSG_66": 0x2600,  # message
    "MP1_SMN_C2PMSG_82": 0x2601,  # argument / answer
    "MP1_SMN_C2PMSG_90": 0x2602,  # response: 0 while busy, SMU_RESPONSE_OK when done
}
# fmt: on

BAR5_SIZE = 0x100000
VRAM_BAR, DOORBELL_BAR, MMIO_BAR = 0, 2, 5
DOORBELL_BAR_SIZE = 0x2000  # 1024 u64 doorbells
SDMA_QUEUE_STRIDE = 0x20
SDMA_QUEUES = 2
COMPUTE_QUEUES = 8


class RegisterMap:
    """`REG.SCRATCH_REG7` -> its dword address; `REG.name_of(address)` for traces."""

    def __init__(self, table: dict[str, int]) -> None:
        self._table = dict(table)
        self._names = {address: name for name, address in table.items()}

    def __getattr__(self, name: str) -> int:
        try:
            return self._table[name]
        except KeyError:
            raise AttributeError(f"no register {name} in the map") from None

    def name_of(self, address: int) -> str:
        return self._names.get(address, f"0x{address:X}")

    def sdma(self, name: str, queue: int) -> int:
        """SDMA0 queue `queue`'s register `name` (e.g. "RB_CNTL")."""
        return self._table[f"SDMA0_QUEUE0_{name}"] + queue * SDMA_QUEUE_STRIDE


REG = RegisterMap(REGISTERS)

# --- register fields ---------------------------------------------------------------------------------------------
GRBM_STATUS_GUI_ACTIVE = 1 << 31  # an engine is executing (not blocked in a wait)
GRBM_SOFT_RESET_CP = 1 << 0  # every compute queue stops and forgets its descriptor
GRBM_SOFT_RESET_SDMA0 = 1 << 1
CP_MEC_CNTL_MEC_HALT = 1 << 30
VM_CONTEXT_ENABLE = 1 << 0
VM_CONTEXT_PAGE_TABLE_DEPTH_SHIFT = 1  # depth 3: PDB2 -> PDB1 -> PDB0 -> PTE, the only depth the sim walks
VM_CONTEXT_DEPTH = 3
IH_RB_ENABLE = 1 << 0
IH_RB_SIZE_SHIFT = 1  # log2 of the ring size in dwords
CP_HQD_PQ_CONTROL_QUEUE_SIZE_MASK = 0x3F  # log2(ring size in dwords) - 1, as the hardware field
DOORBELL_OFFSET_SHIFT, DOORBELL_OFFSET_MASK = 2, 0x3FFFFFF  # in dwords (a 64-bit doorbell is two)
CP_HQD_DOORBELL_EN = 1 << 30
SDMA_RB_ENABLE = 1 << 0
SDMA_RB_SIZE_SHIFT = 1  # log2 of the ring size in dwords
SDMA_DOORBELL_ENABLE = 1 << 28
SCRATCH_BOOT_VERSION = 0x7467_0001  # SCRATCH_REG7 after a full boot by this driver ("tg", version 1)
SESSION_RUNNING, SESSION_FINALIZED = 0x52554E00, 0x46494E00  # SCRATCH_REG6; anything else: a crashed session
SMU_RESPONSE_OK = 1


class PSPCommand(enum.IntEnum):
    LOAD_SOS = 0x1  # the bootloader starts the secure OS from the blob at C2PMSG_36/37
    LOAD_FIRMWARE = 0x2  # SOS loads a component (IRAM/DRAM of the engine the blob names)


PSP_READY = 1 << 31


class PSPStatus(enum.IntEnum):
    OK = 0
    BAD_HEADER = 1
    SIGNATURE_MISMATCH = 2  # the payload's sha256 differs from the header's
    SOS_NOT_RUNNING = 3
    BAD_ADDRESS = 4


class SMUMessage(enum.IntEnum):
    MODE1_RESET = 0x2F
    SET_SOFT_MAX_GFXCLK = 0x12  # argument: MHz
    TEST_MESSAGE = 0x1


# --- firmware blobs -----------------------------------------------------------------------------------------------
class Firmware(enum.IntEnum):
    """Components, in the order the PSP must get them (SOS first)."""

    SOS = 1
    SMU = 2
    RLC = 3
    MEC = 4
    SDMA = 5


FIRMWARE_FILES = {
    Firmware.SOS: "psp_13_0_0_sos.bin",
    Firmware.SMU: "smu_13_0_0.bin",
    Firmware.RLC: "gc_11_0_0_rlc.bin",
    Firmware.MEC: "gc_11_0_0_mec.bin",
    Firmware.SDMA: "sdma_6_0_0.bin",
}
FIRMWARE_MAGIC = b"TGFW"
FIRMWARE_HEADER = struct.Struct("<4sII32s")  # magic, component, payload size, sha256(payload)


def pack_firmware(component: Firmware, payload: bytes) -> bytes:
    """A firmware blob as the vendor ships it: header (with the payload's sha256) then the payload."""
    return FIRMWARE_HEADER.pack(FIRMWARE_MAGIC, component, len(payload), hashlib.sha256(payload).digest()) + payload


def parse_firmware_header(blob: bytes) -> tuple[Firmware, int, bytes] | None:
    """(component, payload size, sha256) of a blob, or None when the header is not one."""
    if len(blob) < FIRMWARE_HEADER.size:
        return None
    magic, component, size, digest = FIRMWARE_HEADER.unpack_from(blob)
    if magic != FIRMWARE_MAGIC or component not in Firmware._value2member_map_:
        return None
    return Firmware(component), size, digest


# --- IP discovery -------------------------------------------------------------------------------------------------
DISCOVERY_RESERVED = 0x10000  # the table sits this far below the end of VRAM; the driver allocates none of it
DISCOVERY_MAGIC = b"TGIP"
DISCOVERY_HEADER = struct.Struct("<4sHH")  # magic, version, IP count
DISCOVERY_IP = struct.Struct("<4sBBBx")  # IP name, major, minor, revision
DISCOVERY_GC_INFO = struct.Struct("<8H")  # the GC block's geometry, names in GC_INFO_FIELDS
GC_INFO_FIELDS = (
    "num_se",
    "num_sa_per_se",
    "num_cu_per_sa",
    "num_simd_per_cu",
    "lds_size_in_kb",
    "max_waves_per_simd",
    "wave_size",
    "num_sdma_queues",
)

# --- interrupt-handler ring entries -------------------------------------------------------------------------------
IH_ENTRY = struct.Struct("<8I")  # source id, client id, queue doorbell index, context id, address lo/hi, status, 0
IH_ENTRY_DWORDS = IH_ENTRY.size // 4


class IHSource(enum.IntEnum):
    CP_EOP = 181  # RELEASE_MEM with an interrupt
    CP_BAD_OPCODE = 183  # a packet or an instruction the engine rejects: the queue stopped
    SDMA_TRAP = 224
    VM_FAULT = 146  # a translation fault: the address is in the entry


# --- page-table entries -------------------------------------------------------------------------------------------
PTE_VALID = 1 << 0
PTE_SYSTEM = 1 << 1  # the address is a bus address (system memory through the IOMMU), not VRAM
PTE_SNOOPED = 1 << 2
PTE_EXECUTABLE = 1 << 4
PTE_READABLE = 1 << 5
PTE_WRITEABLE = 1 << 6
PTE_FRAGMENT_SHIFT = 7
PTE_ADDRESS_MASK = ((1 << 48) - 1) & ~0xFFF
PDE_IS_PTE = 1 << 54  # in a PDB0 entry: maps a 2 MiB page directly
PAGE_SIZE = 0x1000
HUGE_PAGE_SIZE = 0x200000
LEVEL_BITS = 9
VA_BITS = 48
