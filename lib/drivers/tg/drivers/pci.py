"""PCI devices: the PCIDevice interface and its Linux sysfs implementation.

Enumeration reads /sys/bus/pci/devices/*/{vendor,device}; a BAR is mapped by mmap of the device's
`resourceN` file. Nothing here loads or unloads kernel modules: the native path needs the kernel driver
already unbound, and says so when the BAR cannot be opened.
"""

from __future__ import annotations

import mmap
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from tg.drivers.mmio import BufferMMIO, MMIOInterface

SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class DeviceMatch:
    """Matches a device id when `(device & mask) in ids`."""

    mask: int
    ids: tuple[int, ...]

    def matches(self, device_id: int) -> bool:
        return (device_id & self.mask) in self.ids


class PCIDevice(ABC):
    """One PCI function whose BARs can be mapped."""

    address: str
    vendor_id: int
    device_id: int

    @abstractmethod
    def map_bar(self, bar: int) -> MMIOInterface:
        """Map BAR `bar` and return its register window."""

    def close(self) -> None:  # noqa: B027 - optional hook, most devices hold nothing to release
        """Release mappings; the default holds none."""


class SysfsPCIDevice(PCIDevice):
    """A PCI function reached through /sys/bus/pci/devices/<address>."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.address = path.name
        self.vendor_id = _read_hex(path / "vendor")
        self.device_id = _read_hex(path / "device")
        self._maps: list[mmap.mmap] = []

    def map_bar(self, bar: int) -> MMIOInterface:
        if not 0 <= bar <= 5:
            raise ValueError(f"BAR must be 0..5, not {bar}")
        resource = self.path / f"resource{bar}"
        try:
            fd = os.open(resource, os.O_RDWR | os.O_SYNC)
        except OSError as e:
            raise OSError(f"cannot open {resource} ({e.strerror}); run as root with the kernel driver unbound") from e
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise OSError(f"{resource} is empty: BAR {bar} is not implemented by {self.address}")
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._maps.append(mapping)
        return BufferMMIO(memoryview(mapping))

    def close(self) -> None:
        # A memoryview still exported by a BufferMMIO keeps the mmap open; the OS releases it at exit.
        for mapping in self._maps:
            try:
                mapping.close()
            except BufferError:
                pass
        self._maps.clear()

    def __repr__(self) -> str:
        return f"SysfsPCIDevice({self.address} {self.vendor_id:04x}:{self.device_id:04x})"


def scan_pci(vendor_id: int, matches: tuple[DeviceMatch, ...], root: Path = SYSFS_PCI_DEVICES) -> list[SysfsPCIDevice]:
    """Every PCI function under `root` of this vendor whose device id fits one of `matches`, sorted by address."""
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.iterdir()):
        try:
            vendor, device = _read_hex(path / "vendor"), _read_hex(path / "device")
        except (OSError, ValueError):
            continue  # a half-removed device or an unreadable entry is not ours
        if vendor == vendor_id and any(m.matches(device) for m in matches):
            found.append(SysfsPCIDevice(path))
    return found


def bound_driver(device_path: Path) -> str | None:
    """The kernel driver bound to a PCI function (the name `driver` links to), or None."""
    link = Path(device_path) / "driver"
    return Path(os.readlink(link)).name if link.is_symlink() else None


def _read_hex(path: Path) -> int:
    return int(path.read_text().strip(), 16)
