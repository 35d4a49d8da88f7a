"""USB transfers for the ASM24 USB-PCIe bridge running its custom firmware: vendor control transfers on
endpoint 0 and bulk transfers on 0x02 (OUT) and 0x81 (IN), through libusb (the ctypes bindings tg-autogen
generates in `tg.drivers.autogen.libusb`).

The custom firmware takes its commands as vendor control requests (bmRequestType 0x40 host-to-device,
0xC0 device-to-host); the bulk endpoints carry only the data phase of a streaming PCIe transfer or an SRAM
DMA that a control request announced. Mass-storage framing (CBW/CSW) is not used on this path: the firmware
keeps it only for updating its own flash, which tg does not do.

A STALL on endpoint 0 is a protocol stall: the device refused that one request, and the next SETUP packet
clears it. `USB3` sends a stalled control request once more before it reports the stall.

`USBHandle` is the device boundary: libusb implements it for a real bridge, `tg.drivers.sim.asm24` for
the simulated one, so everything above it (`USB3`, the ASM24 controller, the flash driver) is the same
code on both.
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

EP_BULK_OUT, EP_BULK_IN = 0x02, 0x81
# bmRequestType: vendor request to the device, host to device (OUT) and device to host (IN)
REQUEST_VENDOR_OUT, REQUEST_VENDOR_IN = 0x40, 0xC0
CONFIGURATION, INTERFACE, ALT_SETTING = 1, 0, 0
CUSTOM_FIRMWARE_PRODUCT = "custom"  # the custom firmware's product string starts with this
TIMEOUT_MS = 1000
SLOW_TIMEOUT_MS = 10000  # PCIe power changes and long streaming transfers


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
    def control_transfer(
        self, request_type: int, request: int, value: int, index: int, data: bytes | int, timeout_ms: int = TIMEOUT_MS
    ) -> bytes:
        """A control transfer; `data` is what to send (OUT) or how many bytes to receive (IN)."""

    @abstractmethod
    def bulk_transfer(self, endpoint: int, data: bytes | int, timeout_ms: int = TIMEOUT_MS) -> bytes:
        """A bulk transfer on `endpoint`; raises USBStall when the endpoint is halted."""

    @abstractmethod
    def clear_halt(self, endpoint: int) -> None:
        """CLEAR_FEATURE(ENDPOINT_HALT)."""

    def close(self) -> None:  # noqa: B027 - a simulated device holds nothing
        """Release the device."""


class USB3:
    """Vendor control requests and bulk data phases on an opened bridge."""

    def __init__(self, handle: USBHandle) -> None:
        self.handle = handle
        self.stall_retries = 0

    def control_write(
        self, request: int, value: int = 0, index: int = 0, data: bytes = b"", timeout_ms: int = TIMEOUT_MS
    ) -> None:
        self._control(REQUEST_VENDOR_OUT, request, value, index, bytes(data), timeout_ms)

    def control_read(
        self, request: int, length: int, value: int = 0, index: int = 0, timeout_ms: int = TIMEOUT_MS
    ) -> bytes:
        received = self._control(REQUEST_VENDOR_IN, request, value, index, length, timeout_ms)
        if len(received) != length:
            raise USBError(f"control request 0x{request:02x}: {len(received)} bytes received, expected {length}")
        return received

    def _control(
        self, request_type: int, request: int, value: int, index: int, data: bytes | int, timeout_ms: int
    ) -> bytes:
        if not (0 <= value <= 0xFFFF and 0 <= index <= 0xFFFF):
            raise ValueError(f"control request 0x{request:02x}: wValue/wIndex are 16-bit ({value:#x}, {index:#x})")
        try:
            return self.handle.control_transfer(request_type, request, value, index, data, timeout_ms)
        except USBStall:
            # A protocol stall ends with the next SETUP packet; the request did not run, so send it once more.
            self.stall_retries += 1
            try:
                return self.handle.control_transfer(request_type, request, value, index, data, timeout_ms)
            except USBStall:
                raise USBError(f"the bridge refused control request 0x{request:02x} (STALL, twice)") from None

    def bulk_write(self, data: bytes, timeout_ms: int = TIMEOUT_MS) -> None:
        try:
            self.handle.bulk_transfer(EP_BULK_OUT, bytes(data), timeout_ms)
        except USBStall:
            self.handle.clear_halt(EP_BULK_OUT)
            raise USBError(f"the bridge stalled a {len(data)}-byte bulk OUT data phase") from None

    def bulk_read(self, length: int, timeout_ms: int = TIMEOUT_MS) -> bytes:
        try:
            received = self.handle.bulk_transfer(EP_BULK_IN, length, timeout_ms)
        except USBStall:
            self.handle.clear_halt(EP_BULK_IN)
            raise USBError(f"the bridge stalled a {length}-byte bulk IN data phase") from None
        if len(received) != length:
            raise USBError(f"bulk IN: {len(received)} bytes received, expected {length}")
        return received

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
    """A bridge opened through libusb the way the custom firmware expects: the kernel's driver detached (and
    the device reset after that, so it starts from a clean state), configuration 1, interface 0 claimed,
    alternate setting 0 (the one with plain bulk endpoints, no streams)."""

    def __init__(self, context, device) -> None:
        lib = _libusb()
        self._lib, self._context, self.interface = lib, context, INTERFACE
        self._handle = ctypes.POINTER(lib.libusb_device_handle)()
        _check(lib.libusb_open(device, ctypes.byref(self._handle)), "libusb_open")
        try:
            self._open()
        except BaseException:
            lib.libusb_close(self._handle)
            self._handle = None
            raise

    def _open(self) -> None:
        lib, handle = self._lib, self._handle
        product = self.product()
        if not product.startswith(CUSTOM_FIRMWARE_PRODUCT):
            raise USBError(
                f"the bridge runs firmware {product!r}, not the ASM24 custom firmware (product string "
                f"'{CUSTOM_FIRMWARE_PRODUCT}...'); flash the custom firmware onto the bridge first"
            )
        if _check(lib.libusb_kernel_driver_active(handle, INTERFACE), "asking for a kernel driver") == 1:
            _check(lib.libusb_detach_kernel_driver(handle, INTERFACE), "detaching the kernel driver")
            _check(lib.libusb_reset_device(handle), "resetting the bridge")
        _check(lib.libusb_set_configuration(handle, CONFIGURATION), "selecting configuration 1")
        _check(lib.libusb_claim_interface(handle, INTERFACE), "claiming the bridge's USB interface")
        _check(lib.libusb_set_interface_alt_setting(handle, INTERFACE, ALT_SETTING), "selecting alternate setting 0")

    def product(self) -> str:
        lib = self._lib
        descriptor = lib.struct_libusb_device_descriptor()
        device = lib.libusb_get_device(self._handle)
        _check(lib.libusb_get_device_descriptor(device, ctypes.byref(descriptor)), "reading the device descriptor")
        buffer = (ctypes.c_ubyte * 256)()
        size = _check(
            lib.libusb_get_string_descriptor_ascii(self._handle, descriptor.iProduct, buffer, 256),
            "reading the product string",
        )
        return bytes(buffer[:size]).decode("ascii", errors="replace")

    def control_transfer(
        self, request_type: int, request: int, value: int, index: int, data: bytes | int, timeout_ms: int = TIMEOUT_MS
    ) -> bytes:
        size = data if isinstance(data, int) else len(data)
        buffer = (ctypes.c_ubyte * max(size, 1))(*([] if isinstance(data, int) else data))
        done = self._lib.libusb_control_transfer(
            self._handle, request_type, request, value, index, buffer, size, timeout_ms
        )
        if done == self._lib.LIBUSB_ERROR_PIPE:
            raise USBStall(0)
        _check(done, f"control request 0x{request:02x}")
        if not isinstance(data, int) and done != size:
            raise USBError(f"control request 0x{request:02x}: {done} of {size} bytes sent")
        return bytes(buffer[:done]) if isinstance(data, int) else b""

    def bulk_transfer(self, endpoint: int, data: bytes | int, timeout_ms: int = TIMEOUT_MS) -> bytes:
        size = data if isinstance(data, int) else len(data)
        buffer = (ctypes.c_ubyte * max(size, 1))(*([] if isinstance(data, int) else data))
        transferred = ctypes.c_int(0)
        result = self._lib.libusb_bulk_transfer(
            self._handle, endpoint, buffer, size, ctypes.byref(transferred), timeout_ms
        )
        if result == self._lib.LIBUSB_ERROR_PIPE:
            raise USBStall(endpoint)
        _check(result, f"bulk transfer on endpoint 0x{endpoint:02x}")
        if not isinstance(data, int) and transferred.value != size:
            raise USBError(f"bulk OUT: {transferred.value} of {size} bytes sent")
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
