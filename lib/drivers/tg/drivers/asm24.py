"""The ASM24 USB-PCIe bridge running its custom firmware (the seed's path to a Navi31 board): vendor requests,
PCIe TLPs, bridge and BAR setup, and an MMIOInterface whose register accesses are PCIe memory requests sent
over USB.

Every command is a vendor control transfer (tg.drivers.usb; bmRequestType 0x40 OUT, 0xC0 IN):

- 0xE4 XDATA read, IN: wValue the 8051 XDATA address, wLength the size (1..255 bytes).
- 0xE5 XDATA write, OUT: wValue the address, wIndex the byte to write, no data stage.
- 0xF3 PCIe power, OUT: wValue 1 (on) or 0 (off); XDATA 0xB450 (the LTSSM state) reads 0x78 once the link
  is in L0.
- 0xF0 PCIe TLP, OUT: wValue `fmt_type | byte_enable << 8`, wIndex the mode, data `<III` (address bits 0-31,
  address bits 32-63, value). Mode 0 sends one TLP; a request that completes (reads, configuration writes) is
  answered by 0xF0 IN, 8 bytes: the completion data as `<I`, the completion status in bits 5-7 of byte 4, and
  in byte 7 the bridge's own status (non-zero: no completion arrived; the request is sent again, up to
  `TLP_RETRIES` times). Posted requests (memory writes, messages) get no completion. Mode 1 (streaming write,
  fmt_type 0x60) and mode 2 (streaming read, fmt_type 0x20) take the number of dwords as the value and move the
  data through a bulk OUT / bulk IN phase, little-endian dwords.
- 0xF2 SRAM DMA, OUT: wValue the number of 512-byte sectors (bit 15 set: a read), wIndex the first 16 KiB slot
  in bits 0-7 and the number of slots in bits 8-15; the data follows on bulk OUT (write) or bulk IN (read,
  whole sectors).

Sources: the specification (hcq.md 1.16, the `CustomASM24Controller`) and the public host code of the custom
firmware (tinygrad's `runtime/support/usb.py` and `system.py`, read for the wire format only).
"""

from __future__ import annotations

import struct
import time

from tg.drivers.mmio import MMIOInterface
from tg.drivers.pci import PCIDevice
from tg.drivers.usb import SLOW_TIMEOUT_MS, USB3

USB_IDS = ((0x3801, 0x0001), (0xADD1, 0x0001))  # searched in this order (tools.md A.2)

XDATA_READ, XDATA_WRITE, PCIE_TLP, SRAM_DMA, PCIE_POWER = 0xE4, 0xE5, 0xF0, 0xF2, 0xF3
TLP_REQUEST = struct.Struct("<III")  # address low, address high, value (or dword count when streaming)
COMPLETION_SIZE = 8
XDATA_CHUNK = 0xFF
LTSSM_STATE, LINK_UP = 0xB450, 0x78
TLP_RETRIES, TLP_RETRY_WAIT_S = 10, 0.001
STREAM_CHUNK = 0x1000  # bytes per streaming TLP command (the driver's choice, well inside the bridge's buffers)
SRAM_SIZE, SRAM_SLOT, SECTOR = 512 * 1024, 0x4000, 512
SRAM_READ_FLAG = 0x8000

MODE_SINGLE, MODE_STREAM_WRITE, MODE_STREAM_READ = 0, 1, 2
FMT_MEM_READ, FMT_MEM_WRITE, FMT_CFG_READ, FMT_CFG_WRITE = 0x00, 0x40, 0x04, 0x44
FMT_MEM_READ_64, FMT_MEM_WRITE_64 = 0x20, 0x60
COMPLETION_STATUS = {1: "unsupported request", 2: "configuration retry", 4: "completer abort"}

# PCI configuration space (type 0 and type 1 headers)
PCI_VENDOR_ID, PCI_COMMAND, PCI_BAR0 = 0x00, 0x04, 0x10
PCI_PRIMARY_BUS = 0x18  # primary, secondary, subordinate bus: one dword with all three
PCI_MEMORY_BASE, PCI_MEMORY_LIMIT = 0x20, 0x22
PCI_PREF_MEMORY_BASE, PCI_PREF_MEMORY_LIMIT, PCI_PREF_BASE_UPPER32, PCI_PREF_LIMIT_UPPER32 = 0x24, 0x26, 0x28, 0x2C
PCI_COMMAND_IO, PCI_COMMAND_MEMORY, PCI_COMMAND_MASTER = 0x1, 0x2, 0x4
PCI_COMMAND_ENABLE = PCI_COMMAND_IO | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER
GPU_BUS, MEM_BASE, PREF_MEM_BASE = 4, 0x10000000, 32 << 30  # the GPU sits behind four bridges (hcq.md 1.16)


class PCIeError(RuntimeError):
    """A PCIe request through the bridge failed; the message says which and how."""


def is_posted(fmt_type: int) -> bool:
    """Memory writes and messages are posted: no completion comes back."""
    return fmt_type & 0xDF == FMT_MEM_WRITE or fmt_type & 0xB8 == 0x30


class ASM24Controller:
    def __init__(self, usb: USB3) -> None:
        self.usb = usb
        self.tlp_retries = 0

    # -- 8051 XDATA ------------------------------------------------------------------------------------------

    def xdata_read(self, address: int, size: int = 1) -> bytes:
        out = bytearray()
        for start in range(0, size, XDATA_CHUNK):
            chunk = min(XDATA_CHUNK, size - start)
            out += self.usb.control_read(XDATA_READ, chunk, value=address + start)
        return bytes(out)

    def xdata_write(self, address: int, data: bytes) -> None:
        for i, byte in enumerate(data):
            self.usb.control_write(XDATA_WRITE, value=address + i, index=byte)

    def set_pcie_power(self, on: bool) -> None:
        self.usb.control_write(PCIE_POWER, value=int(on), timeout_ms=SLOW_TIMEOUT_MS)

    def ensure_link(self) -> None:
        """The custom firmware boots with PCIe off: power it on unless the link is already in L0, then check."""
        if self.xdata_read(LTSSM_STATE)[0] != LINK_UP:
            self.set_pcie_power(True)
        state = self.xdata_read(LTSSM_STATE)[0]
        if state != LINK_UP:
            raise PCIeError(
                f"PCIe link not up (LTSSM state 0x{state:02x}, expected 0x{LINK_UP:02x}): check the board's "
                "power and the enclosure's cable"
            )

    # -- PCIe TLPs -------------------------------------------------------------------------------------------

    def _tlp_out(self, fmt_type: int, byte_enable: int, address: int, value: int, mode: int) -> None:
        request = TLP_REQUEST.pack(address & 0xFFFFFFFF, address >> 32, value)
        self.usb.control_write(PCIE_TLP, value=fmt_type | byte_enable << 8, index=mode, data=request)

    def _tlp_in(self) -> tuple[int, int, int]:
        """(completion data, completion status, bridge status) of the last non-posted request."""
        raw = self.usb.control_read(PCIE_TLP, COMPLETION_SIZE)
        return struct.unpack_from("<I", raw)[0], raw[4] >> 5 & 0x7, raw[7]

    def pcie_request(self, fmt_type: int, address: int, value: int | None = None, size: int = 4) -> int | None:
        """One TLP of 1, 2 or 4 bytes inside an aligned dword; returns the read value, None for writes."""
        offset = address & 3
        if size not in (1, 2, 4) or offset + size > 4:
            raise ValueError("a single TLP covers 1, 2 or 4 bytes within one dword")
        byte_enable = ((1 << size) - 1) << offset
        payload = ((value or 0) << (8 * offset)) & 0xFFFFFFFF
        for attempt in range(TLP_RETRIES + 1):
            self._tlp_out(fmt_type, byte_enable, address & ~3, payload, MODE_SINGLE)
            if is_posted(fmt_type):
                return None
            data, status, bridge_status = self._tlp_in()
            if bridge_status == 0:
                break
            self.tlp_retries += 1
            if attempt < TLP_RETRIES:
                time.sleep(TLP_RETRY_WAIT_S)
        else:
            raise PCIeError(
                f"PCIe request (fmt_type 0x{fmt_type:02x}) at 0x{address:x}: no completion after {TLP_RETRIES} "
                f"retries (bridge status {bridge_status})"
            )
        if status:
            what = COMPLETION_STATUS.get(status, f"reserved status 0b{status:03b}")
            raise PCIeError(f"PCIe request (fmt_type 0x{fmt_type:02x}) at 0x{address:x} failed: {what}")
        return (data >> (8 * offset)) & ((1 << (8 * size)) - 1) if value is None else None

    def pcie_cfg_req(
        self, byte_address: int, bus: int, dev: int = 0, fn: int = 0, value: int | None = None, size: int = 4
    ) -> int | None:
        """A configuration request; type 1 (forwarded by bridges) for buses beyond 0."""
        fmt_type = (FMT_CFG_READ if value is None else FMT_CFG_WRITE) | (1 if bus > 0 else 0)
        address = (bus << 24) | (dev << 19) | (fn << 16) | (byte_address & 0xFFF)
        return self.pcie_request(fmt_type, address, value, size)

    def pcie_mem_read(self, address: int, size: int = 4) -> int:
        value = self.pcie_request(FMT_MEM_READ, address, None, size)
        assert value is not None
        return value

    def pcie_mem_write(self, address: int, value: int, size: int = 4) -> None:
        self.pcie_request(FMT_MEM_WRITE, address, value, size)

    def pcie_mem_read_stream(self, address: int, length: int) -> bytes:
        """Aligned dwords read with streaming TLPs (mode 2) and returned on bulk IN."""
        _check_dwords(address, length)
        out = bytearray()
        for start in range(0, length, STREAM_CHUNK):
            size = min(STREAM_CHUNK, length - start)
            self._tlp_out(FMT_MEM_READ_64, 0xF, address + start, size // 4, MODE_STREAM_READ)
            out += self.usb.bulk_read(size, timeout_ms=SLOW_TIMEOUT_MS)
        return bytes(out)

    def pcie_mem_write_stream(self, address: int, data: bytes) -> None:
        """Aligned dwords written with streaming TLPs (mode 1), the data on bulk OUT."""
        _check_dwords(address, len(data))
        for start in range(0, len(data), STREAM_CHUNK):
            chunk = data[start : start + STREAM_CHUNK]
            self._tlp_out(FMT_MEM_WRITE_64, 0xF, address + start, len(chunk) // 4, MODE_STREAM_WRITE)
            self.usb.bulk_write(chunk, timeout_ms=SLOW_TIMEOUT_MS)

    # -- bridge SRAM -----------------------------------------------------------------------------------------

    def sram_write(self, offset: int, data: bytes) -> None:
        """Write at a 16 KiB slot boundary; the data is padded to whole 512-byte sectors."""
        padded = bytes(data) + bytes(-len(data) % SECTOR)
        slot, slots = self._sram_slots(offset, len(padded))
        self.usb.control_write(SRAM_DMA, value=len(padded) // SECTOR, index=slot | slots << 8)
        self.usb.bulk_write(padded, timeout_ms=SLOW_TIMEOUT_MS)

    def sram_read(self, offset: int, length: int) -> bytes:
        sectors = -(-length // SECTOR)
        slot, slots = self._sram_slots(offset, sectors * SECTOR)
        self.usb.control_write(SRAM_DMA, value=sectors | SRAM_READ_FLAG, index=slot | slots << 8)
        return self.usb.bulk_read(sectors * SECTOR, timeout_ms=SLOW_TIMEOUT_MS)[:length]

    @staticmethod
    def _sram_slots(offset: int, length: int) -> tuple[int, int]:
        if offset < 0 or length < 1 or offset + length > SRAM_SIZE:
            raise ValueError(f"SRAM access 0x{offset:x}+0x{length:x} outside the 512 KiB bridge SRAM")
        if offset % SRAM_SLOT:
            raise ValueError(f"SRAM transfers start at a 16 KiB slot, not at 0x{offset:x}")
        return offset // SRAM_SLOT, -(-length // SRAM_SLOT)


def _check_dwords(address: int, length: int) -> None:
    if address % 4 or length % 4 or length <= 0:
        raise ValueError(f"streaming TLPs move whole aligned dwords, not 0x{length:x} bytes at 0x{address:x}")


def setup_usb_bars(ctrl: ASM24Controller, vendor_id: int, device_ids: tuple[int, ...], bar: int) -> tuple[int, int]:
    """Number the buses down to the GPU and open the bridges' windows, size the GPU's BAR with its memory
    decoding still off, place it, then enable the GPU; returns the BAR's (address, size)."""
    for bus in range(GPU_BUS):
        # The primary, secondary and subordinate bus numbers are one dword write: the bridge takes them together.
        ctrl.pcie_cfg_req(PCI_PRIMARY_BUS, bus, value=bus | (bus + 1) << 8 | GPU_BUS << 16, size=4)
        ctrl.pcie_cfg_req(PCI_MEMORY_BASE, bus, value=(MEM_BASE >> 16) & 0xFFFF, size=2)
        ctrl.pcie_cfg_req(PCI_MEMORY_LIMIT, bus, value=0xFFFF, size=2)
        ctrl.pcie_cfg_req(PCI_PREF_MEMORY_BASE, bus, value=(PREF_MEM_BASE >> 16) & 0xFFFF, size=2)
        ctrl.pcie_cfg_req(PCI_PREF_MEMORY_LIMIT, bus, value=0xFFFF, size=2)
        ctrl.pcie_cfg_req(PCI_PREF_BASE_UPPER32, bus, value=PREF_MEM_BASE >> 32, size=4)
        ctrl.pcie_cfg_req(PCI_PREF_LIMIT_UPPER32, bus, value=0xFFFFFFFF, size=4)
        ctrl.pcie_cfg_req(PCI_COMMAND, bus, value=PCI_COMMAND_ENABLE, size=1)
    ids = ctrl.pcie_cfg_req(PCI_VENDOR_ID, GPU_BUS)
    assert ids is not None
    if ids & 0xFFFF != vendor_id or ids >> 16 not in device_ids:
        raise PCIeError(f"no Navi31 behind the USB bridge: bus {GPU_BUS} answers {ids & 0xFFFF:04x}:{ids >> 16:04x}")
    bar_register = PCI_BAR0 + 4 * bar
    ctrl.pcie_cfg_req(bar_register, GPU_BUS, value=0xFFFFFFFF)
    sized = ctrl.pcie_cfg_req(bar_register, GPU_BUS)
    assert sized is not None
    size = (~(sized & ~0xF) + 1) & 0xFFFFFFFF
    if not sized & ~0xF or not size:
        raise PCIeError(f"BAR {bar} of the GPU is not implemented")
    ctrl.pcie_cfg_req(bar_register, GPU_BUS, value=MEM_BASE)
    ctrl.pcie_cfg_req(PCI_COMMAND, GPU_BUS, value=PCI_COMMAND_ENABLE, size=1)
    return MEM_BASE, size


class USBMMIOInterface(MMIOInterface):
    """A BAR behind the bridge: dword registers are single memory TLPs, longer accesses streaming TLPs."""

    def __init__(self, ctrl: ASM24Controller, base: int, size: int) -> None:
        self.ctrl, self.base, self.size = ctrl, base, size

    def _check(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise IndexError(f"MMIO access 0x{offset:x}+0x{size:x} outside the 0x{self.size:x}-byte BAR")

    def read32(self, offset: int) -> int:
        self._check(offset, 4)
        return self.ctrl.pcie_mem_read(self.base + offset)

    def write32(self, offset: int, value: int) -> None:
        self._check(offset, 4)
        self.ctrl.pcie_mem_write(self.base + offset, value & 0xFFFFFFFF)

    def read(self, offset: int, size: int) -> bytes:
        """A byte copy, like a 'B' view; the bridge reads whole dwords, so the span is widened to dwords."""
        self._check(offset, size)
        if size == 0:
            return b""
        start, end = offset & ~3, (offset + size + 3) & ~3
        data = self.ctrl.pcie_mem_read_stream(self.base + start, end - start)
        return data[offset - start : offset - start + size]

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        if offset % 4 or len(data) % 4:
            raise ValueError("writes through the bridge are whole aligned dwords")
        if len(data) == 4:
            self.write32(offset, int.from_bytes(data, "little"))
        elif data:
            self.ctrl.pcie_mem_write_stream(self.base + offset, bytes(data))


class USBPCIDevice(PCIDevice):
    """The GPU behind an ASM24 bridge, set up for memory access on open."""

    def __init__(self, usb: USB3, vendor_id: int, device_ids: tuple[int, ...], description: str) -> None:
        self.usb = usb
        self.ctrl = ASM24Controller(usb)
        self.address = description
        self.vendor_id = vendor_id
        self._device_ids = device_ids
        self.device_id = device_ids[0]

    def map_bar(self, bar: int) -> MMIOInterface:
        self.ctrl.ensure_link()
        base, size = setup_usb_bars(self.ctrl, self.vendor_id, self._device_ids, bar)
        return USBMMIOInterface(self.ctrl, base, size)

    def close(self) -> None:
        self.usb.close()
