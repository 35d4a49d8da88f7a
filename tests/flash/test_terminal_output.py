"""Progress: a rich bar on a terminal (without colour under NO_COLOR), plain lines when piped;
and the `sim` command group."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path


def run_in_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run a command with a pseudo-terminal as stdout and return what it printed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(args, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed when the process exited
            break
        if not chunk:
            break
        output += chunk
    process.wait(timeout=60)
    os.close(leader)
    assert process.returncode == 0, output.decode(errors="replace")
    return output.decode(errors="replace")


def test_dump_shows_a_bar_on_a_terminal_and_lines_when_piped(make_board, tmp_path: Path) -> None:
    board = make_board()
    command = [sys.executable, "-m", "tg.flash", "--transport", "sim", "--sim-state", str(board.path), "dump"]
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    on_terminal = run_in_terminal([*command, str(tmp_path / "a.bin")], env)
    assert "reading" in on_terminal and "━" in on_terminal
    assert "0x001000/0x200000" not in on_terminal
    assert "\x1b[3" not in on_terminal, "NO_COLOR must not produce colour codes"
    piped = subprocess.run([*command, str(tmp_path / "b.bin")], capture_output=True, text=True, env=env)
    assert piped.returncode == 0
    assert "━" not in piped.stdout and "\x1b[" not in piped.stdout
    assert piped.stdout.splitlines()[0] == "0x001000/0x200000"


def test_sim_init_show_and_ifwi(cli, tmp_path: Path) -> None:
    state = tmp_path / "board.sim"
    image = tmp_path / "image.bin"
    image.write_bytes(b"\x5a" * 0x200000)
    result = cli("sim", "init", str(state), "--image", str(image), "--cmp", "--gated", "--stuck-bit", "0x10:0x1")
    assert result.exit_code == 0, result.stderr
    shown = json.loads(cli("--json", "sim", "show", str(state)).stdout)
    assert shown["sr2"] == 0x40 and shown["faults"]["gated"] and shown["faults"]["stuck_bits"] == {"16": 1}
    assert shown["registers"]["GPIO_PAD_A"] == 0x780 and shown["sessions"] == 0
    result = cli("--transport", "sim", "--sim-state", str(state), "info")
    assert result.exit_code == 1 and "engine may be gated" in result.stderr
    assert cli("sim", "ifwi", str(state), str(tmp_path / "ifwi.bin")).exit_code == 0
    assert (tmp_path / "ifwi.bin").read_bytes()[:4] == bytes.fromhex("aa55aa55")
    assert cli("sim", "init", str(state), "--stuck-bit", "nonsense").exit_code == 2
    assert cli("sim", "init", str(state), "--image", str(tmp_path / "missing")).exit_code == 1
