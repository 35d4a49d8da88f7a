"""PCI devices: the PCIDevice interface and its Linux sysfs implementation.

Enumeration reads /sys/bus/pci/devices/*/{vendor,device}; a BAR is mapped by mmap of the device's
`resourceN` file. Nothing here loads or unloads kernel modules: the native path needs the kernel driver
already unbound, and says so when the BAR cannot be opened.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from tg.drivers.mmio import BufferMMIO, MMIOInterface

SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")
# Linux mmap values (Python's mmap module cannot map at a fixed address)
PROT_NONE, MAP_FIXED, MAP_NORESERVE = 0, 0x10, 0x4000


@dataclass(frozen=True)
class DeviceMatch:
    """Matches a device id when `(device & mask) in ids`."""

    mask: int
    ids: tuple[int, ...]

    def matches(self, device_id: int) -> bool:
        return (device_id & self.mask) in self.ids


# Config-space offsets and bits (PCI local bus specification, type-0 header)
PCI_VENDOR_ID, PCI_DEVICE_ID, PCI_COMMAND, PCI_BAR0 = 0x00, 0x02, 0x04, 0x10
PCI_COMMAND_MEMORY, PCI_COMMAND_MASTER = 1 << 1, 1 << 2
PCI_BAR_MEM_TYPE_64, PCI_BAR_PREFETCH = 0x4, 0x8
PCI_CONFIG_SIZE = 0x1000
# Resizable BAR extended capability (PCIe base spec 7.8.6): header, then per BAR a capability dword (bit 4 + n: a
# size of 2^n MiB is supported) and a control dword (BAR index [2:0], resizable BAR count [7:5], size n [13:8]).
PCI_EXT_CAP_ID_REBAR = 0x15
REBAR_CAPABILITY, REBAR_CONTROL = 0x4, 0x8
REBAR_CONTROL_SIZE_SHIFT, REBAR_CONTROL_SIZE_MASK = 8, 0x3F


class PCIDevice(ABC):
    """One PCI function: its BARs, its config space, and (for a driver that runs the device itself) system memory
    the device can reach by DMA. The surface of spec hcq §1.16; a transport implements what it can reach, the rest
    raises NotImplementedError naming the transport."""

    address: str
    vendor_id: int
    device_id: int

    @abstractmethod
    def map_bar(self, bar: int) -> MMIOInterface:
        """Map BAR `bar` and return its register window."""

    def map_bar_at(self, bar: int, offset: int, address: int, size: int) -> None:
        """Map bytes [offset, offset + size) of BAR `bar` at CPU address `address` (inside a reserve_va window),
        so a driver can give the CPU the same address for a buffer as the GPU."""
        raise NotImplementedError(f"{type(self).__name__} cannot map a BAR at a fixed address")

    def bar_info(self, bar: int) -> tuple[int, int]:
        """(bus address, size) of BAR `bar`."""
        raise NotImplementedError(f"{type(self).__name__} cannot report BAR addresses")

    def read_config(self, offset: int, size: int) -> int:
        raise NotImplementedError(f"{type(self).__name__} cannot read config space")

    def write_config(self, offset: int, value: int, size: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot write config space")

    def alloc_sysmem(self, size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[MMIOInterface, list[int]]:
        """`size` bytes of host memory the device can reach: its CPU window (at `vaddr`, inside a reserve_va window,
        when given) and the bus address of each 4 KiB page."""
        raise NotImplementedError(f"{type(self).__name__} cannot give the device system memory")

    def free_sysmem(self, memory: MMIOInterface) -> None:  # noqa: B027 - the default gives nothing back
        """Give back memory from alloc_sysmem (the device must no longer use it)."""

    def reset(self) -> None:
        """A function-level reset of the device."""
        raise NotImplementedError(f"{type(self).__name__} cannot reset the device")

    def resize_bar(self, bar: int) -> None:
        """Grow BAR `bar` to the largest size the device offers (resizable BAR)."""
        raise NotImplementedError(f"{type(self).__name__} cannot resize BARs")

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


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def _mmap(address: int, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> int:
    result = _libc.mmap(address or None, size, prot, flags, fd, offset)
    if result in (None, ctypes.c_void_p(-1).value):
        error = ctypes.get_errno()
        raise OSError(error, f"mmap of 0x{size:x} bytes at 0x{address:x} failed: {os.strerror(error)}")
    return int(result)


def reserve_va(size: int) -> int:
    """Reserve `size` bytes of this process's address space (no memory, no access) for fixed mappings."""
    return _mmap(0, size, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)


def map_fixed(fd: int, offset: int, address: int, size: int) -> None:
    """Map `size` bytes of file `fd` from `offset` at `address` (replacing what was there: a reserved range)."""
    _mmap(address, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | MAP_FIXED, fd, offset)


def release_fixed(address: int, size: int) -> None:
    """Put a fixed mapping back to reserved address space (an access to it then faults, as a use after free)."""
    _mmap(address, size, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED)


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
