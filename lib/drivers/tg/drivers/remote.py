"""Remote PCI: a board in another machine, reached over TCP with the seed's protocol (hcq.md 1.17).

Every request is a 29-byte header `<BIIQQQ` (cmd, dev_id, bar, arg0, arg1, arg2) and an optional payload.
Every answer to an RPC is a 17-byte header `<BQQ` (status, resp0, resp1): status 0 is followed by the
requested read-out bytes, any other status by `resp0` bytes of UTF-8 error text. Writes are fire-and-forget:
no answer; a server that fails a write drops the connection, so the next RPC sees "Connection closed".

The client sees the board only as registers, so the flash driver, its safety rules (--yes, read-back,
register restores, deferred Ctrl-C) and its messages are the same as on a local board.

Authentication (tg's addition; the seed served only trusted networks): a server started with a token
answers nothing until the client sends PING with the token as payload. A server listening on anything but
loopback must have a token.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import socket
import socketserver
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from tg.drivers.mmio import MMIOInterface
from tg.drivers.pci import DeviceMatch, PCIDevice

REQUEST = struct.Struct("<BIIQQQ")
RESPONSE = struct.Struct("<BQQ")
DEFAULT_PORT = 6667
CONNECT_TIMEOUT = 3.0


class RemoteCmd(enum.IntEnum):
    PROBE = 0
    MAP_BAR = 1
    MAP_SYSMEM_FD = 2
    CFG_READ = 3
    CFG_WRITE = 4
    RESET = 5
    MMIO_READ = 6
    MMIO_WRITE = 7
    MAP_SYSMEM = 8
    SYSMEM_READ = 9
    SYSMEM_WRITE = 10
    RESIZE_BAR = 11
    PING = 12


def parse_address(text: str) -> tuple[str, int]:
    """`HOST[:PORT]`, port 6667 by default."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, DEFAULT_PORT
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


# -- client -------------------------------------------------------------------------------------------------


class RemoteConnection:
    def __init__(self, host: str, port: int, token: str | None = None, timeout: float = CONNECT_TIMEOUT) -> None:
        self.host, self.port = host, port
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ConnectionError(f"cannot reach the remote-PCI server at {host}:{port} ({e})") from None
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.round_trips = 0
        if token:
            self.rpc(0, RemoteCmd.PING, len(token.encode()), payload=token.encode())

    def send(self, dev_id: int, cmd: RemoteCmd, arg0: int = 0, arg1: int = 0, arg2: int = 0, bar: int = 0,
             payload: bytes = b"") -> None:  # fmt: skip
        """A fire-and-forget request (writes)."""
        self.sock.sendall(REQUEST.pack(cmd, dev_id, bar, arg0, arg1, arg2) + payload)

    def rpc(self, dev_id: int, cmd: RemoteCmd, arg0: int = 0, arg1: int = 0, arg2: int = 0, bar: int = 0,
            payload: bytes = b"", readout_size: int = 0) -> tuple[int, int, bytes]:  # fmt: skip
        self.send(dev_id, cmd, arg0, arg1, arg2, bar, payload)
        self.round_trips += 1
        status, resp0, resp1 = RESPONSE.unpack(self._recvall(RESPONSE.size))
        if status != 0:
            raise RuntimeError(f"RPC failed: {self._recvall(resp0).decode(errors='replace')}")
        return resp0, resp1, self._recvall(readout_size) if readout_size else b""

    def _recvall(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise RuntimeError("Connection closed")
            data += chunk
        return bytes(data)

    def probe(self, vendor: int, matches: Sequence[DeviceMatch], base_class: int = 0) -> list[str]:
        payload = b"".join(struct.pack("<II", m.mask, i) for m in matches for i in m.ids)
        text_size, count, _ = self.rpc(0, RemoteCmd.PROBE, base_class, len(payload), vendor, payload=payload)
        text = self._recvall(text_size).decode() if text_size else ""
        buses = text.split("\n") if text else []
        assert len(buses) == count, f"server said {count} devices but named {len(buses)}"
        return buses

    def close(self) -> None:
        self.sock.close()


class RemotePCIDevice(PCIDevice):
    def __init__(self, connection: RemoteConnection, dev_id: int, pcibus: str) -> None:
        self.connection, self.dev_id = connection, dev_id
        self.address = f"remote:{connection.host}:{connection.port}:{dev_id} ({pcibus})"
        self.vendor_id = self.read_config(0, 2)
        self.device_id = self.read_config(2, 2)

    def read_config(self, offset: int, size: int) -> int:
        return self.connection.rpc(self.dev_id, RemoteCmd.CFG_READ, offset, size)[0]

    def write_config(self, offset: int, value: int, size: int) -> None:
        self.connection.send(self.dev_id, RemoteCmd.CFG_WRITE, offset, size, value)

    def map_bar(self, bar: int) -> MMIOInterface:
        _start, size, _ = self.connection.rpc(self.dev_id, RemoteCmd.MAP_BAR, bar=bar)
        return RemoteMMIOInterface(self.connection, self.dev_id, bar, size)

    def close(self) -> None:
        self.connection.close()


class RemoteMMIOInterface(MMIOInterface):
    """A BAR on the server: reads are RPCs, writes are fire-and-forget."""

    def __init__(self, connection: RemoteConnection, dev_id: int, bar: int, size: int) -> None:
        self.connection, self.dev_id, self.bar, self.size = connection, dev_id, bar, size

    def read(self, offset: int, size: int) -> bytes:
        self._check(offset, size)
        return self.connection.rpc(self.dev_id, RemoteCmd.MMIO_READ, offset, size, bar=self.bar, readout_size=size)[2]

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        self.connection.send(self.dev_id, RemoteCmd.MMIO_WRITE, offset, len(data), bar=self.bar, payload=data)

    def _check(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise IndexError(f"MMIO access 0x{offset:x}+0x{size:x} outside the 0x{self.size:x}-byte BAR")


# -- server -------------------------------------------------------------------------------------------------


@dataclass
class ServedDevice:
    """A board the server exposes: its identity and its mapped BARs."""

    pcibus: str
    vendor_id: int
    device_id: int
    bars: dict[int, MMIOInterface] = field(default_factory=dict)

    def config(self, offset: int, size: int) -> int:
        space = struct.pack("<HH", self.vendor_id, self.device_id).ljust(256, b"\0")
        return int.from_bytes(space[offset : offset + size], "little")


class _Refused(Exception):
    """A request the server answers with an error."""


class _Handler(socketserver.BaseRequestHandler):
    server: RemoteServer

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.one_client_at_a_time:
            self._serve_client()

    def _serve_client(self) -> None:
        authenticated = not self.server.token
        while True:
            try:
                header = self._recvall(REQUEST.size)
            except ConnectionError:
                return
            cmd, dev_id, bar, arg0, arg1, arg2 = REQUEST.unpack(header)
            payload = self._payload(cmd, arg0, arg1)
            if not authenticated:
                token = (self.server.token or "").encode()  # (set: a server without one authenticates everyone)
                if cmd == RemoteCmd.PING and hmac.compare_digest(payload, token):
                    authenticated = True
                    self._answer(0, 0)
                    continue
                self._error("authentication required: connect with the server's token")
                return
            if cmd in (RemoteCmd.MMIO_WRITE, RemoteCmd.CFG_WRITE):
                try:
                    self.server.write(cmd, dev_id, bar, arg0, arg1, arg2, payload)
                except Exception as e:  # a failed fire-and-forget write ends the connection
                    print(f"remote: dropping the client after a failed write: {e}", file=sys.stderr)
                    return
                continue
            try:
                resp0, resp1, data = self.server.answer(cmd, dev_id, bar, arg0, arg1, arg2, payload)
            except Exception as e:
                self._error(str(e) or type(e).__name__)
                continue
            self._answer(resp0, resp1, data)

    def _payload(self, cmd: int, arg0: int, arg1: int) -> bytes:
        sizes: dict[int, int] = {RemoteCmd.MMIO_WRITE: arg1, RemoteCmd.PROBE: arg1, RemoteCmd.PING: arg0}
        size = sizes.get(cmd, 0)
        return self._recvall(size) if size else b""

    def _recvall(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.request.recv(size - len(data))
            if not chunk:
                raise ConnectionError("client closed")
            data += chunk
        return bytes(data)

    def _answer(self, resp0: int, resp1: int, data: bytes = b"") -> None:
        self.request.sendall(RESPONSE.pack(0, resp0, resp1) + data)

    def _error(self, text: str) -> None:
        encoded = text.encode()
        self.request.sendall(RESPONSE.pack(1, len(encoded), 0) + encoded)


class RemoteServer(socketserver.ThreadingTCPServer):
    """Serves `devices` to one client at a time (a board is never driven by two flashers at once): a second
    client's connection waits until the first one closes."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, devices: list[ServedDevice], host: str, port: int, token: str | None = None) -> None:
        if not token and not is_loopback(host):
            raise ValueError(f"listening on {host} (beyond loopback) needs an auth token")
        self.devices, self.token = devices, token
        self.one_client_at_a_time = threading.Lock()
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def _device(self, dev_id: int) -> ServedDevice:
        if not 0 <= dev_id < len(self.devices):
            raise _Refused(f"device {dev_id} does not exist ({len(self.devices)} devices available)")
        return self.devices[dev_id]

    def _bar(self, dev_id: int, bar: int) -> MMIOInterface:
        device = self._device(dev_id)
        if bar not in device.bars:
            raise _Refused(f"BAR {bar} of {device.pcibus} is not served")
        return device.bars[bar]

    def answer(self, cmd: int, dev_id: int, bar: int, arg0: int, arg1: int, arg2: int, payload: bytes):
        if cmd == RemoteCmd.PING:
            return 0, 0, b""
        if cmd == RemoteCmd.PROBE:
            pairs = [struct.unpack_from("<II", payload, i) for i in range(0, len(payload), 8)]
            found = [
                d.pcibus
                for d in self.devices
                if d.vendor_id == arg2 and (not pairs or any(d.device_id & m == i for m, i in pairs))
            ]
            text = "\n".join(found).encode()
            return len(text), len(found), text
        if cmd == RemoteCmd.MAP_BAR:
            return 0, self._bar(dev_id, bar).size, b""
        if cmd == RemoteCmd.CFG_READ:
            return self._device(dev_id).config(arg0, arg1), 0, b""
        if cmd == RemoteCmd.MMIO_READ:
            mmio = self._bar(dev_id, bar)
            if arg1 == 4 and arg0 % 4 == 0:  # the 32-bit fast path: one register access
                return 0, 0, mmio.read32(arg0).to_bytes(4, "little")
            return 0, 0, mmio.read(arg0, arg1)
        name = RemoteCmd(cmd).name if cmd in RemoteCmd._value2member_map_ else str(cmd)
        raise _Refused(f"{name} is not supported by this server")

    def write(self, cmd: int, dev_id: int, bar: int, arg0: int, arg1: int, arg2: int, payload: bytes) -> None:
        if cmd == RemoteCmd.CFG_WRITE:
            raise _Refused("configuration writes are not supported by this server")
        mmio = self._bar(dev_id, bar)
        if len(payload) == 4 and arg0 % 4 == 0:
            mmio.write32(arg0, int.from_bytes(payload, "little"))
        else:
            mmio.write(arg0, payload)

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        return thread


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_remote_board(request):
    """The transport's remote branch: probe the server, pick the index-th device, map its BAR."""
    from tg.drivers.transport import BoardConnection, TransportError

    host, port = parse_address(request.remote)
    connection = RemoteConnection(host, port, request.token)
    try:
        buses = connection.probe(request.vendor_id, request.matches)
        if not buses:
            raise TransportError(f"no supported remote AMD GPU found on {host}:{port}")
        if request.index >= len(buses):
            raise TransportError(f"device index {request.index} out of range (found {len(buses)})")
        device = RemotePCIDevice(connection, request.index, buses[request.index])
        mmio = device.map_bar(request.bar)
    except BaseException:
        connection.close()
        raise
    return BoardConnection(mmio, device.address, device=device)
