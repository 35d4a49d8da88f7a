"""`AMDev`: the userspace driver of an AMD GPU on the PCI bus (spec hcq §1.15), for the register map of
tg.drivers.amd.am_regs (the simulated Navi31's; see tg.drivers.amd.sim_pci).

It runs the chip itself, through the PCIDevice surface only: BAR0 (VRAM), BAR2 (doorbells), BAR5 (registers),
config space and system memory from alloc_sysmem. Boot:

1. discovery: the IP table at the top of VRAM gives the IP versions and the GC geometry (the device properties);
2. full or partial boot: SCRATCH_REG7 says whether this driver booted the chip, SCRATCH_REG6 whether the previous
   session finalized cleanly. Partial boot (firmware still running) when both hold and AM_RESET is not set;
   otherwise a full boot: if the PSP's SOS runs, bus mastering off, SMU mode-1 reset, bus mastering on; then every
   firmware blob, checked against its sha256 and loaded through the PSP mailbox;
3. GMC: a fresh page table in VRAM for VM context 0 (`AMMemoryManager`), IH ring; compute (MEC) and SDMA queues are
   set up on demand by `setup_compute_ring` / `setup_sdma_ring`.

`fini()` stops the queues and marks the session finalized; `recover(force)` halts the MEC and soft-resets SDMA after
a fault, after which the caller sets its queues up again.
"""

from __future__ import annotations

import hashlib
import os
import select
import sys
import time
from pathlib import Path

from tg.drivers.amd import am_regs as am
from tg.drivers.pci import PCI_COMMAND, PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY, PCIDevice

REG = am.REG
POLL_TIMEOUT_S = 2.0
BOOT_RESERVED = 0x100000  # the first MiB of VRAM: nothing allocated there (firmware staging lives above it)
VA_START, VA_END = 0x1_0000_0000, 0x7FFF_0000_0000  # the default VA window (a driver without CPU mappings)
VM_START, VM_END = 0x1000, 0x8000_0000_0000
IH_RING_SIZE = 0x10000
FIRMWARE_STAGING = 0  # blobs are copied to VRAM here (inside the boot area) for the PSP to read


class AMError(RuntimeError):
    """The userspace driver cannot bring the device up (firmware missing or rejected, a register that never
    answers)."""


class RangeAllocator:
    """First-fit allocator over [start, end), for VRAM physical pages and for GPU virtual addresses."""

    def __init__(self, start: int, end: int, what: str) -> None:
        self.free: list[tuple[int, int]] = [(start, end - start)]
        self.what = what

    def alloc(self, size: int, alignment: int = am.PAGE_SIZE) -> int:
        for index, (start, length) in enumerate(self.free):
            aligned = (start + alignment - 1) // alignment * alignment
            if aligned + size <= start + length:
                pieces = [(start, aligned - start), (aligned + size, start + length - aligned - size)]
                self.free[index : index + 1] = [p for p in pieces if p[1]]
                return aligned
        raise MemoryError(f"out of {self.what}: no free range of {size:#x} bytes")

    def release(self, start: int, size: int) -> None:
        self.free.append((start, size))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for begin, length in self.free:
            if merged and merged[-1][0] + merged[-1][1] == begin:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((begin, length))
        self.free = merged


class AMMemoryManager:
    """VRAM pages (`palloc`/`pfree`), GPU virtual addresses (`alloc_vaddr`) and the four-level page table of VM
    context 0, written into VRAM through BAR0 (`map_range`/`unmap_range`, each followed by a TLB invalidation)."""

    def __init__(self, dev: AMDev, va_window: tuple[int, int]) -> None:
        self.dev = dev
        self.vram = dev.vram
        self.pa = RangeAllocator(BOOT_RESERVED, dev.vram_size - am.DISCOVERY_RESERVED, "VRAM")
        self.va_window = va_window
        self.va = RangeAllocator(*va_window, "GPU virtual addresses")
        self.root = self.palloc(am.PAGE_SIZE, zero=True)

    def palloc(self, size: int, zero: bool = False, alignment: int = am.PAGE_SIZE) -> int:
        paddr = self.pa.alloc(size, alignment)
        if zero:
            self.vram.write(paddr, bytes(size))
        return paddr

    def pfree(self, paddr: int, size: int) -> None:
        self.pa.release(paddr, size)

    def alloc_vaddr(self, size: int) -> int:
        return self.va.alloc(size, am.HUGE_PAGE_SIZE if size >= am.HUGE_PAGE_SIZE else am.PAGE_SIZE)

    def map_range(self, vaddr: int, paddrs: list[int], system: bool) -> None:
        """Map one 4 KiB page at `vaddr + 4K * i` to `paddrs[i]` (bus addresses when `system`); 2 MiB runs of
        contiguous VRAM get one huge-page PDE."""
        flags = am.PTE_VALID | am.PTE_READABLE | am.PTE_WRITEABLE | am.PTE_EXECUTABLE
        if system:
            flags |= am.PTE_SYSTEM | am.PTE_SNOOPED
        pages_per_huge = am.HUGE_PAGE_SIZE // am.PAGE_SIZE
        index = 0
        while index < len(paddrs):
            va, pa = vaddr + index * am.PAGE_SIZE, paddrs[index]
            run = paddrs[index : index + pages_per_huge]
            huge = (
                not system
                and va % am.HUGE_PAGE_SIZE == 0
                and pa % am.HUGE_PAGE_SIZE == 0
                and len(run) == pages_per_huge
                and run[-1] == pa + am.HUGE_PAGE_SIZE - am.PAGE_SIZE
            )
            if huge:
                self._set_entry(va, 1, pa | flags | am.PDE_IS_PTE)
                index += pages_per_huge
            else:
                self._set_entry(va, 0, pa | flags)
                index += 1
        self.dev.invalidate_tlb()

    def unmap_range(self, vaddr: int, size: int) -> None:
        va = vaddr
        while va < vaddr + size:
            entry_address = self._entry_address(va, 1)
            if entry_address is not None and self._read(entry_address) & am.PDE_IS_PTE:
                self.vram.write(entry_address, bytes(8))
                va += am.HUGE_PAGE_SIZE
                continue
            entry_address = self._entry_address(va, 0)
            if entry_address is not None:
                self.vram.write(entry_address, bytes(8))
            va += am.PAGE_SIZE
        self.dev.invalidate_tlb()

    def _index(self, va: int, level: int) -> int:
        return (va >> (12 + am.LEVEL_BITS * level)) & ((1 << am.LEVEL_BITS) - 1)

    def _entry_address(self, va: int, level: int, create: bool = False) -> int | None:
        """VRAM address of the entry for `va` at `level` (0: PTE, 1: PDB0, ...), creating tables when asked."""
        table = self.root
        for upper in range(am.VM_CONTEXT_DEPTH, level, -1):
            entry_address = table + self._index(va, upper) * 8
            entry = self._read(entry_address)
            if not entry & am.PTE_VALID or entry & am.PDE_IS_PTE:
                if not create:
                    return None
                child = self.palloc(am.PAGE_SIZE, zero=True)
                self.vram.write(entry_address, (child | am.PTE_VALID).to_bytes(8, "little"))
                entry = child | am.PTE_VALID
            table = entry & am.PTE_ADDRESS_MASK
        return table + self._index(va, level) * 8

    def _set_entry(self, va: int, level: int, value: int) -> None:
        address = self._entry_address(va, level, create=True)
        assert address is not None
        self.vram.write(address, value.to_bytes(8, "little"))

    def _read(self, address: int) -> int:
        return int.from_bytes(self.vram.read(address, 8), "little")


class AMDev:
    """The device as the driver runs it. `firmware_dir` holds the blobs named by am_regs.FIRMWARE_FILES."""

    def __init__(
        self,
        pci: PCIDevice,
        firmware_dir: Path,
        reset: bool | None = None,
        va_window: tuple[int, int] = (VA_START, VA_END),
    ) -> None:
        self.pci = pci
        self.firmware_dir = Path(firmware_dir)
        self.debug = int(os.environ.get("AM_DEBUG", "0"))
        self._set_command(PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER)
        pci.resize_bar(am.VRAM_BAR)
        self.vram_size = pci.bar_info(am.VRAM_BAR)[1]
        self.vram = pci.map_bar(am.VRAM_BAR)
        self.doorbell64 = pci.map_bar(am.DOORBELL_BAR)
        self.mmio = pci.map_bar(am.MMIO_BAR)
        self.is_vf = bool(self.rreg(REG.RCC_IOV_FUNC_IDENTIFIER) & 1)
        self.ip_ver, self.gc_info = self._discover()
        self.faults: list[str] = []
        self.interrupts_seen = 0
        force = reset if reset is not None else os.environ.get("AM_RESET", "0") == "1"
        booted_by_us = self.rreg(REG.SCRATCH_REG7) == am.SCRATCH_BOOT_VERSION
        clean = self.rreg(REG.SCRATCH_REG6) == am.SESSION_FINALIZED
        self.partial_boot = booted_by_us and clean and not force and self.is_sos_alive()
        if not self.partial_boot:
            self._full_reset_and_firmware()
        self.mm = AMMemoryManager(self, va_window)
        self._init_gmc()
        self._init_ih()
        self.wreg(REG.SCRATCH_REG7, am.SCRATCH_BOOT_VERSION)
        self.wreg(REG.SCRATCH_REG6, am.SESSION_RUNNING)

    # -- registers -------------------------------------------------------------------------------------------------
    def rreg(self, register: int) -> int:
        value = self.mmio.read32(register * 4)
        if self.debug >= 4:
            print(f"AM: read  {REG.name_of(register)} = 0x{value:08X}", file=sys.stderr)
        return value

    def wreg(self, register: int, value: int) -> None:
        if self.debug >= 4:
            print(f"AM: write {REG.name_of(register)} = 0x{value:08X}", file=sys.stderr)
        self.mmio.write32(register * 4, value)

    def wreg_pair(self, low_register: int, value: int) -> None:
        self.wreg(low_register, value & 0xFFFFFFFF)
        self.wreg(low_register + 1, value >> 32)

    def wait_reg(self, register: int, value: int, mask: int = 0xFFFFFFFF, what: str = "") -> int:
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while (read := self.rreg(register)) & mask != value:
            if time.monotonic() > deadline:
                raise AMError(f"AM: {what or REG.name_of(register)}: 0x{read:X} never reached 0x{value:X}")
        return read

    def _set_command(self, bits: int, on: bool = True) -> None:
        command = self.pci.read_config(PCI_COMMAND, 2)
        self.pci.write_config(PCI_COMMAND, (command | bits) if on else (command & ~bits), 2)

    # -- discovery -------------------------------------------------------------------------------------------------
    def _discover(self) -> tuple[dict[str, tuple[int, int, int]], dict[str, int]]:
        offset = self.vram_size - am.DISCOVERY_RESERVED
        magic, _, count = am.DISCOVERY_HEADER.unpack(self.vram.read(offset, am.DISCOVERY_HEADER.size))
        if magic != am.DISCOVERY_MAGIC:
            raise AMError(f"AM: no IP discovery table at VRAM 0x{offset:X} (found {magic!r})")
        offset += am.DISCOVERY_HEADER.size
        versions = {}
        for _ in range(count):
            name, major, minor, revision = am.DISCOVERY_IP.unpack(self.vram.read(offset, am.DISCOVERY_IP.size))
            versions[name.rstrip(b"\0").decode()] = (major, minor, revision)
            offset += am.DISCOVERY_IP.size
        gc = am.DISCOVERY_GC_INFO.unpack(self.vram.read(offset, am.DISCOVERY_GC_INFO.size))
        return versions, dict(zip(am.GC_INFO_FIELDS, gc, strict=True))

    @property
    def gfx_version(self) -> tuple[int, int, int]:
        return self.ip_ver["GC"]

    def properties(self) -> dict[str, int]:
        """The KFD-style node properties the HCQ device reads, derived from the GC info."""
        gc = self.gc_info
        arrays = gc["num_se"] * gc["num_sa_per_se"]
        major, minor, stepping = self.gfx_version
        return {
            "simd_count": arrays * gc["num_cu_per_sa"] * gc["num_simd_per_cu"],
            "array_count": arrays,
            "simd_arrays_per_engine": gc["num_sa_per_se"],
            "cu_per_simd_array": gc["num_cu_per_sa"],
            "simd_per_cu": gc["num_simd_per_cu"],
            "lds_size_in_kb": gc["lds_size_in_kb"],
            "max_waves_per_simd": gc["max_waves_per_simd"],
            "wave_front_size": gc["wave_size"],
            "max_slots_scratch_cu": 32,
            "num_xcc": 1,
            "gfx_target_version": major * 10000 + minor * 100 + stepping,
            "vendor_id": self.pci.vendor_id,
            "device_id": self.pci.device_id,
        }

    # -- boot ------------------------------------------------------------------------------------------------------
    def is_sos_alive(self) -> bool:
        return self.rreg(REG.MP0_SMN_C2PMSG_81) != 0

    def _full_reset_and_firmware(self) -> None:
        if self.is_sos_alive():  # firmware from an earlier session runs: reset the chip to a known state
            self._set_command(PCI_COMMAND_MASTER, on=False)
            self.smu_message(am.SMUMessage.MODE1_RESET)
            self._set_command(PCI_COMMAND_MASTER)
        blobs = [(component, self._read_firmware(component)) for component in am.Firmware]  # all checked first
        for component, blob in blobs:
            self._psp_load(component, blob, FIRMWARE_STAGING)

    def _read_firmware(self, component: am.Firmware) -> bytes:
        path = self.firmware_dir / am.FIRMWARE_FILES[component]
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            raise AMError(f"AM: firmware {path} is missing (the {component.name} blob; set AM_FIRMWARE_DIR)") from None
        header = am.parse_firmware_header(blob)
        if len(blob) > BOOT_RESERVED - FIRMWARE_STAGING:
            raise AMError(f"AM: firmware {path} ({len(blob):#x} bytes) does not fit the boot area of VRAM")
        if header is None or header[0] != component:
            raise AMError(f"AM: firmware {path} is not a {component.name} blob (bad header)")
        payload = blob[am.FIRMWARE_HEADER.size :]
        digest = hashlib.sha256(payload).digest()
        if len(payload) != header[1] or digest != header[2]:
            raise AMError(
                f"AM: firmware {path} is corrupted: its payload's sha256 is {digest.hex()}, "
                f"its header says {header[2].hex()} ({len(payload)} of {header[1]} bytes)"
            )
        if self.debug >= 1:
            print(f"AM: firmware {path.name} sha256={hashlib.sha256(blob).hexdigest()}", file=sys.stderr)
        return blob

    def _psp_load(self, component: am.Firmware, blob: bytes, staging: int) -> None:
        self.vram.write(staging, blob)
        self.wreg_pair(REG.MP0_SMN_C2PMSG_36, staging)
        self.wreg(REG.MP0_SMN_C2PMSG_38, len(blob))
        command = am.PSPCommand.LOAD_SOS if component == am.Firmware.SOS else am.PSPCommand.LOAD_FIRMWARE
        self.wreg(REG.MP0_SMN_C2PMSG_35, command)
        status = self.wait_reg(REG.MP0_SMN_C2PMSG_35, am.PSP_READY, am.PSP_READY, "PSP mailbox") & 0xFF
        if status != am.PSPStatus.OK:
            name = am.PSPStatus(status).name if status in am.PSPStatus._value2member_map_ else hex(status)
            raise AMError(f"AM: the PSP rejected the {component.name} firmware: {name}")
        if component == am.Firmware.SOS and not self.is_sos_alive():
            raise AMError("AM: the PSP took the SOS firmware but SOS does not run")

    def smu_message(self, message: am.SMUMessage, argument: int = 0) -> int:
        self.wreg(REG.MP1_SMN_C2PMSG_90, 0)
        self.wreg(REG.MP1_SMN_C2PMSG_82, argument)
        self.wreg(REG.MP1_SMN_C2PMSG_66, message)
        self.wait_reg(REG.MP1_SMN_C2PMSG_90, am.SMU_RESPONSE_OK, what=f"SMU message {message.name}")
        return self.rreg(REG.MP1_SMN_C2PMSG_82)

    def _init_gmc(self) -> None:
        self.wreg(REG.GCVM_CONTEXT0_CNTL, 0)
        self.wreg_pair(REG.GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32, self.mm.root)
        # The VM spans every address a user process can have (not only this device's window): a peer's allocation
        # is mapped at the peer's address.
        self.wreg_pair(REG.GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32, VM_START >> 12)
        self.wreg_pair(REG.GCVM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32, (VM_END - 1) >> 12)
        self.wreg(
            REG.GCVM_CONTEXT0_CNTL, am.VM_CONTEXT_ENABLE | am.VM_CONTEXT_DEPTH << am.VM_CONTEXT_PAGE_TABLE_DEPTH_SHIFT
        )
        self.invalidate_tlb()

    def flush_hdp(self) -> None:
        self.wreg(REG.BIF_BX_PF0_GPU_HDP_FLUSH_REQ, 1)
        self.wait_reg(REG.BIF_BX_PF0_GPU_HDP_FLUSH_DONE, 1, 1, "HDP flush")

    def invalidate_tlb(self) -> None:
        """Make page-table writes visible to the GPU: flush HDP (our BAR0 writes), then invalidate VM context 0."""
        self.flush_hdp()
        self.wreg(REG.GCVM_INVALIDATE_ENG0_ACK, 0)
        self.wreg(REG.GCVM_INVALIDATE_ENG0_REQ, 1)
        self.wait_reg(REG.GCVM_INVALIDATE_ENG0_ACK, 1, 1, "TLB invalidation")

    def _init_ih(self) -> None:
        self.ih_ring = self.mm.palloc(IH_RING_SIZE, zero=True, alignment=IH_RING_SIZE)
        self.ih_rptr = 0
        self.wreg(REG.IH_RB_CNTL, 0)
        self.wreg_pair(REG.IH_RB_BASE, self.ih_ring >> 8)
        self.wreg(REG.IH_RB_RPTR, 0)
        log2_dwords = (IH_RING_SIZE // 4).bit_length() - 1
        self.wreg(REG.IH_RB_CNTL, am.IH_RB_ENABLE | log2_dwords << am.IH_RB_SIZE_SHIFT)

    # -- queues ----------------------------------------------------------------------------------------------------
    def setup_compute_ring(self, queue: int, ring: int, size: int, rptr: int, wptr: int, doorbell: int) -> None:
        """Program compute queue `queue`'s descriptor (ring at GPU VA `ring`, `size` bytes) and activate it."""
        if not 0 <= queue < am.COMPUTE_QUEUES:
            raise AMError(f"AM: the MEC has {am.COMPUTE_QUEUES} compute queues; there is no queue {queue}")
        self.wreg(REG.GRBM_GFX_CNTL, queue)
        self.wreg(REG.CP_HQD_DEQUEUE_REQUEST, 1)
        self.wreg_pair(REG.CP_HQD_PQ_BASE, ring >> 8)
        self.wreg(REG.CP_HQD_PQ_CONTROL, (size // 4).bit_length() - 2)
        self.wreg_pair(REG.CP_HQD_PQ_RPTR_REPORT_ADDR, rptr)
        self.wreg_pair(REG.CP_HQD_PQ_WPTR_POLL_ADDR, wptr)
        self.wreg(REG.CP_HQD_PQ_DOORBELL_CONTROL, (doorbell * 2) << am.DOORBELL_OFFSET_SHIFT | am.CP_HQD_DOORBELL_EN)
        self.wreg(REG.CP_HQD_ACTIVE, 1)

    def setup_sdma_ring(self, queue: int, ring: int, size: int, rptr: int, wptr: int, doorbell: int) -> None:
        if not 0 <= queue < am.SDMA_QUEUES:
            raise AMError(f"AM: SDMA0 has {am.SDMA_QUEUES} queues; there is no queue {queue}")
        self.wreg(REG.sdma("RB_CNTL", queue), 0)
        self.wreg_pair(REG.sdma("RB_BASE", queue), ring >> 8)
        self.wreg_pair(REG.sdma("RB_RPTR_ADDR_LO", queue), rptr)
        self.wreg_pair(REG.sdma("RB_WPTR_POLL_ADDR_LO", queue), wptr)
        self.wreg(REG.sdma("DOORBELL_OFFSET", queue), (doorbell * 2) << am.DOORBELL_OFFSET_SHIFT)
        self.wreg(REG.sdma("DOORBELL", queue), am.SDMA_DOORBELL_ENABLE)
        log2_dwords = (size // 4).bit_length() - 1
        self.wreg(REG.sdma("RB_CNTL", queue), am.SDMA_RB_ENABLE | log2_dwords << am.SDMA_RB_SIZE_SHIFT)

    def ring_doorbell(self, slot: int, value: int) -> None:
        self.doorbell64.write(slot * 8, value.to_bytes(8, "little"))

    def is_busy(self) -> bool:
        return bool(self.rreg(REG.GRBM_STATUS) & am.GRBM_STATUS_GUI_ACTIVE)

    # -- interrupts ------------------------------------------------------------------------------------------------
    def interrupt_handler(self) -> None:
        """Consume the IH ring: count interrupts, record faults (`is_err_state`)."""
        wptr = self.rreg(REG.IH_RB_WPTR)
        while self.ih_rptr != wptr:
            entry = am.IH_ENTRY.unpack(self.vram.read(self.ih_ring + self.ih_rptr, am.IH_ENTRY.size))
            self._handle(entry)
            self.ih_rptr = (self.ih_rptr + am.IH_ENTRY.size) % IH_RING_SIZE
        self.wreg(REG.IH_RB_RPTR, self.ih_rptr)

    def _handle(self, entry: tuple[int, ...]) -> None:
        source, _, doorbell, _, address_lo, address_hi, status, _ = entry
        self.interrupts_seen += 1
        if source == am.IHSource.VM_FAULT:
            self.faults.append(
                f"MMU fault: 0x{address_lo | address_hi << 32:X} | queue at doorbell {doorbell} (status 0x{status:X})"
            )
        elif source == am.IHSource.CP_BAD_OPCODE:
            self.faults.append(f"HW fault: illegal instruction or packet; queue at doorbell {doorbell} stopped")

    def sleep(self, timeout_ms: int) -> None:
        """Wait up to `timeout_ms` for an interrupt (the MSI eventfd where the device has one), then handle the IH
        ring; raise RuntimeError naming the fault if the device reported one."""
        irq_fd = getattr(self.pci, "irq_fd", None)
        if irq_fd is not None and not self.faults:
            ready, _, _ = select.select([irq_fd], [], [], max(timeout_ms, 0) / 1000)
            if ready:
                os.eventfd_read(irq_fd)
        self.interrupt_handler()
        if self.faults:
            raise RuntimeError(self.faults[0])

    @property
    def is_err_state(self) -> bool:
        return bool(self.faults)

    def recover(self, force: bool = False) -> bool:
        """After a fault (or when `force`): halt and restart the MEC, soft-reset SDMA, clear the fault latch. The
        queues are gone afterwards: the caller sets them up again. Returns whether a reset was done."""
        self.interrupt_handler()
        if not (force or self.faults):
            return False
        self.wreg(REG.CP_MEC_CNTL, am.CP_MEC_CNTL_MEC_HALT)
        self.wreg(REG.CP_MEC_CNTL, 0)
        self.wreg(REG.GRBM_SOFT_RESET, am.GRBM_SOFT_RESET_SDMA0)
        self.wreg(REG.GRBM_SOFT_RESET, 0)
        self.wreg(REG.GCVM_L2_PROTECTION_FAULT_STATUS, 0)
        self.interrupt_handler()  # (entries the stopped queues posted on the way down)
        self.faults.clear()
        return True

    def fini(self) -> None:
        """Stop every queue, drain the IH ring, and mark the session finalized (the next driver may partial-boot)."""
        for queue in range(am.COMPUTE_QUEUES):
            self.wreg(REG.GRBM_GFX_CNTL, queue)
            self.wreg(REG.CP_HQD_DEQUEUE_REQUEST, 1)
        for queue in range(am.SDMA_QUEUES):
            self.wreg(REG.sdma("RB_CNTL", queue), 0)
        self.interrupt_handler()
        self.wreg(REG.SCRATCH_REG6, am.SESSION_FINALIZED)


__all__ = ["AMDev", "AMError", "AMMemoryManager"]
