"""The real libusb path through tg-autogen's generated bindings, with the libusb-1.0 that the
libusb-package wheel ships (this machine has no system libusb and no USB bus: enumeration finds nothing)."""

from __future__ import annotations

import ctypes

import pytest

from tg.drivers import usb
from tg.drivers.asm24 import USB_IDS


@pytest.fixture
def bundled_libusb(monkeypatch) -> str:
    libusb_package = pytest.importorskip("libusb_package")
    path = str(libusb_package.get_library_path())
    monkeypatch.setenv("USB_1_0_PATH", path)
    return path


def test_enumeration_runs_through_libusb_and_finds_no_bridge_here(bundled_libusb: str) -> None:
    lib, context = usb._context()
    try:
        devices, count = usb._device_list(lib, context)
        described = [usb._describe(lib, devices[i]) for i in range(count)]
        lib.libusb_free_device_list(devices, 1)
    finally:
        lib.libusb_exit(context)
    bridges = usb.list_devices(USB_IDS)
    assert bridges == [d for ids in USB_IDS for d in described if (d.vendor, d.product) == ids]


def test_a_missing_libusb_is_named(monkeypatch) -> None:
    """What the bindings raise when the library is absent (cbind.DLL: OSError) becomes one clear message."""

    class Missing:
        def __getattr__(self, name):
            raise OSError("cannot find library 'usb-1.0'; set USB_1_0_PATH to its path")

    monkeypatch.setattr(usb, "_libusb", lambda: Missing())
    with pytest.raises(usb.LibusbUnavailable, match="libusb-1.0 is not available .*install libusb-1.0-0"):
        usb.list_devices(USB_IDS)


class FakeLibusb:
    """Records the libusb calls of an open; a kernel driver is attached and the product string is scripted."""

    LIBUSB_ERROR_PIPE = -9

    def __init__(self, product: bytes, kernel_driver: int = 1) -> None:
        self.calls: list[tuple] = []
        self.product, self.kernel_driver = product, kernel_driver

        class DeviceDescriptor(ctypes.Structure):
            _fields_ = [("iProduct", ctypes.c_uint8)]

        self.struct_libusb_device_descriptor = DeviceDescriptor
        self.libusb_device_handle = ctypes.c_void_p

    def __getattr__(self, name: str):
        def call(*args):
            self.calls.append((name, *(a for a in args[1:] if isinstance(a, int))))
            if name == "libusb_get_string_descriptor_ascii":
                buffer = args[2]
                buffer[: len(self.product)] = list(self.product)
                return len(self.product)
            if name == "libusb_kernel_driver_active":
                return self.kernel_driver
            return 0

        return call


def test_the_bridge_is_opened_as_the_custom_firmware_expects(monkeypatch) -> None:
    lib = FakeLibusb(b"custom ASM2464 firmware")
    monkeypatch.setattr(usb, "_libusb", lambda: lib)
    handle = usb.LibusbHandle(None, None)
    names = [c for c in lib.calls if c[0] not in ("libusb_get_device", "libusb_get_device_descriptor")]
    assert names == [
        ("libusb_open",),
        ("libusb_get_string_descriptor_ascii", 0, 256),  # iProduct 0 in the fake descriptor
        ("libusb_kernel_driver_active", 0),
        ("libusb_detach_kernel_driver", 0),
        ("libusb_reset_device",),
        ("libusb_set_configuration", 1),
        ("libusb_claim_interface", 0),
        ("libusb_set_interface_alt_setting", 0, 0),
    ]
    assert handle.product().startswith("custom")
    lib.calls.clear()
    monkeypatch.setattr(usb, "_libusb", lambda: FakeLibusb(b"custom", kernel_driver=0))
    quiet = usb._libusb()
    usb.LibusbHandle(None, None)
    assert not any(c[0] in ("libusb_detach_kernel_driver", "libusb_reset_device") for c in quiet.calls)


def test_a_bridge_with_the_stock_firmware_is_refused_and_closed(monkeypatch) -> None:
    lib = FakeLibusb(b"AS2462")
    monkeypatch.setattr(usb, "_libusb", lambda: lib)
    with pytest.raises(usb.USBError, match="runs firmware 'AS2462', not the ASM24 custom firmware"):
        usb.LibusbHandle(None, None)
    assert lib.calls[-1][0] == "libusb_close"
    assert not any(c[0] == "libusb_set_configuration" for c in lib.calls)
