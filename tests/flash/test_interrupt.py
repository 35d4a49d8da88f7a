"""Ctrl-C during a flash: the transaction in flight completes, every register is restored, exit 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tg.drivers.sim.gd25 import GD25Chip


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
    board = make_board(random_image(32))
    image = random_image(33)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    command = [sys.executable, "-m", "tg.flash", "--transport", "sim", "--sim-state", str(board.path)]
    process = subprocess.Popen(
        [*command, "flash", str(path), "--yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    sectors_done = 0
    deadline = time.monotonic() + 60
    while sectors_done < 3 and time.monotonic() < deadline:
        line = process.stdout.readline()
        sectors_done += line.startswith("OK sector")
    os.kill(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "error: interrupted; controller registers were restored"
    assert stderr.splitlines()[1].startswith("resume with: tg-flash --transport sim")
    board.assert_registers_restored()
    flash = board.flash()
    written = sum(flash[s : s + 0x1000] == image[s : s + 0x1000] for s in range(0, 0x200000, 0x1000))
    assert 3 <= written < 512
