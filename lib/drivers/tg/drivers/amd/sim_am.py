"""The simulated Navi31 as a userspace PCI driver sees it: the chip behind tg.drivers.amd.sim_pci's BARs.

Everything the driver does goes through registers (BAR5), doorbells (BAR2) and memory (VRAM through BAR0, system
memory from alloc_sysmem); nothing here is called by the driver directly. The register file is am_regs.REGISTERS,
with side effects:

- PSP mailbox (MP0 C2PMSG_35..38, 81): the bootloader starts SOS from a blob in VRAM, then SOS loads the other
  components; each blob's payload must match the sha256 in its header. The compute and SDMA engines refuse queues
  until their firmware (MEC, SDMA) is loaded.
- SMU mailbox (MP1 C2PMSG_66/82/90): MODE1_RESET resets the chip (engines, registers, scratch registers, firmware;
  VRAM keeps its contents), clock messages are acknowledged.
- GMC: VM context 0 (page-table base, VA range, enable), the TLB invalidation engine (REQ -> TLB flushed -> ACK), the
  protection-fault latch; translation itself is tg.drivers.amd.sim_mmu.
- IH: the interrupt-handler ring in VRAM; EOP interrupts, SDMA traps and faults become 8-dword entries, then the
  MSI (the PCI function's irq eventfd) fires.
- CP (MEC) and SDMA queues: activating a queue descriptor starts an engine thread (tg.drivers.amd.navi31_cp /
  navi31_sdma, the same engines the KFD simulator runs); a doorbell write only wakes it. A fault stops the queue until
  the driver halts the MEC (or soft-resets SDMA) and sets the queue up again.
- HDP flush request/done: the flush completes at once (no HDP write buffer is modelled: memory is coherent).
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

from tg.drivers.amd import am_regs as am
from tg.drivers.amd.iface import GPUAllocation, ShaderEngines
from tg.drivers.amd.navi31 import NAVI31_PROPERTIES
from tg.drivers.amd.navi31_cp import ComputeEngine
from tg.drivers.amd.navi31_engine import DeviceClock, DeviceFault, Interrupts, QueueEngine
from tg.drivers.amd.navi31_sdma import SDMAEngine
from tg.drivers.amd.sim_mmu import IOMMU, MMU, TranslatedMemory
from tg.drivers.sim.romsw import SimProtocolError

REG = am.REG
IP_VERSIONS = (("GC", 11, 0, 0), ("SDMA", 6, 0, 0), ("NBIO", 4, 3, 0), ("MP0", 13, 0, 0), ("MP1", 13, 0, 0))
SOS_VERSION = 0x00170020


def discovery_table() -> bytes:
    """The IP discovery table the chip keeps at the top of VRAM: IP versions, then the GC geometry."""
    p = NAVI31_PROPERTIES
    gc_info = (
        p["array_count"] // p["simd_arrays_per_engine"],
        p["simd_arrays_per_engine"],
        p["cu_per_simd_array"],
        p["simd_per_cu"],
        p["lds_size_in_kb"],
        p["max_waves_per_simd"],
        p["wave_front_size"],
        am.SDMA_QUEUES,
    )
    table = am.DISCOVERY_HEADER.pack(am.DISCOVERY_MAGIC, 1, len(IP_VERSIONS))
    for name, major, minor, revision in IP_VERSIONS:
        table += am.DISCOVERY_IP.pack(name.encode(), major, minor, revision)
    return table + am.DISCOVERY_GC_INFO.pack(*gc_info)


def write_sim_firmware(directory: Path, seed: int = 0) -> Path:
    """The firmware package of the simulated board (what linux-firmware is to a real one): one signed blob per
    component, random payloads from `seed`."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for component, name in am.FIRMWARE_FILES.items():
        payload = rng.randbytes(0x1000 + 0x100 * component)
        (directory / name).write_bytes(am.pack_firmware(component, payload))
    return directory


class IHInterrupts(Interrupts):
    """The engines' interrupt line, wired to the IH ring: every interrupt and every fault also becomes an entry."""

    def __init__(self, chip: SimNavi31Chip) -> None:
        super().__init__()
        self.chip = chip

    def post(self, context_id: int = 0) -> None:
        super().post(context_id)
        # The engines post from their own thread: which engine it is tells the interrupt source.
        engine = threading.current_thread()
        source = am.IHSource.SDMA_TRAP if isinstance(engine, SDMAEngine) else am.IHSource.CP_EOP
        self.chip.post_ih(source, engine, context_id)

    def latch(self, fault: DeviceFault) -> None:
        super().latch(fault)
        self.chip.report_fault(fault)


class SimNavi31Chip:
    """The chip: register file with side effects, VRAM, MMU, PSP/SMU, IH and the queue engines."""

    def __init__(
        self,
        vram: memoryview,
        iommu: IOMMU,
        bus_master: Callable[[], bool],
        irq: Callable[[], None],
        shader_engines: ShaderEngines | None,
        chaos_seed: int | None = None,
    ) -> None:
        self.vram = vram
        self.shader_engines = shader_engines
        self.chaos_seed = chaos_seed
        self.iommu = iommu
        self._irq = irq  # fires the MSI
        self.regs: dict[int, int] = {}
        self.mmu = MMU(vram, self.read_register, iommu, bus_master)
        self.memory = TranslatedMemory(self.mmu)
        self.clock = DeviceClock()
        self.interrupts = IHInterrupts(self)
        self._lock = threading.RLock()
        self.hqd: dict[int, dict[int, int]] = {}  # compute queue -> its CP_HQD_* registers
        self.engines: dict[tuple[str, int], QueueEngine] = {}  # ("compute"|"sdma", queue) -> running engine
        self.doorbells: dict[int, QueueEngine] = {}  # doorbell slot -> engine
        self.firmware_loaded: list[am.Firmware] = []  # in load order, since the last reset
        self.psp_loads = 0  # firmware blobs the PSP accepted, ever (a partial boot adds none)
        self.mode1_resets = 0
        self.stray_doorbells = 0  # doorbell writes no queue owned (hardware drops them)
        self.trace: list[tuple[str, str, int]] = []  # ("R"|"W", register name, value) when `tracing`
        self.tracing = False
        self._ih_wptr = 0
        self.stopped: list[QueueEngine] = []  # engines stopped by resets, joined on close
        self.last_fault: DeviceFault | None = None  # what went wrong, for tests (the driver sees only the IH entry)
        vram[len(vram) - am.DISCOVERY_RESERVED :][: len(discovery_table())] = discovery_table()

    # -- register file -------------------------------------------------------------------------------------------
    def read_register(self, register: int) -> int:
        """What a read of `register` returns (BAR5, or a WAIT_REG_MEM on a register)."""
        with self._lock:
            if register == REG.GRBM_STATUS:
                value = am.GRBM_STATUS_GUI_ACTIVE if self.busy() else 0
            elif REG.CP_HQD_ACTIVE <= register <= REG.CP_HQD_DEQUEUE_REQUEST:
                value = self.hqd.get(self._selected_queue(), {}).get(register, 0)
            else:
                value = self.regs.get(register, 0)
        if self.tracing:
            self.trace.append(("R", REG.name_of(register), value))
        return value

    def write_register(self, register: int, value: int) -> None:
        value &= 0xFFFFFFFF
        if self.tracing:
            self.trace.append(("W", REG.name_of(register), value))
        with self._lock:
            if REG.CP_HQD_ACTIVE <= register <= REG.CP_HQD_DEQUEUE_REQUEST:
                self._write_hqd(register, value)
            else:
                self.regs[register] = value
                self._side_effect(register, value)
        self.memory.wake_waiters()  # a WAIT_REG_MEM on this register re-checks

    def _side_effect(self, register: int, value: int) -> None:
        if register == REG.BIF_BX_PF0_GPU_HDP_FLUSH_REQ:
            self.regs[REG.BIF_BX_PF0_GPU_HDP_FLUSH_DONE] = value
        elif register == REG.GCVM_INVALIDATE_ENG0_REQ:
            self.mmu.invalidate()
            self.regs[REG.GCVM_INVALIDATE_ENG0_ACK] = value
        elif register == REG.CP_MEC_CNTL and value & am.CP_MEC_CNTL_MEC_HALT:
            self._stop_engines("compute")
            self.hqd.clear()
            self.interrupts.clear()
        elif register == REG.GRBM_SOFT_RESET:
            if value & am.GRBM_SOFT_RESET_CP:
                self._stop_engines("compute")
                self.hqd.clear()
            if value & am.GRBM_SOFT_RESET_SDMA0:
                self._stop_engines("sdma")
                for queue in range(am.SDMA_QUEUES):
                    self.regs[REG.sdma("RB_CNTL", queue)] = 0
            self.interrupts.clear()
        elif register == REG.IH_RB_CNTL:
            self._ih_wptr = 0
            self.regs[REG.IH_RB_WPTR] = 0
        elif register == REG.MP0_SMN_C2PMSG_35:
            self.regs[register] = am.PSP_READY | self._psp_command(value)
        elif register == REG.MP1_SMN_C2PMSG_66:
            self._smu_message(value)
        else:
            for queue in range(am.SDMA_QUEUES):
                if register == REG.sdma("RB_CNTL", queue):
                    self._sdma_control(queue, value)

    def _selected_queue(self) -> int:
        return self.regs.get(REG.GRBM_GFX_CNTL, 0) & 0xFF

    # -- PSP -------------------------------------------------------------------------------------------------------
    def _psp_command(self, command: int) -> int:
        kind = command & 0xFF
        address = self.regs.get(REG.MP0_SMN_C2PMSG_36, 0) | self.regs.get(REG.MP0_SMN_C2PMSG_37, 0) << 32
        size = self.regs.get(REG.MP0_SMN_C2PMSG_38, 0)
        if address + size > len(self.vram) or size < am.FIRMWARE_HEADER.size:
            return am.PSPStatus.BAD_ADDRESS
        blob = bytes(self.vram[address : address + size])
        header = am.parse_firmware_header(blob)
        if header is None or header[1] != size - am.FIRMWARE_HEADER.size:
            return am.PSPStatus.BAD_HEADER
        component, _, digest = header
        if hashlib.sha256(blob[am.FIRMWARE_HEADER.size :]).digest() != digest:
            return am.PSPStatus.SIGNATURE_MISMATCH
        if kind == am.PSPCommand.LOAD_SOS:
            if component != am.Firmware.SOS:
                return am.PSPStatus.BAD_HEADER
            self.firmware_loaded = [am.Firmware.SOS]
            self.regs[REG.MP0_SMN_C2PMSG_81] = SOS_VERSION
            self.psp_loads += 1
            return am.PSPStatus.OK
        if kind != am.PSPCommand.LOAD_FIRMWARE or component == am.Firmware.SOS:
            return am.PSPStatus.BAD_HEADER
        if not self.regs.get(REG.MP0_SMN_C2PMSG_81):
            return am.PSPStatus.SOS_NOT_RUNNING
        self.firmware_loaded.append(component)
        self.psp_loads += 1
        return am.PSPStatus.OK

    # -- SMU -------------------------------------------------------------------------------------------------------
    def _smu_message(self, message: int) -> None:
        if message == am.SMUMessage.MODE1_RESET:
            self.mode1_reset()
        self.regs[REG.MP1_SMN_C2PMSG_90] = am.SMU_RESPONSE_OK

    def mode1_reset(self) -> None:
        """Whole-chip reset: engines stop, every register (scratch ones too) returns to 0, firmware must be loaded
        again; VRAM keeps its contents."""
        with self._lock:
            self._stop_engines("compute")
            self._stop_engines("sdma")
            self.regs.clear()
            self.hqd.clear()
            self.firmware_loaded = []
            self.mmu.invalidate()
            self.interrupts.clear()
            self._ih_wptr = 0
            self.mode1_resets += 1

    # -- queues ----------------------------------------------------------------------------------------------------
    def _write_hqd(self, register: int, value: int) -> None:
        queue = self._selected_queue()
        descriptor = self.hqd.setdefault(queue, {})
        if register == REG.CP_HQD_ACTIVE and value & 1 and not descriptor.get(REG.CP_HQD_ACTIVE):
            self._check_can_run("compute queue", am.Firmware.MEC)
            if self.regs.get(REG.CP_MEC_CNTL, 0) & am.CP_MEC_CNTL_MEC_HALT:
                raise SimProtocolError("CP_HQD_ACTIVE set while the MEC is halted (CP_MEC_CNTL.MEC_HALT)")
            descriptor[register] = 1
            self._start_compute(queue, descriptor)
            return
        if (register == REG.CP_HQD_ACTIVE and not value & 1) or (register == REG.CP_HQD_DEQUEUE_REQUEST and value):
            self._stop_engine(("compute", queue))
            descriptor[REG.CP_HQD_ACTIVE] = 0
            return
        if descriptor.get(REG.CP_HQD_ACTIVE):
            raise SimProtocolError(f"{REG.name_of(register)} written while compute queue {queue} is active")
        descriptor[register] = value

    def _start_compute(self, queue: int, d: dict[int, int]) -> None:
        base = (d.get(REG.CP_HQD_PQ_BASE, 0) | d.get(REG.CP_HQD_PQ_BASE_HI, 0) << 32) << 8
        size = 4 << ((d.get(REG.CP_HQD_PQ_CONTROL, 0) & am.CP_HQD_PQ_CONTROL_QUEUE_SIZE_MASK) + 1)
        rptr = d.get(REG.CP_HQD_PQ_RPTR_REPORT_ADDR, 0) | d.get(REG.CP_HQD_PQ_RPTR_REPORT_ADDR_HI, 0) << 32
        wptr = d.get(REG.CP_HQD_PQ_WPTR_POLL_ADDR, 0) | d.get(REG.CP_HQD_PQ_WPTR_POLL_ADDR_HI, 0) << 32
        doorbell = d.get(REG.CP_HQD_PQ_DOORBELL_CONTROL, 0)
        if not doorbell & am.CP_HQD_DOORBELL_EN:
            raise SimProtocolError(f"compute queue {queue} activated without CP_HQD_PQ_DOORBELL_CONTROL.DOORBELL_EN")
        slot = ((doorbell >> am.DOORBELL_OFFSET_SHIFT) & am.DOORBELL_OFFSET_MASK) // 2
        engine = ComputeEngine(self, f"compute{queue}", GPUAllocation(base, size), rptr, wptr)  # type: ignore[arg-type]
        self._start(("compute", queue), engine, slot)

    def _sdma_control(self, queue: int, value: int) -> None:
        if not value & am.SDMA_RB_ENABLE:
            self._stop_engine(("sdma", queue))
            return
        if ("sdma", queue) in self.engines:
            return
        self._check_can_run("SDMA queue", am.Firmware.SDMA)
        base = self._sdma_pair(queue, "RB_BASE", "RB_BASE_HI") << 8
        size = 4 << ((value >> am.SDMA_RB_SIZE_SHIFT) & 0x1F)
        rptr = self._sdma_pair(queue, "RB_RPTR_ADDR_LO", "RB_RPTR_ADDR_HI")
        wptr = self._sdma_pair(queue, "RB_WPTR_POLL_ADDR_LO", "RB_WPTR_POLL_ADDR_HI")
        if not self.regs.get(REG.sdma("DOORBELL", queue), 0) & am.SDMA_DOORBELL_ENABLE:
            raise SimProtocolError(f"SDMA queue {queue} enabled without SDMA0_QUEUE{queue}_DOORBELL.ENABLE")
        offset = self.regs.get(REG.sdma("DOORBELL_OFFSET", queue), 0)
        slot = ((offset >> am.DOORBELL_OFFSET_SHIFT) & am.DOORBELL_OFFSET_MASK) // 2
        engine = SDMAEngine(self, f"sdma{queue}", GPUAllocation(base, size), rptr, wptr)  # type: ignore[arg-type]
        self._start(("sdma", queue), engine, slot)

    def _sdma_pair(self, queue: int, low: str, high: str) -> int:
        return self.regs.get(REG.sdma(low, queue), 0) | self.regs.get(REG.sdma(high, queue), 0) << 32

    def _check_can_run(self, what: str, firmware: am.Firmware) -> None:
        if firmware not in self.firmware_loaded:
            raise SimProtocolError(f"{what} activated before the PSP loaded the {firmware.name} firmware")
        if not self.regs.get(REG.GCVM_CONTEXT0_CNTL, 0) & am.VM_CONTEXT_ENABLE:
            raise SimProtocolError(f"{what} activated before VM context 0 was enabled")

    def _start(self, key: tuple[str, int], engine: QueueEngine, slot: int) -> None:
        engine.reset()  # (faults here, before the thread starts, if the driver's pointers are not mapped)
        self.engines[key] = engine
        self.doorbells[slot] = engine
        engine.start()

    def _stop_engine(self, key: tuple[str, int]) -> None:
        engine = self.engines.pop(key, None)
        if engine is None:
            return
        for slot in [s for s, e in self.doorbells.items() if e is engine]:
            del self.doorbells[slot]
        # Not joined here (the register lock is held and the engine may be posting an interrupt): it stops at its
        # next packet boundary, and its late writes are fenced off by the epoch it checks.
        engine.close()
        self.stopped.append(engine)

    def _stop_engines(self, kind: str) -> None:
        for key in [k for k in self.engines if k[0] == kind]:
            self._stop_engine(key)

    def ring_doorbell(self, slot: int, value: int) -> None:
        """A doorbell write: wakes the engine that owns the slot (it fetches the packets in its own thread)."""
        engine = self.doorbells.get(slot)
        if engine is None:
            self.stray_doorbells += 1
            return
        engine.ring_doorbell(value)

    def busy(self) -> bool:
        return any(not e.idle and not e.waiting for e in list(self.engines.values()))

    # -- interrupts and faults -------------------------------------------------------------------------------------
    def post_ih(self, source: am.IHSource, engine: object, context: int, address: int = 0, status: int = 0) -> None:
        """Append an entry to the IH ring (when the driver enabled it) and fire the MSI."""
        with self._lock:
            control = self.regs.get(REG.IH_RB_CNTL, 0)
            if not control & am.IH_RB_ENABLE:
                return
            size = 4 << ((control >> 1) & 0x1F)
            base = (self.regs.get(REG.IH_RB_BASE, 0) | self.regs.get(REG.IH_RB_BASE_HI, 0) << 32) << 8
            slot = next((s for s, e in self.doorbells.items() if e is engine), 0xFFFFFFFF)
            low, high = address & 0xFFFFFFFF, address >> 32
            entry = am.IH_ENTRY.pack(source, 0, slot, context & 0xFFFFFFFF, low, high, status, 0)
            self.vram[base + self._ih_wptr : base + self._ih_wptr + len(entry)] = entry
            self._ih_wptr = (self._ih_wptr + len(entry)) % size
            self.regs[REG.IH_RB_WPTR] = self._ih_wptr
        self._irq()

    def report_fault(self, fault: DeviceFault) -> None:
        """A queue stopped: latch the fault registers and post the IH entry (VM fault with its address, or a bad
        opcode / illegal instruction)."""
        engine = threading.current_thread()
        if fault.address is not None:
            with self._lock:
                self.regs[REG.GCVM_L2_PROTECTION_FAULT_STATUS] = 1
                self.regs[REG.GCVM_L2_PROTECTION_FAULT_ADDR_LO32] = fault.address & 0xFFFFFFFF
                self.regs[REG.GCVM_L2_PROTECTION_FAULT_ADDR_HI32] = fault.address >> 32
            self.post_ih(am.IHSource.VM_FAULT, engine, 0, fault.address, 1)
        else:
            self.post_ih(am.IHSource.CP_BAD_OPCODE, engine, 0)
        self.last_fault = fault

    def close(self) -> None:
        with self._lock:
            self._stop_engines("compute")
            self._stop_engines("sdma")
        for engine in self.stopped:
            engine.join(timeout=5)
        self.stopped.clear()


def irq_eventfd() -> int:
    return os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
