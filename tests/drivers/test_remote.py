"""The remote-PCI protocol (hcq.md 1.17) over loopback: framing, commands, errors, fire-and-forget writes,
and the server's hardening (issue 36 item 5): a token on every TCP address or a 0600 Unix socket, nothing read
before authentication beyond the fixed header, idle and slow clients dropped without blocking others, registers
restored on disconnect, and a client that gives up waiting on Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import struct
import threading
from pathlib import Path

import pytest

from tg.drivers import navi31_regs as r
from tg.drivers.mmio import BufferMMIO
from tg.drivers.pci import DeviceMatch
from tg.drivers.remote import (
    REQUEST,
    RESPONSE,
    RemoteCmd,
    RemoteConnection,
    RemoteInterrupted,
    RemotePCIDevice,
    RemoteServer,
    RemoteUnixServer,
    ServedDevice,
    parse_address,
)

NAVI31 = (DeviceMatch(0xFFFF, (0x744C,)),)
TOKEN = "s3cret"


@pytest.fixture
def served():
    bar = BufferMMIO(bytearray(0x1000))
    devices = [ServedDevice("0000:03:00.0", 0x1002, 0x744C, {5: bar}), ServedDevice("0000:04:00.0", 0x1002, 0x73BF)]
    server = RemoteServer(devices, "127.0.0.1", 0, TOKEN, quiet=True)
    server.serve_in_thread()
    yield server, bar
    server.shutdown()
    server.server_close()


def test_wire_formats_and_command_numbers() -> None:
    # `<BIIQQQ` packs to 1+4+4+3*8 = 33 bytes (hcq.md 1.17 says 29, which miscounts its own format string)
    assert REQUEST.size == 33 and RESPONSE.size == 17
    assert [c.value for c in RemoteCmd] == list(range(13))
    assert RemoteCmd.MMIO_READ == 6 and RemoteCmd.PING == 12
    assert parse_address("10.0.0.2") == ("10.0.0.2", 6667) and parse_address("[::1]:7000") == ("::1", 7000)


def test_probe_map_read_and_fire_and_forget_write(served) -> None:
    server, bar = served
    connection = RemoteConnection(("127.0.0.1", server.port), TOKEN)
    assert connection.probe(0x1002, NAVI31) == ["0000:03:00.0"]
    assert connection.probe(0x1002, ()) == ["0000:03:00.0", "0000:04:00.0"]
    device = RemotePCIDevice(connection, 0, "0000:03:00.0")
    assert (device.vendor_id, device.device_id) == (0x1002, 0x744C)
    assert device.address == f"remote:127.0.0.1:{server.port}:0 (0000:03:00.0)"
    mmio = device.map_bar(5)
    assert mmio.size == 0x1000
    before = connection.round_trips
    mmio.write32(0x10, 0xDEADBEEF)
    mmio.write(0x20, b"abcdefgh")
    assert connection.round_trips == before, "writes need no answer"
    assert mmio.read32(0x10) == 0xDEADBEEF and mmio.read(0x20, 8) == b"abcdefgh"
    assert bar.read(0x10, 4) == bytes.fromhex("efbeadde")
    connection.close()


def test_errors_carry_their_text_and_a_failed_write_drops_the_connection(served) -> None:
    server, _ = served
    connection = RemoteConnection(("127.0.0.1", server.port), TOKEN)
    with pytest.raises(RuntimeError, match="RPC failed: BAR 2 of 0000:03:00.0 is not served"):
        connection.rpc(0, RemoteCmd.MAP_BAR, bar=2)
    with pytest.raises(RuntimeError, match="RPC failed: RESET is not supported"):
        connection.rpc(0, RemoteCmd.RESET)
    connection.send(0, RemoteCmd.MMIO_WRITE, 0x2000, 4, bar=5, payload=b"\0" * 4)  # outside the BAR: dropped
    with pytest.raises(RuntimeError, match="Connection closed"):
        connection.rpc(0, RemoteCmd.PING)


def test_a_token_is_required_on_every_tcp_address(served) -> None:
    server, _ = served
    with pytest.raises(RuntimeError, match="authentication required"):
        RemoteConnection(("127.0.0.1", server.port)).probe(0x1002, NAVI31)
    with pytest.raises(RuntimeError, match="authentication required"):
        RemoteConnection(("127.0.0.1", server.port), token="wrong")
    assert RemoteConnection(("127.0.0.1", server.port), token=TOKEN).probe(0x1002, NAVI31) == ["0000:03:00.0"]
    for host in ("127.0.0.1", "0.0.0.0"):
        with pytest.raises(ValueError, match="needs an auth token"):
            RemoteServer([], host, 0)


def test_a_server_that_is_not_there_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match=f"cannot reach the remote-PCI server at 127.0.0.1:{port}"):
        RemoteConnection(("127.0.0.1", port), timeout=1)


def test_raw_framing_of_a_read(served) -> None:
    server, bar = served
    bar.write(r.ROM_CNTL % 0x1000, b"\x01\x02\x03\x04")
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(struct.pack("<BIIQQQ", 12, 0, 0, len(TOKEN), 0, 0) + TOKEN.encode())
        s.sendall(struct.pack("<BIIQQQ", 6, 0, 5, r.ROM_CNTL % 0x1000, 4, 0))
        answer = b""
        while len(answer) < 17 + 21:  # the PING's answer; a 17-byte header and 4 bytes read out
            answer += s.recv(64)
    assert answer == struct.pack("<BQQ", 0, 0, 0) * 2 + b"\x01\x02\x03\x04"


def recv_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


@pytest.mark.parametrize(
    "header",
    [
        struct.pack("<BIIQQQ", 7, 0, 5, 0, 1 << 30, 0),  # an unauthenticated 1 GiB write
        struct.pack("<BIIQQQ", 12, 0, 0, 1 << 20, 0, 0),  # a PING announcing a 1 MiB "token"
        struct.pack("<BIIQQQ", 0, 0, 0, 0, 4000, 0x1002),  # a probe before the PING
    ],
)
def test_nothing_but_the_header_is_read_before_authentication(served, header: bytes) -> None:
    server, _ = served
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(header)  # and none of the payload it announces: the server must not wait for it
        answer = recv_until_closed(s)
    status, size, _ = struct.unpack("<BQQ", answer[:17])
    assert status == 1 and answer[17:].decode() == "authentication required: connect with the server's token"
    assert len(answer) == 17 + size, "the server answered and closed without reading the announced payload"


def test_a_unix_socket_is_0600_and_needs_no_token(tmp_path: Path) -> None:
    path = str(tmp_path / "flash.sock")
    server = RemoteUnixServer([ServedDevice("x", 0x1002, 0x744C)], path, quiet=True)
    server.serve_in_thread()
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert RemoteConnection(parse_address(f"unix:{path}")).probe(0x1002, NAVI31) == ["x"]
        with pytest.raises(ValueError, match="already exists"):
            RemoteUnixServer([], path)
    finally:
        server.shutdown()
        server.server_close()
    assert not os.path.exists(path)


def authenticated(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(struct.pack("<BIIQQQ", 12, 0, 0, len(TOKEN), 0, 0) + TOKEN.encode())
    assert s.recv(17) == struct.pack("<BQQ", 0, 0, 0)
    return s


def test_idle_and_slow_clients_are_dropped_and_do_not_block_others() -> None:
    bar = BufferMMIO(bytearray(0x1000))
    server = RemoteServer([ServedDevice("x", 0x1002, 0x744C, {5: bar})], "127.0.0.1", 0, TOKEN,
                          idle_timeout=0.5, request_timeout=0.5, busy_wait=30, quiet=True)  # fmt: skip
    server.serve_in_thread()
    try:
        idle = authenticated(server.port)  # holds the board, then says nothing
        silent = socket.create_connection(("127.0.0.1", server.port), timeout=30)  # never authenticates
        slow = authenticated(server.port)  # starts a request and never finishes it (waits for the board first)
        slow.sendall(struct.pack("<BIIQQQ", 6, 0, 5, 0, 4, 0)[:10])
        # a well-behaved client gets the board once the idle one is dropped, however the others behave
        assert RemoteConnection(("127.0.0.1", server.port), TOKEN).probe(0x1002, NAVI31) == ["x"]
        for dropped in (idle, silent, slow):
            assert recv_until_closed(dropped) == b"", "dropped without an answer"
            dropped.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_busy_board_is_refused_after_the_wait() -> None:
    server = RemoteServer([ServedDevice("x", 0x1002, 0x744C)], "127.0.0.1", 0, TOKEN, busy_wait=0.2, quiet=True)
    server.serve_in_thread()
    try:
        holder = RemoteConnection(("127.0.0.1", server.port), TOKEN)
        # an answered request proves the holder's handler took the board: on a loaded machine the second client's
        # handler could otherwise run first and take it
        holder.probe(0x1002, NAVI31)
        with pytest.raises(RuntimeError, match="board busy"):
            RemoteConnection(("127.0.0.1", server.port), TOKEN).probe(0x1002, NAVI31)
        holder.close()
    finally:
        server.shutdown()
        server.server_close()


def test_registers_a_client_left_changed_are_restored_when_it_disconnects() -> None:
    bar = BufferMMIO(bytearray(0x1000))
    bar.write32(0x10, 0x11111111)
    bar.write32(0x14, 0x22222222)
    device = ServedDevice("x", 0x1002, 0x744C, {5: bar}, restorable=frozenset({(5, 0x10), (5, 0x14)}))
    server = RemoteServer([device], "127.0.0.1", 0, TOKEN, quiet=True)
    server.serve_in_thread()
    try:
        connection = RemoteConnection(("127.0.0.1", server.port), TOKEN)
        mmio = RemotePCIDevice(connection, 0, "x").map_bar(5)
        mmio.write32(0x10, 0xAAAAAAAA)
        mmio.write32(0x10, 0xBBBBBBBB)
        mmio.write(0x14, b"\0" * 8)  # a restorable register and an ordinary one
        assert mmio.read32(0x10) == 0xBBBBBBBB  # the writes have arrived
        connection.sock.close()  # the client dies without restoring anything
        for _ in range(300):  # hang guard only: the server restores as soon as it sees the close
            if bar.read32(0x10) == 0x11111111 and bar.read32(0x14) == 0x22222222:
                break
            threading.Event().wait(0.05)
        assert (bar.read32(0x10), bar.read32(0x14), bar.read32(0x18)) == (0x11111111, 0x22222222, 0)
    finally:
        server.shutdown()
        server.server_close()


class SilentServer:
    """Accepts connections and reads, but never answers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.connections.append(self.listener.accept()[0])

    def close(self) -> None:
        for c in self.connections:
            c.close()
        self.listener.close()


def test_a_client_stops_waiting_on_a_silent_server_when_cancelled() -> None:
    silent = SilentServer()
    try:
        flag = threading.Event()
        connection = RemoteConnection(("127.0.0.1", silent.port), cancelled=flag.is_set)
        threading.Timer(0.3, flag.set).start()
        with pytest.raises(RemoteInterrupted, match="the server restores the registers this client changed"):
            connection.rpc(0, RemoteCmd.PING)
        with pytest.raises(ConnectionError, match="interrupted"):  # the connection stays failed
            connection.rpc(0, RemoteCmd.PING)
        quiet = RemoteConnection(("127.0.0.1", silent.port), answer_timeout=0.3)
        with pytest.raises(ConnectionError, match="stopped answering"):
            quiet.rpc(0, RemoteCmd.PING)
    finally:
        silent.close()


def test_ctrl_c_held_back_by_a_register_sequence_ends_a_wait_on_a_silent_server() -> None:
    """In tg-flash the register sequences hold SIGINT back; the remote client sees that through
    interrupt_pending and gives up waiting instead of hanging with Ctrl-C deferred forever."""
    from tg.flash.interrupts import deferred_interrupt, interrupt_pending

    silent = SilentServer()
    try:
        connection = RemoteConnection(("127.0.0.1", silent.port), cancelled=interrupt_pending)
        with pytest.raises(KeyboardInterrupt) as raised, deferred_interrupt():
            # sent from inside the block: a timer started before it could fire first on a loaded machine, and the
            # SIGINT then hit whatever test this process ran next
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            connection.rpc(0, RemoteCmd.MMIO_READ, 0, 4, bar=5, readout_size=4)
        assert isinstance(raised.value, RemoteInterrupted)
        assert not interrupt_pending()
    finally:
        silent.close()


def test_a_stopping_server_restores_the_registers_of_a_connected_client() -> None:
    bar = BufferMMIO(bytearray(0x1000))
    bar.write32(0x10, 0x11111111)
    device = ServedDevice("x", 0x1002, 0x744C, {5: bar}, restorable=frozenset({(5, 0x10)}))
    server = RemoteServer([device], "127.0.0.1", 0, TOKEN, quiet=True)
    server.serve_in_thread()
    try:
        connection = RemoteConnection(("127.0.0.1", server.port), TOKEN)
        mmio = RemotePCIDevice(connection, 0, "x").map_bar(5)
        mmio.write32(0x10, 0xAAAAAAAA)
        assert mmio.read32(0x10) == 0xAAAAAAAA  # the client is connected, holding the board, register changed
        assert server.disconnect_clients(wait=60)
        assert bar.read32(0x10) == 0x11111111
        with pytest.raises((RuntimeError, ConnectionError)):
            mmio.read32(0x10)
    finally:
        server.shutdown()
        server.server_close()


def test_a_stopping_server_lets_go_of_an_idle_client_even_when_the_socket_shutdown_does_not_wake_it() -> None:
    """Regression: `tg-flash serve` on SIGTERM once waited its full 10 s for a handler still blocked in recv after
    the shutdown. Here the shutdown is made to miss the client altogether; the stop flag alone must end its wait."""
    bar = BufferMMIO(bytearray(0x1000))
    bar.write32(0x10, 0x11111111)
    device = ServedDevice("x", 0x1002, 0x744C, {5: bar}, restorable=frozenset({(5, 0x10)}))
    server = RemoteServer([device], "127.0.0.1", 0, TOKEN, quiet=True)  # idle_timeout: the default 60 s
    server.serve_in_thread()
    try:
        connection = RemoteConnection(("127.0.0.1", server.port), TOKEN)
        mmio = RemotePCIDevice(connection, 0, "x").map_bar(5)
        mmio.write32(0x10, 0xAAAAAAAA)
        assert mmio.read32(0x10) == 0xAAAAAAAA
        with server.clients_lock:
            server.clients.clear()  # as if the shutdown never reached this client's blocked recv
        assert server.disconnect_clients(wait=30)
        assert bar.read32(0x10) == 0x11111111
    finally:
        connection.close()
        server.shutdown()
        server.server_close()
