"""Transport selection: which path reaches a board's BAR (`--transport auto|usb|pci|sim`).

`auto` tries the USB bridge, then native PCI; it never picks the simulator, which must be asked for by
name together with the file that holds its state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from tg.drivers.mmio import MMIOInterface
from tg.drivers.pci import SYSFS_PCI_DEVICES, DeviceMatch, PCIDevice, scan_pci


class Transport(enum.StrEnum):
    AUTO = "auto"
    USB = "usb"
    PCI = "pci"
    SIM = "sim"


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


class BoardConnection:
    """An open BAR plus whatever must happen when it is closed (unmapping, saving simulator state)."""

    def __init__(self, mmio: MMIOInterface, description: str, device: PCIDevice | None = None, sim=None) -> None:
        self.mmio = mmio
        self.description = description
        self.device = device
        self.sim = sim  # the SimBoardSession when the transport is sim, else None

    def close(self) -> None:
        if self.sim is not None:
            self.sim.close()
        if self.device is not None:
            self.device.close()

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
    if request.transport is Transport.USB:
        raise TransportError("the USB bridge transport (ASM24) is not supported yet; use --transport pci")
    if request.transport is Transport.SIM and request.sim_state is None:
        raise ValueError("--transport sim needs --sim-state PATH (create one with `sim init PATH`)")
    if request.transport is not Transport.SIM and request.sim_state is not None:
        raise ValueError("--sim-state is only used with --transport sim")


def open_board(request: BoardRequest) -> BoardConnection:
    check_request(request)
    if request.transport is Transport.SIM:
        return _open_sim(request)
    # AUTO: the USB bridge would come first; it is not implemented, so only native PCI is tried.
    devices = scan_pci(request.vendor_id, request.matches, request.sysfs_root)
    if not devices:
        raise TransportError(f"no supported {request.transport.value} AMD GPU found")
    if request.index >= len(devices):
        raise TransportError(f"device index {request.index} out of range (found {len(devices)})")
    device = devices[request.index]
    try:
        mmio = device.map_bar(request.bar)
    except OSError:
        device.close()
        raise
    return BoardConnection(mmio, f"pci {device.address}", device=device)


def _open_sim(request: BoardRequest) -> BoardConnection:
    from tg.drivers.sim.state import open_session

    assert request.sim_state is not None
    if request.index != 0:
        raise TransportError(f"device index {request.index} out of range (found 1)")
    session = open_session(request.sim_state)
    return BoardConnection(session.board, f"sim {request.sim_state}", sim=session)
