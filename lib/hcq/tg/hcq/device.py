"""The device registry: `Device["CPU"]`, `Device["CPU:1"]`, `Device.DEFAULT` from `DEV=`.

Device strings follow `[IFACE+]NAME[:INDEX][:RENDERER[:ARCH]]`: `CPU`, `CPU:1`, `CPU:LLVM`, `NULL:HIP:gfx950`.
A part after NAME that is all digits is the index (so `CPU:1` is the second CPU device, `CPU:LLVM` is the
first one with the LLVM renderer). `DISK:/path/to/file` names a file. Index 0 is dropped from canonical
names, so `Device["CPU:0"] is Device["CPU"]`. A device string without a renderer inherits the renderer and
arch that `DEV` gives the same device, so with `DEV=CPU:LLVM` both `Device["CPU"]` and `Device.DEFAULT`
use LLVM; that renderer is then the device's default and names leave it out (`Device.DEFAULT == "CPU"`, and
`Device["CPU:LLVM"] is Device["CPU"]`). A renderer or arch the device does not have is an error that lists the
known ones (`DEV=CPU:FOO`, `NULL:HIP:gfx1`). Devices are opened lazily, on first use, and stay open for the life
of the process.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from tg.codegen.flags import DEV
from tg.codegen.render.registry import UnknownRendererError, check_renderer
from tg.codegen.target import Target

# name -> "module:Class"; imported on first use so `import tg.hcq` starts no compiler and no thread.
DEVICE_CLASSES: dict[str, str] = {
    "CPU": "tg.hcq.devices.cpu:CPUDevice",
    "NULL": "tg.hcq.devices.null:NullDevice",
    "PYTHON": "tg.hcq.devices.python:PythonDevice",
    "DISK": "tg.hcq.devices.disk:DiskDevice",
    "CL": "tg.hcq.devices.cl:CLDevice",
    "AMD": "tg.hcq.devices.amd:AMDDevice",
}


# name -> the renderers its device string may name (the first is what a bare name gets); None: every renderer.
DEVICE_RENDERERS: dict[str, tuple[str, ...] | None] = {
    "CPU": ("C", "CLANG", "LLVM"),
    "NULL": None,
    "PYTHON": ("PYTHON",),
    "DISK": (),
    "CL": ("OPENCL",),
    "AMD": ("AMD",),
}
# The interfaces (`IFACE+` in a device string) each device can be reached through; a device string naming another
# interface is an error, never silently ignored. AMD: the kernel driver (KFD, the default), the userspace PCI driver,
# and the same two on the simulated Navi31 (MOCKKFD, MOCKPCI).
DEVICE_INTERFACES: dict[str, tuple[str, ...]] = {name: () for name in DEVICE_CLASSES}
DEVICE_INTERFACES["AMD"] = ("KFD", "MOCKKFD", "PCI", "MOCKPCI")


class UnknownDeviceError(ValueError):
    """A device name that no backend provides, or a renderer or arch that the device does not have."""


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed device string."""

    name: str
    index: int = 0
    iface: str = ""
    renderer: str = ""
    arch: str = ""
    path: str = ""  # DISK only: the file
    # the renderer and arch are the ones DEV gives this device: names leave them out (`CPU` under DEV=CPU:LLVM)
    renderer_from_dev: bool = field(default=False, compare=False)

    @property
    def canonical(self) -> str:
        """The device's name: the renderer and arch are left out when they are the ones DEV gives it."""
        if self.renderer_from_dev:
            return replace(self, renderer="", arch="", renderer_from_dev=False).full_name
        return self.full_name

    @property
    def full_name(self) -> str:
        """The name with the renderer and arch always spelled out: what tells two opened devices apart."""
        text = f"{self.iface}+{self.name}" if self.iface else self.name
        if self.path:
            return f"{text}:{self.path}"
        if self.index:
            text += f":{self.index}"
        if self.renderer:
            text += f":{self.renderer}"
        if self.arch:
            text += f":{self.arch}"
        return text


def parse_device(text: str) -> DeviceSpec:
    """Parse `[IFACE+]NAME[:INDEX][:RENDERER[:ARCH]]` (or `DISK:path`) into a DeviceSpec."""
    if not isinstance(text, str) or not text.strip():
        raise UnknownDeviceError(f"device name must be a non-empty string, got {text!r}; {_available_hint()}")
    name, _, tail = text.strip().partition(":")
    iface = ""
    if "+" in name:
        iface, name = name.rsplit("+", 1)
    name = name.upper()
    if name == "DISK":
        if not tail:
            raise UnknownDeviceError("DISK needs a file: DISK:/path/to/file")
        return DeviceSpec(name, iface=iface.upper(), path=tail)
    parts = tail.split(":") if tail else []
    index = 0
    if parts and parts[0].isdigit():
        index = int(parts.pop(0))
    if len(parts) > 2 or any(not p for p in parts):
        raise UnknownDeviceError(f"cannot parse device {text!r}: expected [IFACE+]NAME[:INDEX][:RENDERER[:ARCH]]")
    renderer = parts[0].upper() if parts else ""
    arch = parts[1] if len(parts) > 1 else ""
    return DeviceSpec(name, index, iface.upper(), renderer, arch)


class Compiled:
    """A device: an allocator, a compiler, a program class and a renderer slot.

    `dev.runtime(name, lib)` loads a compiled binary as a program of `dev.program_class`.
    `renderer` is filled by the code-generation layer (UOps -> source); the runtime only carries it.
    `renderer_name` and `arch` are what the device string asked for (e.g. "LLVM" for `CPU:LLVM`).
    """

    def __init__(self, spec: DeviceSpec, allocator: Any, compiler: Any, program_class: Any) -> None:
        self.spec = spec
        self.device = spec.canonical
        self.allocator = allocator
        self.compiler = compiler
        self.program_class = program_class
        self.renderer: Any = None
        self.renderer_name = spec.renderer
        self.arch = spec.arch

    @property
    def target(self) -> Target:
        """What code generation for this device may assume (tg.codegen.target): its renderer's Target, built when the
        device opened; a device without a renderer (DISK) generates no kernels and gets the default one."""
        return self.renderer.target if self.renderer is not None else Target()

    def runtime(self, name: str, lib: bytes) -> Any:
        """Load compiled binary `lib` and return its function `name` as a callable program."""
        if self.program_class is None:
            raise RuntimeError(f"{self.device} cannot run programs")
        return self.program_class(self, name, lib)

    def synchronize(self) -> None:
        """Block until all work submitted to this device has finished."""

    def finalize(self) -> None:
        """Release the device at shutdown."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"


def _check_renderer(spec: DeviceSpec, text: str) -> None:
    """A renderer (and arch) the device has; the error lists the ones it knows."""
    if not spec.renderer:
        return
    try:
        check_renderer(spec.renderer, spec.arch, DEVICE_RENDERERS.get(spec.name))
    except UnknownRendererError as error:
        raise UnknownDeviceError(f"{error} (device {spec.name}, from {text!r})") from None


def _available_hint() -> str:
    return f"available devices: {', '.join(sorted(DEVICE_CLASSES))}"


SPEC_CACHE_SIZE = 256


class _DeviceRegistry:
    """`Device[name]` opens (once) and returns the device for a device string."""

    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._lock = threading.RLock()
        self._default: str | None = None
        # parsed names by (name, DEV): every buffer and launch looks its device up by name, several times per call
        self._specs: dict[tuple[str, str], DeviceSpec] = {}

    @property
    def available(self) -> list[str]:
        return sorted(DEVICE_CLASSES)

    def spec(self, name: str) -> DeviceSpec:
        """The parsed device `name`, with the renderer DEV gives it (cached: names and DEV are few)."""
        key = (name, DEV.value) if isinstance(name, str) else None
        found = self._specs.get(key) if key is not None else None
        if found is None:
            found = self._parse_spec(name)
            if key is not None:
                if len(self._specs) >= SPEC_CACHE_SIZE:  # (DISK:path names one file each: keep the cache small)
                    self._specs.clear()
                self._specs[key] = found
        return found

    def _parse_spec(self, name: str) -> DeviceSpec:
        spec = parse_device(name)
        if spec.name not in DEVICE_CLASSES:
            raise UnknownDeviceError(f"unknown device {spec.name!r} (from {name!r}); {_available_hint()}")
        supported = DEVICE_INTERFACES.get(spec.name, ())
        if spec.iface and spec.iface not in supported:
            reachable = f"it supports {', '.join(i + '+' for i in supported)}" if supported else "it takes no interface"
            raise UnknownDeviceError(f"device {spec.name} has no interface {spec.iface}+ (in {name!r}): {reachable}")
        _check_renderer(spec, name)
        if DEV.value:
            default = parse_device(DEV.value)
            same_device = (default.name, default.index, default.iface) == (spec.name, spec.index, spec.iface)
            dev_renderer = (default.renderer, default.arch)
            if same_device and default.renderer and (not spec.renderer or (spec.renderer, spec.arch) == dev_renderer):
                spec = replace(spec, renderer=default.renderer, arch=default.arch, renderer_from_dev=True)
        return spec

    def canonicalize(self, name: str) -> str:
        return self.spec(name).canonical

    def __getitem__(self, name: str) -> Compiled:
        spec = self.spec(name)
        device = self._opened.get(spec.full_name)  # the hit path: no lock (a dict read is atomic)
        if device is not None:
            return device
        with self._lock:
            device = self._opened.get(spec.full_name)
            if device is None:
                module_name, class_name = DEVICE_CLASSES[spec.name].split(":")
                device_class = getattr(importlib.import_module(module_name), class_name)
                device = self._opened[spec.full_name] = device_class(spec)
            return device

    @property
    def DEFAULT(self) -> str:  # noqa: N802 - the public name mirrors tinygrad's Device.DEFAULT
        if self._default is not None:
            return self._default
        return self.canonicalize(DEV.value or "CPU")

    @DEFAULT.setter
    def DEFAULT(self, name: str | None) -> None:  # noqa: N802
        """Override the default device for this process (None goes back to DEV)."""
        self._default = None if name is None else self.canonicalize(name)

    def opened(self) -> list[Compiled]:
        with self._lock:
            return list(self._opened.values())

    def synchronize(self) -> None:
        """Wait for all work on every opened device."""
        for device in self.opened():
            device.synchronize()


Device = _DeviceRegistry()
