"""The simulated board in a process of its own (tg.drivers.amd.sim_process): the driver reaches it only through the
PCIDevice surface (requests over a socket, memory and the MSI as file descriptors), and everything still works:
boot, partial boot by a second driver, queues, a kernel, the chip's protocol errors reported back."""

from __future__ import annotations

import ctypes
import random

import pytest

from tg.drivers.amd import am_regs as am
from tg.drivers.amd.am_driver import AMDev
from tg.drivers.amd.iface import QueueKind
from tg.drivers.amd.pci_iface import PCIInterface
from tg.drivers.amd.sim_pci import SimPCIDevice
from tg.drivers.amd.sim_process import BoardProcessError, ProcessPCIDevice

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def firmware(tmp_path):
    rng = random.Random(7)
    for component, name in am.FIRMWARE_FILES.items():
        (tmp_path / name).write_bytes(am.pack_firmware(component, rng.randbytes(2048)))
    return tmp_path


@pytest.fixture
def board():
    device = ProcessPCIDevice(vram_size=256 << 20)
    yield device
    device.close()


def test_the_driver_process_holds_no_chip_and_a_second_driver_boots_partially(board, firmware) -> None:
    assert not any(isinstance(value, SimPCIDevice) for value in vars(board).values())
    assert (board.read_config(0, 2), board.read_config(2, 2)) == (0x1002, 0x744C)
    first = AMDev(board, firmware)
    assert not first.partial_boot and first.gfx_version == (11, 0, 0)
    first.fini()
    assert AMDev(board, firmware).partial_boot  # the boot state lives in the other process's registers


def test_a_queue_and_a_copy_run_across_the_process_boundary(board, firmware) -> None:
    iface = PCIInterface(board, firmware)

    ring = iface.alloc(0x1000, host=True)
    pointers = iface.alloc(0x1000, host=True)
    src, dst = iface.alloc(0x2000), iface.alloc(0x2000, host=True)
    data = random.Random(1).randbytes(0x2000)
    ctypes.memmove(src.cpu_address, data, len(data))
    queue = iface.create_queue(QueueKind.SDMA, ring, pointers, iface.alloc(0x1000, host=True))
    copy = [1, 0x2000 - 1, 0, src.va_addr & 0xFFFFFFFF, src.va_addr >> 32, dst.va_addr & 0xFFFFFFFF, dst.va_addr >> 32]
    ctypes.memmove(ring.cpu_address, b"".join(v.to_bytes(4, "little") for v in copy), 28)
    queue.doorbell.write(28)
    for _ in range(200):
        if ctypes.string_at(pointers.cpu_address, 8) == (28).to_bytes(8, "little"):
            break
        iface.sleep(50)
    assert ctypes.string_at(dst.cpu_address, len(data)) == data  # SDMA COPY_LINEAR, VRAM -> system memory


def test_the_chips_protocol_errors_come_back_as_text(board) -> None:
    board.write_config(4, 0x6, 2)
    registers = board.map_bar(am.MMIO_BAR)
    registers.write32(am.REG.sdma("DOORBELL", 0) * 4, am.SDMA_DOORBELL_ENABLE)
    with pytest.raises(BoardProcessError, match="SimProtocolError: SDMA queue activated before the PSP loaded"):
        registers.write32(am.REG.sdma("RB_CNTL", 0) * 4, am.SDMA_RB_ENABLE)


def test_the_board_process_ends_when_the_driver_closes_it(firmware) -> None:
    device = ProcessPCIDevice(vram_size=64 << 20)
    device.close()
    assert device.process.returncode == 0
