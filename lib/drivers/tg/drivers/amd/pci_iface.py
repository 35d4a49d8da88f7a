"""The AMDInterface (tg.drivers.amd.iface) over the userspace PCI driver (`AMDev`): what `DEV=MOCKPCI+AMD` (the
simulated board, tg.drivers.amd.sim_pci) and `DEV=PCI+AMD` (a board on the PCI bus) open.

Memory: one virtual window of this process is reserved, and the GPU's VM uses the same addresses: an allocation's
GPU VA is also where the CPU sees it (as under KFD). VRAM pages come from the driver's physical allocator and the
CPU's view is that part of BAR0 mapped at the VA; system memory comes from the PCI device's alloc_sysmem at the VA,
mapped for the GPU with SYSTEM PTEs to its bus addresses. Queues
are MEC/SDMA descriptors programmed through registers, their doorbells slots of BAR2. Faults arrive as IH ring
entries; `recover` resets the engines and sets every queue up again.
"""

from __future__ import annotations

import os
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

from tg.drivers.amd import am_regs as am
from tg.drivers.amd.am_driver import AMDev
from tg.drivers.amd.iface import GPUAllocation, HardwareQueue, QueueKind, ShaderEngines
from tg.drivers.amd.kfd import CHAOS_VARIABLE
from tg.drivers.mmio import MMIOInterface
from tg.drivers.navi31_regs import NAVI31_DEVICE_IDS, VENDOR_AMD
from tg.drivers.pci import DeviceMatch, PCIDevice, release_fixed, reserve_va, scan_pci

FIRMWARE_DIR_VARIABLE = "AM_FIRMWARE_DIR"
PROCESS_VARIABLE = (
    "MOCKGPU_PROCESS"  # 1: each simulated board runs in a process of its own (tg.drivers.amd.sim_process)
)
SYSTEM_FIRMWARE_DIR = Path("/lib/firmware/amdgpu")
VA_WINDOW_SIZE = 1 << 36  # address space (not memory) reserved per device for its allocations
FIRST_DOORBELL = 4  # doorbell slots below this are left to the kernel-mode conventions (none used here)


class PCIDoorbell:
    def __init__(self, dev: AMDev, slot: int) -> None:
        self.dev, self.slot = dev, slot

    def write(self, value: int) -> None:
        self.dev.ring_doorbell(self.slot, value)


@dataclass
class _Backing:
    """What an allocation holds besides its VA: its VRAM pages, or its system-memory window."""

    size: int
    paddr: int = -1
    sysmem: MMIOInterface | None = None
    bus_addresses: list[int] | None = None


class PCIInterface:
    name = "gfx1100"

    def __init__(self, pci: PCIDevice, firmware_dir: Path) -> None:
        self.pci = pci
        window = reserve_va(VA_WINDOW_SIZE)
        self.dev = AMDev(pci, firmware_dir, va_window=(window, window + VA_WINDOW_SIZE))
        self.gfx_version = self.dev.gfx_version
        self.properties = self.dev.properties()
        self._backing: dict[int, _Backing] = {}
        self._peers: dict[int, int] = {}  # other devices' allocations mapped here: VA -> mapped size
        _INTERFACES.add(self)
        self._queues: list[tuple[QueueKind, int, tuple[int, int, int, int, int]]] = []
        self._lock = threading.Lock()

    def alloc(
        self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = False
    ) -> GPUAllocation:
        mapped = (max(size, 1) + am.PAGE_SIZE - 1) // am.PAGE_SIZE * am.PAGE_SIZE
        with self._lock:
            va = self.dev.mm.alloc_vaddr(mapped)
            if host or uncached:
                window, bus_addresses = self.pci.alloc_sysmem(mapped, vaddr=va)
                self.dev.mm.map_range(va, bus_addresses, system=True)
                self._backing[va] = _Backing(mapped, sysmem=window, bus_addresses=bus_addresses)
                return GPUAllocation(va, size, va, host=True)
            alignment = am.HUGE_PAGE_SIZE if mapped >= am.HUGE_PAGE_SIZE else am.PAGE_SIZE
            paddr = self.dev.mm.palloc(mapped, alignment=alignment)
            self.dev.mm.map_range(va, [paddr + i * am.PAGE_SIZE for i in range(mapped // am.PAGE_SIZE)], system=False)
            self.pci.map_bar_at(am.VRAM_BAR, paddr, va, mapped)
            self._backing[va] = _Backing(mapped, paddr=paddr)
            return GPUAllocation(va, size, va)

    def free(self, mem: GPUAllocation) -> None:
        mapped = (max(mem.size, 1) + am.PAGE_SIZE - 1) // am.PAGE_SIZE * am.PAGE_SIZE
        with self._lock:
            peer_size = self._peers.pop(mem.va_addr, None)
            if peer_size is not None:  # only this GPU's mapping of another's memory
                self.dev.mm.unmap_range(mem.va_addr, peer_size)
                return
            backing = self._backing.pop(mem.va_addr)
            self.dev.mm.unmap_range(mem.va_addr, mapped)
            release_fixed(mem.va_addr, mapped)
            self.dev.mm.va.release(mem.va_addr, mapped)
            if backing.sysmem is not None:
                self.pci.free_sysmem(backing.sysmem)
            else:
                self.dev.mm.pfree(backing.paddr, mapped)

    def map(self, mem: GPUAllocation) -> None:
        """Make another device's allocation visible to this GPU at its address: its system-memory pages by their
        bus addresses, its VRAM through the owner's BAR0 (peer to peer). Both are SYSTEM PTEs of this page table."""
        with self._lock:
            if mem.va_addr in self._backing or mem.va_addr in self._peers:
                return
            owner = next((o for o in list(_INTERFACES) if o is not self and mem.va_addr in o._backing), None)
            if owner is None:
                raise RuntimeError(f"AMD PCI: 0x{mem.va_addr:X} is not an allocation of a GPU of this process")
            bus_addresses = owner.bus_addresses(mem.va_addr)
            self.dev.mm.map_range(mem.va_addr, bus_addresses, system=True)
            self._peers[mem.va_addr] = len(bus_addresses) * am.PAGE_SIZE

    def bus_addresses(self, va: int) -> list[int]:
        """Where a peer reaches allocation `va` on the bus, page by page."""
        backing = self._backing[va]
        if backing.bus_addresses:
            return backing.bus_addresses
        bar0 = self.pci.bar_info(am.VRAM_BAR)[0]
        return [bar0 + backing.paddr + i * am.PAGE_SIZE for i in range(backing.size // am.PAGE_SIZE)]

    def create_queue(
        self, kind: QueueKind, ring: GPUAllocation, read_ptr: GPUAllocation, write_ptr: GPUAllocation
    ) -> HardwareQueue:
        same_kind = sum(1 for k, _, _ in self._queues if k == kind)
        slot = FIRST_DOORBELL + len(self._queues)
        params = (ring.va_addr, ring.size, read_ptr.va_addr, write_ptr.va_addr, slot)
        self._queues.append((kind, same_kind, params))
        self._setup(kind, same_kind, params)
        return HardwareQueue(kind, ring, read_ptr, write_ptr, PCIDoorbell(self.dev, slot), len(self._queues) - 1)

    def _setup(self, kind: QueueKind, queue: int, params: tuple[int, int, int, int, int]) -> None:
        if kind == QueueKind.COMPUTE:
            self.dev.setup_compute_ring(queue, *params)
        else:
            self.dev.setup_sdma_ring(queue, *params)

    def sleep(self, timeout_ms: int) -> None:
        self.dev.sleep(timeout_ms)

    def busy(self) -> bool:
        return self.dev.is_busy()

    def recover(self) -> None:
        """Reset the engines, then set every queue up again from empty (the caller restarts its pointers at 0)."""
        self.dev.recover(force=True)
        for kind, queue, params in self._queues:
            self._setup(kind, queue, params)

    def close(self) -> None:
        self.dev.fini()


_INTERFACES: weakref.WeakSet[PCIInterface] = weakref.WeakSet()  # open devices, for peer mappings

# --- opening ------------------------------------------------------------------------------------------------------
_SIM_BOARDS: dict[int, PCIDevice] = {}  # the simulated bus of this process: board index -> its PCI function
_SIM_LOCK = threading.Lock()


def simulated_board(index: int, shader_engines: ShaderEngines | None) -> PCIDevice:
    """Board `index` of the simulated bus, powered on at first use (in a child process with MOCKGPU_PROCESS=1); it
    outlives the drivers that open it (a second driver finds it booted, as on a real machine)."""
    from tg.drivers.amd.sim_pci import SimPCIDevice

    seed = os.environ.get(CHAOS_VARIABLE)
    with _SIM_LOCK:
        if index not in _SIM_BOARDS and os.environ.get(PROCESS_VARIABLE) == "1":
            from tg.drivers.amd.sim_process import ProcessPCIDevice

            _SIM_BOARDS[index] = ProcessPCIDevice(address=f"0000:{3 + index:02x}:00.0")
        if index not in _SIM_BOARDS:
            _SIM_BOARDS[index] = SimPCIDevice(
                shader_engines=shader_engines,
                chaos_seed=int(seed) if seed else None,
                address=f"0000:{3 + index:02x}:00.0",
            )
        return _SIM_BOARDS[index]


def sim_firmware_dir() -> Path:
    """AM_FIRMWARE_DIR, or the simulated board's own firmware package written once per process to a temp folder."""
    if os.environ.get(FIRMWARE_DIR_VARIABLE):
        return Path(os.environ[FIRMWARE_DIR_VARIABLE])
    from tg.drivers.amd.sim_am import write_sim_firmware

    global _SIM_FIRMWARE
    if _SIM_FIRMWARE is None:
        _SIM_FIRMWARE = write_sim_firmware(Path(tempfile.mkdtemp(prefix="tg-sim-firmware-")))
    return _SIM_FIRMWARE


_SIM_FIRMWARE: Path | None = None


def open_mock_pci(index: int, shader_engines: ShaderEngines | None) -> PCIInterface:
    return PCIInterface(simulated_board(index, shader_engines), sim_firmware_dir())


AMD_PCI_MATCHES = (DeviceMatch(0xFFFF, NAVI31_DEVICE_IDS),)


def open_pci(index: int) -> PCIInterface:
    """A Navi31 on this machine's PCI bus. Its register map is not the simulator's: the driver's tables
    (am_regs) are the simulated chip's, so a real board is refused with that reason rather than misprogrammed."""
    boards = scan_pci(VENDOR_AMD, AMD_PCI_MATCHES)
    if index >= len(boards):
        ids = ", ".join(f"{VENDOR_AMD:04x}:{d:04x}" for d in NAVI31_DEVICE_IDS)
        raise RuntimeError(
            f"PCI+AMD:{index} does not exist ({len(boards)} devices available): no AMD GPU ({ids}) on this machine's "
            "PCI bus; DEV=MOCKPCI+AMD runs the same userspace driver on the simulated Navi31"
        )
    raise RuntimeError(
        f"PCI+AMD: found {boards[index]}, but the userspace driver only knows the simulated Navi31's register map "
        "(tg.drivers.amd.am_regs); the real gc_11_0_0/nbio_4_3_0 register tables and PSP firmware format are not "
        "implemented. Use DEV=AMD (the kernel driver) on this machine"
    )
