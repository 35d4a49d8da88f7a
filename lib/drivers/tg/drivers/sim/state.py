"""Simulated board state in one file, so a CLI can use the same board across commands.

The file is one line of JSON (status registers, controller registers, faults, PSP script), padded with
spaces to a multiple of 4 KiB, followed by the 2 MiB flash array and then the IFWI the simulated PSP expects.
When tracing is on, each session appends its register accesses to `<state>.trace`, headed by `# session N`.

A session writes every program, erase and status-register write through to the file as it happens (the
flash bytes in place, the status registers by rewriting the padded header in place), so a session that is
killed leaves the chip as a real flash part would be: with everything that was written before the kill. The
rest (controller registers, the session count, the PSP script) is saved when the session closes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tg.drivers.sim.board import SimNavi31Board, format_trace
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import DEFAULT_BUSY_SCALE, FLASH_SIZE, GD25Chip
from tg.drivers.sim.ifwi import DEFAULT_TRANSFER_STATES, build_ifwi
from tg.drivers.sim.psp import PSPScript
from tg.drivers.sim.romsw import SimProtocolError

if TYPE_CHECKING:
    from tg.drivers.sim.asm24 import SimASM24Device

FORMAT = "tg-sim-navi31/2"
VIAS = ("usb", "pci")
HEADER_BLOCK = 4096


@dataclass
class SimState:
    flash: bytearray
    ifwi: bytes
    sr1: int = 0
    sr2: int = 0
    sr3: int = 0x60
    busy_until: float = 0.0
    busy_scale: float = DEFAULT_BUSY_SCALE
    jedec_rotation: int = 0
    faults: Faults = field(default_factory=Faults)
    registers: dict[int, int] = field(default_factory=dict)
    psp: PSPScript = field(default_factory=PSPScript)
    trace: bool = False
    sessions: int = 0
    via: str = "usb"  # how the host reaches the board: through the simulated ASM24 USB bridge, or native PCI

    def board(self) -> SimNavi31Board:
        chip = GD25Chip(self.flash, self.faults)
        chip.sr1, chip.sr2, chip.sr3 = self.sr1, self.sr2, self.sr3
        chip.busy_until, chip.busy_scale, chip.jedec_rotation = self.busy_until, self.busy_scale, self.jedec_rotation
        return SimNavi31Board(chip, self.faults, self.registers, self.psp, self.ifwi)

    def absorb(self, board: SimNavi31Board) -> None:
        """Take over what a session changed."""
        chip = board.chip
        self.flash = chip.data
        self.sr1, self.sr2, self.sr3, self.busy_until = chip.sr1, chip.sr2, chip.sr3, chip.busy_until
        self.registers = {offset: board.regs[offset] for offset in board.regs}
        self.psp = board.psp.script


def new_state(
    image: bytes | None = None, ifwi_seed: int = 0, cmp: bool = False, faults: Faults | None = None
) -> SimState:
    """A healthy board: the flash holds `image` or, by default, the synthetic IFWI the PSP expects."""
    ifwi = build_ifwi(ifwi_seed)
    flash = bytearray(image if image is not None else ifwi.image)
    if len(flash) != FLASH_SIZE:
        raise ValueError(f"simulated flash image must be exactly 0x{FLASH_SIZE:x} bytes, not 0x{len(flash):x}")
    psp = PSPScript(states=list(DEFAULT_TRANSFER_STATES), items=dict(ifwi.items))
    return SimState(flash=flash, ifwi=ifwi.image, sr2=0x40 if cmp else 0, faults=faults or Faults(), psp=psp)


def save_state(state: SimState, path: Path) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        f.write(_header_line(state))
        f.write(state.flash)
        f.write(state.ifwi)
    os.replace(temporary, path)


def _header_line(state: SimState, length: int | None = None) -> bytes:
    """The JSON header and its newline, padded with spaces to `length` (default: a multiple of 4 KiB)."""
    encoded = json.dumps(_header(state)).encode()
    if length is None:
        length = -(-(len(encoded) + 1) // HEADER_BLOCK) * HEADER_BLOCK
    if len(encoded) + 1 > length:
        raise ValueError(f"simulator state header grew beyond its {length} bytes")
    return encoded.ljust(length - 1) + b"\n"


def _header(state: SimState) -> dict:
    return {
        "format": FORMAT,
        "sr1": state.sr1,
        "sr2": state.sr2,
        "sr3": state.sr3,
        "busy_until": state.busy_until,
        "busy_scale": state.busy_scale,
        "via": state.via,
        "jedec_rotation": state.jedec_rotation,
        "faults": state.faults.to_json(),
        "registers": {f"0x{k:x}": v for k, v in state.registers.items()},
        "psp": {
            "states": state.psp.states,
            "items": {str(k): list(v) for k, v in state.psp.items.items()},
            "position": state.psp.position,
        },
        "trace": state.trace,
        "sessions": state.sessions,
    }


def load_state(path: Path) -> SimState:
    """Read a state file; anything that is not a complete state of this format is one clear error."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"simulator state {path} does not exist (create it with `sim init {path}`)") from None
    except IsADirectoryError:
        raise ValueError(f"simulator state {path} is a folder") from None
    head, _, body = raw.partition(b"\n")
    try:
        header = json.loads(head)
    except ValueError:
        header = None
    if not isinstance(header, dict) or not str(header.get("format", "")).startswith("tg-sim-navi31/"):
        raise ValueError(f"{path} is not a simulated Navi31 state file (create one with `sim init`)")
    if header["format"] != FORMAT:
        raise ValueError(
            f"{path} has format {header['format']}, this tg-flash reads {FORMAT}; recreate it with sim init"
        )
    if len(body) != 2 * FLASH_SIZE:
        raise ValueError(f"{path} is truncated or damaged: {len(body)} bytes of flash+IFWI, expected {2 * FLASH_SIZE}")
    try:
        return _state_from_header(header, body)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path} is a damaged simulated Navi31 state file ({type(e).__name__}: {e})") from None


def _state_from_header(header: dict, body: bytes) -> SimState:
    psp = header["psp"]
    via = header["via"]
    if via not in VIAS:
        raise ValueError(f"via must be one of {VIAS}, not {via!r}")
    return SimState(
        flash=bytearray(body[:FLASH_SIZE]),
        ifwi=body[FLASH_SIZE:],
        sr1=int(header["sr1"]),
        sr2=int(header["sr2"]),
        sr3=int(header["sr3"]),
        busy_until=float(header["busy_until"]),
        busy_scale=float(header["busy_scale"]),
        jedec_rotation=int(header["jedec_rotation"]),
        faults=Faults.from_json(header["faults"]),
        registers={int(k, 16): int(v) for k, v in header["registers"].items()},
        psp=PSPScript(
            states=[int(x) for x in psp["states"]],
            items={int(k): (int(v[0]), int(v[1])) for k, v in psp["items"].items()},
            position=int(psp["position"]),
        ),
        trace=bool(header["trace"]),
        sessions=int(header["sessions"]),
        via=via,
    )


def trace_path(state_path: Path) -> Path:
    return state_path.with_name(state_path.name + ".trace")


class SimSession:
    """One command's use of the simulated board; closing saves the state and checks the registers."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.state = load_state(self.path)
        self._on_disk = load_state(self.path)  # what the file says: the base for in-place status writes
        with open(self.path, "rb") as f:
            self._header_length = len(f.readline())
        self.state.sessions += 1
        self.board = self.state.board()
        self.board.chip.on_change = self._write_through
        self.bridge: SimASM24Device | None = None  # the simulated bridge in front of the board when via usb

    def _write_through(self, span: tuple[int, int] | None) -> None:
        """Put a chip change into the state file now, as the real part holds it from this moment."""
        chip = self.board.chip
        fd = os.open(self.path, os.O_WRONLY)
        try:
            if span is None:
                on_disk = self._on_disk
                on_disk.sr1, on_disk.sr2, on_disk.sr3 = chip.sr1, chip.sr2, chip.sr3
                try:
                    header = _header_line(on_disk, self._header_length)
                except ValueError:
                    return  # a file from before the padded header: the status is saved when the session closes
                os.pwrite(fd, header, 0)
            else:
                start, size = span
                os.pwrite(fd, bytes(chip.data[start : start + size]), self._header_length + start)
        finally:
            os.close(fd)

    def discard(self) -> None:
        """Leave the state file as it was (the session failed before it touched the board)."""

    def close(self) -> None:
        self.state.absorb(self.board)
        save_state(self.state, self.path)
        if self.state.trace:
            with open(trace_path(self.path), "a") as f:
                f.write(f"# session {self.state.sessions}\n")
                f.write(format_trace(self.board.trace))
        unrestored = self.board.unrestored_registers()
        if unrestored:
            details = ", ".join(f"{name}=0x{found:08x} (was 0x{was:08x})" for name, (was, found) in unrestored.items())
            raise SimProtocolError(f"simulator: controller registers not restored: {details}")


def open_session(path: Path) -> SimSession:
    return SimSession(path)
