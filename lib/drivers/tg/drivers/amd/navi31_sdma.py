"""The SDMA engine of the simulated Navi31: executes SDMA 6.0 packets from its ring.

The ring's pointers count bytes. Unlike the CP, SDMA needs every packet contiguous in the ring: a packet that would
run past the ring's end is a fault, which is why the driver zero-fills the tail and restarts at offset 0 (a zero
dword is a one-dword NOP). Packets: NOP, COPY LINEAR (count = bytes - 1), WRITE LINEAR, FENCE (32-bit store),
TRAP (interrupt), POLL_REGMEM (memory or register, any compare, masked; blocks), TIMESTAMP GET / GET_GLOBAL.
"""

from __future__ import annotations

import struct

from tg.drivers.amd import packets as pk
from tg.drivers.amd.iface import QueueKind
from tg.drivers.amd.navi31_engine import PacketError, QueueEngine, compare


def _address64(lo: int, hi: int) -> int:
    return (hi & 0xFFFFFFFF) << 32 | (lo & 0xFFFFFFFF)


class SDMAEngine(QueueEngine):
    unit = 1
    kind = QueueKind.SDMA

    def _read(self, offset: int, count: int) -> list[int]:
        return list(struct.unpack(f"<{count}I", self.memory.read(self.ring.va_addr + offset, count * 4)))

    _packet = (0, 0)

    def describe_packet(self) -> str:
        header, offset = self._packet
        op = header & pk.SDMA_HEADER_OP_MASK
        name = pk.SDMA(op).name if op in pk.SDMA._value2member_map_ else f"op {op}"
        return f"SDMA {name} (header 0x{header:08X}) at ring byte {offset}"

    def execute_next(self, position: int, epoch: int) -> int:
        offset = position % self.ring.size
        if offset % 4:
            raise PacketError(f"the read pointer {position} is not dword aligned")
        header = self._read(offset, 1)[0]
        op, sub_op = header & pk.SDMA_HEADER_OP_MASK, (header >> pk.SDMA_HEADER_SUB_OP_SHIFT) & 0xFF
        self._packet = (header, offset)  # described only if it faults
        length = self._length(op, sub_op, header, offset)
        if offset + length * 4 > self.ring.size:
            raise PacketError(
                f"a {length}-dword packet at byte {offset} straddles the ring end ({self.ring.size} bytes): SDMA "
                "packets must be contiguous (the driver zero-fills the tail and wraps)"
            )
        if position + length * 4 > self.target:
            raise PacketError(f"the {length}-dword packet runs past the write pointer {self.target}")
        body = self._read(offset + 4, length - 1) if length > 1 else []
        self._execute(op, sub_op, header, body, epoch)
        return position + length * 4

    def _length(self, op: int, sub_op: int, header: int, offset: int) -> int:
        """Packet length in dwords, header included."""
        if op == pk.SDMA.NOP:
            return 1 + ((header >> pk.SDMA_NOP_COUNT_SHIFT) & pk.SDMA_NOP_COUNT_MASK)
        if op == pk.SDMA.COPY and sub_op == pk.SDMA_SUBOP_COPY_LINEAR:
            return pk.SDMA_COPY_LINEAR_DWORDS
        if op == pk.SDMA.WRITE and sub_op == pk.SDMA_SUBOP_WRITE_LINEAR:
            if offset + 16 > self.ring.size:
                return 4  # the count itself lies past the end: reported as straddling
            count = self._read(offset + 12, 1)[0] & pk.SDMA_WRITE_COUNT_MASK
            return 4 + count + 1
        if op == pk.SDMA.FENCE:
            return pk.SDMA_FENCE_DWORDS
        if op == pk.SDMA.TRAP:
            return pk.SDMA_TRAP_DWORDS
        if op == pk.SDMA.POLL_REGMEM:
            return pk.SDMA_POLL_REGMEM_DWORDS
        if op == pk.SDMA.TIMESTAMP and sub_op in (pk.SDMA_SUBOP_TIMESTAMP_GET, pk.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL):
            return pk.SDMA_TIMESTAMP_DWORDS
        raise PacketError(f"unknown SDMA packet: op {op}, sub_op {sub_op}")

    def _execute(self, op: int, sub_op: int, header: int, body: list[int], epoch: int) -> None:
        if op == pk.SDMA.NOP:
            return
        if op == pk.SDMA.COPY:
            self._copy(body)
        elif op == pk.SDMA.WRITE:
            address = _address64(body[0], body[1])
            self._aligned(address)
            self.memory.write(address, struct.pack(f"<{len(body) - 3}I", *body[3:]))
        elif op == pk.SDMA.FENCE:
            address = _address64(body[0], body[1])
            self._aligned(address)
            self.memory.write_u32(address, body[2])
        elif op == pk.SDMA.TRAP:
            self.device.interrupts.post(body[0] & pk.SDMA_TRAP_INT_CONTEXT_MASK)
        elif op == pk.SDMA.POLL_REGMEM:
            self._poll_regmem(header, body, epoch)
        elif op == pk.SDMA.TIMESTAMP:
            address = _address64(body[0], body[1])
            if address % 8:
                raise PacketError(f"TIMESTAMP address 0x{address:X} is not 8-byte aligned")
            self.memory.write_u64(address, self.device.clock.ticks())

    @staticmethod
    def _aligned(address: int) -> None:
        if address % 4:
            raise PacketError(f"address 0x{address:X} is not dword aligned")

    def _copy(self, body: list[int]) -> None:
        size = (body[0] & pk.SDMA_COPY_COUNT_MASK) + 1
        source, destination = _address64(body[2], body[3]), _address64(body[4], body[5])
        self.memory.copy(destination, source, size)

    def _poll_regmem(self, header: int, body: list[int], epoch: int) -> None:
        function = (header >> pk.SDMA_POLL_REGMEM_FUNC_SHIFT) & pk.SDMA_POLL_REGMEM_FUNC_MASK
        compare(function, 0, 0)  # rejects a reserved function before blocking
        lo, hi, reference, mask = body[0:4]
        if header & pk.SDMA_POLL_REGMEM_MEM_POLL:
            address = _address64(lo, hi)
            self._aligned(address)

            def read() -> int:
                return self.memory.read_u32(address)

        else:  # register space, byte addresses; with HDP_FLUSH the request register (dw2) is written first
            if header & pk.SDMA_POLL_REGMEM_HDP_FLUSH:
                self.device.write_register(hi >> 2, reference)
            polled = lo >> 2

            def read() -> int:
                return self.device.read_register(polled)

        # The retry count is not modelled: the engine polls until the condition holds (a hang is the driver's
        # timeout to report), which is what 0xFFF (the driver's setting) asks for.
        self.wait_until(lambda: compare(function, read() & mask, reference), epoch)
