"""The ASM24 controller and the bridge setup against the simulated ASM24 (with a simulated Navi31 behind it),
which decodes the custom firmware's wire format from its own description (issue 36 items 1-2). The mutation
check (tests/flash/mutation_check.py) runs these tests against edits of the USB layer: the simulator alone
must catch them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tg.drivers import navi31_regs as r
from tg.drivers.asm24 import ASM24Controller, PCIeError, USBMMIOInterface, USBPCIDevice, setup_usb_bars
from tg.drivers.pci import DeviceMatch
from tg.drivers.sim.asm24 import SimASM24Device
from tg.drivers.sim.board import SimNavi31Board
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import GD25Chip
from tg.drivers.sim.romsw import SimProtocolError
from tg.drivers.sim.state import load_state, new_state, save_state
from tg.drivers.transport import BoardRequest, Transport, TransportError, open_board
from tg.drivers.usb import USB3, USBError, USBStall


def bridge(**faults) -> tuple[SimASM24Device, ASM24Controller, SimNavi31Board]:
    board = SimNavi31Board(GD25Chip(faults=Faults(**faults)))
    device = SimASM24Device(board, board.faults)
    return device, ASM24Controller(USB3(device)), board


def linked(**faults) -> tuple[SimASM24Device, ASM24Controller, SimNavi31Board]:
    device, ctrl, board = bridge(**faults)
    ctrl.ensure_link()
    return device, ctrl, board


def test_xdata_and_the_link_check() -> None:
    device, ctrl, _ = bridge()
    assert ctrl.xdata_read(0xB450)[0] != 0x78, "no link before power-on"
    ctrl.xdata_write(0x1234, b"\xab")
    assert ctrl.xdata_read(0x1233, 3) == b"\x00\xab\x00"
    ctrl.ensure_link()
    assert ctrl.xdata_read(0xB450) == b"\x78"
    _, down, _ = bridge(usb_link_down=True)
    with pytest.raises(PCIeError, match=r"PCIe link not up \(LTSSM state 0x01, expected 0x78\)"):
        down.ensure_link()


def test_the_simulated_bridge_stalls_malformed_requests() -> None:
    device, ctrl, _ = linked()
    usb = device

    def refused(*args) -> str:
        with pytest.raises(USBStall):
            usb.control_transfer(*args)
        return device.last_stall

    assert "bmRequestType" in refused(0x40, 0xE4, 0xB450, 0, 1)  # an IN request sent as OUT
    assert "bmRequestType" in refused(0xC1, 0xE4, 0xB450, 0, 1)
    assert "wIndex" in refused(0x40, 0xE5, 0x10, 0x1FF, b"")  # the byte to write in wIndex
    assert "12 bytes" in refused(0x40, 0xF0, 0x0F00, 0, b"\0" * 8)
    assert "32-bit address" in refused(0x40, 0xF0, 0x0F00, 0, struct.pack("<III", 0x10000000, 1, 0))
    big_endian = struct.pack(">III", 3 << 24 | 0x18, 0, 0)  # reads as 0x18000003: not dword-aligned
    assert "aligned" in refused(0x40, 0xF0, 0x0F05, 0, big_endian)
    assert "without a pending" in refused(0xC0, 0xF0, 0, 0, 8)
    assert "streaming" in refused(0x40, 0xF0, 0x0F20, 1, struct.pack("<III", 0x10000000, 0, 1))  # read fmt, mode 1
    usb.control_transfer(0x40, 0xF0, 0x0F04, 0, struct.pack("<III", 0, 0, 0))  # config read, completion waiting
    assert "not collected" in refused(0x40, 0xF0, 0x0F04, 0, struct.pack("<III", 0, 0, 0))
    assert "unknown request" in refused(0x40, 0xE6, 0, 0, b"")
    with pytest.raises(USBStall):  # a bulk phase nobody announced halts the endpoint
        usb.bulk_transfer(0x02, b"\0" * 4)
    assert 0x02 in device.halted


def test_a_stalled_control_request_is_sent_once_more() -> None:
    device, ctrl, _ = bridge(usb_stall_at=[2])
    ctrl.xdata_write(0x10, b"\x01\x02")  # transfer 2 is stalled and repeated
    assert ctrl.xdata_read(0x10, 2) == b"\x01\x02"
    assert ctrl.usb.stall_retries == 1 and device.stalls == 1
    device, ctrl, _ = bridge(usb_stall_at=[1, 2])
    with pytest.raises(USBError, match=r"refused control request 0xe5 \(STALL, twice\)"):
        ctrl.xdata_write(0x10, b"\x01")


def test_config_requests_need_numbered_bridges_and_type_1_beyond_bus_0() -> None:
    _, ctrl, _ = linked()
    assert ctrl.pcie_cfg_req(0, bus=0) == 0x24611B21
    with pytest.raises(PCIeError, match="unsupported request"):
        ctrl.pcie_cfg_req(0, bus=4)  # no bus numbers programmed yet


def test_bus_numbers_latch_only_from_one_dword_write() -> None:
    _, ctrl, _ = linked()
    for offset, value in ((0x18, 0), (0x19, 1), (0x1A, 4)):  # three byte writes: dropped by the bridge
        ctrl.pcie_cfg_req(offset, bus=0, value=value, size=1)
    with pytest.raises(PCIeError, match="unsupported request"):
        ctrl.pcie_cfg_req(0, bus=1)
    ctrl.pcie_cfg_req(0x18, bus=0, value=0 | 1 << 8 | 4 << 16)
    assert ctrl.pcie_cfg_req(0, bus=1) == 0x24611B21


def test_bar_setup_programs_the_bridges_and_maps_bar5() -> None:
    _, ctrl, board = linked()
    base, size = setup_usb_bars(ctrl, r.VENDOR_AMD, r.NAVI31_DEVICE_IDS, r.BAR)
    assert (base, size) == (0x10000000, r.BAR5_SIZE)
    for bus in range(4):
        assert ctrl.pcie_cfg_req(0x18, bus=bus) & 0xFFFFFF == bus | (bus + 1) << 8 | 4 << 16
        assert ctrl.pcie_cfg_req(0x20, bus=bus) == 0xFFFF1000  # memory base 0x1000, limit 0xffff
        assert ctrl.pcie_cfg_req(0x04, bus=bus) & 0x7 == 0x7  # IO | MEM | MASTER
    assert ctrl.pcie_cfg_req(0x04, bus=4) & 0x7 == 0x7
    mmio = USBMMIOInterface(ctrl, base, size)
    assert mmio.read32(r.ROM_CNTL) == 0x08000003
    mmio.write32(0x5A500, 0xCAFEF00D)
    assert board.regs[0x5A500] == 0xCAFEF00D


def test_sizing_a_bar_while_it_decodes_is_refused() -> None:
    _, ctrl, _ = linked()
    setup_usb_bars(ctrl, r.VENDOR_AMD, r.NAVI31_DEVICE_IDS, r.BAR)
    with pytest.raises(SimProtocolError, match="memory decoding is on"):
        ctrl.pcie_cfg_req(0x10 + 4 * r.BAR, bus=4, value=0xFFFFFFFF)


def test_bar_setup_refuses_a_device_that_is_not_navi31() -> None:
    _, ctrl, _ = linked()
    with pytest.raises(PCIeError, match="no Navi31 behind the USB bridge: bus 4 answers 1002:744c"):
        setup_usb_bars(ctrl, r.VENDOR_AMD, (0x73BF,), r.BAR)


def test_mmio_byte_reads_stream_the_rom_sw_window() -> None:
    device, ctrl, board = bridge()
    mmio = USBPCIDevice(USB3(device), r.VENDOR_AMD, r.NAVI31_DEVICE_IDS, "sim").map_bar(r.BAR)
    board.engine.window[:8] = bytes(range(1, 9))
    assert mmio.read(r.ROM_SW_DATA, 8) == bytes(range(1, 9))
    assert mmio[r.ROM_SW_DATA + 1 : r.ROM_SW_DATA + 4] == b"\x02\x03\x04"
    assert board.trace[-1][0] == "RB", "a byte read reaches the BAR as one streaming read"
    mmio.write(0x5A600, bytes(range(8)))
    assert (board.regs[0x5A600], board.regs[0x5A604]) == (0x03020100, 0x07060504)


def test_sram_dma_round_trip_through_the_simulated_bridge() -> None:
    _, ctrl, _ = bridge()
    ctrl.sram_write(0x7C000, b"hello bridge")
    assert ctrl.sram_read(0x7C000, 12) == b"hello bridge"
    with pytest.raises(ValueError, match="outside the 512 KiB bridge SRAM"):
        ctrl.sram_read(0x7C000, 0x8000)


def test_bridge_timeouts_are_retried_transparently() -> None:
    device, ctrl, _ = linked(usb_tlp_timeout_at=[1, 2, 4])  # TLPs 1, 2: first read; 3: ok; 4, 5: second
    assert ctrl.pcie_cfg_req(0, bus=0) == 0x24611B21
    assert ctrl.pcie_cfg_req(0, bus=0) == 0x24611B21
    assert ctrl.tlp_retries == 3


def sim_request(state: Path) -> BoardRequest:
    return BoardRequest(Transport.SIM, 0, r.VENDOR_AMD, (DeviceMatch(0xFFFF, r.NAVI31_DEVICE_IDS),), r.BAR, state)


def test_sim_transport_goes_through_the_usb_protocol_by_default(tmp_path: Path) -> None:
    state = tmp_path / "board.sim"
    save_state(new_state(), state)
    assert load_state(state).via == "usb"
    with open_board(sim_request(state)) as connection:
        assert isinstance(connection.mmio, USBMMIOInterface)
        assert connection.mmio.read32(r.ROM_CNTL) == 0x08000003
        assert connection.sim.bridge.control_count > 20  # power-on, link check, bus numbering, BAR sizing, the read
    down = tmp_path / "down.sim"
    save_state(new_state(faults=Faults(usb_link_down=True)), down)
    with pytest.raises(PCIeError, match="PCIe link not up"):
        open_board(sim_request(down))
    assert load_state(down).sessions == 0, "a failed open leaves the state file alone"
    with pytest.raises(TransportError, match="out of range"):
        open_board(BoardRequest(Transport.SIM, 1, r.VENDOR_AMD, (), r.BAR, state))
