"""The AMD device: RDNA3 kernels run through PM4/SDMA hardware queues over an AMD driver interface.

    DEV=AMD            the kernel driver, /dev/kfd (tg.drivers.amd.kfd.KFDInterface), on a machine with an AMD GPU
    DEV=MOCKKFD+AMD    the same code path on the simulated Navi31 (tg.drivers.amd.kfd.SimKFDInterface), whose
                       shader engines are the RDNA3 emulator: what the tests run
    DEV=MOCKPCI+AMD    the userspace PCI driver (tg.drivers.amd.pci_iface.PCIInterface over AMDev) on the simulated
                       Navi31 board (tg.drivers.amd.sim_pci): boot, page tables, queues through registers and doorbells
    DEV=PCI+AMD        the same driver on a board of this machine's PCI bus: refused with the reason (its register
                       map is the simulator's), or "does not exist" where there is none

The device drives any `AMDInterface` (tg.drivers.amd.iface) the same way: memory from `alloc`, one PM4 compute queue
and one SDMA copy queue from `create_queue`, signals in GPU memory the host reads through the CPU mapping, waits that
sleep in the driver (`sleep`) until an interrupt or a fault. Kernels are HSA code objects (tg.codegen's AMD renderer
and compiler: LLVM IR for amdgcn-amd-amdhsa gfx1100, wave32), loaded by tg.drivers.amd.code_object; a launch programs
the COMPUTE_* registers from the kernel descriptor and passes the kernel-argument pointer in user SGPRs.

Kernel ABI: the kernarg segment holds the buffer arguments as 8-byte global pointers, then the int arguments as int32
(CLikeArgsState); `global_size` is in workgroups, `local_size` in threads (the renderer's ProgramSource.local_size).
Timestamps count the GPU clock, 100 ticks per microsecond.

After a fault (an access to an unmapped address, an illegal instruction) or a hang (a wait that made no progress for
HCQDEV_WAIT_TIMEOUT_MS), `synchronize` raises the driver's report once, resets the queues (`AMDInterface.recover`)
and the device can be used again.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import struct
import weakref
from typing import Any

from tg.drivers.amd.code_object import build_program
from tg.drivers.amd.iface import GPUAllocation
from tg.hcq.allocator import BufferSpec
from tg.hcq.commands import ExecCommand
from tg.hcq.compiled import HCQCompiled
from tg.hcq.device import DeviceSpec
from tg.hcq.devices import amd_pm4 as pm4
from tg.hcq.devices.amd_memory import (
    AMDAllocator,
    AMDDeviceError,
    AMDSignalPool,
)
from tg.hcq.devices.amd_queues import AMDComputeQueue, AMDCopyQueue, EncodeCache, PM4Ring, SDMARing
from tg.hcq.memory import HCQBuffer
from tg.hcq.program import HCQProgram
from tg.hcq.signal import HCQSignal
from tg.hcq.symbolic import concrete

KFD_PATH = "/dev/kfd"
SHARED_MEMORY_BYTES = 64 << 10  # LDS per workgroup on gfx11
SCRATCH_DESCRIPTOR_WORD3 = 0x20C14000  # the buffer resource word the driver gives the private segment
KERNARGS_ALIGNMENT = 16
HSA_DISPATCH_PACKET_SIZE = 64
NO_LRU = BufferSpec(nolru=True)


# ------------------------------------------------------------------------------------------------------ interfaces


def rdna3_emulator() -> Any:
    """The RDNA3 emulator (tg.drivers.amd.rdna3) as the simulated GPU's shader engines; None where this checkout has
    none (the simulator then picks its default)."""
    try:
        from tg.drivers.amd.rdna3 import RDNA3Emulator
    except ImportError:
        return None
    return RDNA3Emulator()


def open_interface(spec: DeviceSpec) -> Any:
    """The driver interface a device string asks for (`KFD` when it names none)."""
    iface = spec.iface or "KFD"
    if iface in ("PCI", "MOCKPCI"):
        pci = importlib.import_module("tg.drivers.amd.pci_iface")
        if iface == "MOCKPCI":  # every index is a board of the simulated bus, its shader engines the RDNA3 emulator
            return pci.open_mock_pci(spec.index, rdna3_emulator())
        return pci.open_pci(spec.index)
    kfd = importlib.import_module("tg.drivers.amd.kfd")
    if iface == "MOCKKFD":  # every index is a simulated GPU of its own, its shader engines the RDNA3 emulator
        return kfd.SimKFDInterface(rdna3_emulator())
    if not os.path.exists(KFD_PATH):
        raise RuntimeError(
            f"AMD: {KFD_PATH} does not exist: this machine has no AMD GPU kernel driver (amdgpu with KFD); "
            "DEV=MOCKKFD+AMD runs the same driver on the simulated Navi31"
        )
    return kfd.KFDInterface(spec.index)


# ------------------------------------------------------------------------------------------------------ programs


class AMDProgram(HCQProgram):
    """A kernel of an HSA code object, its image copied into GPU memory (relocated for its address)."""

    def __init__(self, dev: AMDDevice, name: str, lib: bytes) -> None:
        data = build_program(lib, name, gfx_version=dev.gfx_version, lds_size_in_kb=dev.lds_size_in_kb)
        super().__init__(dev, name, kernargs_alloc_size=_round_up(data.kernargs_alloc_size, KERNARGS_ALIGNMENT))
        self.lib = lib
        self.data = data
        self.image_memory: HCQBuffer = dev.allocator.alloc(max(len(data.image), 1), NO_LRU)
        image = data.code_object.image_at(self.image_memory.va_addr)
        self.image_memory.cpu_view()[: len(image)] = image
        self.program_address = self.image_memory.va_addr + data.entry_point_offset
        # the image goes back to the allocator with the program (after the device finished what may still run it)
        release = weakref.finalize(self, dev.allocator.free, self.image_memory, self.image_memory.size, NO_LRU)
        release.atexit = False

    def dispatch(self, command: ExecCommand) -> pm4.Dispatch:
        """The register values of one launch (ExecCommand with every value resolved)."""
        gx, gy, gz = (concrete(s) for s in command.global_size)
        lx, ly, lz = (concrete(s) for s in command.local_size)
        global_size, local_size = (gx, gy, gz), (lx, ly, lz)
        args_addr = concrete(command.args_addr)
        scratch_base, tmpring = self.dev.scratch_for(self.data.private_segment_size)
        user_data = self._user_sgprs(args_addr, scratch_base, global_size, local_size)
        return pm4.Dispatch(
            program_address=self.program_address,
            rsrc1=self.data.rsrc1,
            rsrc2=self.data.rsrc2,
            rsrc3=self.data.rsrc3,
            user_data=user_data,
            global_size=global_size,
            local_size=local_size,
            wave32=self.data.wave32,
            tmpring_size=tmpring,
            scratch_base=scratch_base,
        )

    def _user_sgprs(
        self, args_addr: int, scratch_base: int, global_size: tuple[int, ...], local_size: tuple[int, ...]
    ) -> tuple[int, ...]:
        """The user SGPRs the kernel descriptor enables, in the HSA order: private segment buffer descriptor,
        dispatch packet pointer, queue pointer, kernarg segment pointer, dispatch id, flat scratch init, private
        segment size."""
        desc = self.data.descriptor
        sgprs: list[int] = []
        if desc.enable_sgpr_private_segment_buffer:
            sgprs += [pm4.lo32(scratch_base), pm4.hi32(scratch_base) | (1 << 31), pm4.U32, SCRATCH_DESCRIPTOR_WORD3]
        if desc.enable_sgpr_dispatch_ptr:
            packet = args_addr + _round_up(self.data.kernargs_segment_size, KERNARGS_ALIGNMENT)
            self._write_dispatch_packet(packet, args_addr, global_size, local_size)
            sgprs += [pm4.lo32(packet), pm4.hi32(packet)]
        if desc.enable_sgpr_queue_ptr:
            queue = self.dev.zero_page.va_addr
            sgprs += [pm4.lo32(queue), pm4.hi32(queue)]
        if desc.enable_sgpr_kernarg_segment_ptr:
            sgprs += [pm4.lo32(args_addr), pm4.hi32(args_addr)]
        if desc.enable_sgpr_dispatch_id:
            sgprs += [0, 0]
        if desc.enable_sgpr_flat_scratch_init:
            sgprs += [pm4.lo32(scratch_base), pm4.hi32(scratch_base)]
        if desc.enable_sgpr_private_segment_size:
            sgprs += [self.data.private_segment_size]
        count = self.data.user_sgpr_count
        if len(sgprs) > count:
            raise RuntimeError(
                f"{self.name}: the kernel descriptor enables {len(sgprs)} user SGPRs, "
                f"but RSRC2.USER_SGPR_COUNT is {count}"
            )
        # LLVM pads the count on gfx11 wave32 (user + system SGPRs must be 16, its UserSGPRInit16Bug workaround): the
        # padding SGPRs are unused, and the workgroup ids follow them
        return tuple(sgprs) + (0,) * (count - len(sgprs))

    def _write_dispatch_packet(
        self, packet: int, args_addr: int, global_size: tuple[int, ...], local_size: tuple[int, ...]
    ) -> None:
        """An hsa_kernel_dispatch_packet_t after the kernel arguments, for kernels that read it (dispatch_ptr): written
        through the CPU mapping, which KFD (and the simulator) place at the GPU address. The kernel-argument slice has
        room for it (kernargs_alloc_size counts it)."""
        grid = [g * s for g, s in zip(global_size, local_size, strict=True)]
        dims = 3 if grid[2] > 1 else 2 if grid[1] > 1 else 1
        kernel_object = self.image_memory.va_addr + self.data.code_object.kernel(self.data.name).descriptor_offset
        fields = struct.pack(
            "<6H5I4Q", 0, dims, *local_size, 0, *grid, self.data.private_segment_size, self.data.group_segment_size,
            kernel_object, args_addr, 0, 0,
        )  # fmt: skip
        ctypes.memmove(packet, fields, HSA_DISPATCH_PACKET_SIZE)


# ------------------------------------------------------------------------------------------------------ the device


class AMDDevice(HCQCompiled):
    """`Device["AMD"]` (KFD), `Device["MOCKKFD+AMD"]` (the simulated Navi31); `:N` picks the N-th GPU."""

    def __init__(self, spec: DeviceSpec) -> None:
        self.iface = open_interface(spec)
        self._signal_pool: AMDSignalPool | None = None
        self._peer_mapped: dict[int, GPUAllocation] = {}  # other devices' allocations mapped into this GPU
        major, minor, stepping = self.iface.gfx_version
        self.gfx_version = (major, minor, stepping)
        props = self.iface.properties
        self.lds_size_in_kb = int(props.get("lds_size_in_kb", SHARED_MEMORY_BYTES >> 10))
        self.max_copy_size = 0x40000000 if self.gfx_version[0] >= 10 else 0x400000  # SDMA IP >= 5 on gfx10+
        self.encode_cache = EncodeCache()
        self._scratch: tuple[HCQBuffer, int] | None = None
        allocator = AMDAllocator()
        allocator.device = self
        self.compute_ring = PM4Ring(self)
        self.sdma_ring = SDMARing(self)
        compiler, renderer = _amd_codegen(spec.arch or "gfx1100")
        super().__init__(spec, allocator, compiler, AMDProgram, AMDComputeQueue, AMDCopyQueue)
        self.renderer = renderer
        self.zero_page = allocator.alloc(0x1000, BufferSpec(nolru=True))

    # --- signals ---

    def new_signal(self, value: int = 0, **kwargs: Any) -> HCQSignal:
        """A signal in this device's GPU memory (one pool per device: another GPU whose queue names the signal maps
        its page when it first does, see map_peer)."""
        pool = self._signal_pool
        if pool is None:
            pool = self._signal_pool = AMDSignalPool(self)
        return pool.new_signal(value, owner=self, **kwargs)

    # --- memory of other GPUs ---

    def map_peer(self, buf: HCQBuffer) -> None:
        """Make another device's allocation (a signal page, a copy's destination) visible to this GPU at its address,
        once: the driver interface's optional `map` (KFD: MAP_MEMORY_TO_GPU; the simulator: a shared mapping, its
        multi-GPU fabric). Without it the access faults, which the device then reports."""
        allocation = buf.meta
        if not isinstance(allocation, GPUAllocation) or allocation.va_addr in self._peer_mapped:
            return
        map_into = getattr(self.iface, "map", None)
        if map_into is not None:
            map_into(allocation)
            self._peer_mapped[allocation.va_addr] = allocation

    # --- programs ---

    def scratch_for(self, private_segment_size: int) -> tuple[int, int]:
        """(scratch base address, COMPUTE_TMPRING_SIZE) for a kernel with `private_segment_size` bytes per lane;
        (0, 0) without one. The scratch buffer only grows."""
        if not private_segment_size:
            return 0, 0
        per_wave = _round_up(private_segment_size * 64, 256)  # sized for wave64 lanes, as the hardware driver does
        props = self.iface.properties
        waves = min(0xFFF, int(props.get("simd_count", 96)) * int(props.get("max_waves_per_simd", 16)))
        if self._scratch is None or self._scratch[1] < per_wave:
            self._scratch = (self.allocator.alloc(waves * per_wave, BufferSpec(nolru=True)), per_wave)
        tmpring = waves | ((per_wave // 256) << 12)
        return concrete(self._scratch[0].va_addr), tmpring

    # --- timeline, errors, recovery ---

    def is_busy(self) -> bool:
        """Whether an engine is executing a packet (a long dispatch on the emulator) rather than blocked in a wait:
        while it is, a signal wait that sees no progress is not a hang (HCQSignal.wait asks the owner). The driver
        interface says when it can (`busy()`); the simulated Navi31 is asked through its queue engines, which tell
        whether they are blocked in a wait; the real KFD cannot tell, so there every stall counts."""
        busy = getattr(self.iface, "busy", None)
        if busy is not None:
            return bool(busy())
        engines = getattr(getattr(self.iface, "device", None), "queues", ())
        return any(not engine.idle and not getattr(engine, "waiting", True) for engine in engines)

    def synchronize(self, timeout: int | None = None) -> None:
        """Wait for every submission; a fault or a hang is raised once (with the driver's report), after which the
        queues are reset and the device works again."""
        try:
            super().synchronize(timeout)
        except AMDDeviceError:
            self.error_state = None  # (reported and recovered where the wait saw it)
            raise
        except RuntimeError as error:
            if self.error_state is not error:
                raise
            self.recover()
            raise AMDDeviceError(f"{self.device}: hang detected ({error}); the queues were reset") from error

    def fault_seen(self, error: RuntimeError) -> AMDDeviceError:
        """The driver reported a fault while a host thread waited: reset the queues, and the error to raise."""
        self.recover()
        return AMDDeviceError(f"{self.device}: {error}; the queues were reset")

    def recover(self) -> None:
        """Reset the queues after a fault or a hang: the driver drops what they held, the rings restart empty, and
        the timeline is marked done so new work does not wait for the dropped submissions."""
        self.iface.recover()
        self.compute_ring.reset_state()
        self.sdma_ring.reset_state()
        self.timeline_signal.value = self.timeline_value - 1
        self.error_state = None

    def _wrap_timeline_signal(self) -> None:
        super()._wrap_timeline_signal()
        marks = self.allocator._staging_marks
        for i in range(len(marks)):
            marks[i] = 0
        self.allocator.reuse_after.clear()  # (marks of the old timeline; the device is idle here)

    def on_device_hang(self) -> None:
        """Ask the driver for what went wrong (raises RuntimeError naming the fault, e.g. "MMU fault: 0x...")."""
        self.iface.sleep(0)
        raise RuntimeError(f"{self.device}: device hang detected")

    def device_props(self) -> dict[str, Any]:
        return {"gfx_version": self.gfx_version, **self.iface.properties}


def _round_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _amd_codegen(arch: str) -> tuple[Any, Any]:
    """The AMD compiler and renderer from tg.codegen (None, None where this checkout does not have them yet: the
    device still runs code objects built elsewhere)."""
    try:
        from tg.codegen.render.registry import RENDERERS, make_renderer
    except ImportError:  # pragma: no cover
        return None, None
    if "AMD" not in RENDERERS:
        return None, None
    renderer = make_renderer(
        "AMD", arch, machine={"family": "AMD", "has_local": True, "shared_max": SHARED_MEMORY_BYTES}
    )
    compiler_module = importlib.import_module("tg.codegen.compiler.amd")
    return compiler_module.AMDCompiler(arch), renderer


__all__ = ["AMDDevice", "AMDProgram", "open_interface", "rdna3_emulator"]
