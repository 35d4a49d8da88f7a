"""Ctrl-C during a flash: the transaction in flight completes, every register is restored, exit 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tg.drivers.sim.gd25 import GD25Chip

PAUSED_FLASH = Path(__file__).with_name("flash_paused_mid_program.py")


def test_keyboard_interrupt_inside_a_transaction_restores_registers(
    random_image, make_board, tmp_path: Path, monkeypatch
) -> None:
    board = make_board(random_image(30))
    image = random_image(31)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    original_transact = GD25Chip.transact
    programs = [0]

    def interrupted_transact(chip: GD25Chip, mosi: bytes, rx_count: int) -> bytes:
        if mosi[:1] == b"\x02":
            programs[0] += 1
            if programs[0] == 20:
                raise KeyboardInterrupt  # as if Ctrl-C landed in the middle of a register sequence
        return original_transact(chip, mosi, rx_count)

    monkeypatch.setattr(GD25Chip, "transact", interrupted_transact)
    result = board.run("flash", str(path), "--yes")
    assert result.exit_code == 130
    lines = result.stderr.splitlines()
    assert lines[-1] == "error: interrupted; controller registers were restored"
    assert lines[0].startswith("last good sector: ") and "--start-sector" in lines[1]
    board.assert_registers_restored()
    assert board.flash()[:0x1000] == image[:0x1000]  # the first sector completed and was verified


def test_sigint_during_a_flash_subprocess(random_image, make_board, tmp_path: Path) -> None:
    """A real SIGINT, sent once the subprocess says it is inside the first page program of sector 3 (it holds the
    signal pending until it arrives, so a loaded machine cannot let the flash finish first)."""
    board = make_board(random_image(32))
    image = random_image(33)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    pages_per_sector = 0x1000 // 0x100
    paused_flash = [sys.executable, str(PAUSED_FLASH), str(3 * pages_per_sector + 1)]
    command = [*paused_flash, "--transport", "sim", "--sim-state", str(board.path), "flash", str(path), "--yes"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    sector_lines = []
    for line in process.stdout:  # ends at the marker line, or at EOF if the subprocess never got there
        if line.startswith("paused mid-program"):
            break
        sector_lines.append(line)
    else:
        raise AssertionError(f"the flash never reached the pause: {process.communicate(timeout=300)}")
    os.kill(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert [line[:14] for line in sector_lines if "sector" in line] == [f"OK sector {s:03d}/" for s in range(3)]
    assert stderr.splitlines()[-1] == "error: interrupted; controller registers were restored"
    assert stderr.splitlines()[1].startswith("resume with: tg-flash --transport sim")
    board.assert_registers_restored()
    flash = board.flash()
    written = [s for s in range(512) if flash[s * 0x1000 : (s + 1) * 0x1000] == image[s * 0x1000 : (s + 1) * 0x1000]]
    assert written == [0, 1, 2]  # the sector in flight when Ctrl-C came was not finished


def paused_flash(board, image_path: Path, pause_signal: str) -> subprocess.Popen:
    pages_per_sector = 0x1000 // 0x100
    paused = [sys.executable, str(PAUSED_FLASH), str(3 * pages_per_sector + 1)]
    command = [*paused, "--transport", "sim", "--sim-state", str(board.path), "flash", str(image_path), "--yes"]
    env = {**os.environ, "PAUSE_SIGNAL": pause_signal}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("paused mid-program"):
            return process
    raise AssertionError(f"the flash never reached the pause: {process.communicate(timeout=300)}")


def written_sectors(board, image: bytes) -> list[int]:
    flash = board.flash()
    return [s for s in range(512) if flash[s * 0x1000 : (s + 1) * 0x1000] == image[s * 0x1000 : (s + 1) * 0x1000]]


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_restore_registers_and_print_the_resume_hint(
    name: str, random_image, make_board, tmp_path: Path
) -> None:
    board = make_board(random_image(34))
    image = random_image(35)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    process = paused_flash(board, path, name)
    os.kill(process.pid, signal.Signals[name])
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.Signals[name], stderr
    lines = stderr.splitlines()
    assert lines[-1] == f"error: terminated by {name}; controller registers were restored"
    assert lines[0] == "last good sector: 002 @0x02000"
    assert lines[1].startswith("resume with: tg-flash --transport sim") and "--start-sector 3" in lines[1]
    board.assert_registers_restored()
    assert written_sectors(board, image) == [0, 1, 2]


def test_a_killed_session_keeps_what_it_wrote_as_flash_would(random_image, make_board, tmp_path: Path) -> None:
    """SIGKILL mid-sector: nothing of tg-flash runs, yet the simulated chip keeps sectors 0-2 and the erase of
    sector 3, as a real part would; the controller registers and the session count are not saved."""
    original = random_image(36)
    board = make_board(original)
    image = random_image(37)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    sessions = board.state().sessions
    process = paused_flash(board, path, "SIGINT")
    process.kill()
    process.communicate(timeout=300)
    assert process.returncode == -signal.SIGKILL
    assert written_sectors(board, image) == [0, 1, 2]
    flash = board.flash()
    assert flash[3 * 0x1000 : 4 * 0x1000] == b"\xff" * 0x1000, "sector 3 was erased before the kill"
    assert flash[4 * 0x1000 :] == original[4 * 0x1000 :]
    assert board.state().sessions == sessions
