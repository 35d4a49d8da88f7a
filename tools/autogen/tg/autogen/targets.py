"""The registry of bindings tg.drivers uses: which headers, which library, which clang arguments.

Every header comes from a Debian package that is on a fresh machine (linux-libc-dev, libc6-dev) or that .ci/run
installs (libusb-1.0-0-dev), so the committed modules can be regenerated and checked anywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SHIMS = Path(__file__).parent / "shims"

# Where `regen` writes (and `regen --check` reads) the committed bindings: the tg.drivers.autogen package of this
# checkout. It is a setting of the registry, not found by importing tg.drivers, so that the generator depends on
# tg.drivers.cbind alone (the runtime its output imports). TG_AUTOGEN_OUTPUT points it elsewhere.
_CHECKOUT = Path(__file__).resolve().parents[4]
OUTPUT_DIR = Path(os.environ.get("TG_AUTOGEN_OUTPUT") or _CHECKOUT / "lib" / "drivers" / "tg" / "drivers" / "autogen")
_ARCH_INCLUDE = f"/usr/include/{os.uname().machine}-linux-gnu"


@dataclass(frozen=True)
class Header:
    """A source header; PATTERN (re.match), when set, limits which of its names are emitted."""

    path: str
    pattern: str | None = None
    # False for internal headers (glibc's bits/*) that must only be reached through their public header.
    include: bool = True


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    headers: tuple[Header, ...]
    lib: str | None = None
    defines: tuple[str, ...] = ()
    # Include folders; "{shims}" stands for tg/autogen/shims so that recorded arguments are checkout-independent.
    include_dirs: tuple[str, ...] = ()

    def resolved_include_dirs(self) -> tuple[str, ...]:
        return tuple(folder.format(shims=SHIMS) for folder in self.include_dirs)


def _linux(*names: str) -> tuple[Header, ...]:
    return tuple(Header(f"/usr/include/linux/{name}") for name in names)


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target("pci", "PCI configuration space registers (linux/pci_regs.h)", _linux("pci_regs.h")),
        Target("vfio", "VFIO user API: containers, groups, device regions and irqs", _linux("vfio.h")),
        Target(
            "io_uring",
            "io_uring rings, SQE/CQE layouts and the io_uring syscall numbers",
            (
                Header("/usr/include/linux/io_uring.h"),
                Header("/usr/include/asm-generic/unistd.h", pattern=r"__NR_io_uring"),
            ),
        ),
        Target("kfd_ioctl", "AMD KFD ioctls (linux/kfd_ioctl.h)", _linux("kfd_ioctl.h"), include_dirs=("{shims}",)),
        Target(
            "libc",
            "libc: mmap/munmap, open/close/read/write, ioctl, string functions, errno values",
            (
                Header("/usr/include/string.h"),
                Header("/usr/include/unistd.h"),
                Header("/usr/include/fcntl.h"),
                Header("/usr/include/errno.h"),
                Header(f"{_ARCH_INCLUDE}/bits/fcntl-linux.h", include=False),
                Header(f"{_ARCH_INCLUDE}/sys/mman.h"),
                Header(f"{_ARCH_INCLUDE}/bits/mman-linux.h", include=False),
                Header(f"{_ARCH_INCLUDE}/bits/mman-shared.h", include=False),
                Header(f"{_ARCH_INCLUDE}/bits/mman-map-flags-generic.h", include=False),
                Header(f"{_ARCH_INCLUDE}/sys/ioctl.h"),
                Header("/usr/include/asm-generic/errno-base.h", include=False),
                Header("/usr/include/asm-generic/errno.h", include=False),
            ),
            lib="c",
            defines=("_GNU_SOURCE",),
        ),
        Target(
            "opencl",
            "OpenCL 3.0 host API (CL/cl.h, opencl-headers): platforms, contexts, queues, programs, kernels",
            (Header("/usr/include/CL/cl.h"), Header("/usr/include/CL/cl_platform.h", pattern=r"CL_|cl_")),
            lib="OpenCL",
            defines=("CL_TARGET_OPENCL_VERSION=300",),
        ),
        Target(
            "libusb",
            "libusb-1.0: device enumeration and transfers",
            (
                Header("/usr/include/libusb-1.0/libusb.h"),
                # libusb_handle_events_timeout() and friends take a struct timeval the caller fills in.
                Header(f"{_ARCH_INCLUDE}/bits/types/struct_timeval.h", include=False),
            ),
            lib="usb-1.0",
        ),
    )
}
