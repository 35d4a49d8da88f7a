"""A simulated ASM24 USB-PCIe bridge with a Navi31 behind it, speaking the USB requests of tg.drivers.asm24.

It enforces what the real parts require: CBWs must be well formed (else both bulk endpoints stall until
reset recovery, as the Bulk-Only Transport spec says), the PCIe link is up only after the power-on command,
configuration requests reach a bus only once the bridges above it are numbered, and memory requests reach
the GPU's BAR only through open bridge memory windows with memory decoding enabled (else an unsupported
request, and posted writes are dropped, as on real PCIe).

The topology is the one of a Navi31 enclosure (hcq.md 1.16, 3.7): bridges on buses 0-3 (the ASM switch
port, its downstream port, the Navi31 upstream and downstream switch ports) and the GPU on bus 4.

Faults: `usb_link_down` (the LTSSM never reaches L0), `usb_stall_at` (these bulk OUT transfers, counted
from 1 in a session, are answered with a STALL), `usb_corrupt_cbw_at` (these CBWs arrive corrupted).
"""

from __future__ import annotations

import struct

from tg.drivers import asm24
from tg.drivers import navi31_regs as r
from tg.drivers.mmio import MMIOInterface
from tg.drivers.sim.faults import Faults
from tg.drivers.usb import (
    BOT_MASS_STORAGE_RESET,
    CBW,
    CBW_DATA_IN,
    CBW_SIGNATURE,
    CSW,
    CSW_FAILED,
    CSW_PASSED,
    CSW_SIGNATURE,
    EP_BULK_IN,
    EP_BULK_OUT,
    REQUEST_CLASS_INTERFACE_OUT,
    USBHandle,
    USBStall,
)

UNSUPPORTED_REQUEST = 1
LTSSM_DETECT = 0x01
BRIDGE_IDS = {0: (0x1B21, 0x2461), 1: (0x1B21, 0x2461), 2: (0x1002, 0x1478), 3: (0x1002, 0x1479)}


class SimPCIeFunction:
    """A 4 KiB configuration space with the writable fields tg touches."""

    def __init__(self, vendor: int, device: int, bridge: bool, bar_sizes: dict[int, int] | None = None) -> None:
        self.space = bytearray(0x1000)
        struct.pack_into("<HH", self.space, 0, vendor, device)
        self.space[0x0E] = 0x01 if bridge else 0x00
        self.bridge = bridge
        self.bar_sizes = bar_sizes or {}

    def read(self, offset: int) -> int:
        return int.from_bytes(self.space[offset : offset + 4], "little")

    def write(self, offset: int, value: int, byte_enable: int) -> None:
        for i in range(4):
            if not byte_enable >> i & 1 or offset + i < 0x04:
                continue  # the IDs are read-only
            self.space[offset + i] = value >> (8 * i) & 0xFF
        for bar, size in self.bar_sizes.items():  # BARs ignore the address bits below their size
            at = 0x10 + 4 * bar
            if offset == at:
                struct.pack_into("<I", self.space, at, self.read(at) & ~(size - 1) & 0xFFFFFFF0)

    def u8(self, offset: int) -> int:
        return self.space[offset]

    def u16(self, offset: int) -> int:
        return int.from_bytes(self.space[offset : offset + 2], "little")


class SimASM24Device(USBHandle):
    def __init__(self, board: MMIOInterface, faults: Faults | None = None) -> None:
        self.board = board
        self.faults = faults or Faults()
        self.xdata = bytearray(0x10000)
        self.xdata[asm24.LTSSM_STATE] = LTSSM_DETECT
        self.sram = bytearray(asm24.SRAM_SIZE)
        self.functions = {bus: SimPCIeFunction(*ids, bridge=True) for bus, ids in BRIDGE_IDS.items()}
        self.functions[asm24.GPU_BUS] = SimPCIeFunction(
            r.VENDOR_AMD, r.NAVI31_DEVICE_IDS[0], bridge=False, bar_sizes={r.BAR: r.BAR5_SIZE}
        )
        self.halted: set[int] = set()
        self.bulk_out_count = 0
        self.cbw_count = 0
        self.resets = 0
        self.dropped_writes = 0
        self._expect_data_out: tuple[bytes, int] | None = None  # (CBW, length) waiting for its data phase
        self._to_host: list[bytes] = []  # data-in and CSW waiting for bulk IN reads
        self._bar_window: tuple[int, int] | None = None  # cached [base, end) the bridges route; None: recompute

    # -- USBHandle -------------------------------------------------------------------------------------------

    def control_transfer(self, request_type: int, request: int, value: int, index: int, data: bytes | int) -> bytes:
        if request_type == REQUEST_CLASS_INTERFACE_OUT and request == BOT_MASS_STORAGE_RESET:
            self.resets += 1
            self._expect_data_out, self._to_host = None, []
            return b""
        raise USBStall(0)  # a request the bridge does not know

    def clear_halt(self, endpoint: int) -> None:
        self.halted.discard(endpoint)

    def bulk_transfer(self, endpoint: int, data: bytes | int) -> bytes:
        if endpoint in self.halted:
            raise USBStall(endpoint)
        if endpoint == EP_BULK_OUT:
            assert isinstance(data, bytes)
            self._bulk_out(data)
            return b""
        if endpoint == EP_BULK_IN:
            assert isinstance(data, int)
            if not self._to_host:
                raise USBStall(EP_BULK_IN)  # the host read where the device has nothing to send
            return self._to_host.pop(0)[:data]
        raise USBStall(endpoint)

    # -- Bulk-Only Transport ---------------------------------------------------------------------------------

    def _bulk_out(self, data: bytes) -> None:
        self.bulk_out_count += 1
        if self.bulk_out_count in self.faults.usb_stall_at:
            self.halted.add(EP_BULK_OUT)
            raise USBStall(EP_BULK_OUT)
        if self._expect_data_out is not None:
            cbw, length = self._expect_data_out
            self._expect_data_out = None
            self._execute(cbw, data[:length])
            return
        self.cbw_count += 1
        if self.cbw_count in self.faults.usb_corrupt_cbw_at:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        if len(data) != CBW.size or CBW.unpack(data)[0] != CBW_SIGNATURE or not 1 <= data[14] <= 16:
            # BOT 6.6.1: an invalid CBW stalls both bulk endpoints until reset recovery.
            self.halted.update((EP_BULK_IN, EP_BULK_OUT))
            raise USBStall(EP_BULK_OUT)
        _, _, length, flags, _, _, _ = CBW.unpack(data)
        if length and not flags & CBW_DATA_IN:
            self._expect_data_out = (data, length)
            return
        self._execute(data, b"")

    def _execute(self, cbw: bytes, data_out: bytes) -> None:
        _, tag, length, flags, _, cdb_length, cdb = CBW.unpack(cbw)
        cdb = cdb[:cdb_length]
        try:
            data_in = self._run_cdb(cdb, data_out, length if flags & CBW_DATA_IN else 0)
            status = CSW_PASSED
        except _CommandFailed:
            data_in, status = b"", CSW_FAILED
        if flags & CBW_DATA_IN and length:
            self._to_host.append(data_in.ljust(length, b"\0"))
        self._to_host.append(CSW.pack(CSW_SIGNATURE, tag, 0, status))

    # -- vendor commands -------------------------------------------------------------------------------------

    def _run_cdb(self, cdb: bytes, data_out: bytes, data_in: int) -> bytes:
        op = cdb[0]
        if op == asm24.XDATA_READ:
            _, size, high, low, _ = asm24.XDATA_CDB.unpack(cdb[:6])
            address = high << 16 | low
            return bytes(self.xdata[address : address + size])
        if op == asm24.XDATA_WRITE:
            _, value, high, low, _ = asm24.XDATA_CDB.unpack(cdb[:6])
            self.xdata[(high << 16 | low) & 0xFFFF] = value
            return b""
        if op == asm24.PCIE_POWER_ON:
            self.xdata[asm24.LTSSM_STATE] = LTSSM_DETECT if self.faults.usb_link_down else asm24.LINK_UP
            return b""
        if op == asm24.PCIE_TLP:
            op_code, mode, fmt_type, byte_enable, address, value = asm24.TLP_CDB.unpack(cdb[:16])
            return self._tlp(op_code, mode, fmt_type, byte_enable, address, value, data_out)
        if op == asm24.SRAM_DMA:
            _, direction, offset, length = asm24.SRAM_CDB.unpack(cdb[:10])
            if offset + length > len(self.sram):
                raise _CommandFailed
            if direction == 0:
                self.sram[offset : offset + length] = data_out
                return b""
            return bytes(self.sram[offset : offset + length])
        raise _CommandFailed

    @property
    def link_up(self) -> bool:
        return self.xdata[asm24.LTSSM_STATE] == asm24.LINK_UP

    def _tlp(self, _op: int, mode: int, fmt_type: int, byte_enable: int, address: int, value: int, data_out: bytes):
        if not self.link_up:
            raise _CommandFailed  # no link: the request never completes
        if fmt_type & ~1 in (asm24.FMT_CFG_READ, asm24.FMT_CFG_WRITE):
            return self._config(fmt_type, address, value, byte_enable)
        offset = self._bar_offset(address)
        if mode == asm24.MODE_STREAM_READ:
            if offset is None or offset + value > r.BAR5_SIZE:
                raise _CommandFailed
            return self.board.read(offset, value)
        if mode == asm24.MODE_STREAM_WRITE:
            if offset is None:
                self.dropped_writes += 1
                return b""
            self.board.write(offset, data_out)
            return b""
        if asm24.is_posted(fmt_type):
            if offset is None or byte_enable != 0xF:
                self.dropped_writes += 1
            else:
                self.board.write32(offset, value)
            return b""
        if offset is None:
            return asm24.COMPLETION.pack(UNSUPPORTED_REQUEST, 0xFFFFFFFF)
        return asm24.COMPLETION.pack(0, self.board.read32(offset))

    def _config(self, fmt_type: int, address: int, value: int, byte_enable: int) -> bytes:
        bus, dev, fn, offset = address >> 24, address >> 19 & 0x1F, address >> 16 & 0x7, address & 0xFFC
        function = self.functions.get(bus) if dev == 0 and fn == 0 and self._reachable(bus, fmt_type & 1) else None
        if function is None:
            return asm24.COMPLETION.pack(UNSUPPORTED_REQUEST, 0xFFFFFFFF)
        if fmt_type & ~1 == asm24.FMT_CFG_WRITE:
            function.write(offset, value, byte_enable)
            self._bar_window = None  # routing may have changed
            return asm24.COMPLETION.pack(0, 0)
        return asm24.COMPLETION.pack(0, function.read(offset))

    def _reachable(self, bus: int, type1: int) -> bool:
        """Bus 0 takes type-0 requests; bus N > 0 takes type-1 requests routed through every bridge above it."""
        if bus == 0:
            return not type1
        for upper in range(bus):
            bridge = self.functions[upper]
            secondary, subordinate = bridge.u8(asm24.PCI_SECONDARY_BUS), bridge.u8(asm24.PCI_SUBORDINATE_BUS)
            if not type1 or not secondary <= bus <= subordinate or (upper + 1 != secondary):
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
        gpu = self.functions[asm24.GPU_BUS]
        base = gpu.read(0x10 + 4 * r.BAR) & ~0xF
        if not base or not all(self._decodes(base + edge) for edge in (0, r.BAR5_SIZE - 1)):
            return 0, 0
        return base, base + r.BAR5_SIZE

    def _decodes(self, address: int) -> bool:
        """Whether a memory request for `address` passes every bridge window and reaches the GPU's BAR."""
        gpu = self.functions[asm24.GPU_BUS]
        base = gpu.read(0x10 + 4 * r.BAR) & ~0xF
        if not base <= address < base + r.BAR5_SIZE or not gpu.u16(asm24.PCI_COMMAND) & asm24.PCI_COMMAND_MEMORY:
            return False
        for bus in range(asm24.GPU_BUS):
            bridge = self.functions[bus]
            low = (bridge.u16(asm24.PCI_MEMORY_BASE) & 0xFFF0) << 16
            high = ((bridge.u16(asm24.PCI_MEMORY_LIMIT) & 0xFFF0) << 16) | 0xFFFFF
            if not bridge.u16(asm24.PCI_COMMAND) & asm24.PCI_COMMAND_MEMORY or not low <= address <= high:
                return False
            if not self._reachable(bus + 1, 1):
                return False
        return True


class _CommandFailed(Exception):
    """The command ends with CSW status 1 (failed)."""
