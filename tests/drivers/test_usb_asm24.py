"""The USB layer (BOT CBW/CSW), the ASM24 controller and the bridge setup, against the simulated ASM24 with a
simulated Navi31 behind it (issue 20 items 1-2)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tg.drivers import asm24
from tg.drivers import navi31_regs as r
from tg.drivers.asm24 import ASM24Controller, PCIeError, USBMMIOInterface, USBPCIDevice, setup_usb_bars
from tg.drivers.pci import DeviceMatch
from tg.drivers.sim.asm24 import SimASM24Device
from tg.drivers.sim.board import SimNavi31Board
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import GD25Chip
from tg.drivers.sim.state import load_state, new_state, save_state
from tg.drivers.transport import BoardRequest, Transport, TransportError, open_board
from tg.drivers.usb import USB3, USBError, USBHandle


def bridge(**faults) -> tuple[SimASM24Device, ASM24Controller, SimNavi31Board]:
    board = SimNavi31Board(GD25Chip(faults=Faults(**faults)))
    device = SimASM24Device(board, board.faults)
    return device, ASM24Controller(USB3(device)), board


class Recorder(USBHandle):
    """Records the bulk transfers and answers with scripted bytes."""

    def __init__(self, answers: list[bytes]) -> None:
        self.sent: list[tuple[int, bytes | int]] = []
        self.answers = answers
        self.controls: list[tuple[int, int]] = []
        self.cleared: list[int] = []

    def control_transfer(self, request_type, request, value, index, data):
        self.controls.append((request_type, request))
        return b""

    def bulk_transfer(self, endpoint, data):
        self.sent.append((endpoint, data))
        return self.answers.pop(0) if endpoint & 0x80 else b""

    def clear_halt(self, endpoint):
        self.cleared.append(endpoint)


def test_cbw_and_csw_framing_follow_bulk_only_transport() -> None:
    csw = struct.pack("<IIIB", 0x53425355, 1, 0, 0)
    handle = Recorder([b"\x78", csw])
    assert USB3(handle).command(bytes([0xE4, 1, 0, 0xB4, 0x50, 0]), data_in=1) == b"\x78"
    (out_ep, cbw), (in_ep, size), (_, csw_size) = handle.sent
    assert (out_ep, in_ep, size, csw_size) == (0x02, 0x81, 1, 13)
    assert len(cbw) == 31
    signature, tag, length, flags, lun, cdb_length = struct.unpack("<IIIBBB", cbw[:15])
    assert (signature, tag, length, flags, lun, cdb_length) == (0x43425355, 1, 1, 0x80, 0, 6)
    assert cbw[15:21] == bytes([0xE4, 1, 0, 0xB4, 0x50, 0]) and cbw[21:] == bytes(10)


def test_a_malformed_csw_is_an_error_and_triggers_reset_recovery() -> None:
    bad = struct.pack("<IIIB", 0xDEADBEEF, 1, 0, 0)
    handle = Recorder([bad])
    with pytest.raises(USBError, match="malformed CSW"):
        USB3(handle).command(bytes([0xF3]))
    assert handle.controls == [(0x21, 0xFF)] and handle.cleared == [0x81, 0x02]


def test_xdata_and_the_link_check() -> None:
    device, ctrl, _ = bridge()
    assert ctrl.xdata_read(asm24.LTSSM_STATE)[0] != asm24.LINK_UP, "no link before power-on"
    ctrl.xdata_write(0x1234, 0xAB)
    assert ctrl.xdata_read(0x1233, 3) == b"\x00\xab\x00"
    ctrl.power_on()
    assert ctrl.xdata_read(asm24.LTSSM_STATE) == b"\x78"
    _, down, _ = bridge(usb_link_down=True)
    with pytest.raises(PCIeError, match=r"PCIe link not up \(LTSSM state 0x01, expected 0x78\)"):
        down.power_on()


def test_config_requests_need_numbered_bridges_and_type_1_beyond_bus_0() -> None:
    device, ctrl, _ = bridge()
    ctrl.power_on()
    assert ctrl.pcie_cfg_req(0, bus=0) == 0x24611B21
    with pytest.raises(PCIeError, match="unsupported request"):
        ctrl.pcie_cfg_req(0, bus=4)  # no bus numbers programmed yet
    recorder = Recorder([b"\0" * 8, struct.pack("<IIIB", 0x53425355, 1, 0, 0)])
    ASM24Controller(USB3(recorder)).pcie_cfg_req(0x19, bus=3, value=4, size=1)
    cdb = recorder.sent[0][1][15:31]
    assert asm24.TLP_CDB.unpack(cdb) == (0xF0, 0, 0x45, 0b0010, (3 << 24) | 0x18, 4 << 8)


def test_bar_setup_programs_the_bridges_and_maps_bar5() -> None:
    device, ctrl, board = bridge()
    ctrl.power_on()
    with pytest.raises(PCIeError, match="unsupported request"):
        ctrl.pcie_mem_read(asm24.MEM_BASE + r.ROM_CNTL)
    base, size = setup_usb_bars(ctrl, r.VENDOR_AMD, r.NAVI31_DEVICE_IDS, r.BAR)
    assert (base, size) == (0x10000000, r.BAR5_SIZE)
    for bus in range(4):
        assert ctrl.pcie_cfg_req(0x18, bus=bus) & 0xFFFFFF == bus | (bus + 1) << 8 | 4 << 16
        assert ctrl.pcie_cfg_req(0x20, bus=bus) == 0x10001000  # memory base 0x1000, limit 0x1000 (1 MiB)
    mmio = USBMMIOInterface(ctrl, base, size)
    assert mmio.read32(r.ROM_CNTL) == 0x08000003
    mmio.write32(0x5A500, 0xCAFEF00D)
    assert board.regs[0x5A500] == 0xCAFEF00D


def test_bar_setup_refuses_a_device_that_is_not_navi31() -> None:
    device, ctrl, _ = bridge()
    ctrl.power_on()
    with pytest.raises(PCIeError, match="no Navi31 behind the USB bridge: bus 4 answers 1002:744c"):
        setup_usb_bars(ctrl, r.VENDOR_AMD, (0x73BF,), r.BAR)


def test_mmio_byte_reads_stream_the_rom_sw_window() -> None:
    device, ctrl, board = bridge()
    mmio = USBPCIDevice(USB3(device), r.VENDOR_AMD, r.NAVI31_DEVICE_IDS, "sim").map_bar(r.BAR)
    board.engine.window[:8] = bytes(range(1, 9))
    assert mmio.read(r.ROM_SW_DATA, 8) == bytes(range(1, 9))
    assert mmio[r.ROM_SW_DATA : r.ROM_SW_DATA + 3] == b"\x01\x02\x03"
    assert board.trace[-1][0] == "RB", "a byte read reaches the BAR as one streaming read"


def test_sram_dma_round_trip_and_bounds() -> None:
    _, ctrl, _ = bridge()
    ctrl.sram_write(0x7F000, b"hello bridge")
    assert ctrl.sram_read(0x7F000, 12) == b"hello bridge"
    with pytest.raises(ValueError, match="outside the 512 KiB bridge SRAM"):
        ctrl.sram_read(0x7FFF0, 0x20)


def test_a_stalled_endpoint_and_a_corrupted_cbw_are_recovered() -> None:
    device, ctrl, _ = bridge(usb_stall_at=[2], usb_corrupt_cbw_at=[4])
    ctrl.power_on()  # CBW 1 (power on), CBW 2 stalls and is resent, CBW 4 arrives corrupted and is resent
    ctrl.xdata_write(0x10, 1)
    ctrl.xdata_write(0x11, 2)
    assert ctrl.xdata_read(0x10, 2) == b"\x01\x02"
    assert device.resets == 2 and not device.halted


def test_a_stall_in_the_data_phase_is_an_error() -> None:
    device, ctrl, _ = bridge(usb_stall_at=[3])  # bulk OUT 1: power-on CBW, 2: the SRAM CBW, 3: its data
    ctrl.usb.command(bytes([0xF3]))
    with pytest.raises(USBError, match="stalled in its data or status phase"):
        ctrl.sram_write(0, b"x" * 16)
    assert device.resets == 1


def sim_request(state: Path) -> BoardRequest:
    return BoardRequest(Transport.SIM, 0, r.VENDOR_AMD, (DeviceMatch(0xFFFF, r.NAVI31_DEVICE_IDS),), r.BAR, state)


def test_sim_transport_goes_through_the_usb_protocol_by_default(tmp_path: Path) -> None:
    state = tmp_path / "board.sim"
    save_state(new_state(), state)
    assert load_state(state).via == "usb"
    with open_board(sim_request(state)) as connection:
        assert isinstance(connection.mmio, USBMMIOInterface)
        assert connection.mmio.read32(r.ROM_CNTL) == 0x08000003
        assert connection.sim.bridge.cbw_count > 20  # power-on, link check, bus numbering, BAR sizing, the read
    down = tmp_path / "down.sim"
    save_state(new_state(faults=Faults(usb_link_down=True)), down)
    with pytest.raises(PCIeError, match="PCIe link not up"):
        open_board(sim_request(down))
    assert load_state(down).sessions == 0, "a failed open leaves the state file alone"
    with pytest.raises(TransportError, match="out of range"):
        open_board(BoardRequest(Transport.SIM, 1, r.VENDOR_AMD, (), r.BAR, state))
