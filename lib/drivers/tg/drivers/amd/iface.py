"""Where the AMD pieces meet: GPU memory, the launch a dispatch hands the shader engines, and the driver interface.

Three parts of the AMD path are written against these definitions and nothing else of each other:

- the shader engines (the RDNA3 emulator, tg.drivers.amd.rdna3) run a `WaveLaunch` over a `GPUMemory`;
- the command processors of the simulated Navi31 (tg.drivers.amd.navi31) read PM4/SDMA packets from a `GPUMemory`
  and turn a DISPATCH_DIRECT into a `WaveLaunch`;
- tg.hcq's AMD device drives any `AMDInterface`: the real KFD (/dev/kfd) or the simulator behind the same surface.

GPU addresses are 64-bit virtual addresses of the GPU's page table. An access to an address the page table does not
map raises `GPUFault`, naming the address; the simulator reports it as hardware does (the queue stops, the driver
sees a memory-fault event).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class GPUFault(RuntimeError):
    """An access by the GPU to an address its page table does not map (or maps without the needed permission)."""

    def __init__(self, address: int, access: str, engine: str = "") -> None:
        where = f" by {engine}" if engine else ""
        super().__init__(f"GPU page fault{where}: {access} at 0x{address:X} is not mapped")
        self.address = address
        self.access = access
        self.engine = engine


class GPUMemory(Protocol):
    """Memory as the GPU sees it: byte access by GPU virtual address. Raises GPUFault on an unmapped address."""

    def read(self, address: int, size: int) -> bytes: ...

    def write(self, address: int, data: bytes) -> None: ...


@dataclass(frozen=True)
class WaveLaunch:
    """What the command processor hands the shader engines for one DISPATCH_DIRECT: the COMPUTE_* registers as the
    PM4 stream left them. The emulator derives the wave layout from these alone, as hardware does (user SGPR count,
    workgroup-id enables and LDS size from rsrc2, wave32 from the dispatch initiator)."""

    program_address: int  # byte address of the first instruction (COMPUTE_PGM_LO/HI << 8)
    rsrc1: int  # COMPUTE_PGM_RSRC1
    rsrc2: int  # COMPUTE_PGM_RSRC2
    rsrc3: int  # COMPUTE_PGM_RSRC3
    user_data: tuple[int, ...]  # COMPUTE_USER_DATA_0.. : the user SGPRs, in order
    grid: tuple[int, int, int]  # workgroups in x, y, z (DISPATCH_DIRECT)
    workgroup: tuple[int, int, int]  # threads per workgroup (COMPUTE_NUM_THREAD_X/Y/Z)
    wave32: bool = True  # COMPUTE_DISPATCH_INITIATOR.CS_W32_EN
    scratch_address: int = 0  # per-dispatch scratch (private segment) base, 0 when the kernel has none
    scratch_bytes_per_lane: int = 0


class ShaderEngines(Protocol):
    """Runs a dispatch to completion (the emulator). Raises GPUFault on a bad access and IllegalInstruction (a
    RuntimeError naming the opcode and encoding) on an instruction it does not know."""

    def run_dispatch(self, memory: GPUMemory, launch: WaveLaunch) -> None: ...


class QueueKind(enum.Enum):
    COMPUTE = "compute"  # PM4
    SDMA = "sdma"


@dataclass(frozen=True)
class GPUAllocation:
    """A range of GPU virtual memory. `cpu_address` is where the CPU sees the same bytes (0: not CPU-visible)."""

    va_addr: int
    size: int
    cpu_address: int = 0
    host: bool = False  # system memory (GTT/userptr) rather than VRAM


class Doorbell(Protocol):
    """A queue's doorbell: writing the new write pointer tells the engine there is work."""

    def write(self, value: int) -> None: ...


@dataclass(frozen=True)
class HardwareQueue:
    kind: QueueKind
    ring: GPUAllocation
    read_ptr: GPUAllocation  # the engine writes back how far it has read (u64, in dwords for PM4, bytes for SDMA)
    write_ptr: GPUAllocation  # the driver writes how far it has written (same unit)
    doorbell: Doorbell
    queue_id: int = 0


class AMDInterface(Protocol):
    """The kernel-driver surface tg.hcq's AMD device needs; KFD on a real machine, the simulator under MOCKKFD."""

    name: str
    gfx_version: tuple[int, int, int]  # (11, 0, 0) for Navi31
    properties: dict[str, int]  # KFD node properties: simd_count, lds_size_in_kb, max_waves_per_simd, ...

    def alloc(
        self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = False
    ) -> GPUAllocation: ...

    def free(self, mem: GPUAllocation) -> None: ...

    def create_queue(
        self, kind: QueueKind, ring: GPUAllocation, read_ptr: GPUAllocation, write_ptr: GPUAllocation
    ) -> HardwareQueue: ...

    def sleep(self, timeout_ms: int) -> None:
        """Wait up to timeout_ms for an interrupt (a signal written with its interrupt bit); raise RuntimeError naming
        the fault (e.g. "MMU fault: 0x... ") if the device reported one."""
        ...

    def recover(self) -> None:
        """After a fault or hang: reset the queues so the device can be used again."""
        ...
