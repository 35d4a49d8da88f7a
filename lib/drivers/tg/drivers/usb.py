"""USB transfers for the ASM24 USB-PCIe bridge: control and bulk transfers through libusb (the ctypes
bindings tg-autogen generates in `tg.drivers.autogen.libusb`), and the mass-storage Bulk-Only Transport
(BOT) the bridge's vendor commands ride on.

A BOT command is three phases: a 31-byte Command Block Wrapper (CBW: signature 0x43425355, tag, data
length, direction flag, LUN, CDB length, up to 16 CDB bytes) on the bulk OUT endpoint, an optional data
phase, and a 13-byte Command Status Wrapper (CSW: signature 0x53425355, the same tag, residue, status) on
the bulk IN endpoint. A device that gets an invalid CBW stalls its endpoints until the host runs reset
recovery (the class request Bulk-Only Mass Storage Reset, then CLEAR_FEATURE(HALT) on both endpoints).

`USBHandle` is the device boundary: libusb implements it for a real bridge, `tg.drivers.sim.asm24` for
the simulated one, so everything above it (`USB3`, the ASM24 controller, the flash driver) is the same
code on both.
"""

from __future__ import annotations

import ctypes
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

CBW = struct.Struct("<IIIBBB16s")
CSW = struct.Struct("<IIIB")
CBW_SIGNATURE, CSW_SIGNATURE = 0x43425355, 0x53425355
CBW_DATA_IN = 0x80
EP_BULK_OUT, EP_BULK_IN = 0x02, 0x81
# bmRequestType values: vendor request to the device (host to device / device to host), class to interface
REQUEST_VENDOR_OUT, REQUEST_VENDOR_IN, REQUEST_CLASS_INTERFACE_OUT = 0x40, 0xC0, 0x21
BOT_MASS_STORAGE_RESET = 0xFF
CSW_PASSED, CSW_FAILED, CSW_PHASE_ERROR = 0, 1, 2
TIMEOUT_MS = 1000


class USBError(RuntimeError):
    """A USB transfer failed; the message names the transfer and the reason."""


class USBStall(USBError):
    """The device halted an endpoint (a STALL handshake)."""

    def __init__(self, endpoint: int) -> None:
        super().__init__(f"USB endpoint 0x{endpoint:02x} stalled")
        self.endpoint = endpoint


class USBHandle(ABC):
    """One opened USB device: the transfers the bridge needs."""

    @abstractmethod
    def control_transfer(self, request_type: int, request: int, value: int, index: int, data: bytes | int) -> bytes:
        """A control transfer; `data` is what to send (OUT) or how many bytes to receive (IN)."""

    @abstractmethod
    def bulk_transfer(self, endpoint: int, data: bytes | int) -> bytes:
        """A bulk transfer on `endpoint`; raises USBStall when the endpoint is halted."""

    @abstractmethod
    def clear_halt(self, endpoint: int) -> None:
        """CLEAR_FEATURE(ENDPOINT_HALT)."""

    def close(self) -> None:  # noqa: B027 - a simulated device holds nothing
        """Release the device."""


class USB3:
    """Control, bulk and BOT transfers on an opened bridge."""

    def __init__(self, handle: USBHandle, interface: int = 0) -> None:
        self.handle = handle
        self.interface = interface
        self._tag = 0
        self.recoveries = 0

    def control_write(self, request: int, value: int, index: int, data: bytes = b"") -> None:
        self.handle.control_transfer(REQUEST_VENDOR_OUT, request, value, index, data)

    def control_read(self, request: int, length: int, value: int = 0, index: int = 0) -> bytes:
        return self.handle.control_transfer(REQUEST_VENDOR_IN, request, value, index, length)

    def bulk_write(self, data: bytes) -> None:
        self.handle.bulk_transfer(EP_BULK_OUT, data)

    def bulk_read(self, length: int) -> bytes:
        return self.handle.bulk_transfer(EP_BULK_IN, length)

    def reset_recovery(self) -> None:
        """BOT reset recovery: Bulk-Only Mass Storage Reset, then clear the halt on both bulk endpoints."""
        self.recoveries += 1
        self.handle.control_transfer(REQUEST_CLASS_INTERFACE_OUT, BOT_MASS_STORAGE_RESET, 0, self.interface, b"")
        self.handle.clear_halt(EP_BULK_IN)
        self.handle.clear_halt(EP_BULK_OUT)

    def send_batch(
        self, cdbs: Sequence[bytes], idata: Sequence[int] | None = None, odata: Sequence[bytes | None] | None = None
    ) -> list[bytes | None]:
        """Run BOT commands in order: CDB i receives idata[i] bytes or sends odata[i]; returns what each
        received (None for commands without a data-in phase)."""
        idata = idata or [0] * len(cdbs)
        odata = odata or [None] * len(cdbs)
        return [self.command(cdb, size, out) for cdb, size, out in zip(cdbs, idata, odata, strict=True)]

    def command(self, cdb: bytes, data_in: int = 0, data_out: bytes | None = None) -> bytes | None:
        if not 1 <= len(cdb) <= 16:
            raise ValueError("a CDB is 1..16 bytes")
        if data_in and data_out:
            raise ValueError("a BOT command has one data phase, IN or OUT")
        self._tag = (self._tag + 1) & 0xFFFFFFFF
        length = data_in or len(data_out or b"")
        cbw = CBW.pack(CBW_SIGNATURE, self._tag, length, CBW_DATA_IN if data_in else 0, 0, len(cdb), cdb)
        try:
            self.bulk_write(cbw)
        except USBStall:
            # The device did not take the CBW (a halted endpoint, or a CBW it judged invalid): nothing ran,
            # so after reset recovery the same command is sent once more.
            self.reset_recovery()
            self.bulk_write(cbw)
        received = None
        try:
            if data_out:
                self.bulk_write(data_out)
            elif data_in:
                received = self.bulk_read(data_in)
            status = self._read_csw(cdb[0])
        except USBStall as e:
            self.reset_recovery()
            raise USBError(f"ASM24 command 0x{cdb[0]:02x} stalled in its data or status phase ({e})") from None
        if status == CSW_PHASE_ERROR:
            self.reset_recovery()
            raise USBError(f"ASM24 command 0x{cdb[0]:02x}: phase error reported by the bridge")
        if status != CSW_PASSED:
            raise USBError(f"ASM24 command 0x{cdb[0]:02x} failed (CSW status {status})")
        return received

    def _read_csw(self, opcode: int) -> int:
        raw = self.bulk_read(CSW.size)
        if len(raw) != CSW.size:
            self.reset_recovery()
            raise USBError(f"ASM24 command 0x{opcode:02x}: malformed CSW of {len(raw)} bytes")
        signature, tag, _residue, status = CSW.unpack(raw)
        if signature != CSW_SIGNATURE or tag != self._tag:
            self.reset_recovery()
            raise USBError(
                f"ASM24 command 0x{opcode:02x}: malformed CSW (signature 0x{signature:08x}, tag {tag} "
                f"for CBW tag {self._tag})"
            )
        return status

    def close(self) -> None:
        self.handle.close()


# -- libusb ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class USBDeviceInfo:
    vendor: int
    product: int
    bus: int
    address: int

    def __str__(self) -> str:
        return f"usb {self.bus:03d}:{self.address:03d} ({self.vendor:04x}:{self.product:04x})"


class LibusbUnavailable(USBError):
    """libusb-1.0 is not installed, so no USB device can be reached."""


def _libusb():
    from tg.drivers.autogen import libusb

    return libusb


def _check(result: int, what: str) -> int:
    if result < 0:
        name = _libusb().libusb_error_name(result)
        raise USBError(f"{what} failed: {name.decode() if name else result}")
    return result


class LibusbHandle(USBHandle):
    """A bridge opened through libusb; the kernel's mass-storage driver is detached while we hold it."""

    def __init__(self, context, device, interface: int = 0) -> None:
        lib = _libusb()
        self._lib, self._context, self.interface = lib, context, interface
        self._handle = ctypes.POINTER(lib.libusb_device_handle)()
        _check(lib.libusb_open(device, ctypes.byref(self._handle)), "libusb_open")
        lib.libusb_set_auto_detach_kernel_driver(self._handle, 1)
        _check(lib.libusb_claim_interface(self._handle, interface), "claiming the bridge's USB interface")

    def control_transfer(self, request_type: int, request: int, value: int, index: int, data: bytes | int) -> bytes:
        size = data if isinstance(data, int) else len(data)
        buffer = (ctypes.c_ubyte * max(size, 1))(*([] if isinstance(data, int) else data))
        done = self._lib.libusb_control_transfer(
            self._handle, request_type, request, value, index, buffer, size, TIMEOUT_MS
        )
        if done == self._lib.LIBUSB_ERROR_PIPE:
            raise USBStall(0)
        _check(done, f"control request 0x{request:02x}")
        return bytes(buffer[:done]) if isinstance(data, int) else b""

    def bulk_transfer(self, endpoint: int, data: bytes | int) -> bytes:
        size = data if isinstance(data, int) else len(data)
        buffer = (ctypes.c_ubyte * max(size, 1))(*([] if isinstance(data, int) else data))
        transferred = ctypes.c_int(0)
        result = self._lib.libusb_bulk_transfer(
            self._handle, endpoint, buffer, size, ctypes.byref(transferred), TIMEOUT_MS
        )
        if result == self._lib.LIBUSB_ERROR_PIPE:
            raise USBStall(endpoint)
        _check(result, f"bulk transfer on endpoint 0x{endpoint:02x}")
        return bytes(buffer[: transferred.value]) if isinstance(data, int) else b""

    def clear_halt(self, endpoint: int) -> None:
        _check(self._lib.libusb_clear_halt(self._handle, endpoint), f"clearing the halt on 0x{endpoint:02x}")

    def close(self) -> None:
        if self._handle:
            self._lib.libusb_release_interface(self._handle, self.interface)
            self._lib.libusb_close(self._handle)
            self._handle = None


def _device_list(lib, context):
    devices = ctypes.POINTER(ctypes.POINTER(lib.libusb_device))()
    count = _check(lib.libusb_get_device_list(context, ctypes.byref(devices)), "libusb_get_device_list")
    return devices, count


def _context():
    try:
        lib = _libusb()
        context = ctypes.POINTER(lib.libusb_context)()
        _check(lib.libusb_init(ctypes.byref(context)), "libusb_init")
    except OSError as e:
        raise LibusbUnavailable(f"libusb-1.0 is not available ({e}); install libusb-1.0-0 for the USB bridge") from e
    return lib, context


def list_devices(ids: Sequence[tuple[int, int]]) -> list[USBDeviceInfo]:
    """Every USB device whose (vendor, product) is in `ids`, in the order of `ids` (the seed's search order)."""
    lib, context = _context()
    try:
        devices, count = _device_list(lib, context)
        try:
            found = [_describe(lib, devices[i]) for i in range(count)]
        finally:
            lib.libusb_free_device_list(devices, 1)
    finally:
        lib.libusb_exit(context)
    return [info for vid_pid in ids for info in found if (info.vendor, info.product) == vid_pid]


def _describe(lib, device) -> USBDeviceInfo:
    descriptor = lib.struct_libusb_device_descriptor()
    _check(lib.libusb_get_device_descriptor(device, ctypes.byref(descriptor)), "reading a device descriptor")
    bus, address = lib.libusb_get_bus_number(device), lib.libusb_get_device_address(device)
    return USBDeviceInfo(descriptor.idVendor, descriptor.idProduct, bus, address)


def open_device(info: USBDeviceInfo) -> USBHandle:
    """Open the device `list_devices` described (the libusb context lives as long as the handle)."""
    lib, context = _context()
    devices, count = _device_list(lib, context)
    try:
        for i in range(count):
            if _describe(lib, devices[i]) == info:
                return LibusbHandle(context, devices[i])
    finally:
        lib.libusb_free_device_list(devices, 1)
    raise USBError(f"{info} disappeared before it could be opened")
