"""A simulated Navi31 (gfx1100): GPU memory with a page table, doorbell-driven compute (PM4) and SDMA queues each
in its own thread, a GPU clock, interrupts, and faults latched and reported the way the KFD reports them.

The pieces: tg.drivers.amd.navi31_memory (VRAM, system memory, the page table), navi31_engine (clock, interrupts,
the queue thread), navi31_cp (the PM4 command processor), navi31_sdma (the SDMA engine). A DISPATCH_DIRECT is run by
the `ShaderEngines` the device is built with (the RDNA3 emulator, tg.drivers.amd.rdna3, in normal use).

What it does not model: caches and HDP write buffers (memory is coherent), the MES/HQD scheduling between queues
(each queue has its own thread), preemption, the interrupt handler ring's entry format, the PCI side (BARs, MMIO
boot, PSP/SMU firmware): this is the device as the KFD presents it.
"""

from __future__ import annotations

import itertools
import threading

from tg.drivers.amd import packets as pk
from tg.drivers.amd.iface import GPUAllocation, QueueKind, ShaderEngines
from tg.drivers.amd.navi31_cp import ComputeEngine
from tg.drivers.amd.navi31_engine import DeviceClock, DeviceFault, Interrupts, QueueEngine
from tg.drivers.amd.navi31_memory import DEFAULT_VRAM_SIZE, SimMemory
from tg.drivers.amd.navi31_sdma import SDMAEngine

GFX_VERSION = (11, 0, 0)

# KFD topology properties of a Radeon RX 7900 XTX (what /sys/devices/virtual/kfd/kfd/topology/nodes/N/properties
# lists for it): 6 shader engines x 2 arrays x 8 CUs, 2 SIMDs per CU.
NAVI31_PROPERTIES: dict[str, int] = {
    "cpu_cores_count": 0,
    "simd_count": 192,
    "mem_banks_count": 1,
    "lds_size_in_kb": 64,
    "gds_size_in_kb": 0,
    "num_gws": 64,
    "wave_front_size": 32,
    "array_count": 12,
    "simd_arrays_per_engine": 2,
    "cu_per_simd_array": 8,
    "simd_per_cu": 2,
    "max_slots_scratch_cu": 32,
    "gfx_target_version": 110000,
    "vendor_id": 0x1002,
    "device_id": 0x744C,
    "location_id": 0x8600,
    "max_waves_per_simd": 16,
    "num_sdma_engines": 2,
    "num_sdma_xgmi_engines": 0,
    "num_sdma_queues_per_engine": 6,
    "num_cp_queues": 8,
    "num_xcc": 1,
    "max_engine_clk_fcompute": 2500,
}


class Navi31:
    """The simulated device. Thread-safe: the driver side allocates and rings doorbells while the engines run."""

    def __init__(
        self,
        shader_engines: ShaderEngines | None = None,
        vram_size: int = DEFAULT_VRAM_SIZE,
        chaos_seed: int | None = None,
    ) -> None:
        self.shader_engines = shader_engines
        self.chaos_seed = chaos_seed  # not None: engines stall at random (seeded) points, to shake out ordering bugs
        self.memory = SimMemory(vram_size)
        self.clock = DeviceClock()
        self.interrupts = Interrupts()
        self.queues: list[QueueEngine] = []
        self._registers: dict[int, int] = {}
        self._register_lock = threading.Lock()
        self._queue_ids = itertools.count()
        self._closed = False

    # -- memory ------------------------------------------------------------------------------------------------
    def allocate(self, size: int, host: bool = False) -> tuple[int, int]:
        """Map `size` bytes (VRAM, or system memory when `host`); returns (GPU VA, mapped size)."""
        mapped = self.memory.map_host(size) if host else self.memory.map_vram(size)
        return mapped.start, mapped.size

    def free(self, address: int) -> None:
        self.memory.unmap(address)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- registers (what register-space waits and WRITE_DATA to a register touch) ------------------------------
    def write_register(self, register: int, value: int) -> None:
        with self._register_lock:
            self._registers[register] = value & 0xFFFFFFFF
            if register == pk.regBIF_BX_PF0_GPU_HDP_FLUSH_REQ:  # no HDP write buffer: the flush completes at once
                self._registers[pk.regBIF_BX_PF0_GPU_HDP_FLUSH_DONE] = value & 0xFFFFFFFF
        self.memory.wake_waiters()

    def read_register(self, register: int) -> int:
        with self._register_lock:
            return self._registers.get(register, 0)

    # -- queues ------------------------------------------------------------------------------------------------
    def create_queue(self, kind: QueueKind, ring: GPUAllocation, read_ptr: int, write_ptr: int) -> QueueEngine:
        """A queue on `ring`, reporting its read pointer at GPU address `read_ptr` (u64). The driver announces work
        by writing the new write pointer to `write_ptr` and ringing the returned engine's doorbell."""
        if self._closed:
            raise RuntimeError("the simulated device is closed")
        for address in (read_ptr, write_ptr):
            if not self.memory.is_mapped(address, 8):
                raise ValueError(f"queue pointer 0x{address:X} is not mapped")
        if not self.memory.is_mapped(ring.va_addr, ring.size):
            raise ValueError(f"queue ring 0x{ring.va_addr:X}+0x{ring.size:X} is not mapped")
        number = next(self._queue_ids)
        engine_class = ComputeEngine if kind == QueueKind.COMPUTE else SDMAEngine
        name = f"{'compute' if kind == QueueKind.COMPUTE else 'sdma'}{number}"
        engine = engine_class(self, name, ring, read_ptr, write_ptr)
        engine.reset()
        self.queues.append(engine)
        engine.start()
        return engine

    def destroy_queue(self, engine: QueueEngine) -> None:
        engine.close()
        engine.join(timeout=5)
        self.queues.remove(engine)

    # -- faults and interrupts ---------------------------------------------------------------------------------
    @property
    def fault(self) -> DeviceFault | None:
        return self.interrupts.fault

    def sleep(self, timeout_ms: int) -> None:
        """Wait up to `timeout_ms` for an interrupt; raise RuntimeError with the latched fault if there is one."""
        if self.interrupts.fault is None:
            self.interrupts.wait(max(timeout_ms, 0) / 1000)
        fault = self.interrupts.fault
        if fault is not None:
            raise RuntimeError(fault.message())

    def recover(self) -> None:
        """Reset every queue (read/write pointers to 0, stopped queues restarted, waits abandoned) and clear the
        fault: the device works again once the driver restarts its write pointers at 0."""
        for engine in self.queues:
            engine.reset()
        self.interrupts.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for engine in self.queues:
            engine.close()
        for engine in self.queues:
            engine.join(timeout=5)
        self.queues.clear()
        self.memory.close()
