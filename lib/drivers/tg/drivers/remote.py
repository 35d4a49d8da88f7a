"""Remote PCI: a board in another machine, reached over TCP with the seed's protocol (hcq.md 1.17).

Every request is a 29-byte header `<BIIQQQ` (cmd, dev_id, bar, arg0, arg1, arg2) and an optional payload.
Every answer to an RPC is a 17-byte header `<BQQ` (status, resp0, resp1): status 0 is followed by the
requested read-out bytes, any other status by `resp0` bytes of UTF-8 error text. Writes are fire-and-forget:
no answer; a server that fails a write drops the connection, so the next RPC sees "Connection closed".

The client sees the board only as registers, so the flash driver, its safety rules (--yes, read-back,
register restores, deferred Ctrl-C) and its messages are the same as on a local board.

Hardening (tg's additions; the seed served only trusted networks):

- Authentication: a TCP server, loopback included, must have a token and answers nothing until the client
  sends PING with the token as payload. A server may instead listen on a Unix socket (`unix:PATH`), created
  with mode 0600 so that only its owner can connect; a token there is optional.
- Before authentication the server reads one fixed-size request header and, if it is a PING announcing at
  most `MAX_TOKEN_BYTES`, that many bytes; anything else is refused and the connection closed. After it,
  payload sizes are bounded too (a write never beyond the BAR, a probe list at most `MAX_PROBE_BYTES`).
- Time limits: a client that sends nothing for `idle_timeout` seconds, or takes longer than
  `request_timeout` to deliver a request it started, is dropped. Authentication happens before a client may
  wait for the board, and a client waits for the board at most `busy_wait` seconds (then: "board busy"), so
  no client can hold up another beyond those limits.
- Restores: the server remembers the first value of every register in a device's `restorable` set that a
  client writes, and when the client disconnects (cleanly, dropped, or killed) writes back every one that no
  longer holds it.
- The client waits for answers in short slices, so Ctrl-C (or the `cancelled` hook a tool passes while it
  holds Ctrl-C back) ends the wait within a second even when the server has stopped answering.
"""

from __future__ import annotations

import contextlib
import enum
import hmac
import os
import socket
import socketserver
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from tg.drivers.mmio import MMIOInterface
from tg.drivers.pci import DeviceMatch, PCIDevice

REQUEST = struct.Struct("<BIIQQQ")
RESPONSE = struct.Struct("<BQQ")
DEFAULT_PORT = 6667
CONNECT_TIMEOUT = 3.0
ANSWER_TIMEOUT = 60.0  # a server silent this long is declared gone
WAIT_SLICE = 0.2  # the client's longest uninterruptible wait
MAX_TOKEN_BYTES = 256
MAX_PROBE_BYTES = 4096
IDLE_TIMEOUT, REQUEST_TIMEOUT, BUSY_WAIT = 60.0, 10.0, 5.0
STOP_CHECK = 0.1  # how often a wait for an idle client looks whether the server is stopping
UNIX_PREFIX = "unix:"


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


def parse_address(text: str) -> tuple[str, int] | str:
    """`HOST[:PORT]` (port 6667 by default), or `unix:PATH` for a Unix socket (returned as the path)."""
    if text.startswith(UNIX_PREFIX):
        if not text[len(UNIX_PREFIX) :]:
            raise ValueError(f"{text!r} names no socket path")
        return text[len(UNIX_PREFIX) :]
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, DEFAULT_PORT
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


# -- client -------------------------------------------------------------------------------------------------


class RemoteInterrupted(KeyboardInterrupt):
    """Ctrl-C while waiting for a remote server; the message says what the server will do about it."""


class RemoteConnection:
    def __init__(
        self,
        endpoint: tuple[str, int] | str,
        token: str | None = None,
        timeout: float = CONNECT_TIMEOUT,
        cancelled: Callable[[], bool] | None = None,
        answer_timeout: float = ANSWER_TIMEOUT,
    ) -> None:
        self.endpoint = endpoint
        self.name = f"unix:{endpoint}" if isinstance(endpoint, str) else f"{endpoint[0]}:{endpoint[1]}"
        self.cancelled = cancelled or (lambda: False)
        self.answer_timeout = answer_timeout
        try:
            if isinstance(endpoint, str):
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout)
                self.sock.connect(endpoint)
            else:
                self.sock = socket.create_connection(endpoint, timeout=timeout)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            raise ConnectionError(f"cannot reach the remote-PCI server at {self.name} ({e})") from None
        self.sock.settimeout(WAIT_SLICE)
        self.round_trips = 0
        self.broken: str | None = None
        if token:
            self.rpc(0, RemoteCmd.PING, len(token.encode()), payload=token.encode())

    def send(self, dev_id: int, cmd: RemoteCmd, arg0: int = 0, arg1: int = 0, arg2: int = 0, bar: int = 0,
             payload: bytes = b"") -> None:  # fmt: skip
        """A fire-and-forget request (writes)."""
        data = memoryview(REQUEST.pack(cmd, dev_id, bar, arg0, arg1, arg2) + payload)
        sent = 0
        while sent < data.nbytes:
            self._check_alive()
            started = time.monotonic()
            while True:
                try:
                    sent += self.sock.send(data[sent:])
                    break
                except TimeoutError:
                    self._waited(started, "sending to")
                except OSError:  # reset or broken pipe: the server dropped us
                    self._closed()

    def rpc(self, dev_id: int, cmd: RemoteCmd, arg0: int = 0, arg1: int = 0, arg2: int = 0, bar: int = 0,
            payload: bytes = b"", readout_size: int = 0) -> tuple[int, int, bytes]:  # fmt: skip
        self.send(dev_id, cmd, arg0, arg1, arg2, bar, payload)
        self.round_trips += 1
        status, resp0, resp1 = RESPONSE.unpack(self._recvall(RESPONSE.size))
        if status != 0:
            raise RuntimeError(f"RPC failed: {self._recvall(resp0).decode(errors='replace')}")
        return resp0, resp1, self._recvall(readout_size) if readout_size else b""

    def _closed(self) -> NoReturn:
        self.broken = "Connection closed"
        raise RuntimeError("Connection closed")

    def _check_alive(self) -> None:
        """A connection that failed once (interrupted, closed, silent) fails every later request at once."""
        if self.broken:
            raise ConnectionError(self.broken)

    def _waited(self, started: float, doing: str) -> None:
        """Called after each empty wait slice: give up on Ctrl-C or a server silent for too long."""
        if self.cancelled():
            self.broken = f"interrupted while {doing} the remote server at {self.name}"
            raise RemoteInterrupted(
                f"interrupted while {doing} the remote server at {self.name}; the server restores the "
                "registers this client changed when the connection closes"
            )
        if time.monotonic() - started > self.answer_timeout:
            self.broken = f"the remote server at {self.name} stopped answering"
            raise ConnectionError(f"{self.broken} (nothing for {self.answer_timeout:.0f} s)")

    def _recvall(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            self._check_alive()
            started = time.monotonic()
            while True:
                try:
                    chunk = self.sock.recv(size - len(data))
                    break
                except TimeoutError:
                    self._waited(started, "waiting for")
                except OSError:
                    self._closed()
            if not chunk:
                self._closed()
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
        self.address = f"remote:{connection.name}:{dev_id} ({pcibus})"
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
    """A board the server exposes: its identity, its mapped BARs, and the registers (BAR, offset) the server
    puts back when a client leaves them changed (only registers that reading does not disturb)."""

    pcibus: str
    vendor_id: int
    device_id: int
    bars: dict[int, MMIOInterface] = field(default_factory=dict)
    restorable: frozenset[tuple[int, int]] = frozenset()

    def config(self, offset: int, size: int) -> int:
        space = struct.pack("<HH", self.vendor_id, self.device_id).ljust(256, b"\0")
        return int.from_bytes(space[offset : offset + size], "little")


class _Refused(Exception):
    """A request the server answers with an error."""


class _Drop(Exception):
    """The client is dropped: timed out, oversized, unauthenticated or gone."""


class _Handler(socketserver.BaseRequestHandler):
    server: _ServerMixin  # type: ignore[assignment]  # the servers below mix it into socketserver's

    def handle(self) -> None:
        if self.request.family != socket.AF_UNIX:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.originals: dict[tuple[int, int, int], int] = {}  # (dev, bar, offset) -> value before this client
        with self.server.clients_lock:
            self.server.clients.add(self.request)
        try:
            self._authenticate()
            if not self.server.board_lock.acquire(timeout=self.server.busy_wait):
                self._error("board busy: another client is using it; try again later")
                return
            try:
                self._serve_client()
            finally:
                self._restore()
                self.server.board_lock.release()
        except _Drop as e:
            self.server.log(f"remote: dropping a client: {e}")
        finally:
            with self.server.clients_lock:
                self.server.clients.discard(self.request)

    def _authenticate(self) -> None:
        token = self.server.token
        if token is None:
            return  # a Unix socket without a token: its 0600 mode is the authentication
        cmd, _dev, _bar, size, _arg1, _arg2 = REQUEST.unpack(self._recvall(REQUEST.size, self.server.request_timeout))
        if cmd != RemoteCmd.PING or not 0 < size <= MAX_TOKEN_BYTES:
            self._error("authentication required: connect with the server's token")
            raise _Drop("no PING with a token first")
        if not hmac.compare_digest(self._recvall(size, self.server.request_timeout), token.encode()):
            self._error("authentication required: connect with the server's token")
            raise _Drop("wrong token")
        self._answer(0, 0)

    def _serve_client(self) -> None:
        while True:
            try:
                first = self._recv_first()
            except _Drop as e:
                self.server.log(f"remote: dropping a client: {e}")
                return
            if not first:
                return  # the client closed the connection
            header = first + self._recvall(REQUEST.size - len(first), self.server.request_timeout)
            cmd, dev_id, bar, arg0, arg1, arg2 = REQUEST.unpack(header)
            try:
                payload = self._recvall(self._payload_size(cmd, dev_id, bar, arg0, arg1), self.server.request_timeout)
            except _Refused as e:
                if cmd not in (RemoteCmd.MMIO_WRITE, RemoteCmd.CFG_WRITE):  # a write gets no answer, only the drop
                    self._error(str(e))
                raise _Drop(str(e)) from None
            if cmd in (RemoteCmd.MMIO_WRITE, RemoteCmd.CFG_WRITE):
                try:
                    self._remember(dev_id, bar, arg0, len(payload))
                    self.server.write(cmd, dev_id, bar, arg0, arg1, arg2, payload)
                except Exception as e:  # a failed fire-and-forget write ends the connection
                    self.server.log(f"remote: dropping the client after a failed write: {e}")
                    return
                continue
            try:
                resp0, resp1, data = self.server.answer(cmd, dev_id, bar, arg0, arg1, arg2, payload)
            except Exception as e:
                self._error(str(e) or type(e).__name__)
                continue
            self._answer(resp0, resp1, data)

    def _payload_size(self, cmd: int, dev_id: int, bar: int, arg0: int, arg1: int) -> int:
        """The payload a request announces, refused when larger than the request can need."""
        if cmd == RemoteCmd.MMIO_WRITE:
            size = self.server.bar_size(dev_id, bar)
            if arg1 > size or arg0 + arg1 > size:
                raise _Refused(f"a {arg1}-byte write at 0x{arg0:x} does not fit the 0x{size:x}-byte BAR")
            return arg1
        if cmd == RemoteCmd.PROBE:
            if arg1 > MAX_PROBE_BYTES:
                raise _Refused(f"a probe list of {arg1} bytes (at most {MAX_PROBE_BYTES})")
            return arg1
        if cmd == RemoteCmd.PING:
            if arg0 > MAX_TOKEN_BYTES:
                raise _Refused(f"a PING of {arg0} bytes (at most {MAX_TOKEN_BYTES})")
            return arg0
        return 0

    def _remember(self, dev_id: int, bar: int, offset: int, size: int) -> None:
        """Read each restorable register this write touches the first time this client writes it."""
        device = self.server.devices[dev_id] if 0 <= dev_id < len(self.server.devices) else None
        if device is None or bar not in device.bars:
            return
        for register in range(offset & ~3, offset + size, 4):
            key = (dev_id, bar, register)
            if (bar, register) in device.restorable and key not in self.originals:
                self.originals[key] = device.bars[bar].read32(register)

    def _restore(self) -> None:
        restored = []
        for (dev_id, bar, register), value in reversed(self.originals.items()):
            mmio = self.server.devices[dev_id].bars[bar]
            try:
                if mmio.read32(register) != value:
                    mmio.write32(register, value)
                    restored.append(f"0x{register:x}")
            except Exception as e:
                self.server.log(f"remote: could not restore register 0x{register:x}: {e}")
        if restored:
            self.server.log(f"remote: restored {len(restored)} registers the client left changed: {' '.join(restored)}")

    def _recv_first(self) -> bytes:
        """The first byte of the next request, or b"" when the connection ends. The client may be idle for up to
        idle_timeout. The wait goes in short slices so that a stopping server ends it even when the socket's
        shutdown does not wake a blocked recv (seen about once in 30 runs under load)."""
        deadline = time.monotonic() + self.server.idle_timeout
        while not self.server.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Drop(f"idle for {self.server.idle_timeout:g} s")
            self.request.settimeout(min(remaining, STOP_CHECK))
            try:
                return self.request.recv(1)
            except TimeoutError:
                continue
            except OSError:
                return b""
        return b""

    def _recvall(self, size: int, within: float) -> bytes:
        """`size` bytes that must all arrive within `within` seconds (a slow client is dropped)."""
        deadline = time.monotonic() + within
        data = bytearray()
        while len(data) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Drop(f"a request took longer than {within:g} s to arrive")
            self.request.settimeout(remaining)
            try:
                chunk = self.request.recv(min(size - len(data), 1 << 20))
            except TimeoutError:
                raise _Drop(f"a request took longer than {within:g} s to arrive") from None
            except OSError as e:
                raise _Drop(f"connection failed ({e})") from None
            if not chunk:
                raise _Drop("the client closed the connection mid-request")
            data += chunk
        return bytes(data)

    def _answer(self, resp0: int, resp1: int, data: bytes = b"") -> None:
        self._send(RESPONSE.pack(0, resp0, resp1) + data)

    def _error(self, text: str) -> None:
        encoded = text.encode()
        self._send(RESPONSE.pack(1, len(encoded), 0) + encoded)

    def _send(self, data: bytes) -> None:
        self.request.settimeout(self.server.request_timeout)  # a client that does not read is dropped too
        try:
            self.request.sendall(data)
        except OSError as e:
            raise _Drop(f"could not answer ({e})") from None


class _ServerMixin:
    """What the TCP and the Unix-socket server share: the devices, the limits, one client on the board at a time."""

    devices: list[ServedDevice]
    token: str | None
    idle_timeout: float
    request_timeout: float
    busy_wait: float
    board_lock: threading.Lock
    stopping: threading.Event  # set by disconnect_clients: idle clients are let go
    quiet: bool

    def _setup(self, devices, token, idle_timeout, request_timeout, busy_wait, quiet) -> None:
        self.devices, self.token = devices, token
        self.idle_timeout, self.request_timeout, self.busy_wait = idle_timeout, request_timeout, busy_wait
        self.board_lock = threading.Lock()
        self.quiet = quiet
        self.clients: set[socket.socket] = set()
        self.clients_lock = threading.Lock()
        self.stopping = threading.Event()

    def disconnect_clients(self, wait: float = 10.0) -> bool:
        """End every client connection (a server that stops), and wait up to `wait` seconds for the one holding
        the board to put its registers back; False when it did not finish in time."""
        self.stopping.set()
        with self.clients_lock:
            clients = list(self.clients)
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
        if not self.board_lock.acquire(timeout=wait):
            return False
        self.board_lock.release()
        return True

    def log(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def _device(self, dev_id: int) -> ServedDevice:
        if not 0 <= dev_id < len(self.devices):
            raise _Refused(f"device {dev_id} does not exist ({len(self.devices)} devices available)")
        return self.devices[dev_id]

    def _bar(self, dev_id: int, bar: int) -> MMIOInterface:
        device = self._device(dev_id)
        if bar not in device.bars:
            raise _Refused(f"BAR {bar} of {device.pcibus} is not served")
        return device.bars[bar]

    def bar_size(self, dev_id: int, bar: int) -> int:
        return getattr(self._bar(dev_id, bar), "size", 0)

    def answer(self, cmd: int, dev_id: int, bar: int, arg0: int, arg1: int, arg2: int, payload: bytes):
        if cmd == RemoteCmd.PING:
            return 0, 0, b""
        if cmd == RemoteCmd.PROBE:
            pairs = [struct.unpack_from("<II", payload, i) for i in range(0, len(payload) - 7, 8)]
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
            if arg0 + arg1 > self.bar_size(dev_id, bar):
                raise _Refused(f"a {arg1}-byte read at 0x{arg0:x} does not fit the BAR")
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
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)  # type: ignore[attr-defined]
        thread.start()
        return thread


class RemoteServer(_ServerMixin, socketserver.ThreadingTCPServer):
    """Serves `devices` over TCP, to clients with the token, one client on the board at a time."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(
        self,
        devices: list[ServedDevice],
        host: str,
        port: int,
        token: str | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        busy_wait: float = BUSY_WAIT,
        quiet: bool = False,
    ) -> None:
        if not token:
            raise ValueError(
                f"a TCP server (here {host}:{port}) needs an auth token (--token), loopback included; "
                "or listen on a Unix socket (unix:PATH), which only its owner can use"
            )
        if len(token.encode()) > MAX_TOKEN_BYTES:
            raise ValueError(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
        self._setup(devices, token, idle_timeout, request_timeout, busy_wait, quiet)
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host!s}:{port}"


class RemoteUnixServer(_ServerMixin, socketserver.ThreadingUnixStreamServer):
    """Serves `devices` on a Unix socket created with mode 0600; the token is optional there."""

    daemon_threads = True

    def __init__(
        self,
        devices: list[ServedDevice],
        path: str,
        token: str | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        busy_wait: float = BUSY_WAIT,
        quiet: bool = False,
    ) -> None:
        if os.path.lexists(path):
            raise ValueError(f"{path} already exists; remove it if no server is using it")
        self._setup(devices, token or None, idle_timeout, request_timeout, busy_wait, quiet)
        previous = os.umask(0o177)  # the socket file is born 0600: no window in which others could connect
        try:
            super().__init__(path, _Handler)
        finally:
            os.umask(previous)
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode != 0o600:
            self.server_close()
            raise OSError(f"{path} was created with mode {mode:o}, not 600")

    @property
    def address(self) -> str:
        return f"unix:{self.server_address}"

    def server_close(self) -> None:
        super().server_close()
        if isinstance(self.server_address, str) and os.path.exists(self.server_address):
            os.unlink(self.server_address)


def make_server(devices: list[ServedDevice], listen: str, token: str | None = None, **limits) -> _ServerMixin:
    """A server for `listen` (`HOST:PORT` or `unix:PATH`)."""
    endpoint = parse_address(listen)
    if isinstance(endpoint, str):
        return RemoteUnixServer(devices, endpoint, token, **limits)
    return RemoteServer(devices, endpoint[0], endpoint[1], token, **limits)


def open_remote_board(request):
    """The transport's remote branch: probe the server, pick the index-th device, map its BAR."""
    from tg.drivers.transport import BoardConnection, TransportError

    connection = RemoteConnection(parse_address(request.remote), request.token, cancelled=request.cancelled)
    try:
        buses = connection.probe(request.vendor_id, request.matches)
        if not buses:
            raise TransportError(f"no supported remote AMD GPU found on {connection.name}")
        if request.index >= len(buses):
            raise TransportError(f"device index {request.index} out of range (found {len(buses)})")
        device = RemotePCIDevice(connection, request.index, buses[request.index])
        mmio = device.map_bar(request.bar)
    except BaseException:
        connection.close()
        raise
    return BoardConnection(mmio, device.address, device=device)
