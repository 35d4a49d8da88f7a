"""The ASM24 USB-PCIe bridge (the seed's path to a Navi31 board): vendor commands, PCIe TLPs, bridge BAR
setup, and an MMIOInterface whose register accesses are PCIe memory requests sent over USB.

Vendor commands are SCSI CDBs carried in BOT CBWs (tg.drivers.usb), as hcq.md 1.16 describes:

- 0xE4 XDATA read: `op, size, addr[23:16], addr[15:0], 0`; data IN: `size` bytes of the 8051 XDATA.
- 0xE5 XDATA write: `op, value, addr[23:16], addr[15:0], 0`; no data.
- 0xF3 PCIe power on: `op`; then XDATA 0xB450 (the LTSSM state) reads 0x78 once the link is up.
- 0xF0 PCIe TLP: `op, mode, fmt_type, byte_enable, address:u64, value:u32`. Mode 0 (single): IN 8 bytes
  `status:u32, value:u32` for requests that complete, no data for posted memory writes. Mode 1
  (streaming write): OUT `value` bytes. Mode 2 (streaming read): IN `value` bytes.
- 0xF2 SRAM DMA: `op, direction (0 write, 1 read), offset:u32, length:u32`; OUT or IN `length` bytes of
  the 512 KiB bridge SRAM.

The exact byte layouts of 0xF0 and 0xF2 are tg's reading of the spec (the seed calls them through
tinygrad's USB support, which is not in the seeds); they are validated against the simulated bridge only.
"""

from __future__ import annotations

import struct

from tg.drivers.mmio import MMIOInterface
from tg.drivers.pci import PCIDevice
from tg.drivers.usb import USB3

USB_IDS = ((0x3801, 0x0001), (0xADD1, 0x0001))  # searched in this order (tools.md A.2)

XDATA_READ, XDATA_WRITE, PCIE_TLP, SRAM_DMA, PCIE_POWER_ON = 0xE4, 0xE5, 0xF0, 0xF2, 0xF3
XDATA_CDB = struct.Struct(">BBBHB")
TLP_CDB = struct.Struct(">BBBBQI")
SRAM_CDB = struct.Struct(">BBII")
COMPLETION = struct.Struct(">II")
LTSSM_STATE, LINK_UP = 0xB450, 0x78
SRAM_SIZE = 512 * 1024
STREAM_CHUNK = 0x1000

MODE_SINGLE, MODE_STREAM_WRITE, MODE_STREAM_READ = 0, 1, 2
FMT_MEM_READ, FMT_MEM_WRITE, FMT_CFG_READ, FMT_CFG_WRITE = 0x00, 0x40, 0x04, 0x44
COMPLETION_STATUS = {0: "successful", 1: "unsupported request", 2: "configuration retry", 4: "completer abort"}

# PCI configuration space (type 0 and type 1 headers)
PCI_VENDOR_ID, PCI_COMMAND, PCI_BAR0 = 0x00, 0x04, 0x10
PCI_PRIMARY_BUS, PCI_SECONDARY_BUS, PCI_SUBORDINATE_BUS = 0x18, 0x19, 0x1A
PCI_MEMORY_BASE, PCI_MEMORY_LIMIT = 0x20, 0x22
PCI_COMMAND_MEMORY, PCI_COMMAND_MASTER = 0x2, 0x4
GPU_BUS, MEM_BASE = 4, 0x10000000  # the GPU sits behind four bridges (hcq.md 1.16)


class PCIeError(RuntimeError):
    """A PCIe request through the bridge failed; the message says which and how."""


def is_posted(fmt_type: int) -> bool:
    """Memory writes are posted: no completion comes back."""
    return fmt_type & 0xDF == FMT_MEM_WRITE


class ASM24Controller:
    def __init__(self, usb: USB3) -> None:
        self.usb = usb

    # -- 8051 XDATA ------------------------------------------------------------------------------------------

    def xdata_read(self, address: int, size: int = 1) -> bytes:
        if not 1 <= size <= 0xFF:
            raise ValueError("XDATA reads are 1..255 bytes")
        cdb = XDATA_CDB.pack(XDATA_READ, size, (address >> 16) & 0xFF, address & 0xFFFF, 0)
        return self.usb.command(cdb, data_in=size) or b""

    def xdata_write(self, address: int, value: int) -> None:
        self.usb.command(XDATA_CDB.pack(XDATA_WRITE, value & 0xFF, (address >> 16) & 0xFF, address & 0xFFFF, 0))

    def power_on(self) -> None:
        """Power the PCIe side and check the link: the LTSSM state must read 0x78 (L0, link up)."""
        self.usb.command(bytes([PCIE_POWER_ON]))
        state = self.xdata_read(LTSSM_STATE)[0]
        if state != LINK_UP:
            raise PCIeError(
                f"PCIe link not up (LTSSM state 0x{state:02x}, expected 0x{LINK_UP:02x}): check the board's "
                "power and the enclosure's cable"
            )

    # -- PCIe TLPs -------------------------------------------------------------------------------------------

    def pcie_request(self, fmt_type: int, address: int, value: int | None = None, size: int = 4) -> int | None:
        """One TLP of 1, 2 or 4 bytes inside an aligned dword; returns the read value, None for writes."""
        offset = address & 3
        if size not in (1, 2, 4) or offset + size > 4:
            raise ValueError("a single TLP covers 1, 2 or 4 bytes within one dword")
        byte_enable = ((1 << size) - 1) << offset
        payload = ((value or 0) << (8 * offset)) & 0xFFFFFFFF
        cdb = TLP_CDB.pack(PCIE_TLP, MODE_SINGLE, fmt_type, byte_enable, address & ~3, payload)
        if is_posted(fmt_type):
            self.usb.command(cdb)
            return None
        status, data = COMPLETION.unpack(self.usb.command(cdb, data_in=COMPLETION.size) or b"")
        if status != 0:
            what = COMPLETION_STATUS.get(status, f"status {status}")
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
        out = bytearray()
        for start in range(0, length, STREAM_CHUNK):
            size = min(STREAM_CHUNK, length - start)
            cdb = TLP_CDB.pack(PCIE_TLP, MODE_STREAM_READ, FMT_MEM_READ, 0xF, address + start, size)
            out += self.usb.command(cdb, data_in=size) or b""
        return bytes(out)

    def pcie_mem_write_stream(self, address: int, data: bytes) -> None:
        for start in range(0, len(data), STREAM_CHUNK):
            chunk = data[start : start + STREAM_CHUNK]
            cdb = TLP_CDB.pack(PCIE_TLP, MODE_STREAM_WRITE, FMT_MEM_WRITE, 0xF, address + start, len(chunk))
            self.usb.command(cdb, data_out=chunk)

    # -- bridge SRAM -----------------------------------------------------------------------------------------

    def sram_write(self, offset: int, data: bytes) -> None:
        self._check_sram(offset, len(data))
        self.usb.command(SRAM_CDB.pack(SRAM_DMA, 0, offset, len(data)), data_out=data)

    def sram_read(self, offset: int, length: int) -> bytes:
        self._check_sram(offset, length)
        return self.usb.command(SRAM_CDB.pack(SRAM_DMA, 1, offset, length), data_in=length) or b""

    @staticmethod
    def _check_sram(offset: int, length: int) -> None:
        if offset < 0 or length < 1 or offset + length > SRAM_SIZE:
            raise ValueError(f"SRAM access 0x{offset:x}+0x{length:x} outside the 512 KiB bridge SRAM")


def setup_usb_bars(ctrl: ASM24Controller, vendor_id: int, device_ids: tuple[int, ...], bar: int) -> tuple[int, int]:
    """Number the buses down to the GPU, size and place its BAR, open the bridges' memory windows and enable
    memory decoding; returns the BAR's (address, size)."""
    for bus in range(GPU_BUS):
        ctrl.pcie_cfg_req(PCI_PRIMARY_BUS, bus, value=bus, size=1)
        ctrl.pcie_cfg_req(PCI_SECONDARY_BUS, bus, value=bus + 1, size=1)
        ctrl.pcie_cfg_req(PCI_SUBORDINATE_BUS, bus, value=GPU_BUS, size=1)
    ids = ctrl.pcie_cfg_req(PCI_VENDOR_ID, GPU_BUS)
    assert ids is not None
    if ids & 0xFFFF != vendor_id or ids >> 16 not in device_ids:
        raise PCIeError(f"no Navi31 behind the USB bridge: bus {GPU_BUS} answers {ids & 0xFFFF:04x}:{ids >> 16:04x}")
    bar_register = PCI_BAR0 + 4 * bar
    ctrl.pcie_cfg_req(bar_register, GPU_BUS, value=0xFFFFFFFF)
    sized = ctrl.pcie_cfg_req(bar_register, GPU_BUS)
    assert sized is not None
    size = (~(sized & ~0xF) + 1) & 0xFFFFFFFF
    if not size:
        raise PCIeError(f"BAR {bar} of the GPU is not implemented")
    ctrl.pcie_cfg_req(bar_register, GPU_BUS, value=MEM_BASE)
    window_base, window_limit = (MEM_BASE >> 16) & 0xFFF0, ((MEM_BASE + size - 1) >> 16) & 0xFFF0
    for bus in range(GPU_BUS):
        ctrl.pcie_cfg_req(PCI_MEMORY_BASE, bus, value=window_base, size=2)
        ctrl.pcie_cfg_req(PCI_MEMORY_LIMIT, bus, value=window_limit, size=2)
        ctrl.pcie_cfg_req(PCI_COMMAND, bus, value=PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER, size=2)
    ctrl.pcie_cfg_req(PCI_COMMAND, GPU_BUS, value=PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER, size=2)
    return MEM_BASE, size


class USBMMIOInterface(MMIOInterface):
    """A BAR behind the bridge: aligned dwords are single memory TLPs, longer reads streaming TLPs."""

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
        self._check(offset, size)
        return self.ctrl.pcie_mem_read_stream(self.base + offset, size)  # a byte copy, like a 'B' view

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        if offset % 4 or len(data) % 4:
            raise ValueError("writes through the bridge are whole aligned dwords")
        for i in range(0, len(data), 4):
            self.write32(offset + i, int.from_bytes(data[i : i + 4], "little"))


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
        self.ctrl.power_on()
        base, size = setup_usb_bars(self.ctrl, self.vendor_id, self._device_ids, bar)
        return USBMMIOInterface(self.ctrl, base, size)

    def close(self) -> None:
        self.usb.close()
