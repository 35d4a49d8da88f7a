"""The ASM24 custom-firmware protocol on the wire: which vendor control transfers and bulk phases the controller
sends, recorded at the USB boundary (issue 36 item 1). Expected bytes are literal numbers from the protocol
description (tg.drivers.asm24's docstring, written from the custom firmware's public host code), not the driver's
constants."""

from __future__ import annotations

import struct

import pytest

from tg.drivers.asm24 import ASM24Controller, PCIeError
from tg.drivers.usb import USB3, USBHandle


class Recorder(USBHandle):
    """Records every transfer and answers IN transfers with scripted bytes."""

    def __init__(self, answers: list[bytes] | None = None) -> None:
        self.sent: list[tuple] = []
        self.answers = answers or []

    def control_transfer(self, request_type, request, value, index, data, timeout_ms=1000):
        self.sent.append(("control", request_type, request, value, index, data))
        return self.answers.pop(0) if isinstance(data, int) else b""

    def bulk_transfer(self, endpoint, data, timeout_ms=1000):
        self.sent.append(("bulk", endpoint, data))
        return self.answers.pop(0) if isinstance(data, int) else b""

    def clear_halt(self, endpoint):
        self.sent.append(("clear_halt", endpoint))


def completion(data: int, status: int = 0, bridge_status: int = 0) -> bytes:
    return struct.pack("<I", data) + bytes([status << 5, 0, 0, bridge_status])


def test_xdata_requests_are_vendor_control_transfers() -> None:
    handle = Recorder([b"\x78"])
    ctrl = ASM24Controller(USB3(handle))
    assert ctrl.xdata_read(0xB450) == b"\x78"
    ctrl.xdata_write(0x1234, b"\xab\xcd")
    ctrl.set_pcie_power(True)
    assert handle.sent == [
        ("control", 0xC0, 0xE4, 0xB450, 0, 1),
        ("control", 0x40, 0xE5, 0x1234, 0xAB, b""),
        ("control", 0x40, 0xE5, 0x1235, 0xCD, b""),
        ("control", 0x40, 0xF3, 1, 0, b""),
    ]


def test_a_tlp_is_an_f0_request_and_its_completion_an_f0_read() -> None:
    handle = Recorder([completion(0x24611B21)])
    ctrl = ASM24Controller(USB3(handle))
    assert ctrl.pcie_cfg_req(0x19, bus=3, size=1) == 0x24611B21 >> 8 & 0xFF
    request, answer = handle.sent
    # wValue: fmt_type 0x05 (type-1 config read) | byte enable 0b0010 << 8; wIndex: mode 0; data <III
    assert request == ("control", 0x40, 0xF0, 0x0205, 0, struct.pack("<III", 3 << 24 | 0x18, 0, 0))
    assert answer == ("control", 0xC0, 0xF0, 0, 0, 8)


def test_posted_memory_writes_read_no_completion_and_config_writes_do() -> None:
    handle = Recorder([completion(0)])
    ctrl = ASM24Controller(USB3(handle))
    ctrl.pcie_mem_write(0x10000010, 0xCAFEF00D)
    ctrl.pcie_cfg_req(0x04, bus=0, value=7, size=1)
    assert [s[1:4] for s in handle.sent] == [(0x40, 0xF0, 0x0F40), (0x40, 0xF0, 0x0144), (0xC0, 0xF0, 0)]
    assert handle.sent[0][5] == bytes.fromhex("10000010 00000000 0df0feca")


def test_completion_status_and_bridge_status_are_parsed_and_retried() -> None:
    handle = Recorder([completion(0xFFFFFFFF, bridge_status=1), completion(0x1234)])
    ctrl = ASM24Controller(USB3(handle))
    assert ctrl.pcie_mem_read(0x10000000) == 0x1234, "a bridge timeout is retried"
    assert ctrl.tlp_retries == 1 and len(handle.sent) == 4
    with pytest.raises(PCIeError, match="unsupported request"):
        ASM24Controller(USB3(Recorder([completion(0xFFFFFFFF, status=0b001)]))).pcie_mem_read(0x10000000)
    with pytest.raises(PCIeError, match="completer abort"):
        ASM24Controller(USB3(Recorder([completion(0, status=0b100)]))).pcie_cfg_req(0, bus=1)
    hopeless = Recorder([completion(0, bridge_status=1)] * 11)
    with pytest.raises(PCIeError, match="no completion after 10 retries"):
        ASM24Controller(USB3(hopeless)).pcie_mem_read(0x10000000)


def test_streaming_transfers_announce_dword_counts_and_move_data_on_bulk() -> None:
    handle = Recorder([bytes(range(8))])
    ctrl = ASM24Controller(USB3(handle))
    assert ctrl.pcie_mem_read_stream(0x10000100, 8) == bytes(range(8))
    ctrl.pcie_mem_write_stream(0x10000200, b"\x01\x02\x03\x04" * 3)
    assert handle.sent == [
        ("control", 0x40, 0xF0, 0x0F20, 2, struct.pack("<III", 0x10000100, 0, 2)),
        ("bulk", 0x81, 8),
        ("control", 0x40, 0xF0, 0x0F60, 1, struct.pack("<III", 0x10000200, 0, 3)),
        ("bulk", 0x02, b"\x01\x02\x03\x04" * 3),
    ]


def test_sram_dma_announces_sectors_and_slots() -> None:
    handle = Recorder([bytes(512)])
    ctrl = ASM24Controller(USB3(handle))
    ctrl.sram_write(0x8000, b"x" * 600)
    assert ctrl.sram_read(0x4000, 10) == bytes(10)
    assert handle.sent[0] == ("control", 0x40, 0xF2, 2, 2 | 1 << 8, b"")
    assert handle.sent[1] == ("bulk", 0x02, b"x" * 600 + bytes(424))
    assert handle.sent[2] == ("control", 0x40, 0xF2, 1 | 0x8000, 1 | 1 << 8, b"")
    with pytest.raises(ValueError, match="16 KiB slot"):
        ctrl.sram_write(0x100, b"x")
