"""The userspace driver (tg.drivers.amd.am_driver.AMDev) booting the simulated board (spec hcq §3.11): cold boot
loads every firmware blob through the PSP, a second driver after a clean `fini` boots partially, AM_RESET=1 and a
crashed previous session force a full reset; missing and corrupted firmware are clear errors; the page tables the
driver writes are the ones the simulated MMU walks."""

from __future__ import annotations

import hashlib
import random

import pytest

from tg.drivers.amd import am_regs as am
from tg.drivers.amd.am_driver import AMDev, AMError
from tg.drivers.amd.iface import GPUFault
from tg.drivers.amd.sim_mmu import IOMMU
from tg.drivers.amd.sim_pci import SimPCIDevice

REG = am.REG


@pytest.fixture
def firmware(tmp_path):
    """A firmware package made here: random payloads, each blob's header carrying the payload's sha256."""
    rng = random.Random(31)
    for component, name in am.FIRMWARE_FILES.items():
        (tmp_path / name).write_bytes(am.pack_firmware(component, rng.randbytes(3000 + component)))
    return tmp_path


@pytest.fixture
def board():
    device = SimPCIDevice(vram_size=256 << 20, bus=IOMMU())
    yield device
    device.close()


def test_a_cold_board_gets_a_full_boot_with_every_firmware(board, firmware) -> None:
    dev = AMDev(board, firmware)
    assert not dev.partial_boot
    assert board.chip.firmware_loaded == list(am.Firmware)  # SOS first, then the rest in order
    assert dev.rreg(REG.SCRATCH_REG7) == am.SCRATCH_BOOT_VERSION
    assert dev.rreg(REG.SCRATCH_REG6) == am.SESSION_RUNNING
    assert dev.gfx_version == (11, 0, 0) and dev.properties()["simd_count"] == 192  # from the discovery table


def test_a_second_driver_after_a_clean_fini_boots_partially(board, firmware) -> None:
    AMDev(board, firmware).fini()
    loads, resets = board.chip.psp_loads, board.chip.mode1_resets
    second = AMDev(board, firmware)
    assert second.partial_boot
    assert (board.chip.psp_loads, board.chip.mode1_resets) == (loads, resets)


def test_am_reset_forces_a_full_boot(board, firmware, monkeypatch: pytest.MonkeyPatch) -> None:
    AMDev(board, firmware).fini()
    monkeypatch.setenv("AM_RESET", "1")
    loads, resets = board.chip.psp_loads, board.chip.mode1_resets
    dev = AMDev(board, firmware)
    assert not dev.partial_boot
    assert board.chip.mode1_resets == resets + 1  # SOS was running: the chip is reset before loading again
    assert board.chip.psp_loads == loads + len(am.Firmware)


def test_a_previous_session_that_did_not_finalize_forces_a_full_reset(board, firmware) -> None:
    AMDev(board, firmware)  # no fini(): SCRATCH_REG6 still says the session runs
    resets = board.chip.mode1_resets
    dev = AMDev(board, firmware)
    assert not dev.partial_boot and board.chip.mode1_resets == resets + 1


def test_a_missing_firmware_blob_is_a_clear_error(board, firmware) -> None:
    (firmware / am.FIRMWARE_FILES[am.Firmware.MEC]).unlink()
    with pytest.raises(AMError, match=r"firmware .*gc_11_0_0_mec\.bin is missing \(the MEC blob"):
        AMDev(board, firmware)


def test_a_corrupted_firmware_blob_is_a_clear_error_naming_both_hashes(board, firmware) -> None:
    path = firmware / am.FIRMWARE_FILES[am.Firmware.SDMA]
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF
    path.write_bytes(bytes(blob))
    actual = hashlib.sha256(bytes(blob[am.FIRMWARE_HEADER.size :])).hexdigest()
    with pytest.raises(AMError, match=rf"sdma_6_0_0\.bin is corrupted: its payload's sha256 is {actual}"):
        AMDev(board, firmware)


def test_am_debug_logs_each_firmware_blob_s_sha256(board, firmware, monkeypatch, capsys) -> None:
    monkeypatch.setenv("AM_DEBUG", "1")
    AMDev(board, firmware)
    sos = (firmware / am.FIRMWARE_FILES[am.Firmware.SOS]).read_bytes()
    assert f"AM: firmware psp_13_0_0_sos.bin sha256={hashlib.sha256(sos).hexdigest()}" in capsys.readouterr().err


def test_a_queue_the_engine_does_not_have_is_refused(board, firmware) -> None:
    with pytest.raises(AMError, match="SDMA0 has 2 queues; there is no queue 2"):
        AMDev(board, firmware).setup_sdma_ring(2, 0, 0x1000, 0, 8, doorbell=9)


def test_the_psp_itself_rejects_a_blob_whose_sha256_does_not_match(board, firmware) -> None:
    """The PSP checks what it is given: a corrupted blob that skipped the driver's check is still refused."""
    mmio, vram = board.map_bar(am.MMIO_BAR), board.map_bar(am.VRAM_BAR)
    board.write_config(4, 0x6, 2)
    blob = bytearray((firmware / am.FIRMWARE_FILES[am.Firmware.SOS]).read_bytes())
    blob[-1] ^= 1
    vram.write(0x1000, bytes(blob))
    mmio.write32(REG.MP0_SMN_C2PMSG_36 * 4, 0x1000)
    mmio.write32(REG.MP0_SMN_C2PMSG_38 * 4, len(blob))
    mmio.write32(REG.MP0_SMN_C2PMSG_35 * 4, am.PSPCommand.LOAD_SOS)
    assert mmio.read32(REG.MP0_SMN_C2PMSG_35 * 4) == am.PSP_READY | am.PSPStatus.SIGNATURE_MISMATCH
    assert mmio.read32(REG.MP0_SMN_C2PMSG_81 * 4) == 0  # SOS does not run


def test_the_driver_page_table_is_what_the_gpu_walks(board, firmware) -> None:
    dev = AMDev(board, firmware)
    paddr = dev.mm.palloc(0x3000)
    va = dev.mm.alloc_vaddr(0x3000)
    dev.mm.map_range(va, [paddr, paddr + 0x1000, paddr + 0x2000], system=False)
    dev.vram.write(paddr + 0x1FFE, b"spans")
    assert board.chip.memory.read(va + 0x1FFE, 5) == b"spans"
    dev.mm.unmap_range(va, 0x3000)
    with pytest.raises(GPUFault):
        board.chip.memory.read(va, 4)


def test_a_2_mib_aligned_vram_range_is_mapped_with_huge_pages(board, firmware) -> None:
    dev = AMDev(board, firmware)
    size = 2 * am.HUGE_PAGE_SIZE
    paddr, va = dev.mm.palloc(size, alignment=am.HUGE_PAGE_SIZE), dev.mm.alloc_vaddr(size)
    dev.mm.map_range(va, [paddr + i * am.PAGE_SIZE for i in range(size // am.PAGE_SIZE)], system=False)
    dev.vram.write(paddr + size - 4, b"last")
    walks = board.chip.mmu.walks
    assert board.chip.memory.read(va + size - 4, 4) == b"last"
    assert board.chip.memory.read(va + size - 0x10000, 4) == bytes(4)  # same 2 MiB page: no new walk
    assert board.chip.mmu.walks == walks + 1


def test_fini_stops_the_queues_and_marks_the_session_finalized(board, firmware) -> None:
    dev = AMDev(board, firmware)
    ring, pointers = dev.mm.alloc_vaddr(0x1000), dev.mm.alloc_vaddr(0x1000)
    for va in (ring, pointers):
        dev.mm.map_range(va, [dev.mm.palloc(0x1000)], system=False)
    dev.setup_compute_ring(0, ring, 0x1000, pointers, pointers + 8, doorbell=4)
    assert ("compute", 0) in board.chip.engines
    dev.fini()
    assert not board.chip.engines and dev.rreg(REG.SCRATCH_REG6) == am.SESSION_FINALIZED


def test_recover_resets_the_engines_and_clears_the_fault(board, firmware) -> None:
    dev = AMDev(board, firmware)
    ring_paddr = dev.mm.palloc(0x1000)
    ring, pointers = dev.mm.alloc_vaddr(0x1000), dev.mm.alloc_vaddr(0x1000)
    dev.mm.map_range(ring, [ring_paddr], system=False)
    dev.mm.map_range(pointers, [dev.mm.palloc(0x1000)], system=False)
    dev.setup_sdma_ring(0, ring, 0x1000, pointers, pointers + 8, doorbell=5)
    fence = (5 | 3 << 16, 0, 0xDEAD, 7)  # SDMA FENCE (mtype 3) of 7 to 0xDEAD_0000_0000, which nothing maps
    dev.vram.write(ring_paddr, b"".join(v.to_bytes(4, "little") for v in fence))
    dev.ring_doorbell(5, 16)
    with pytest.raises(RuntimeError, match=r"MMU fault: 0xDEAD00000000 \| queue at doorbell 5"):
        for _ in range(400):
            dev.sleep(50)
    assert dev.is_err_state
    assert dev.rreg(REG.GCVM_L2_PROTECTION_FAULT_STATUS) == 1  # the fault latch holds the address too
    latched = dev.rreg(REG.GCVM_L2_PROTECTION_FAULT_ADDR_LO32) | dev.rreg(REG.GCVM_L2_PROTECTION_FAULT_ADDR_HI32) << 32
    assert latched == 0xDEAD_0000_0000
    assert dev.recover() and not dev.is_err_state
    assert dev.rreg(REG.GCVM_L2_PROTECTION_FAULT_STATUS) == 0
    assert ("sdma", 0) not in board.chip.engines  # the caller sets its queues up again
