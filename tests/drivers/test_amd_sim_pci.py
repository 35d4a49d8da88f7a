"""The simulated Navi31 PCI function (tg.drivers.amd.sim_pci) on its own, driven by hand through the PCIDevice
surface: config space and the BAR sizing protocol (PCI local bus spec), BAR decoding, doorbells that only wake the
engine, register side effects, and the MMU: a page table written by hand into VRAM, a TLB that keeps a stale
translation until the invalidate register, system memory through the IOMMU, bus mastering (spec hcq §3.4)."""

from __future__ import annotations

import struct
import threading

import pytest

from tg.drivers.amd import am_regs as am
from tg.drivers.amd.iface import GPUFault
from tg.drivers.amd.sim_mmu import IOMMU
from tg.drivers.amd.sim_pci import SMALL_BAR_SIZE, SimPCIDevice
from tg.drivers.pci import PCI_BAR0, PCI_COMMAND, PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY

REG = am.REG
VRAM = 512 << 20  # more than the small BAR shows (a memfd: only touched pages cost memory)
VA = 0x4000_0000  # where the hand-built page tables map things


@pytest.fixture
def board():
    device = SimPCIDevice(vram_size=VRAM, bus=IOMMU())
    device.write_config(PCI_COMMAND, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER, 2)
    yield device
    device.close()


# --- config space ---


def test_config_space_names_an_amd_navi31() -> None:
    device = SimPCIDevice(vram_size=VRAM, bus=IOMMU())
    assert (device.read_config(0, 2), device.read_config(2, 2)) == (0x1002, 0x744C)
    device.write_config(0, 0x1234, 2)  # read-only
    assert device.read_config(0, 2) == 0x1002


def bar_size_by_sizing(device: SimPCIDevice, register: int, is_64: bool) -> int:
    """The PCI sizing protocol: write all ones, read the mask back, restore; size = ~mask + 1 over the flag bits."""
    saved = [device.read_config(PCI_BAR0 + 4 * (register + i), 4) for i in range(2 if is_64 else 1)]
    for i in range(len(saved)):
        device.write_config(PCI_BAR0 + 4 * (register + i), 0xFFFFFFFF, 4)
    mask = device.read_config(PCI_BAR0 + 4 * register, 4) & ~0xF
    if is_64:
        mask |= device.read_config(PCI_BAR0 + 4 * register + 4, 4) << 32
    for i, value in enumerate(saved):
        device.write_config(PCI_BAR0 + 4 * (register + i), value, 4)
    width = 64 if is_64 else 32
    return (~mask & ((1 << width) - 1)) + 1


def test_bar_sizing_protocol_reports_each_bar_size_and_restores_the_address(board) -> None:
    before = board.bar_info(am.VRAM_BAR)
    assert bar_size_by_sizing(board, am.VRAM_BAR, is_64=True) == SMALL_BAR_SIZE
    assert bar_size_by_sizing(board, am.DOORBELL_BAR, is_64=True) == am.DOORBELL_BAR_SIZE
    assert bar_size_by_sizing(board, am.MMIO_BAR, is_64=False) == am.BAR5_SIZE
    assert board.bar_info(am.VRAM_BAR) == before
    assert board.read_config(PCI_BAR0, 4) & 0xF == 0xC  # 64-bit, prefetchable memory BAR


def test_resize_bar_opens_all_of_vram(board) -> None:
    board.resize_bar(am.VRAM_BAR)
    assert bar_size_by_sizing(board, am.VRAM_BAR, is_64=True) == VRAM
    assert len(board.map_bar(am.VRAM_BAR).read(VRAM - 4, 4)) == 4


def test_the_rebar_capability_lists_256_mib_up_to_all_of_vram_and_resizes_bar0(board) -> None:
    header = board.read_config(0x100, 4)
    assert (header & 0xFFFF, header >> 16 & 0xF) == (0x15, 1)  # resizable BAR, version 1
    capability = board.read_config(0x104, 4)
    assert [n for n in range(28) if capability >> (4 + n) & 1] == [8, 9]  # 2^n MiB: 256 MiB and 512 MiB
    control = board.read_config(0x108, 4)
    assert (control & 7, control >> 8 & 0x3F) == (am.VRAM_BAR, 8)
    board.write_config(0x108, (control & ~0x3F00) | 20 << 8, 4)  # 1 TiB: not listed, ignored
    assert bar_size_by_sizing(board, am.VRAM_BAR, is_64=True) == SMALL_BAR_SIZE
    board.write_config(0x108, (control & ~0x3F00) | 9 << 8, 4)
    assert bar_size_by_sizing(board, am.VRAM_BAR, is_64=True) == VRAM


def test_a_function_level_reset_clears_the_scratch_registers_and_the_command_register(board) -> None:
    mmio = board.map_bar(am.MMIO_BAR)
    mmio.write32(REG.SCRATCH_REG7 * 4, am.SCRATCH_BOOT_VERSION)
    board.map_bar(am.VRAM_BAR).write(0x5000, b"kept")
    board.reset()
    assert board.read_config(PCI_COMMAND, 2) == 0
    board.write_config(PCI_COMMAND, PCI_COMMAND_MEMORY, 2)
    assert mmio.read32(REG.SCRATCH_REG7 * 4) == 0
    assert board.map_bar(am.VRAM_BAR).read(0x5000, 4) == b"kept"  # VRAM survives the reset


def test_registers_read_all_ones_and_drop_writes_while_memory_decoding_is_off(board) -> None:
    mmio = board.map_bar(am.MMIO_BAR)
    board.write_config(PCI_COMMAND, 0, 2)
    mmio.write32(REG.SCRATCH_REG0 * 4, 0x1234)
    assert mmio.read32(REG.SCRATCH_REG0 * 4) == 0xFFFFFFFF
    board.write_config(PCI_COMMAND, PCI_COMMAND_MEMORY, 2)
    assert mmio.read32(REG.SCRATCH_REG0 * 4) == 0
    mmio.write32(REG.SCRATCH_REG0 * 4, 0x1234)
    assert mmio.read32(REG.SCRATCH_REG0 * 4) == 0x1234


def test_hdp_flush_and_tlb_invalidate_are_acknowledged(board) -> None:
    mmio = board.map_bar(am.MMIO_BAR)
    mmio.write32(REG.BIF_BX_PF0_GPU_HDP_FLUSH_REQ * 4, 1)
    assert mmio.read32(REG.BIF_BX_PF0_GPU_HDP_FLUSH_DONE * 4) == 1
    mmio.write32(REG.GCVM_INVALIDATE_ENG0_REQ * 4, 1)
    assert mmio.read32(REG.GCVM_INVALIDATE_ENG0_ACK * 4) == 1


def test_bar5_takes_only_aligned_32_bit_accesses(board) -> None:
    with pytest.raises(ValueError, match="aligned 32-bit"):
        board.map_bar(am.MMIO_BAR).write(2, b"\0\0\0\0")


# --- the MMU, with page tables written by hand ---


class HandPageTable:
    """Four levels in VRAM at fixed pages, written with struct (not the driver's code)."""

    def __init__(self, board: SimPCIDevice) -> None:
        self.vram = board.map_bar(am.VRAM_BAR)
        self.mmio = board.map_bar(am.MMIO_BAR)
        self.next_table = 0x10000
        self.root = self.new_table()
        self.mmio.write32(REG.GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32 * 4, self.root)
        self.mmio.write32(REG.GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32 * 4, 0)
        self.mmio.write32(REG.GCVM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32 * 4, 0xFFFFFFFF)
        self.mmio.write32(REG.GCVM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32 * 4, 0xF)
        self.mmio.write32(REG.GCVM_CONTEXT0_CNTL * 4, 1 | 3 << 1)

    def new_table(self) -> int:
        table, self.next_table = self.next_table, self.next_table + 0x1000
        self.vram.write(table, bytes(0x1000))
        return table

    def entry(self, va: int, level: int) -> int:
        table = self.root
        for upper in (3, 2, 1)[: 3 - level]:
            slot = table + ((va >> (12 + 9 * upper)) & 511) * 8
            (value,) = struct.unpack("<Q", self.vram.read(slot, 8))
            if not value & 1:
                value = self.new_table() | 1
                self.vram.write(slot, struct.pack("<Q", value))
            table = value & 0xFFFFFFFFF000
        return table + ((va >> (12 + 9 * level)) & 511) * 8

    def map_page(self, va: int, address: int, flags: int = 0x61) -> None:  # valid | readable | writeable
        self.vram.write(self.entry(va, 0), struct.pack("<Q", address | flags))

    def invalidate(self) -> None:
        self.mmio.write32(REG.GCVM_INVALIDATE_ENG0_REQ * 4, 1)


def test_a_gpu_access_walks_the_page_table_in_vram(board) -> None:
    table = HandPageTable(board)
    table.vram.write(0x200000, b"page at 2 MiB")
    table.map_page(VA + 0x3000, 0x200000)
    assert board.chip.memory.read(VA + 0x3000, 13) == b"page at 2 MiB"
    with pytest.raises(GPUFault, match=f"0x{VA + 0x4000:X}"):
        board.chip.memory.read(VA + 0x4000, 4)


def test_the_tlb_keeps_a_stale_translation_until_the_invalidate_register(board) -> None:
    table = HandPageTable(board)
    table.vram.write(0x200000, b"AAAA")
    table.vram.write(0x201000, b"BBBB")
    table.map_page(VA, 0x200000)
    assert board.chip.memory.read(VA, 4) == b"AAAA"
    table.map_page(VA, 0x201000)  # remapped in VRAM; the TLB still holds the old page
    assert board.chip.memory.read(VA, 4) == b"AAAA"
    table.invalidate()
    assert board.chip.memory.read(VA, 4) == b"BBBB"


def test_a_huge_page_pde_maps_2_mib(board) -> None:
    table = HandPageTable(board)
    table.vram.write(0x400000 + 0x12345, b"huge")
    table.vram.write(table.entry(VA, 1), struct.pack("<Q", 0x400000 | 0x61 | am.PDE_IS_PTE))
    assert board.chip.memory.read(VA + 0x12345, 4) == b"huge"


def test_a_write_to_a_read_only_page_faults(board) -> None:
    table = HandPageTable(board)
    table.map_page(VA, 0x200000, flags=0x21)  # valid | readable
    board.chip.memory.read(VA, 4)
    with pytest.raises(GPUFault, match="write"):
        board.chip.memory.write(VA, b"x")


def test_system_memory_is_reached_through_the_iommu_and_only_as_bus_master(board) -> None:
    table = HandPageTable(board)
    window, bus_addresses = board.alloc_sysmem(0x2000)
    window.write(0x1000, b"host bytes")
    table.map_page(VA, bus_addresses[1], flags=0x61 | am.PTE_SYSTEM)
    assert board.chip.memory.read(VA, 10) == b"host bytes"
    board.chip.memory.write(VA, b"GPU")
    assert window.read(0x1000, 3) == b"GPU"
    board.write_config(PCI_COMMAND, PCI_COMMAND_MEMORY, 2)  # MASTER off: no DMA
    with pytest.raises(GPUFault, match="bus mastering is disabled"):
        board.chip.memory.read(VA, 4)


def test_an_unknown_bus_address_faults(board) -> None:
    table = HandPageTable(board)
    table.map_page(VA, 0x7777_0000_0000, flags=0x61 | am.PTE_SYSTEM)
    with pytest.raises(GPUFault, match="bus address 0x777700000000 is not a page"):
        board.chip.memory.read(VA, 4)


def test_a_disabled_vm_context_faults(board) -> None:
    HandPageTable(board).mmio.write32(REG.GCVM_CONTEXT0_CNTL * 4, 0)
    with pytest.raises(GPUFault, match="VM context 0 is disabled"):
        board.chip.memory.read(VA, 4)


# --- doorbells ---


def test_a_doorbell_nobody_owns_is_dropped(board) -> None:
    board.map_bar(am.DOORBELL_BAR).write(8 * 7, struct.pack("<Q", 5))
    assert board.chip.stray_doorbells == 1


def test_a_doorbell_only_wakes_the_engine_which_runs_the_packets_in_its_own_thread(board) -> None:
    """An SDMA queue set up by hand; its FENCE is written by the engine thread, never inside the doorbell write."""
    table = HandPageTable(board)
    ring, pointers, target = VA, VA + 0x1000, VA + 0x2000
    for i, va in enumerate((ring, pointers, target)):
        table.map_page(va, 0x300000 + i * 0x1000)
    board.chip.firmware_loaded = [am.Firmware.SOS, am.Firmware.SDMA]  # (as if the PSP had loaded them)
    mmio = table.mmio
    mmio.write32(REG.sdma("RB_BASE", 0) * 4, ring >> 8)
    mmio.write32(REG.sdma("RB_RPTR_ADDR_LO", 0) * 4, pointers)
    mmio.write32(REG.sdma("RB_WPTR_POLL_ADDR_LO", 0) * 4, pointers + 8)
    mmio.write32(REG.sdma("DOORBELL_OFFSET", 0) * 4, (3 * 2) << am.DOORBELL_OFFSET_SHIFT)
    mmio.write32(REG.sdma("DOORBELL", 0) * 4, am.SDMA_DOORBELL_ENABLE)
    mmio.write32(REG.sdma("RB_CNTL", 0) * 4, am.SDMA_RB_ENABLE | 10 << am.SDMA_RB_SIZE_SHIFT)
    fence = struct.pack("<4I", 5 | 3 << 16, target & 0xFFFFFFFF, target >> 32, 0xC0FFEE)  # SDMA FENCE, mtype 3
    table.vram.write(0x300000, fence)
    writers: list[str] = []
    real_write = board.chip.memory.write

    def recording_write(address: int, data: bytes) -> None:
        writers.append(threading.current_thread().name)
        real_write(address, data)

    board.chip.memory.write = recording_write  # type: ignore[method-assign]
    board.map_bar(am.DOORBELL_BAR).write(3 * 8, struct.pack("<Q", len(fence)))
    deadline = threading.Event()
    for _ in range(2000):
        if board.chip.memory.read_u32(target) == 0xC0FFEE:
            break
        deadline.wait(0.005)
    assert board.chip.memory.read_u32(target) == 0xC0FFEE
    assert writers and threading.current_thread().name not in writers
    assert all(name.startswith("navi31-sdma0") for name in writers)


def test_a_queue_before_its_firmware_is_refused(board) -> None:
    from tg.drivers.sim.romsw import SimProtocolError

    HandPageTable(board)
    mmio = board.map_bar(am.MMIO_BAR)
    mmio.write32(REG.sdma("DOORBELL", 0) * 4, am.SDMA_DOORBELL_ENABLE)
    with pytest.raises(SimProtocolError, match="before the PSP loaded the SDMA firmware"):
        mmio.write32(REG.sdma("RB_CNTL", 0) * 4, am.SDMA_RB_ENABLE | 10 << am.SDMA_RB_SIZE_SHIFT)
