"""Test helpers for the simulated Navi31: queues driven from the CPU side, and packets written out as raw dwords.

The packets are spelled from the field layouts of the PM4 (gfx10+) and SDMA 6.0 documentation, as literal header
words and shifts, independent of tg.drivers.amd.packets and of any encoder: a wrong constant there shows up as a
disagreement here.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable

from tg.drivers.amd.iface import GPUAllocation, QueueKind, WaveLaunch
from tg.drivers.amd.kfd import SimKFDInterface

HANG_GUARD_S = 60.0  # only ever reached when something is broken


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = HANG_GUARD_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def lo(value: int) -> int:
    return value & 0xFFFFFFFF


def hi(value: int) -> int:
    return (value >> 32) & 0xFFFFFFFF


def u32(mem: GPUAllocation, offset: int = 0) -> int:
    return ctypes.c_uint32.from_address(mem.cpu_address + offset).value


def u64(mem: GPUAllocation, offset: int = 0) -> int:
    return ctypes.c_uint64.from_address(mem.cpu_address + offset).value


def set_u32(mem: GPUAllocation, value: int, offset: int = 0) -> None:
    ctypes.c_uint32.from_address(mem.cpu_address + offset).value = value


# -- PM4 (type-3 header: 3 << 30 | count << 16 | opcode << 8, count = body dwords - 1) --------------------------
def pm4(opcode: int, *body: int) -> list[int]:
    return [0xC0000000 | (len(body) - 1) << 16 | opcode << 8, *body]


def write_data(address: int, *values: int) -> list[int]:  # WRITE_DATA 0x37, dst_sel 5 (memory), wr_confirm
    return pm4(0x37, 5 << 8 | 1 << 20, lo(address), hi(address), *values)


def release_mem(address: int, value: int, data_sel: int = 1, int_sel: int = 2, ctxid: int = 0) -> list[int]:
    # RELEASE_MEM 0x49: CACHE_FLUSH_AND_INV_TS_EVENT (0x14), event index 5; data_sel [31:29], int_sel [26:24]
    return pm4(
        0x49, 0x14 | 5 << 8, data_sel << 29 | int_sel << 24, lo(address), hi(address), lo(value), hi(value), ctxid
    )


def wait_reg_mem(address: int, reference: int, mask: int = 0xFFFFFFFF, function: int = 5) -> list[int]:
    # WAIT_REG_MEM 0x3C, memory space (bit 4), function [2:0] (3 EQ, 4 NE, 5 GE), poll interval 4
    return pm4(0x3C, 1 << 4 | function, lo(address), hi(address), reference, mask, 4)


def set_sh_reg(register: int, *values: int) -> list[int]:  # SET_SH_REG 0x76, offset from 0x2C00
    return pm4(0x76, register - 0x2C00, *values)


def indirect_buffer(address: int, dwords: int, valid: bool = True) -> list[int]:  # 0x3F, VALID is bit 23
    return pm4(0x3F, lo(address), hi(address), dwords | (1 << 23 if valid else 0))


def dispatch_direct(x: int, y: int, z: int, initiator: int = 1 | 1 << 2 | 1 << 15) -> list[int]:  # 0x15
    return pm4(0x15, x, y, z, initiator)


def acquire_mem() -> list[int]:  # ACQUIRE_MEM 0x58 on gfx10+: 7 body dwords, GCR_CNTL last
    return pm4(0x58, 0, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 0xA, 1 << 8 | 1 << 9 | 1 << 14 | 1 << 15)


def event_write_cs_partial_flush() -> list[int]:  # EVENT_WRITE 0x46: CS_PARTIAL_FLUSH 7, event index 4
    return pm4(0x46, 7 | 4 << 8)


# -- SDMA (header: op [7:0] | sub_op [15:8]) ----------------------------------------------------------------------
def sdma_copy(dst: int, src: int, size: int) -> list[int]:  # COPY 1 / LINEAR 0; count = bytes - 1
    return [1, size - 1, 0, lo(src), hi(src), lo(dst), hi(dst)]


def sdma_fence(address: int, value: int) -> list[int]:  # FENCE 5, mtype 3 at [18:16]
    return [5 | 3 << 16, lo(address), hi(address), value]


def sdma_trap(context: int = 0) -> list[int]:  # TRAP 6
    return [6, context]


def sdma_poll(address: int, value: int, function: int = 5, mask: int = 0xFFFFFFFF) -> list[int]:
    # POLL_REGMEM 8: mem_poll bit 31, func [30:28]; dw5 interval [15:0] | retry count [27:16]
    return [8 | function << 28 | 1 << 31, lo(address), hi(address), value, mask, 4 | 0xFFF << 16]


def sdma_timestamp(address: int) -> list[int]:  # TIMESTAMP 13, GET_GLOBAL sub-op 2
    return [13 | 2 << 8, lo(address), hi(address)]


def sdma_write(address: int, *values: int) -> list[int]:  # WRITE 2 / LINEAR 0, count = dwords - 1
    return [2, lo(address), hi(address), len(values) - 1, *values]


class DriverQueue:
    """A queue as a driver uses it: writes packets into the ring at the write pointer (PM4 may wrap mid-packet;
    SDMA packets are kept contiguous by zero-filling the tail), then the write pointer, then the doorbell."""

    def __init__(self, iface: SimKFDInterface, kind: QueueKind, ring_size: int = 0x1000) -> None:
        self.iface, self.kind = iface, kind
        self.ring = iface.alloc(ring_size, host=True)
        self.read_ptr = iface.alloc(8, host=True)
        self.write_ptr = iface.alloc(8, host=True)
        self.hw = iface.create_queue(kind, self.ring, self.read_ptr, self.write_ptr)
        self.engine = iface.device.queues[-1]  # the simulator's side of this queue (for white-box checks)
        self.put = 0  # dwords for PM4, bytes for SDMA
        self.ring_size = ring_size

    def _store(self, byte_offset: int, dwords: list[int]) -> None:
        data = (ctypes.c_uint32 * len(dwords))(*dwords)
        ctypes.memmove(self.ring.cpu_address + byte_offset, data, 4 * len(dwords))

    def write(self, dwords: list[int], *, contiguous: bool | None = None) -> None:
        """Write packets without ringing the doorbell."""
        contiguous = self.kind == QueueKind.SDMA if contiguous is None else contiguous
        if self.kind == QueueKind.COMPUTE:
            ring_dwords = self.ring_size // 4
            for dword in dwords:
                self._store((self.put % ring_dwords) * 4, [dword])
                self.put += 1
            return
        offset = self.put % self.ring_size
        if contiguous and offset + 4 * len(dwords) > self.ring_size:
            tail = self.ring_size - offset
            self._store(offset, [0] * (tail // 4))
            self.put += tail
            offset = 0
        for index, dword in enumerate(dwords):
            self._store((offset + 4 * index) % self.ring_size, [dword])
        self.put += 4 * len(dwords)

    def ring_doorbell(self) -> None:
        ctypes.c_uint64.from_address(self.write_ptr.cpu_address).value = self.put
        self.hw.doorbell.write(self.put)

    def submit(self, dwords: list[int], **kwargs: bool) -> None:
        self.write(dwords, **kwargs)
        self.ring_doorbell()

    @property
    def executed(self) -> int:
        return u64(self.read_ptr)

    def drain(self) -> None:
        wait_for(lambda: self.executed == self.put, f"{self.kind.value} queue to reach {self.put}")

    def reset_after_recover(self) -> None:
        self.put = 0


class RecordingEngines:
    """ShaderEngines for tests: records every launch; optionally runs a callback (to fault or to block)."""

    def __init__(self, action: Callable[[object, WaveLaunch], None] | None = None) -> None:
        self.launches: list[WaveLaunch] = []
        self.threads: list[threading.Thread] = []
        self.action = action

    def run_dispatch(self, memory: object, launch: WaveLaunch) -> None:
        self.launches.append(launch)
        self.threads.append(threading.current_thread())
        if self.action is not None:
            self.action(memory, launch)
