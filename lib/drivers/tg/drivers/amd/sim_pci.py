"""A simulated Navi31 PCI function (`SimPCIDevice`): the PCIDevice surface (tg.drivers.pci) over the chip model of
tg.drivers.amd.sim_am, what `DEV=MOCKPCI+AMD` drives.

- Config space (4 KiB): vendor/device 0x1002:0x744C, the command register (MEMORY: BAR decoding; MASTER: the chip's
  DMA to system memory faults without it), BARs with the sizing protocol (writing 0xFFFFFFFF reads back the size
  mask): BAR0 64-bit prefetchable VRAM, BAR2 64-bit doorbells, BAR5 32-bit registers; the resizable-BAR extended
  capability at 0x100 for BAR0 (256 MiB up to all of VRAM).
- BAR0: VRAM, a memfd (sparse: only touched pages take host memory), mapped shared by the driver and the chip.
  The BAR starts small (256 MiB visible) until `resize_bar(0)` programs the REBAR control to the largest size.
- BAR2: 64-bit doorbells; a write wakes the engine that owns the slot and returns (the engine runs in its thread).
- BAR5: the register file (tg.drivers.amd.am_regs), its side effects in the chip.
- alloc_sysmem: host pages with bus addresses the chip's IOMMU knows; `irq_fd`: the MSI, an eventfd.
- reset(): function-level reset (the chip's mode-1 reset, the command register cleared).

While MEMORY is clear, BAR2/BAR5 reads return all ones and writes are dropped, as on a real bus.
"""

from __future__ import annotations

import ctypes
import mmap
import os

from tg.drivers.amd import am_regs as am
from tg.drivers.amd.iface import ShaderEngines
from tg.drivers.amd.sim_am import SimNavi31Chip, irq_eventfd
from tg.drivers.amd.sim_mmu import IOMMU
from tg.drivers.mmio import BufferMMIO, MMIOInterface
from tg.drivers.navi31_regs import NAVI31_DEVICE_IDS, VENDOR_AMD
from tg.drivers.pci import (
    PCI_BAR0,
    PCI_BAR_MEM_TYPE_64,
    PCI_BAR_PREFETCH,
    PCI_COMMAND,
    PCI_COMMAND_MASTER,
    PCI_COMMAND_MEMORY,
    PCI_CONFIG_SIZE,
    PCI_DEVICE_ID,
    PCI_EXT_CAP_ID_REBAR,
    PCI_VENDOR_ID,
    REBAR_CAPABILITY,
    REBAR_CONTROL,
    REBAR_CONTROL_SIZE_MASK,
    REBAR_CONTROL_SIZE_SHIFT,
    PCIDevice,
    map_fixed,
)

DEFAULT_SIM_VRAM = 512 << 20
SMALL_BAR_SIZE = 256 << 20
REBAR_CAP_OFFSET = 0x100
VRAM_BAR_BASE, VRAM_BAR_STRIDE = 0x40_0000_0000, 0x10_0000_0000  # board n's BAR0 bus address: base + n * stride
BAR_BUS_ADDRESSES = {am.DOORBELL_BAR: 0xF000_0000, am.MMIO_BAR: 0xF010_0000}
SIM_BUS = IOMMU()  # the bus every simulated board of this process sits on
BAR_FLAGS = {
    am.VRAM_BAR: PCI_BAR_MEM_TYPE_64 | PCI_BAR_PREFETCH,
    am.DOORBELL_BAR: PCI_BAR_MEM_TYPE_64,
    am.MMIO_BAR: 0,
}


def page_rounded(size: int) -> int:
    return (max(size, 1) + am.PAGE_SIZE - 1) // am.PAGE_SIZE * am.PAGE_SIZE


def map_shared(fd: int, size: int, vaddr: int = 0) -> BufferMMIO:
    """A window on `size` bytes of memfd `fd`: at `vaddr` (inside a reserve_va window) when given."""
    if vaddr:
        map_fixed(fd, 0, vaddr, size)
        return BufferMMIO(memoryview((ctypes.c_char * size).from_address(vaddr)).cast("B"))
    return BufferMMIO(memoryview(mmap.mmap(fd, size, mmap.MAP_SHARED)))


class SimRegisterBAR(MMIOInterface):
    """BAR5: 32-bit registers; every access goes to the chip's register file (with its side effects)."""

    def __init__(self, device: SimPCIDevice) -> None:
        self.device = device
        self.size = am.BAR5_SIZE

    def read(self, offset: int, size: int) -> bytes:
        self._check(offset, size)
        return self.read32(offset).to_bytes(4, "little")

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        self.write32(offset, int.from_bytes(data, "little"))

    def read32(self, offset: int) -> int:
        self._check(offset, 4)
        if not self.device.decoding():
            return 0xFFFFFFFF
        return self.device.chip.read_register(offset // 4)

    def write32(self, offset: int, value: int) -> None:
        self._check(offset, 4)
        if self.device.decoding():
            self.device.chip.write_register(offset // 4, value)

    def _check(self, offset: int, size: int) -> None:
        if size != 4 or offset % 4 or not 0 <= offset < self.size:
            raise ValueError(f"BAR5 takes aligned 32-bit accesses (0x{self.size:x} bytes), not 0x{offset:x}+{size}")


class SimDoorbellBAR(MMIOInterface):
    """BAR2: 64-bit doorbell slots. A write records the value and wakes the owning engine, nothing more."""

    def __init__(self, device: SimPCIDevice) -> None:
        self.device = device
        self.size = am.DOORBELL_BAR_SIZE
        self._values = [0] * (self.size // 8)

    def read(self, offset: int, size: int) -> bytes:
        self._check(offset, size)
        value = self._values[offset // 8] if self.device.decoding() else (1 << 64) - 1
        return value.to_bytes(8, "little")

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        if not self.device.decoding():
            return
        value = int.from_bytes(data, "little")
        self._values[offset // 8] = value
        self.device.chip.ring_doorbell(offset // 8, value)

    def _check(self, offset: int, size: int) -> None:
        if size != 8 or offset % 8 or not 0 <= offset < self.size:
            raise ValueError(f"doorbells are aligned 64-bit writes (0x{self.size:x} bytes), not 0x{offset:x}+{size}")


class SimPCIDevice(PCIDevice):
    """The simulated board on the simulated bus: one PCI function, the chip behind its BARs."""

    def __init__(
        self,
        vram_size: int = DEFAULT_SIM_VRAM,
        shader_engines: ShaderEngines | None = None,
        chaos_seed: int | None = None,
        address: str = "0000:03:00.0",
        bus: IOMMU = SIM_BUS,
    ) -> None:
        self.address = address
        self.vendor_id, self.device_id = VENDOR_AMD, NAVI31_DEVICE_IDS[0]
        self.config = bytearray(PCI_CONFIG_SIZE)
        self.config[PCI_VENDOR_ID : PCI_VENDOR_ID + 2] = self.vendor_id.to_bytes(2, "little")
        self.config[PCI_DEVICE_ID : PCI_DEVICE_ID + 2] = self.device_id.to_bytes(2, "little")
        self.vram_size = vram_size
        self._bar_sizes = {am.VRAM_BAR: min(SMALL_BAR_SIZE, vram_size), am.DOORBELL_BAR: am.DOORBELL_BAR_SIZE}
        self._bar_sizes[am.MMIO_BAR] = am.BAR5_SIZE
        bar_addresses = {am.VRAM_BAR: bus.next_bar_address(VRAM_BAR_BASE, VRAM_BAR_STRIDE), **BAR_BUS_ADDRESSES}
        for bar, address_of_bar in bar_addresses.items():
            self._set_bar_register(bar, address_of_bar)
        self._init_rebar()
        self.vram_fd = os.memfd_create("tg-sim-navi31-vram", os.MFD_CLOEXEC)
        os.ftruncate(self.vram_fd, vram_size)
        self._vram_map = mmap.mmap(self.vram_fd, vram_size, mmap.MAP_SHARED)  # the chip's own view of VRAM
        self._driver_maps: list[mmap.mmap] = []
        self._sysmem: dict[int, tuple[mmap.mmap, list[int]]] = {}  # first bus address -> (chip's view, bus addresses)
        self._windows: dict[int, int] = {}  # CPU address of an alloc_sysmem window -> its first bus address
        self.iommu = bus
        bus.add_bar(bar_addresses[am.VRAM_BAR], memoryview(self._vram_map))
        self.irq_fd = irq_eventfd()
        self.chip = SimNavi31Chip(
            memoryview(self._vram_map), self.iommu, self.bus_master, self._fire_irq, shader_engines, chaos_seed
        )
        self._bars = {am.DOORBELL_BAR: SimDoorbellBAR(self), am.MMIO_BAR: SimRegisterBAR(self)}

    # -- config space ----------------------------------------------------------------------------------------------
    def read_config(self, offset: int, size: int) -> int:
        self._check_config(offset, size)
        return int.from_bytes(self.config[offset : offset + size], "little")

    def write_config(self, offset: int, value: int, size: int) -> None:
        self._check_config(offset, size)
        bar_register = (offset - PCI_BAR0) // 4
        if PCI_BAR0 <= offset < PCI_BAR0 + 24 and size == 4:
            self._write_bar_register(bar_register, value)
            return
        if offset == REBAR_CAP_OFFSET + REBAR_CONTROL and size == 4:
            self._write_rebar_control(value)
            return
        if offset in (PCI_VENDOR_ID, PCI_DEVICE_ID) or REBAR_CAP_OFFSET <= offset < REBAR_CAP_OFFSET + REBAR_CONTROL:
            return  # read-only
        self.config[offset : offset + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")

    def _init_rebar(self) -> None:
        sizes = range((SMALL_BAR_SIZE >> 20).bit_length() - 1, (self.vram_size >> 20).bit_length())
        capability = sum(1 << (4 + n) for n in sizes)
        control = (
            am.VRAM_BAR | 1 << 5 | ((self._bar_sizes[am.VRAM_BAR] >> 20).bit_length() - 1) << REBAR_CONTROL_SIZE_SHIFT
        )
        for offset, value in ((0, PCI_EXT_CAP_ID_REBAR | 1 << 16), (REBAR_CAPABILITY, capability)):
            self.config[REBAR_CAP_OFFSET + offset : REBAR_CAP_OFFSET + offset + 4] = value.to_bytes(4, "little")
        self._write_rebar_control(control)

    def _write_rebar_control(self, value: int) -> None:
        """A BAR0 size the capability lists takes effect (the BAR's address is re-masked); others are ignored."""
        n = (value >> REBAR_CONTROL_SIZE_SHIFT) & REBAR_CONTROL_SIZE_MASK
        if not self.read_config(REBAR_CAP_OFFSET + REBAR_CAPABILITY, 4) >> (4 + n) & 1:
            return
        self.config[REBAR_CAP_OFFSET + REBAR_CONTROL : REBAR_CAP_OFFSET + REBAR_CONTROL + 4] = value.to_bytes(
            4, "little"
        )
        address = self.bar_info(am.VRAM_BAR)[0] if am.VRAM_BAR in self._bar_sizes else 0
        self._bar_sizes[am.VRAM_BAR] = 1 << (20 + n)
        self._set_bar_register(am.VRAM_BAR, address)

    def _check_config(self, offset: int, size: int) -> None:
        if size not in (1, 2, 4) or offset % size or not 0 <= offset <= PCI_CONFIG_SIZE - size:
            raise ValueError(f"config access 0x{offset:x}+{size} is not a naturally aligned 1/2/4-byte access")

    def _write_bar_register(self, register: int, value: int) -> None:
        """A BAR register write; all ones asks for the size mask (the sizing protocol), which the next read shows."""
        for bar, size in self._bar_sizes.items():
            is_64 = BAR_FLAGS[bar] & PCI_BAR_MEM_TYPE_64
            if register == bar:
                low = (value & ~(size - 1) & 0xFFFFFFF0) | BAR_FLAGS[bar]
                self.config[PCI_BAR0 + 4 * bar : PCI_BAR0 + 4 * bar + 4] = low.to_bytes(4, "little")
                return
            if is_64 and register == bar + 1:
                high = value & (~(size - 1) >> 32) & 0xFFFFFFFF
                self.config[PCI_BAR0 + 4 * register : PCI_BAR0 + 4 * register + 4] = high.to_bytes(4, "little")
                return

    def _set_bar_register(self, bar: int, address: int) -> None:
        self._write_bar_register(bar, address & 0xFFFFFFFF)
        if BAR_FLAGS[bar] & PCI_BAR_MEM_TYPE_64:
            self._write_bar_register(bar + 1, address >> 32)

    def bar_info(self, bar: int) -> tuple[int, int]:
        if bar not in self._bar_sizes:
            raise ValueError(f"BAR {bar} is not implemented by {self.address}")
        low = self.read_config(PCI_BAR0 + 4 * bar, 4) & ~0xF
        high = self.read_config(PCI_BAR0 + 4 * bar + 4, 4) if BAR_FLAGS[bar] & PCI_BAR_MEM_TYPE_64 else 0
        return low | high << 32, self._bar_sizes[bar]

    def command(self) -> int:
        return self.read_config(PCI_COMMAND, 2)

    def decoding(self) -> bool:
        return bool(self.command() & PCI_COMMAND_MEMORY)

    def bus_master(self) -> bool:
        return bool(self.command() & PCI_COMMAND_MASTER)

    def resize_bar(self, bar: int) -> None:
        """What the platform does for `resourceN_resize`: program the REBAR control to the largest listed size."""
        if bar != am.VRAM_BAR:
            raise ValueError(f"only BAR0 (VRAM) is resizable, not BAR {bar}")
        largest = self.read_config(REBAR_CAP_OFFSET + REBAR_CAPABILITY, 4).bit_length() - 1 - 4
        control = self.read_config(REBAR_CAP_OFFSET + REBAR_CONTROL, 4) & ~(REBAR_CONTROL_SIZE_MASK << 8)
        self.write_config(REBAR_CAP_OFFSET + REBAR_CONTROL, control | largest << REBAR_CONTROL_SIZE_SHIFT, 4)

    # -- BARs ------------------------------------------------------------------------------------------------------
    def map_bar(self, bar: int) -> MMIOInterface:
        if bar == am.VRAM_BAR:  # plain shared memory, the first bar_info(0) bytes of VRAM
            mapping = mmap.mmap(self.vram_fd, self._bar_sizes[bar], mmap.MAP_SHARED)
            self._driver_maps.append(mapping)
            return BufferMMIO(memoryview(mapping))
        if bar not in self._bars:
            raise ValueError(f"BAR {bar} is not implemented by {self.address}")
        return self._bars[bar]

    def map_bar_at(self, bar: int, offset: int, address: int, size: int) -> None:
        if bar != am.VRAM_BAR or offset + size > self._bar_sizes[bar]:
            raise ValueError(f"BAR {bar} bytes 0x{offset:x}+0x{size:x} cannot be mapped at an address")
        map_fixed(self.vram_fd, offset, address, size)

    # -- system memory and interrupts ------------------------------------------------------------------------------
    def alloc_sysmem(self, size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[MMIOInterface, list[int]]:
        """Host pages shared by the driver (at `vaddr` when given) and the chip (its own mapping, as a device
        reaches host memory by bus address, not through the process's page tables)."""
        size = page_rounded(size)
        fd, addresses = self.new_sysmem(size)
        try:
            window = map_shared(fd, size, vaddr)
        finally:
            os.close(fd)
        self._windows[window.address] = addresses[0]
        return window, addresses

    def free_sysmem(self, memory: MMIOInterface) -> None:
        self.release_sysmem(self._windows.pop(memory.address))  # type: ignore[attr-defined]

    def new_sysmem(self, size: int) -> tuple[int, list[int]]:
        """A memfd of `size` host bytes the chip reaches at the returned bus addresses; the caller maps and closes
        the fd (in this process, or in the driver's when the board runs in a process of its own)."""
        fd = os.memfd_create("tg-sim-sysmem", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        chip_view = mmap.mmap(fd, size, mmap.MAP_SHARED)
        addresses = self.iommu.register(memoryview(chip_view))
        self._sysmem[addresses[0]] = (chip_view, addresses)
        return fd, addresses

    def release_sysmem(self, first_bus_address: int) -> None:
        chip_view, addresses = self._sysmem.pop(first_bus_address)
        self.iommu.unregister(addresses)
        try:
            chip_view.close()
        except BufferError:  # an engine still holds a page of it (a TLB entry): the mapping goes with that view
            pass

    def _fire_irq(self) -> None:
        os.eventfd_write(self.irq_fd, 1)

    def reset(self) -> None:
        self.chip.mode1_reset()
        self.write_config(PCI_COMMAND, 0, 2)

    def close(self) -> None:
        self.chip.close()
        os.close(self.irq_fd)

    def __repr__(self) -> str:
        return f"SimPCIDevice({self.address} {self.vendor_id:04x}:{self.device_id:04x})"
