"""The compute command processor (MEC) of the simulated Navi31: executes the PM4 type-3 packets of a compute ring.

The ring's pointers count dwords and wrap at the ring's end; a packet may straddle the end (the CP reads on from
dword 0). Packets: NOP, INDIRECT_BUFFER (one level of chaining), SET_SH_REG / SET_UCONFIG_REG (the register file),
DISPATCH_DIRECT (the COMPUTE_* registers become a WaveLaunch run to completion by the shader engines),
ACQUIRE_MEM (no caches are modelled: accepted after its length is checked), RELEASE_MEM (32/64-bit value or the
GPU clock, optional interrupt), WAIT_REG_MEM (memory or register, any compare, masked; blocks), EVENT_WRITE,
WRITE_DATA. Anything else stops the queue with a fault naming the packet.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.drivers.amd import packets as pk
from tg.drivers.amd.iface import GPUAllocation, GPUFault, QueueKind, WaveLaunch
from tg.drivers.amd.navi31_engine import PacketError, QueueEngine, QueueReset, compare

if TYPE_CHECKING:
    from tg.drivers.amd.navi31 import Navi31

MAX_IB_DEPTH = 2  # the ring's IB may chain one more IB


@dataclass(frozen=True)
class Stream:
    """Where packets are read from: the ring (wraps, bounded by the write pointer) or an indirect buffer."""

    name: str
    read: Callable[[int, int], list[int]]  # (position, count) -> dwords
    end: int  # the first position not to read (write pointer / IB size)
    depth: int = 0


def _address64(lo: int, hi: int) -> int:
    return (hi & 0xFFFFFFFF) << 32 | (lo & 0xFFFFFFFF)


def _dwords(data: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(data) // 4}I", data))


class ComputeEngine(QueueEngine):
    unit = 4
    kind = QueueKind.COMPUTE

    def __init__(self, device: Navi31, name: str, ring: GPUAllocation, read_ptr: int, write_ptr: int) -> None:
        super().__init__(device, name, ring, read_ptr, write_ptr)
        self.registers: dict[int, int] = {}  # the SH / UCONFIG register file, by dword address
        self._packet: tuple[int, Stream, int] = (0, Stream("ring", self._ring_dwords, 0), 0)
        self.dispatches = 0
        self._handlers: dict[int, Callable[[list[int], Stream, int], None]] = {
            pk.PM4.NOP: lambda body, stream, epoch: None,
            pk.PM4.INDIRECT_BUFFER: self._indirect_buffer,
            pk.PM4.SET_SH_REG: lambda body, stream, epoch: self._set_registers(body, pk.SH_REG_START, pk.SH_REG_END),
            pk.PM4.SET_UCONFIG_REG: lambda body, stream, epoch: self._set_registers(
                body, pk.UCONFIG_REG_START, pk.UCONFIG_REG_END
            ),
            pk.PM4.DISPATCH_DIRECT: lambda body, stream, epoch: self._dispatch_direct(body),
            pk.PM4.ACQUIRE_MEM: lambda body, stream, epoch: self._acquire_mem(body),
            pk.PM4.RELEASE_MEM: lambda body, stream, epoch: self._release_mem(body),
            pk.PM4.WAIT_REG_MEM: lambda body, stream, epoch: self._wait_reg_mem(body, epoch),
            pk.PM4.EVENT_WRITE: lambda body, stream, epoch: self._event_write(body),
            pk.PM4.WRITE_DATA: lambda body, stream, epoch: self._write_data(body),
        }

    # -- fetching ----------------------------------------------------------------------------------------------
    def _ring_dwords(self, position: int, count: int) -> list[int]:
        ring_dwords = self.ring.size // 4
        out: list[int] = []
        while count > 0:
            index = position % ring_dwords
            take = min(count, ring_dwords - index)
            out += _dwords(self.memory.read(self.ring.va_addr + index * 4, take * 4))
            position += take
            count -= take
        return out

    def execute_next(self, position: int, epoch: int) -> int:
        return self._execute_packet(Stream("ring", self._ring_dwords, self.target), position, epoch)

    def describe_packet(self) -> str:
        header, stream, position = self._packet
        where = f"{stream.name} dword {position}"
        if pk.packet_type(header) == 2:
            return f"TYPE2 filler at {where}"
        opcode = pk.packet3_opcode(header)
        name = pk.PM4(opcode).name if opcode in pk.PM4._value2member_map_ else f"opcode 0x{opcode:02X}"
        return f"{name} (header 0x{header:08X}) at {where}"

    def _execute_packet(self, stream: Stream, position: int, epoch: int) -> int:
        header = stream.read(position, 1)[0]
        self._packet = (header, stream, position)  # described only if it faults (formatting every packet is slow)
        kind = pk.packet_type(header)
        if kind == 2:  # type-2 filler: one dword
            return position + 1
        opcode = pk.packet3_opcode(header)
        if kind != pk.PACKET_TYPE3:
            raise PacketError(f"type-{kind} packet: the compute queue takes only type-3 packets")
        length = pk.packet3_count(header) + 2
        if position + length > stream.end:
            raise PacketError(f"the packet is {length} dwords but only {stream.end - position} are left before the end")
        handler = self._handlers.get(opcode)
        if handler is None:
            raise PacketError(f"unknown PM4 opcode 0x{opcode:02X}")
        handler(stream.read(position + 1, length - 1), stream, epoch)
        return position + length

    @staticmethod
    def _expect(body: list[int], low: int, high: int | None = None) -> None:
        high = low if high is None else high
        if not low <= len(body) <= high:
            want = f"{low}" if low == high else f"{low}..{high}"
            raise PacketError(f"malformed: body of {len(body)} dwords, expected {want}")

    # -- packets -----------------------------------------------------------------------------------------------
    def _indirect_buffer(self, body: list[int], stream: Stream, epoch: int) -> None:
        self._expect(body, 3)
        address = _address64(body[0] & ~3, body[1] & 0xFFFF)
        control = body[2]
        if not control & pk.INDIRECT_BUFFER_VALID:
            raise PacketError("INDIRECT_BUFFER without the VALID bit")
        size = control & pk.INDIRECT_BUFFER_SIZE_MASK
        if stream.depth >= MAX_IB_DEPTH:
            raise PacketError(f"indirect buffers nested deeper than {MAX_IB_DEPTH}")

        def read(pos: int, count: int) -> list[int]:
            return _dwords(self.memory.read(address + pos * 4, count * 4))

        ib = Stream(f"IB 0x{address:X}", read, size, stream.depth + 1)
        caller = self._packet
        position = 0
        while position < size:
            if self.reset_since(epoch):  # recovery abandons the rest of a long IB, not only a wait in it
                raise QueueReset
            position = self._execute_packet(ib, position, epoch)
        self._packet = caller

    def _set_registers(self, body: list[int], start: int, end: int) -> None:
        if len(body) < 2:
            raise PacketError(f"malformed: a register write of {len(body)} dwords sets no register")
        first = start + body[0]
        if not (start <= first and first + len(body) - 1 <= end):
            raise PacketError(f"registers 0x{first:X}..0x{first + len(body) - 2:X} lie outside 0x{start:X}..0x{end:X}")
        for index, value in enumerate(body[1:]):
            self.registers[first + index] = value

    def _reg(self, address: int) -> int:
        return self.registers.get(address, 0)

    def launch(self, body: list[int]) -> WaveLaunch:
        """The WaveLaunch a DISPATCH_DIRECT with this body makes from the current COMPUTE_* registers."""
        dims, initiator = body[0:3], body[3]
        if not initiator & pk.DISPATCH_INITIATOR_COMPUTE_SHADER_EN:
            raise PacketError("DISPATCH_DIRECT without COMPUTE_SHADER_EN in the initiator")
        workgroup = tuple(self._reg(pk.regCOMPUTE_NUM_THREAD_X + i) & 0x3FF for i in range(3))
        if 0 in workgroup:
            raise PacketError(f"COMPUTE_NUM_THREAD_X/Y/Z is {workgroup}: a workgroup needs at least one thread")
        if initiator & pk.DISPATCH_INITIATOR_USE_THREAD_DIMENSIONS:  # dims count threads, not workgroups
            dims = [-(-dim // size) for dim, size in zip(dims, workgroup, strict=True)]
        rsrc2 = self._reg(pk.regCOMPUTE_PGM_RSRC2)
        user_sgprs = (rsrc2 >> 1) & 0x1F  # COMPUTE_PGM_RSRC2.USER_SGPR
        tmpring = self._reg(pk.regCOMPUTE_TMPRING_SIZE)
        wave_bytes = ((tmpring >> pk.TMPRING_SIZE_WAVESIZE_SHIFT) & pk.TMPRING_SIZE_WAVESIZE_MASK) * 256
        return WaveLaunch(
            program_address=_address64(self._reg(pk.regCOMPUTE_PGM_LO), self._reg(pk.regCOMPUTE_PGM_HI)) << 8,
            rsrc1=self._reg(pk.regCOMPUTE_PGM_RSRC1),
            rsrc2=rsrc2,
            rsrc3=self._reg(pk.regCOMPUTE_PGM_RSRC3),
            user_data=tuple(self._reg(pk.regCOMPUTE_USER_DATA_0 + i) for i in range(user_sgprs)),
            grid=(dims[0], dims[1], dims[2]),
            workgroup=(workgroup[0], workgroup[1], workgroup[2]),
            wave32=bool(initiator & pk.DISPATCH_INITIATOR_CS_W32_EN),
            scratch_address=_address64(
                self._reg(pk.regCOMPUTE_DISPATCH_SCRATCH_BASE_LO), self._reg(pk.regCOMPUTE_DISPATCH_SCRATCH_BASE_HI)
            )
            << 8,
            # TMPRING_SIZE.WAVESIZE is sized for 64 lanes a wave (what the driver computes), in 256-byte units
            scratch_bytes_per_lane=wave_bytes // 64,
        )

    def _dispatch_direct(self, body: list[int]) -> None:
        self._expect(body, 4)
        launch = self.launch(body)
        if launch.grid[0] * launch.grid[1] * launch.grid[2] == 0:
            return  # an empty grid launches nothing
        if not self.memory.is_mapped(launch.program_address, 4):
            raise GPUFault(launch.program_address, "instruction fetch", self.queue_name)
        engines = self.device.shader_engines
        if engines is None:
            raise PacketError("this simulated device was built without shader engines; it cannot dispatch")
        self.dispatches += 1
        engines.run_dispatch(self.memory, launch)

    def _acquire_mem(self, body: list[int]) -> None:
        # gfx10+: coher_cntl, size lo/hi, base lo/hi, poll interval, GCR_CNTL. Caches are not modelled: the GPU's
        # view of memory is always coherent here, so only the shape is checked.
        self._expect(body, 7)

    def _release_mem(self, body: list[int]) -> None:
        self._expect(body, 7)
        event_type = body[0] & 0x3F
        if event_type not in (pk.EventType.CACHE_FLUSH_AND_INV_TS_EVENT, pk.EventType.BOTTOM_OF_PIPE_TS):
            raise PacketError(f"RELEASE_MEM with event type 0x{event_type:X} (not an end-of-pipe event)")
        data_sel = (body[1] >> pk.RELEASE_MEM_DATA_SEL_SHIFT) & 7
        int_sel = (body[1] >> pk.RELEASE_MEM_INT_SEL_SHIFT) & 7
        address = _address64(body[2], body[3])
        value = _address64(body[4], body[5])
        # Everything before this packet has completed (dispatches run to the end), so end of pipe is now.
        if data_sel == pk.ReleaseMemDataSel.VALUE_32:
            self._aligned(address, 4)
            self.memory.write_u32(address, value)
        elif data_sel == pk.ReleaseMemDataSel.VALUE_64:
            self._aligned(address, 8)
            self.memory.write_u64(address, value)
        elif data_sel == pk.ReleaseMemDataSel.GPU_CLOCK:
            self._aligned(address, 8)
            self.memory.write_u64(address, self.device.clock.ticks())
        elif data_sel != pk.ReleaseMemDataSel.NONE:
            raise PacketError(f"RELEASE_MEM data_sel {data_sel} is not supported")
        if int_sel in (pk.ReleaseMemIntSel.SEND_INTERRUPT_ONLY, pk.ReleaseMemIntSel.SEND_INTERRUPT_AFTER_WRITE_CONFIRM):
            self.device.interrupts.post(body[6])
        elif int_sel not in (pk.ReleaseMemIntSel.NONE, pk.ReleaseMemIntSel.SEND_DATA_AFTER_WRITE_CONFIRM):
            raise PacketError(f"RELEASE_MEM int_sel {int_sel} is not supported")

    @staticmethod
    def _aligned(address: int, alignment: int) -> None:
        if address % alignment:
            raise PacketError(f"address 0x{address:X} is not {alignment}-byte aligned")

    def _wait_reg_mem(self, body: list[int], epoch: int) -> None:
        self._expect(body, 6)
        control, lo, hi, reference, mask = body[0:5]
        function = (control >> pk.WAIT_REG_MEM_FUNCTION_SHIFT) & 7
        memory_space = (control >> pk.WAIT_REG_MEM_MEM_SPACE_SHIFT) & 1
        operation = (control >> pk.WAIT_REG_MEM_OPERATION_SHIFT) & 3
        compare(function, 0, 0)  # rejects a reserved function before blocking
        if memory_space == pk.WAIT_REG_MEM_SPACE_MEMORY:
            if operation != pk.WAIT_REG_MEM_OPERATION_WAIT:
                raise PacketError(f"WAIT_REG_MEM operation {operation} on memory")
            address = _address64(lo, hi)
            self._aligned(address, 4)

            def read() -> int:
                return self.memory.read_u32(address)

        else:
            if operation == pk.WAIT_REG_MEM_OPERATION_WRITE_WAIT:
                self.device.write_register(lo, reference)
            elif operation != pk.WAIT_REG_MEM_OPERATION_WAIT:
                raise PacketError(f"WAIT_REG_MEM operation {operation}")
            polled = hi if operation == pk.WAIT_REG_MEM_OPERATION_WRITE_WAIT else lo

            def read() -> int:
                return self.device.read_register(polled)

        self.wait_until(lambda: compare(function, read() & mask, reference), epoch)

    def _event_write(self, body: list[int]) -> None:
        self._expect(body, 1, 3)
        # CS_PARTIAL_FLUSH and the cache events: every dispatch has already finished, nothing is in flight.

    def _write_data(self, body: list[int]) -> None:
        if len(body) < 4:
            raise PacketError(f"malformed: WRITE_DATA of {len(body)} body dwords writes nothing")
        control, lo, hi, data = body[0], body[1], body[2], body[3:]
        dst_sel = (control >> pk.WRITE_DATA_DST_SEL_SHIFT) & 0xF
        fixed = bool(control & pk.WRITE_DATA_NO_ADDR_INCREMENT)
        if dst_sel == pk.WRITE_DATA_DST_SEL_REGISTER:
            for index, value in enumerate(data):
                self.device.write_register(lo + (0 if fixed else index), value)
            return
        if dst_sel not in (pk.WRITE_DATA_DST_SEL_MEMORY, pk.WRITE_DATA_DST_SEL_TC_L2):
            raise PacketError(f"WRITE_DATA dst_sel {dst_sel} is not supported")
        address = _address64(lo, hi)
        self._aligned(address, 4)
        if fixed:
            for value in data:
                self.memory.write_u32(address, value)
        else:
            self.memory.write(address, struct.pack(f"<{len(data)}I", *data))
