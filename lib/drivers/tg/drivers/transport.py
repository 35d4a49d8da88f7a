"""Transport selection: which path reaches a board's BAR (`--transport auto|usb|pci|sim|remote`).

- `usb`: the ASM24 USB-PCIe bridge (tg.drivers.usb, tg.drivers.asm24), the path the seed validated.
- `pci`: native PCI through sysfs. It refuses while a kernel driver (amdgpu) is bound, and is marked
  unvalidated on hardware: the seed never ran its ROM_SW path over native PCI.
- `auto`: USB first, then PCI, as the seed's open_gpu does. It never picks the simulator, and for a command
  that writes (the flash, the firmware, protection bits) it never falls back to native PCI: that needs an
  explicit `--transport pci`.
- `sim`: a simulated board whose state lives in a file; behind a simulated ASM24 (speaking the same USB
  requests as a real bridge) or directly on the simulated BAR, as the state file says (`via`).
- `remote`: a board exposed by a tg remote-PCI server (tg.drivers.remote) on another machine.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tg.drivers.mmio import MMIOInterface
from tg.drivers.pci import SYSFS_PCI_DEVICES, DeviceMatch, PCIDevice, bound_driver, scan_pci

PCI_UNVALIDATED = (
    "the native PCI path is unvalidated on hardware (the seed drove ROM_SW only through the ASM24 USB bridge)"
)


class Transport(enum.StrEnum):
    AUTO = "auto"
    USB = "usb"
    PCI = "pci"
    SIM = "sim"
    REMOTE = "remote"


class TransportError(RuntimeError):
    """The requested board cannot be reached; the message says why."""


@dataclass(frozen=True)
class BoardRequest:
    """What to open: a PCI function of `vendor_id` matching `matches`, the `index`-th found, and its `bar`."""

    transport: Transport
    index: int
    vendor_id: int
    matches: tuple[DeviceMatch, ...]
    bar: int
    sim_state: Path | None = None
    sysfs_root: Path = SYSFS_PCI_DEVICES
    remote: str | None = None  # HOST:PORT or unix:PATH of a remote-PCI server
    token: str | None = None  # its auth token, if it asks for one
    cancelled: Callable[[], bool] | None = None  # True once the user asked to stop (waits on a server end)
    writes: bool = False  # the command writes the flash or firmware: `auto` then never falls back to native PCI

    @property
    def device_ids(self) -> tuple[int, ...]:
        return tuple(i for m in self.matches for i in m.ids)


class BoardConnection:
    """An open BAR plus whatever must happen when it is closed (unmapping, saving simulator state)."""

    def __init__(
        self,
        mmio: MMIOInterface,
        description: str,
        device: PCIDevice | None = None,
        sim=None,
        warnings: tuple[str, ...] = (),
    ) -> None:
        self.mmio = mmio
        self.description = description
        self.device = device
        self.sim = sim  # the SimSession when the transport is sim, else None
        self.warnings = warnings

    def close(self) -> None:
        try:
            if self.device is not None:
                self.device.close()
        finally:
            if self.sim is not None:
                self.sim.close()

    def __enter__(self) -> BoardConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_transport(name: str) -> Transport:
    try:
        return Transport(name)
    except ValueError:
        choices = ", ".join(t.value for t in Transport)
        raise ValueError(f"unsupported transport {name!r} (choose one of {choices})") from None


def check_request(request: BoardRequest) -> None:
    """Argument checks that need no hardware, so a command can fail before it touches anything."""
    if request.index < 0:
        raise ValueError(f"device index must be >= 0, not {request.index}")
    if request.transport is Transport.SIM and request.sim_state is None:
        raise ValueError("--transport sim needs --sim-state PATH (create one with `sim init PATH`)")
    if request.transport is not Transport.SIM and request.sim_state is not None:
        raise ValueError("--sim-state is only used with --transport sim")
    if request.transport is Transport.REMOTE and not request.remote:
        raise ValueError("--transport remote needs --remote HOST:PORT (or unix:PATH)")
    if request.transport is not Transport.REMOTE and request.remote:
        raise ValueError("--remote is only used with --transport remote")


def open_board(request: BoardRequest) -> BoardConnection:
    check_request(request)
    if request.transport is Transport.SIM:
        return _open_sim(request)
    if request.transport is Transport.REMOTE:
        from tg.drivers.remote import open_remote_board

        return open_remote_board(request)
    if request.transport is Transport.USB:
        return _open_usb(request)
    if request.transport is Transport.PCI:
        return _open_pci(request)
    return _open_auto(request)


def _open_auto(request: BoardRequest) -> BoardConnection:
    from tg.drivers.asm24 import USB_IDS
    from tg.drivers.usb import USBError, list_devices

    try:
        bridges = list_devices(USB_IDS)
    except USBError:  # libusb missing or unusable: there is no USB path on this machine
        bridges = []
    if bridges:
        return _open_usb(request)
    if request.writes:
        raise TransportError(
            "no ASM24 USB bridge found, and --transport auto does not fall back to native PCI for a command that "
            f"writes ({PCI_UNVALIDATED}); pass --transport pci to use it anyway"
        )
    try:
        return _open_pci(request)
    except TransportError as e:
        if str(e).startswith("no supported"):
            raise TransportError("no supported AMD GPU found (no ASM24 USB bridge, no Navi31 on PCI)") from None
        raise


def _open_usb(request: BoardRequest) -> BoardConnection:
    from tg.drivers.asm24 import USB_IDS, USBPCIDevice
    from tg.drivers.usb import USB3, list_devices, open_device

    bridges = list_devices(USB_IDS)
    if not bridges:
        raise TransportError("no supported usb AMD GPU found (no ASM24 bridge with ids 3801:0001 or add1:0001)")
    if request.index >= len(bridges):
        raise TransportError(f"device index {request.index} out of range (found {len(bridges)})")
    info = bridges[request.index]
    device = USBPCIDevice(USB3(open_device(info)), request.vendor_id, request.device_ids, str(info))
    return _map(device, request.bar, str(info))


def _map(device: PCIDevice, bar: int, description: str, sim=None, warnings: tuple[str, ...] = ()) -> BoardConnection:
    try:
        mmio = device.map_bar(bar)
    except BaseException:
        device.close()
        if sim is not None:
            sim.discard()
        raise
    return BoardConnection(mmio, description, device=device, sim=sim, warnings=warnings)


def _open_pci(request: BoardRequest) -> BoardConnection:
    devices = scan_pci(request.vendor_id, request.matches, request.sysfs_root)
    if not devices:
        raise TransportError("no supported pci AMD GPU found")
    if request.index >= len(devices):
        raise TransportError(f"device index {request.index} out of range (found {len(devices)})")
    device = devices[request.index]
    driver = bound_driver(device.path)
    if driver is not None:
        raise TransportError(
            f"kernel driver {driver} is bound to {device.address}; unbind it first "
            f"(echo {device.address} > /sys/bus/pci/drivers/{driver}/unbind) or use the USB bridge; "
            f"{PCI_UNVALIDATED}"
        )
    return _map(device, request.bar, f"pci {device.address}", warnings=(PCI_UNVALIDATED,))


def _open_sim(request: BoardRequest) -> BoardConnection:
    from tg.drivers.sim.state import open_session

    assert request.sim_state is not None
    if request.index != 0:
        raise TransportError(f"device index {request.index} out of range (found 1)")
    session = open_session(request.sim_state)
    if session.state.via == "pci":
        return BoardConnection(session.board, f"sim {request.sim_state} (pci)", sim=session)
    from tg.drivers.asm24 import USBPCIDevice
    from tg.drivers.sim.asm24 import SimASM24Device
    from tg.drivers.usb import USB3

    session.bridge = bridge = SimASM24Device(session.board, session.state.faults)
    description = f"sim {request.sim_state} (usb, simulated ASM24)"
    device = USBPCIDevice(USB3(bridge), request.vendor_id, request.device_ids, description)
    return _map(device, request.bar, description, sim=session)
