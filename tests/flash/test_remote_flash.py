"""tg-flash --transport remote against `tg-flash serve` over loopback, with a simulated board on the server
side (issue 20 item 3): the same commands, the same safety rules, the same results."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tg.drivers import navi31_regs as r
from tg.drivers.remote import RemoteConnection, RemotePCIDevice, RemoteServer, ServedDevice, parse_address
from tg.drivers.sim.state import load_state
from tg.drivers.transport import open_board
from tg.flash.board import BoardOptions, Transport
from tg.flash.cli import app
from tg.flash.cli_serve import RESTORABLE


class Served:
    """A simulated board served on 127.0.0.1; `stop()` closes the board, saving its state."""

    def __init__(self, board, token: str = "hunter2") -> None:
        self.board = board
        self.connection = open_board(BoardOptions(transport=Transport.SIM, sim_state=board.path).request())
        device = ServedDevice("sim", r.VENDOR_AMD, r.NAVI31_DEVICE_IDS[0], {r.BAR: self.connection.mmio})
        self.token = token
        self.server = RemoteServer([device], "127.0.0.1", 0, token, quiet=True)
        self.server.serve_in_thread()
        self.address = f"127.0.0.1:{self.server.port}"

    def run(self, *args: str, token: str | None = ""):
        token = self.token if token == "" else token  # "" (default): the server's token; None: none
        options = ["--transport", "remote", "--remote", self.address] + (["--token", token] if token else [])
        result = CliRunner().invoke(app, [*options, *args])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.connection.close()


@pytest.mark.parametrize("via", ["usb", "pci"])
def test_flash_verify_and_info_over_remote(make_board, random_image, tmp_path: Path, via: str) -> None:
    original, image = random_image(21), random_image(22)
    board = make_board(original, via=via)
    (tmp_path / "image.bin").write_bytes(image)
    served = Served(board)
    try:
        info = served.run("info")
        assert info.exit_code == 0, info.stderr
        assert info.stdout.splitlines()[0] == "JEDEC capture: c8601500 (C8 60 15 detected)"
        refused = served.run("flash", str(tmp_path / "image.bin"), "--start-sector", "7", "--sector-count", "2")
        assert refused.exit_code == 1 and "refusing to write without --yes" in refused.stderr
        args = ("flash", str(tmp_path / "image.bin"), "--start-sector", "7", "--sector-count", "2", "--yes")
        result = served.run(*args)
        assert result.exit_code == 0, result.stderr
        read = served.run("read", "0x7000", "32")
        assert read.stdout.strip() == image[0x7000:0x7020].hex()
    finally:
        served.stop()
    expected = bytearray(original)
    expected[0x7000:0x9000] = image[0x7000:0x9000]
    assert board.flash() == bytes(expected)
    board.assert_registers_restored()


def test_a_server_with_a_token_turns_away_clients_without_it(make_board) -> None:
    served = Served(make_board(), token="hunter2")
    try:
        result = served.run("info", token=None)
        assert result.exit_code == 1 and "authentication required" in result.stderr
        assert served.run("info", token="hunter2").exit_code == 0
    finally:
        served.stop()


def test_remote_usage_errors(cli) -> None:
    assert cli("--remote", "127.0.0.1:1", "info").exit_code == 2
    assert cli("--transport", "remote", "info").exit_code == 2
    result = cli("--transport", "remote", "--remote", "127.0.0.1:1", "info")
    assert result.exit_code == 1 and "cannot reach the remote-PCI server at 127.0.0.1:1" in result.stderr


def test_serve_refuses_tcp_without_a_token_even_on_loopback(make_board) -> None:
    for listen in ("0.0.0.0:0", "127.0.0.1:0"):
        result = make_board().run("serve", "--listen", listen)
        assert result.exit_code == 1 and "needs an auth token (--token), loopback included" in result.stderr


def test_the_server_restores_the_registers_of_a_killed_client(make_board, random_image, tmp_path: Path) -> None:
    """A client killed mid-flash restores nothing; the server puts the controller registers back when the
    connection drops (the simulator would report any it left changed when the served board is closed)."""
    board = make_board(random_image(31), via="pci")
    (tmp_path / "image.bin").write_bytes(random_image(32))
    served = Served(board)
    served.server.devices[0].restorable = RESTORABLE
    command = [sys.executable, "-m", "tg.flash", "--transport", "remote", "--remote", served.address]
    command += ["--token", served.token, "flash", str(tmp_path / "image.bin"), "--yes", "--log", str(tmp_path / "l")]
    client = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})
    try:
        for line in client.stdout:
            if line.startswith("OK sector 001/511"):
                break
        client.kill()  # SIGKILL: no restores, no goodbye
        client.wait(timeout=60)
        lock = served.server.board_lock
        assert lock.acquire(timeout=60), "the server let go of the board after the client died"  # hang guard
        lock.release()
    finally:
        served.stop()
    board.assert_registers_restored()


@pytest.mark.slow
def test_tg_flash_serve_subprocess_end_to_end(make_board, tmp_path: Path) -> None:
    board = make_board(via="usb")
    env = {**os.environ, "NO_COLOR": "1"}
    command = [sys.executable, "-m", "tg.flash", "--transport", "sim", "--sim-state", str(board.path)]
    socket_path = tmp_path / "flash.sock"
    server = subprocess.Popen(
        [*command, "serve", "--listen", f"unix:{socket_path}"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("serving sim ") and line.strip().endswith(f" on unix:{socket_path}")
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
        address = f"unix:{socket_path}"
        dump = tmp_path / "dump.bin"
        result = CliRunner().invoke(
            app, ["--transport", "remote", "--remote", address, "read", "0", "0x10000", "-o", str(dump)]
        )
        assert result.exit_code == 0, result.stderr
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    assert server.returncode == 0
    assert dump.read_bytes() == board.flash()[:0x10000]
    assert load_state(board.path).sessions == 1
    assert not socket_path.exists(), "the socket file goes away with the server"


def test_sigterm_to_serve_restores_a_connected_clients_registers(make_board, tmp_path: Path) -> None:
    board = make_board(via="pci")
    socket_path = tmp_path / "flash.sock"
    command = [sys.executable, "-m", "tg.flash", "--transport", "sim", "--sim-state", str(board.path)]
    server = subprocess.Popen(
        [*command, "serve", "--listen", f"unix:{socket_path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        assert server.stdout.readline().strip().endswith(f" on unix:{socket_path}")
        connection = RemoteConnection(parse_address(f"unix:{socket_path}"))
        mmio = RemotePCIDevice(connection, 0, "sim").map_bar(r.BAR)
        mmio.write32(r.ROM_CNTL, 0x1F000001)  # as a flash driver's open does, and the client never restores it
        assert mmio.read32(r.ROM_CNTL) == 0x1F000001
        server.send_signal(signal.SIGTERM)
        stdout, stderr = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0, stderr
    assert stdout.strip() == "stopped"
    board.assert_registers_restored()
