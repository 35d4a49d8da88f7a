"""The remote-PCI protocol (hcq.md 1.17) over loopback: framing, commands, errors, fire-and-forget writes,
and the auth token."""

from __future__ import annotations

import socket
import struct

import pytest

from tg.drivers import navi31_regs as r
from tg.drivers.mmio import BufferMMIO
from tg.drivers.pci import DeviceMatch
from tg.drivers.remote import (
    REQUEST,
    RESPONSE,
    RemoteCmd,
    RemoteConnection,
    RemotePCIDevice,
    RemoteServer,
    ServedDevice,
    parse_address,
)

NAVI31 = (DeviceMatch(0xFFFF, (0x744C,)),)


@pytest.fixture
def served():
    bar = BufferMMIO(bytearray(0x1000))
    devices = [ServedDevice("0000:03:00.0", 0x1002, 0x744C, {5: bar}), ServedDevice("0000:04:00.0", 0x1002, 0x73BF)]
    server = RemoteServer(devices, "127.0.0.1", 0)
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
    connection = RemoteConnection("127.0.0.1", server.port)
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
    connection = RemoteConnection("127.0.0.1", server.port)
    with pytest.raises(RuntimeError, match="RPC failed: BAR 2 of 0000:03:00.0 is not served"):
        connection.rpc(0, RemoteCmd.MAP_BAR, bar=2)
    with pytest.raises(RuntimeError, match="RPC failed: RESET is not supported"):
        connection.rpc(0, RemoteCmd.RESET)
    connection.send(0, RemoteCmd.MMIO_WRITE, 0x2000, 4, bar=5, payload=b"\0" * 4)  # outside the BAR
    with pytest.raises(RuntimeError, match="Connection closed"):
        connection.rpc(0, RemoteCmd.PING)


def test_a_token_is_required_when_the_server_has_one() -> None:
    server = RemoteServer([ServedDevice("x", 0x1002, 0x744C)], "127.0.0.1", 0, token="s3cret")
    server.serve_in_thread()
    try:
        with pytest.raises(RuntimeError, match="authentication required"):
            RemoteConnection("127.0.0.1", server.port).probe(0x1002, NAVI31)
        with pytest.raises(RuntimeError, match="authentication required"):
            RemoteConnection("127.0.0.1", server.port, token="wrong")
        assert RemoteConnection("127.0.0.1", server.port, token="s3cret").probe(0x1002, NAVI31) == ["x"]
    finally:
        server.shutdown()
        server.server_close()


def test_listening_beyond_loopback_needs_a_token() -> None:
    with pytest.raises(ValueError, match="beyond loopback"):
        RemoteServer([], "0.0.0.0", 0)


def test_a_server_that_is_not_there_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match=f"cannot reach the remote-PCI server at 127.0.0.1:{port}"):
        RemoteConnection("127.0.0.1", port, timeout=1)


def test_raw_framing_of_a_read(served) -> None:
    server, bar = served
    bar.write(r.ROM_CNTL % 0x1000, b"\x01\x02\x03\x04")
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(struct.pack("<BIIQQQ", 6, 0, 5, r.ROM_CNTL % 0x1000, 4, 0))
        answer = b""
        while len(answer) < 21:  # 17-byte header, 4 bytes read out
            answer += s.recv(64)
    assert answer == struct.pack("<BQQ", 0, 0, 0) + b"\x01\x02\x03\x04"
