"""Fixtures for tg-flash tests: simulated boards in temporary state files and a CLI runner."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tg.drivers.sim import registers as sim_registers
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.state import SimState, load_state, new_state, save_state
from tg.flash.cli import app

FLASH_SIZE = 0x200000


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@dataclass
class SimBoard:
    """A simulated board on disk and helpers to drive the CLI against it."""

    path: Path
    runner: CliRunner

    def run(self, *args: str) -> CliResult:
        result = self.runner.invoke(app, ["--transport", "sim", "--sim-state", str(self.path), *args])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return CliResult(result.exit_code, result.stdout, result.stderr)

    def state(self) -> SimState:
        return load_state(self.path)

    def flash(self) -> bytes:
        return bytes(self.state().flash)

    def edit(self, **fields) -> None:
        state = self.state()
        for name, value in fields.items():
            setattr(state, name, value)
        save_state(state, self.path)

    def trace_text(self) -> str:
        path = self.path.with_name(self.path.name + ".trace")
        return path.read_text() if path.exists() else ""

    def assert_registers_restored(self) -> None:
        """Every controller register is back at its power-on value after the command ended."""
        registers = self.state().registers
        for name, offset in sim_registers.RESTORED_REGISTERS.items():
            expected = sim_registers.POWER_ON_REGISTERS[offset]
            assert registers[offset] == expected, f"{name}=0x{registers[offset]:08x}, expected 0x{expected:08x}"


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch) -> Path:
    """Flash logs and other cache files of a test go to its own folder, never the user's ~/.cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TG_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def make_board(tmp_path: Path) -> Callable[..., SimBoard]:
    counter = [0]

    def make(
        image: bytes | None = None, faults: Faults | None = None, trace: bool = False, via: str = "pci", **fields
    ) -> SimBoard:
        """A board on disk; `via="usb"` puts it behind the simulated ASM24 bridge (the CLI's default), the
        tests' default is the direct BAR, which is faster, and selected tests run both."""
        counter[0] += 1
        path = tmp_path / f"board{counter[0]}.sim"
        state = new_state(image, faults=faults)
        state.trace, state.via = trace, via
        for name, value in fields.items():
            setattr(state, name, value)
        save_state(state, path)
        return SimBoard(path, CliRunner())

    return make


@pytest.fixture
def random_image() -> Callable[[int], bytes]:
    return lambda seed, size=FLASH_SIZE: random.Random(seed).randbytes(size)


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., CliResult]:
    """Run tg-flash with arbitrary arguments (no simulator options added)."""
    runner = CliRunner()

    def run(*args: str) -> CliResult:
        result = runner.invoke(app, list(args))
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return run
