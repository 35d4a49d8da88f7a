"""A simulated ASM24 USB-PCIe bridge running the custom firmware, with a Navi31 behind it.

The wire format is described here on its own (constants and structs below), not imported from the driver
in tg.drivers.asm24, so that the two can disagree: a driver that packs a field in the wrong byte order, sends
the wrong request type or length, or skips a step is refused here the way the bridge would refuse it.

What the bridge checks, each answered with a STALL of endpoint 0 (the request does not run):

- bmRequestType 0x40 for requests with no or an OUT data stage, 0xC0 for IN requests; wLength exactly what
  the request takes (0xE4: 1..255, 0xE5/0xF3/0xF2: 0, 0xF0 OUT: 12, 0xF0 IN: 8); wIndex of 0xE5 one byte.
- 0xF0 OUT: a known mode (0, 1, 2), byte enables 1..15 (15 for streaming), a dword-aligned address, and a
  header that fits the format: the 3-dword TLP formats (0x00, 0x40, 0x04, 0x05, 0x44, 0x45) carry a 32-bit
  address, so the upper address word must be 0. Streaming writes are fmt 0x60, streaming reads fmt 0x20,
  with a dword count of 1..0x100000.
- 0xF0 IN only while a completion is waiting, and a new 0xF0 OUT only after the host has collected it.
- Bulk transfers only when a streaming TLP or an SRAM DMA announced them, with exactly the announced length;
  anything else halts the endpoint until CLEAR_FEATURE(HALT).

Behind the bridge (hcq.md 1.16, 3.7): bridges on buses 0-3 (the ASM switch port, its downstream port, the
Navi31 upstream and downstream switch ports) and the GPU on bus 4. Configuration requests reach a bus only
once every bridge above it is numbered; the bus numbers latch only from one dword write covering all three
(primary, secondary, subordinate), as the firmware's host code requires. Memory requests reach the GPU's BAR
only through open bridge windows with memory decoding on, else an unsupported request (posted writes are
dropped, as on real PCIe). Sizing a BAR (writing all ones) while the function decodes memory is refused as
a protocol error: the BAR would claim whatever address the all-ones pattern lands on.

Faults: `usb_link_down` (the LTSSM never reaches L0), `usb_stall_at` (these control transfers, counted from
1 in a session, are stalled once), `usb_tlp_timeout_at` (these non-posted TLPs, counted from 1, report a
bridge timeout in their completion instead of running).
"""

from __future__ import annotations

import functools
import struct

from tg.drivers import navi31_regs as r
from tg.drivers.mmio import MMIOInterface
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.romsw import SimProtocolError
from tg.drivers.usb import USBHandle, USBStall

# -- the wire format, as the bridge sees it ----------------------------------------------------------------------
BM_VENDOR_HOST_TO_DEVICE = 0b0_10_00000  # direction OUT, type vendor, recipient device
BM_VENDOR_DEVICE_TO_HOST = 0b1_10_00000
REQ_XDATA_READ, REQ_XDATA_WRITE, REQ_TLP, REQ_SRAM, REQ_POWER = 0xE4, 0xE5, 0xF0, 0xF2, 0xF3
BULK_OUT_ENDPOINT, BULK_IN_ENDPOINT = 0x02, 0x81
TLP_SETUP = struct.Struct("<3I")  # address[31:0], address[63:32], data or dword count; little-endian
TLP_SETUP_LENGTH = 12
COMPLETION_LENGTH = 8  # data[4] little-endian, status byte (status in bits 7:5), 2 reserved, bridge status
TLP_SINGLE, TLP_STREAM_OUT, TLP_STREAM_IN = 0, 1, 2
STREAM_WRITE_FORMAT, STREAM_READ_FORMAT = 0x60, 0x20  # 4-dword memory write / read headers
THREE_DWORD_FORMATS = {0x00, 0x40, 0x04, 0x05, 0x44, 0x45}
MAX_STREAM_DWORDS = 0x100000
SRAM_BYTES, SRAM_SLOT_BYTES, SRAM_SECTOR_BYTES, SRAM_READ_BIT = 0x80000, 0x4000, 512, 0x8000
XDATA_BYTES, LTSSM_ADDRESS, LTSSM_L0, LTSSM_DETECT = 0x10000, 0xB450, 0x78, 0x01
BRIDGE_TIMEOUT = 1  # bridge status byte: no completion arrived

# -- PCIe, as the functions behind the bridge see it --------------------------------------------------------------
CPL_SUCCESS, CPL_UNSUPPORTED = 0, 1
CFG_COMMAND, CFG_BUS_NUMBERS, CFG_MEM_BASE, CFG_MEM_LIMIT, CFG_BAR0 = 0x04, 0x18, 0x20, 0x22, 0x10
COMMAND_MEMORY = 0x2
GPU_BUS_NUMBER = 4
BRIDGE_IDS = {0: (0x1B21, 0x2461), 1: (0x1B21, 0x2461), 2: (0x1002, 0x1478), 3: (0x1002, 0x1479)}


class SimPCIeFunction:
    """A 4 KiB configuration space with the writable fields the driver touches."""

    def __init__(self, vendor: int, device: int, bridge: bool, bar_sizes: dict[int, int] | None = None) -> None:
        self.space = bytearray(0x1000)
        struct.pack_into("<HH", self.space, 0, vendor, device)
        self.space[0x0E] = 0x01 if bridge else 0x00
        self.bridge = bridge
        self.bar_sizes = bar_sizes or {}

    def read(self, offset: int) -> int:
        return int.from_bytes(self.space[offset : offset + 4], "little")

    def write(self, offset: int, value: int, byte_enable: int) -> None:
        if self.bridge and offset == CFG_BUS_NUMBERS and byte_enable & 0b0111 != 0b0111:
            return  # the bus numbers latch only from one write of all three; a partial write is dropped
        if not self.bridge and CFG_BAR0 <= offset < CFG_BAR0 + 24 and byte_enable == 0xF and value == 0xFFFFFFFF:
            if self.u16(CFG_COMMAND) & COMMAND_MEMORY:
                raise SimProtocolError(
                    f"BAR at config 0x{offset:02x} sized (all ones written) while memory decoding is on"
                )
        for i in range(4):
            if byte_enable >> i & 1 and offset + i >= 0x04:  # the IDs are read-only
                self.space[offset + i] = value >> (8 * i) & 0xFF
        for bar, size in self.bar_sizes.items():  # BARs ignore the address bits below their size
            at = CFG_BAR0 + 4 * bar
            if offset == at:
                struct.pack_into("<I", self.space, at, self.read(at) & ~(size - 1) & 0xFFFFFFF0)
        if not self.bridge and CFG_BAR0 <= offset < CFG_BAR0 + 24 and (offset - CFG_BAR0) // 4 not in self.bar_sizes:
            struct.pack_into("<I", self.space, offset, 0)  # an unimplemented BAR reads 0

    def u8(self, offset: int) -> int:
        return self.space[offset]

    def u16(self, offset: int) -> int:
        return int.from_bytes(self.space[offset : offset + 2], "little")


class SimASM24Device(USBHandle):
    def __init__(self, board: MMIOInterface, faults: Faults | None = None) -> None:
        self.board = board
        self.faults = faults or Faults()
        self.xdata = bytearray(XDATA_BYTES)
        self.xdata[LTSSM_ADDRESS] = LTSSM_DETECT
        self.sram = bytearray(SRAM_BYTES)
        self.functions = {bus: SimPCIeFunction(*ids, bridge=True) for bus, ids in BRIDGE_IDS.items()}
        self.functions[GPU_BUS_NUMBER] = SimPCIeFunction(
            r.VENDOR_AMD, r.NAVI31_DEVICE_IDS[0], bridge=False, bar_sizes={r.BAR: r.BAR5_SIZE}
        )
        self.halted: set[int] = set()
        self.control_count = 0
        self.tlp_count = 0  # non-posted single TLPs
        self.stalls = 0
        self.dropped_writes = 0
        self.requests: list[tuple[int, int]] = []  # (bmRequestType, bRequest) of every control transfer
        self.last_stall = ""  # why the last request was stalled, for tests and debugging
        self._completion: bytes | None = None  # waiting for 0xF0 IN
        self._bulk_out: tuple[str, int, int] | None = None  # (what, address or SRAM offset, length) announced
        self._bulk_in: bytes | None = None
        self._bar_window: tuple[int, int] | None = None  # cached [base, end) the bridges route; None: recompute

    # -- USBHandle -------------------------------------------------------------------------------------------

    def control_transfer(
        self, request_type: int, request: int, value: int, index: int, data: bytes | int, timeout_ms: int = 1000
    ) -> bytes:
        self.control_count += 1
        self.requests.append((request_type, request))
        if self.control_count in self.faults.usb_stall_at:
            return self._stall("injected stall")
        if not (0 <= value <= 0xFFFF and 0 <= index <= 0xFFFF):
            return self._stall("wValue/wIndex beyond 16 bits")
        direction_in = isinstance(data, int)
        length = data if isinstance(data, int) else len(data)
        expected_type = BM_VENDOR_DEVICE_TO_HOST if direction_in else BM_VENDOR_HOST_TO_DEVICE
        if request_type != expected_type:
            return self._stall(f"bmRequestType 0x{request_type:02x} for a {'IN' if direction_in else 'OUT'} stage")
        handler = self._handlers.get((request, direction_in))
        if handler is None:
            return self._stall(f"unknown request 0x{request:02x} ({'IN' if direction_in else 'OUT'})")
        return handler(value, index, length, b"" if isinstance(data, int) else bytes(data))

    def clear_halt(self, endpoint: int) -> None:
        self.halted.discard(endpoint)

    def bulk_transfer(self, endpoint: int, data: bytes | int, timeout_ms: int = 1000) -> bytes:
        if endpoint in self.halted:
            raise USBStall(endpoint)
        if endpoint == BULK_OUT_ENDPOINT and isinstance(data, bytes | bytearray):
            return self._bulk_out_phase(bytes(data))
        if endpoint == BULK_IN_ENDPOINT and isinstance(data, int):
            pending, self._bulk_in = self._bulk_in, None
            if pending is None or data != len(pending):
                return self._halt(endpoint)
            return pending
        return self._halt(endpoint)

    # -- control requests ------------------------------------------------------------------------------------

    @functools.cached_property
    def _handlers(self):
        return {
            (REQ_XDATA_READ, True): self._xdata_read,
            (REQ_XDATA_WRITE, False): self._xdata_write,
            (REQ_POWER, False): self._power,
            (REQ_TLP, False): self._tlp_request,
            (REQ_TLP, True): self._tlp_completion,
            (REQ_SRAM, False): self._sram_dma,
        }

    def _stall(self, why: str) -> bytes:
        self.stalls += 1
        self.last_stall = why
        raise USBStall(0)

    def _halt(self, endpoint: int) -> bytes:
        self._bulk_out, self._bulk_in = None, None
        self.halted.add(endpoint)
        raise USBStall(endpoint)

    def _xdata_read(self, value: int, index: int, length: int, _data: bytes) -> bytes:
        if not 1 <= length <= 0xFF or index != 0:
            return self._stall("XDATA read of 1..255 bytes in bank 0")
        return bytes(self.xdata[value : value + length]).ljust(length, b"\0")

    def _xdata_write(self, value: int, index: int, length: int, _data: bytes) -> bytes:
        if length or index > 0xFF:
            return self._stall("XDATA write takes its byte in wIndex and no data stage")
        self.xdata[value] = index
        return b""

    def _power(self, value: int, index: int, length: int, _data: bytes) -> bytes:
        if length or index or value not in (0, 1):
            return self._stall("PCIe power takes 0 or 1 in wValue")
        self.xdata[LTSSM_ADDRESS] = LTSSM_L0 if value and not self.faults.usb_link_down else LTSSM_DETECT
        return b""

    def _tlp_request(self, value: int, mode: int, length: int, data: bytes) -> bytes:
        if length != TLP_SETUP_LENGTH or mode not in (TLP_SINGLE, TLP_STREAM_OUT, TLP_STREAM_IN):
            return self._stall("TLP request: 12 bytes of setup, mode 0..2")
        if self._completion is not None:
            return self._stall("TLP request while the previous completion was not collected")
        fmt_type, byte_enable = value & 0xFF, value >> 8
        low, high, word = TLP_SETUP.unpack(data)
        address = high << 32 | low
        if low & 3 or not 1 <= byte_enable <= 0xF:
            return self._stall("TLP address not dword-aligned or byte enables out of range")
        if fmt_type in THREE_DWORD_FORMATS and high:
            return self._stall("a 3-dword TLP carries a 32-bit address")
        if mode == TLP_SINGLE:
            self._single_tlp(fmt_type, byte_enable, address, word)
            return b""
        expected_fmt = STREAM_WRITE_FORMAT if mode == TLP_STREAM_OUT else STREAM_READ_FORMAT
        if fmt_type != expected_fmt or byte_enable != 0xF or not 1 <= word <= MAX_STREAM_DWORDS:
            return self._stall("streaming TLP with the wrong format, byte enables or dword count")
        if mode == TLP_STREAM_OUT:
            self._bulk_out = ("memory", address, 4 * word)
        else:
            self._bulk_in = self._stream_read(address, 4 * word)
        return b""

    def _tlp_completion(self, value: int, index: int, length: int, _data: bytes) -> bytes:
        if length != COMPLETION_LENGTH or value or index or self._completion is None:
            return self._stall("completion read without a pending non-posted TLP")
        completion, self._completion = self._completion, None
        return completion

    def _sram_dma(self, value: int, index: int, length: int, _data: bytes) -> bytes:
        sectors, read = value & ~SRAM_READ_BIT, bool(value & SRAM_READ_BIT)
        first_slot, slots = index & 0xFF, index >> 8
        size = sectors * SRAM_SECTOR_BYTES
        if length or not sectors or slots != -(-size // SRAM_SLOT_BYTES):
            return self._stall("SRAM DMA: sectors and slots disagree")
        offset = first_slot * SRAM_SLOT_BYTES
        if offset + size > SRAM_BYTES:
            return self._stall("SRAM DMA beyond the 512 KiB SRAM")
        if read:
            self._bulk_in = bytes(self.sram[offset : offset + size])
        else:
            self._bulk_out = ("sram", offset, size)
        return b""

    def _bulk_out_phase(self, data: bytes) -> bytes:
        announced, self._bulk_out = self._bulk_out, None
        if announced is None or len(data) != announced[2]:
            return self._halt(BULK_OUT_ENDPOINT)
        what, address, _ = announced
        if what == "sram":
            self.sram[address : address + len(data)] = data
        else:
            self._stream_write(address, data)
        return b""

    # -- PCIe ------------------------------------------------------------------------------------------------

    @property
    def link_up(self) -> bool:
        return self.xdata[LTSSM_ADDRESS] == LTSSM_L0

    def _single_tlp(self, fmt_type: int, byte_enable: int, address: int, value: int) -> None:
        posted = fmt_type & 0xDF == 0x40 or fmt_type & 0xB8 == 0x30
        if posted:
            offset = self._bar_offset(address) if self.link_up else None
            if offset is None or byte_enable != 0xF:
                self.dropped_writes += 1
            else:
                self.board.write32(offset, value)
            return
        self.tlp_count += 1
        if not self.link_up or self.tlp_count in self.faults.usb_tlp_timeout_at:
            self._completion = self._pack_completion(0xFFFFFFFF, CPL_SUCCESS, BRIDGE_TIMEOUT)
            return
        if fmt_type & ~1 in (0x04, 0x44):
            status, data = self._config(fmt_type, address, value, byte_enable)
        elif fmt_type in (0x00, 0x20):
            offset = self._bar_offset(address)
            status, data = (CPL_UNSUPPORTED, 0xFFFFFFFF) if offset is None else (CPL_SUCCESS, self.board.read32(offset))
        else:
            status, data = CPL_UNSUPPORTED, 0xFFFFFFFF
        self._completion = self._pack_completion(data, status, 0)

    @staticmethod
    def _pack_completion(data: int, status: int, bridge_status: int) -> bytes:
        return struct.pack("<I", data) + bytes([status << 5, 0, 0, bridge_status])

    def _stream_read(self, address: int, size: int) -> bytes:
        offset = self._bar_offset(address) if self.link_up else None
        if offset is None or offset + size > r.BAR5_SIZE:
            return b"\xff" * size  # unsupported requests read as all ones
        return self.board.read(offset, size)

    def _stream_write(self, address: int, data: bytes) -> None:
        offset = self._bar_offset(address) if self.link_up else None
        if offset is None or offset + len(data) > r.BAR5_SIZE:
            self.dropped_writes += 1
            return
        self.board.write(offset, data)

    def _config(self, fmt_type: int, address: int, value: int, byte_enable: int) -> tuple[int, int]:
        bus, dev, fn, offset = address >> 24, address >> 19 & 0x1F, address >> 16 & 0x7, address & 0xFFC
        function = self.functions.get(bus) if dev == 0 and fn == 0 and self._reachable(bus, fmt_type & 1) else None
        if function is None:
            return CPL_UNSUPPORTED, 0xFFFFFFFF
        if fmt_type & ~1 == 0x44:
            function.write(offset, value, byte_enable)
            self._bar_window = None  # routing may have changed
            return CPL_SUCCESS, 0
        return CPL_SUCCESS, function.read(offset)

    def _reachable(self, bus: int, type1: int) -> bool:
        """Bus 0 takes type-0 requests; bus N > 0 takes type-1 requests routed through every bridge above it."""
        if bus == 0:
            return not type1
        for upper in range(bus):
            bridge = self.functions[upper]
            secondary, subordinate = bridge.u8(CFG_BUS_NUMBERS + 1), bridge.u8(CFG_BUS_NUMBERS + 2)
            if not type1 or upper + 1 != secondary or not secondary <= bus <= subordinate:
                return False
        return True

    def _bar_offset(self, address: int) -> int | None:
        """The offset in the GPU's BAR5 a memory request reaches, or None when no path decodes it. Routing
        only changes with configuration writes, so the decoded window is cached until the next one."""
        if self._bar_window is None:
            self._bar_window = self._routed_window()
        base, end = self._bar_window
        return address - base if base <= address < end else None

    def _routed_window(self) -> tuple[int, int]:
        gpu = self.functions[GPU_BUS_NUMBER]
        base = gpu.read(CFG_BAR0 + 4 * r.BAR) & ~0xF
        if not base or not all(self._decodes(base + edge) for edge in (0, r.BAR5_SIZE - 1)):
            return 0, 0
        return base, base + r.BAR5_SIZE

    def _decodes(self, address: int) -> bool:
        """Whether a memory request for `address` passes every bridge window and reaches the GPU's BAR."""
        gpu = self.functions[GPU_BUS_NUMBER]
        if not gpu.u16(CFG_COMMAND) & COMMAND_MEMORY:
            return False
        for bus in range(GPU_BUS_NUMBER):
            bridge = self.functions[bus]
            low = (bridge.u16(CFG_MEM_BASE) & 0xFFF0) << 16
            high = ((bridge.u16(CFG_MEM_LIMIT) & 0xFFF0) << 16) | 0xFFFFF
            if not bridge.u16(CFG_COMMAND) & COMMAND_MEMORY or not low <= address <= high:
                return False
            if not self._reachable(bus + 1, 1):
                return False
        return True
