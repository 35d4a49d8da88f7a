"""A flat test GPU memory and a one-call kernel runner for the emulator tests: compile LLVM IR with llvmlite, load
the code object, lay out kernargs as the kernel ABI says (8-byte pointers, then 4-byte ints), build the WaveLaunch
from the kernel descriptor as a command processor would, and run it."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from tg.drivers.amd.code_object import build_program
from tg.drivers.amd.iface import GPUFault, WaveLaunch
from tg.drivers.amd.rdna3 import RDNA3Emulator

from .llvm_kernels import compile_ir


@dataclass
class FlatMemory:
    """GPU memory as a few mapped ranges; anything else faults."""

    ranges: dict[int, bytearray] = field(default_factory=dict)
    next_address: int = 0x1_0000_0000

    def alloc(self, size: int, data: bytes = b"") -> int:
        address = self.next_address
        self.ranges[address] = bytearray(data.ljust(size, b"\0"))
        self.next_address += (max(size, 1) + 0xFFFF) & ~0xFFFF
        self.next_address += 0x10000  # an unmapped guard page between allocations
        return address

    def _find(self, address: int, size: int, access: str) -> tuple[bytearray, int]:
        for base, buf in self.ranges.items():
            if base <= address and address + size <= base + len(buf):
                return buf, address - base
        raise GPUFault(address, access, "emulator")

    def read(self, address: int, size: int) -> bytes:
        buf, off = self._find(address, size, "read")
        return bytes(buf[off : off + size])

    def write(self, address: int, data: bytes) -> None:
        buf, off = self._find(address, len(data), "write")
        buf[off : off + len(data)] = data


@dataclass
class Run:
    memory: FlatMemory
    addresses: list[int]
    code: bytes
    emulator: RDNA3Emulator

    def read(self, index: int, like: np.ndarray) -> np.ndarray:
        raw = self.memory.read(self.addresses[index], like.nbytes)
        return np.frombuffer(raw, dtype=like.dtype).reshape(like.shape).copy()


def user_sgprs(descriptor_properties: int, kernarg_address: int) -> tuple[int, ...]:
    """COMPUTE_USER_DATA in the order the enabled user SGPRs come (private segment buffer, dispatch ptr, queue ptr,
    kernarg ptr, ...); only the kernarg pointer has a value here."""
    sgprs: list[int] = []
    if descriptor_properties & 1:
        sgprs += [0, 0, 0, 0]
    if descriptor_properties & 2:
        sgprs += [0, 0]
    if descriptor_properties & 4:
        sgprs += [0, 0]
    if descriptor_properties & 8:
        sgprs += [kernarg_address & 0xFFFFFFFF, kernarg_address >> 32]
    return tuple(sgprs)


def run_kernel(
    ir: str,
    buffers: list[np.ndarray],
    ints: tuple[int, ...] = (),
    grid: tuple[int, int, int] = (1, 1, 1),
    local: tuple[int, int, int] = (32, 1, 1),
    name: str | None = None,
    emulator: RDNA3Emulator | None = None,
    code: bytes | None = None,
) -> Run:
    code = compile_ir(ir) if code is None else code
    program = build_program(code, name)
    memory = FlatMemory()
    image_base = memory.alloc(len(program.image), program.code_object.image_at(0x2_0000_0000))
    assert image_base == 0x1_0000_0000
    addresses = [memory.alloc(b.nbytes, b.tobytes()) for b in buffers]
    kernargs = b"".join(struct.pack("<Q", a) for a in addresses) + b"".join(struct.pack("<i", i) for i in ints)
    kernarg_address = memory.alloc(max(program.kernargs_alloc_size, len(kernargs)), kernargs)
    launch = WaveLaunch(
        program_address=image_base + program.entry_point_offset,
        rsrc1=program.rsrc1,
        rsrc2=program.rsrc2,
        rsrc3=program.rsrc3,
        user_data=user_sgprs(program.descriptor.kernel_code_properties, kernarg_address),
        grid=grid,
        workgroup=local,
    )
    emulator = emulator or RDNA3Emulator()
    emulator.run_dispatch(memory, launch)
    return Run(memory, addresses, code, emulator)
