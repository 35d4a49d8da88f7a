"""The simulated board in a process of its own (spec hcq §3.4's out-of-process mode): proof that the driver reaches
the chip only through what a PCI function exposes, with no Python object shared.

The driver's process starts `python -m tg.drivers.amd.sim_process FD` on one end of a socketpair. Config space,
BAR5 registers and BAR2 doorbells are requests over the socket; memory is shared the way a device shares it: the
VRAM memfd, each system-memory memfd and the MSI eventfd cross the socket as file descriptors (SCM_RIGHTS) and are
mapped on both sides. The board's process ends when the socket closes.

Wire format: a request is `<BBHIQQ` (command, BAR, size, 0, offset, value); an answer is `<BQQ` (status, a, b) with,
on status 0, `b` bytes of payload (and any file descriptors), on status 1, `a` bytes of error text.
"""

from __future__ import annotations

import argparse
import enum
import mmap
import os
import socket
import struct
import subprocess
import sys
import threading

from tg.drivers.amd import am_regs as am
from tg.drivers.mmio import BufferMMIO, MMIOInterface
from tg.drivers.pci import PCIDevice, map_fixed

REQUEST = struct.Struct("<BBHIQQ")
ANSWER = struct.Struct("<BQQ")
MAX_FDS = 2


class Command(enum.IntEnum):
    IDENTITY = 0
    CONFIG_READ = 1
    CONFIG_WRITE = 2
    BAR_INFO = 3
    RESIZE_BAR = 4
    RESET = 5
    REGISTER_READ = 6
    REGISTER_WRITE = 7
    DOORBELL_WRITE = 8
    VRAM_FD = 9
    SYSMEM_ALLOC = 10
    SYSMEM_FREE = 11
    IRQ_FD = 12


# --- the board's process ------------------------------------------------------------------------------------------


def serve(connection: socket.socket, vram_size: int) -> None:
    """Answer requests for one SimPCIDevice until the driver's process closes the socket."""
    from tg.drivers.amd.kfd import default_shader_engines
    from tg.drivers.amd.sim_pci import SimPCIDevice

    board = SimPCIDevice(vram_size=vram_size, shader_engines=default_shader_engines())
    registers, doorbells = board.map_bar(am.MMIO_BAR), board.map_bar(am.DOORBELL_BAR)
    while header := _receive_exactly(connection, REQUEST.size):
        command, bar, size, _, offset, value = REQUEST.unpack(header)
        fds: list[int] = []
        try:
            a, payload = 0, b""
            match Command(command):
                case Command.IDENTITY:
                    a = board.vendor_id << 16 | board.device_id
                case Command.CONFIG_READ:
                    a = board.read_config(offset, size)
                case Command.CONFIG_WRITE:
                    board.write_config(offset, value, size)
                case Command.BAR_INFO:
                    start, length = board.bar_info(bar)
                    a, payload = start, struct.pack("<Q", length)
                case Command.RESIZE_BAR:
                    board.resize_bar(bar)
                case Command.RESET:
                    board.reset()
                case Command.REGISTER_READ:
                    a = registers.read32(offset)
                case Command.REGISTER_WRITE:
                    registers.write32(offset, value)
                case Command.DOORBELL_WRITE:
                    doorbells.write(offset, value.to_bytes(8, "little"))
                case Command.VRAM_FD:
                    fds = [board.vram_fd]
                case Command.SYSMEM_ALLOC:
                    fd, addresses = board.new_sysmem(value)
                    fds, payload = [fd], struct.pack(f"<{len(addresses)}Q", *addresses)
                case Command.SYSMEM_FREE:
                    board.release_sysmem(value)
                case Command.IRQ_FD:
                    fds = [board.irq_fd]
            connection.sendmsg(
                [ANSWER.pack(0, a, len(payload)) + payload],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else [],
            )
        except Exception as error:  # the driver's mistake (a protocol error of the chip): its text goes back
            text = f"{type(error).__name__}: {error}".encode()
            connection.sendall(ANSWER.pack(1, len(text), 0) + text)
        finally:
            if Command(command) == Command.SYSMEM_ALLOC:
                for fd in fds:
                    os.close(fd)
    board.close()


def _receive_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fd", type=int, help="the board's end of the socketpair")
    parser.add_argument("--vram-size", type=int, default=512 << 20)
    args = parser.parse_args()
    serve(socket.socket(fileno=args.fd), args.vram_size)


# --- the driver's process -----------------------------------------------------------------------------------------


class BoardProcessError(RuntimeError):
    """The board's process refused a request (the text is its error) or went away."""


class _Link:
    """The socket to the board's process; one request at a time (the driver's threads share it)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()

    def call(self, command: Command, offset: int = 0, value: int = 0, bar: int = 0, size: int = 0) -> tuple:
        with self.lock:
            self.sock.sendall(REQUEST.pack(command, bar, size, 0, offset, value))
            message, ancillary, _, _ = self.sock.recvmsg(ANSWER.size, socket.CMSG_SPACE(MAX_FDS * 4))
            if len(message) < ANSWER.size:
                message += _receive_exactly(self.sock, ANSWER.size - len(message))
            if len(message) < ANSWER.size:
                raise BoardProcessError("the simulated board's process went away")
            status, a, b = ANSWER.unpack(message)
            payload = _receive_exactly(self.sock, a if status else b)
        if status:
            raise BoardProcessError(f"simulated board: {payload.decode()}")
        fds = [fd for level, kind, data in ancillary for fd in struct.unpack(f"{len(data) // 4}i", data)]
        return a, payload, fds


class _RegisterBAR(MMIOInterface):
    def __init__(self, link: _Link) -> None:
        self.link, self.size = link, am.BAR5_SIZE

    def read(self, offset: int, size: int) -> bytes:
        return self.read32(offset).to_bytes(4, "little")

    def write(self, offset: int, data: bytes) -> None:
        self.write32(offset, int.from_bytes(data, "little"))

    def read32(self, offset: int) -> int:
        return self.link.call(Command.REGISTER_READ, offset)[0]

    def write32(self, offset: int, value: int) -> None:
        self.link.call(Command.REGISTER_WRITE, offset, value & 0xFFFFFFFF)


class _DoorbellBAR(MMIOInterface):
    def __init__(self, link: _Link) -> None:
        self.link, self.size = link, am.DOORBELL_BAR_SIZE

    def read(self, offset: int, size: int) -> bytes:
        raise BoardProcessError("doorbells are write-only here")

    def write(self, offset: int, data: bytes) -> None:
        self.link.call(Command.DOORBELL_WRITE, offset, int.from_bytes(data, "little"))


class ProcessPCIDevice(PCIDevice):
    """A simulated board running in a child process, behind the PCIDevice surface."""

    def __init__(self, vram_size: int = 512 << 20, address: str = "0000:03:00.0") -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tg.drivers.amd.sim_process", str(theirs.fileno()), f"--vram-size={vram_size}"],
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        self.link = _Link(ours)
        self.address = address
        identity = self.link.call(Command.IDENTITY)[0]
        self.vendor_id, self.device_id = identity >> 16, identity & 0xFFFF
        self.irq_fd = self.link.call(Command.IRQ_FD)[2][0]
        self._vram_fd = self.link.call(Command.VRAM_FD)[2][0]
        self._windows: dict[int, int] = {}  # CPU address of an alloc_sysmem window -> its first bus address

    def read_config(self, offset: int, size: int) -> int:
        return self.link.call(Command.CONFIG_READ, offset, size=size)[0]

    def write_config(self, offset: int, value: int, size: int) -> None:
        self.link.call(Command.CONFIG_WRITE, offset, value, size=size)

    def bar_info(self, bar: int) -> tuple[int, int]:
        start, payload, _ = self.link.call(Command.BAR_INFO, bar=bar)
        return start, struct.unpack("<Q", payload)[0]

    def resize_bar(self, bar: int) -> None:
        self.link.call(Command.RESIZE_BAR, bar=bar)

    def reset(self) -> None:
        self.link.call(Command.RESET)

    def map_bar(self, bar: int) -> MMIOInterface:
        if bar == am.VRAM_BAR:
            return BufferMMIO(memoryview(mmap.mmap(self._vram_fd, self.bar_info(bar)[1], mmap.MAP_SHARED)))
        if bar == am.MMIO_BAR:
            return _RegisterBAR(self.link)
        if bar == am.DOORBELL_BAR:
            return _DoorbellBAR(self.link)
        raise ValueError(f"BAR {bar} is not implemented by {self.address}")

    def map_bar_at(self, bar: int, offset: int, address: int, size: int) -> None:
        if bar != am.VRAM_BAR:
            raise ValueError(f"only BAR0 can be mapped at an address, not BAR {bar}")
        map_fixed(self._vram_fd, offset, address, size)

    def alloc_sysmem(self, size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[MMIOInterface, list[int]]:
        from tg.drivers.amd.sim_pci import map_shared, page_rounded

        size = page_rounded(size)
        _, payload, fds = self.link.call(Command.SYSMEM_ALLOC, value=size)
        try:
            window = map_shared(fds[0], size, vaddr)
        finally:
            os.close(fds[0])
        addresses = list(struct.unpack(f"<{len(payload) // 8}Q", payload))
        self._windows[window.address] = addresses[0]
        return window, addresses

    def free_sysmem(self, memory: MMIOInterface) -> None:
        self.link.call(Command.SYSMEM_FREE, value=self._windows.pop(memory.address))  # type: ignore[attr-defined]

    def close(self) -> None:
        self.link.sock.close()
        self.process.wait(timeout=10)

    def __repr__(self) -> str:
        return f"ProcessPCIDevice({self.address} pid {self.process.pid})"


if __name__ == "__main__":
    main()
