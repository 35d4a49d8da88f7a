"""How the simulated PCI Navi31 sees memory: a GPU page table walked from VRAM bytes, a TLB, and an IOMMU for
system memory.

The driver writes the page table into VRAM (through BAR0) and points VM context 0 at its root; every engine access
goes through `MMU.translate`, which walks the four levels (PDB2 -> PDB1 -> PDB0 -> PTE, tg.drivers.amd.am_regs'
PTE_* format) on a TLB miss and caches the result. The TLB is refreshed only when the driver writes the invalidate
register, so a driver that changes a mapping and forgets the invalidation keeps seeing the old page, as on hardware.
A PTE with the SYSTEM bit holds a bus address: the IOMMU turns it into the system-memory page alloc_sysmem handed
out (an unknown bus address faults), and only while the function may master the bus (PCI command MASTER bit).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from tg.drivers.amd import am_regs as am
from tg.drivers.amd.iface import GPUFault
from tg.drivers.amd.navi31_memory import WriteAnnouncer

PAGE_MASK = am.PAGE_SIZE - 1
IOMMU_BASE = 0x1000_0000_0000  # the first bus address the simulated host hands out (above every BAR)


class IOMMU:
    """The simulated bus as a device sees it: bus address -> a system-memory page alloc_sysmem handed out, or a page
    of a board's BAR0 (peer-to-peer: one GPU reaching another's VRAM). Every board of the process shares one."""

    def __init__(self) -> None:
        self._pages: dict[int, memoryview] = {}
        self._bars: list[tuple[int, memoryview]] = []  # (bus address, VRAM) of each board's BAR0
        self._next = itertools.count(IOMMU_BASE, am.PAGE_SIZE)
        self._lock = threading.Lock()

    def register(self, memory: memoryview) -> list[int]:
        """Give each 4 KiB page of `memory` a bus address (contiguous ones: the sim never fragments)."""
        with self._lock:
            addresses = [next(self._next) for _ in range(len(memory) // am.PAGE_SIZE)]
            for index, bus in enumerate(addresses):
                self._pages[bus] = memory[index * am.PAGE_SIZE : (index + 1) * am.PAGE_SIZE]
        return addresses

    def unregister(self, addresses: list[int]) -> None:
        with self._lock:
            for bus in addresses:
                self._pages.pop(bus).release()

    def add_bar(self, bus_address: int, vram: memoryview) -> None:
        self._bars.append((bus_address, vram))

    def next_bar_address(self, base: int, stride: int) -> int:
        return base + stride * len(self._bars)

    def page(self, bus_address: int) -> memoryview | None:
        bus_address &= ~PAGE_MASK
        page = self._pages.get(bus_address)
        if page is None:
            for start, vram in self._bars:
                if start <= bus_address < start + len(vram):
                    return vram[bus_address - start : bus_address - start + am.PAGE_SIZE]
        return page


class MMU:
    """VM context 0's translation: registers say where the root table is and which VA range is valid."""

    def __init__(
        self, vram: memoryview, register: Callable[[int], int], iommu: IOMMU, bus_master: Callable[[], bool]
    ) -> None:
        self.vram = vram
        self.register = register
        self.iommu = iommu
        self.bus_master = bus_master
        self._tlb: dict[int, tuple[memoryview, bool, bool]] = {}  # VA page -> (page bytes, writable, system)
        self._huge_tlb: dict[int, tuple[memoryview, bool, bool]] = {}  # VA >> 21 -> (2 MiB of VRAM, ...)
        self.walks = 0  # page-table walks (TLB misses), for tests

    def invalidate(self) -> None:
        self._tlb = {}
        self._huge_tlb = {}

    def translate(self, address: int, access: str) -> memoryview:
        """The 4 KiB page holding `address`; GPUFault if it is not mapped for `access` ("read"/"write")."""
        entry = self._tlb.get(address >> 12)
        if entry is None:
            huge = self._huge_tlb.get(address >> 21)
            if huge is None:
                entry = self._walk(address, access)
            else:  # a 2 MiB entry: the page is a slice of it
                offset = address & (am.HUGE_PAGE_SIZE - 1) & ~PAGE_MASK
                entry = (huge[0][offset : offset + am.PAGE_SIZE], huge[1], huge[2])
            self._tlb[address >> 12] = entry
        page, writable, system = entry
        if access == "write" and not writable:
            raise GPUFault(address, access)
        if system and not self.bus_master():
            raise GPUFault(address, f"{access} (bus mastering is disabled)")
        return page

    def _walk(self, address: int, access: str) -> tuple[memoryview, bool, bool]:
        self.walks += 1
        if not self.register(am.REG.GCVM_CONTEXT0_CNTL) & am.VM_CONTEXT_ENABLE:
            raise GPUFault(address, f"{access} (VM context 0 is disabled)")
        start = self._pair(am.REG.GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32) << 12
        end = self._pair(am.REG.GCVM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32) << 12
        if not start <= address <= end | PAGE_MASK:
            raise GPUFault(address, access)
        table = self._pair(am.REG.GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32)
        for level in range(am.VM_CONTEXT_DEPTH, -1, -1):
            shift = 12 + am.LEVEL_BITS * level
            entry = self._vram_u64(table + ((address >> shift) & ((1 << am.LEVEL_BITS) - 1)) * 8, address)
            if not entry & am.PTE_VALID:
                raise GPUFault(address, access)
            writable, system = bool(entry & am.PTE_WRITEABLE), bool(entry & am.PTE_SYSTEM)
            if level == 1 and entry & am.PDE_IS_PTE and not system:  # a 2 MiB page of VRAM
                base = entry & am.PTE_ADDRESS_MASK & ~(am.HUGE_PAGE_SIZE - 1)
                if base + am.HUGE_PAGE_SIZE > len(self.vram):
                    raise GPUFault(address, f"{access} (VRAM address 0x{base:X} is past the end of VRAM)")
                self._huge_tlb[address >> 21] = (self.vram[base : base + am.HUGE_PAGE_SIZE], writable, system)
                offset = address & (am.HUGE_PAGE_SIZE - 1) & ~PAGE_MASK
                return self.vram[base + offset : base + offset + am.PAGE_SIZE], writable, system
            if level == 0:
                return self._page(entry & am.PTE_ADDRESS_MASK, system, address, access), writable, system
            table = entry & am.PTE_ADDRESS_MASK
        raise AssertionError("unreachable: level 0 returns")

    def _page(self, base: int, system: bool, address: int, access: str) -> memoryview:
        if system:
            page = self.iommu.page(base)
            if page is None:
                raise GPUFault(address, f"{access} (bus address 0x{base:X} is not a page of this device's memory)")
            return page
        if base + am.PAGE_SIZE > len(self.vram):
            raise GPUFault(address, f"{access} (VRAM address 0x{base:X} is past the end of VRAM)")
        return self.vram[base : base + am.PAGE_SIZE]

    def _pair(self, low_register: int) -> int:
        return self.register(low_register) | self.register(low_register + 1) << 32

    def _vram_u64(self, paddr: int, address: int) -> int:
        if paddr + 8 > len(self.vram):
            raise GPUFault(address, f"page-table walk (table at 0x{paddr:X} is past the end of VRAM)")
        return int.from_bytes(self.vram[paddr : paddr + 8], "little")


class TranslatedMemory(WriteAnnouncer):
    """The engines' GPUMemory (tg.drivers.amd.iface) on the PCI simulator: every access through the MMU."""

    def __init__(self, mmu: MMU) -> None:
        super().__init__()
        self.mmu = mmu

    def _pieces(self, address: int, size: int, access: str) -> list[tuple[memoryview, int, int]]:
        pieces = []
        while size > 0:
            offset = address & PAGE_MASK
            length = min(size, am.PAGE_SIZE - offset)
            pieces.append((self.mmu.translate(address, access), offset, length))
            address += length
            size -= length
        return pieces

    def read(self, address: int, size: int) -> bytes:
        if (address & PAGE_MASK) + size <= am.PAGE_SIZE:  # the common case: one page
            offset = address & PAGE_MASK
            return bytes(self.mmu.translate(address, "read")[offset : offset + size])
        return b"".join(bytes(page[offset : offset + n]) for page, offset, n in self._pieces(address, size, "read"))

    def write(self, address: int, data: bytes) -> None:
        source = memoryview(data).cast("B")
        done = 0
        for page, offset, length in self._pieces(address, len(source), "write"):
            page[offset : offset + length] = source[done : done + length]
            done += length
        self._announce_write()

    def copy(self, destination: int, source: int, size: int) -> None:
        done = 0
        while done < size:
            piece = min(size - done, am.PAGE_SIZE - ((source + done) & PAGE_MASK))
            self.write(destination + done, self.read(source + done, piece))
            done += piece

    def is_mapped(self, address: int, size: int = 1) -> bool:
        try:
            self._pieces(address, size, "read")
        except GPUFault:
            return False
        return True
