"""Ctrl-C during a flash: the transaction in flight completes, every register is restored, exit 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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
