"""The real libusb path through tg-autogen's generated bindings, with the libusb-1.0 that the
libusb-package wheel ships (this machine has no system libusb and no USB bus: enumeration finds nothing)."""

from __future__ import annotations

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
