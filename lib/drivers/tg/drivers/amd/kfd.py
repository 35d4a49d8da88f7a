"""The AMDInterface (tg.drivers.amd.iface) twice: `KFDInterface` over a real /dev/kfd, and `SimKFDInterface`, the
same surface over the simulated Navi31 (what `DEV=MOCKKFD+AMD` opens).

KFDInterface follows the KFD's user-mode protocol: the GPU list and its properties come from the topology in sysfs
(nodes with a non-zero gpu_id), the process acquires a GPU VM through the DRM render node, memory is allocated at a
GPU virtual address that is also its CPU address (the range is reserved with mmap first, then mapped from the
render node for CPU access), queues are created with a ring, read/write pointers, an EOP buffer and a CWSR area, and
their doorbells are a page of the KFD file mapped into the process. Faults arrive as KFD events: a memory exception
event carries the faulting address. It needs the amdgpu driver and a GPU; nothing of it runs in CI here.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tg.drivers.amd.iface import GPUAllocation, HardwareQueue, QueueKind, ShaderEngines
from tg.drivers.amd.navi31 import GFX_VERSION, NAVI31_PROPERTIES, Navi31
from tg.drivers.amd.navi31_memory import DEFAULT_VRAM_SIZE, PAGE_SIZE, round_up

KFD_PATH = "/dev/kfd"
TOPOLOGY_NODES = "/sys/devices/virtual/kfd/kfd/topology/nodes"
DOORBELL_PAGE_SIZE = 0x2000
QUEUE_PRIORITY = 7  # AMD_KFD_QUEUE_PRIORITY's default
EOP_BUFFER_SIZE = 0x1000
EVENT_PAGE_SIZE = 0x8000
# The simulated KFD's fault injection (spec hcq §1.26): while set, `sleep` reports an MMU fault at this address.
FAULT_INJECTION_VARIABLE = "MOCKGPU_EMU_FAULTADDR"
# A seed here makes the simulated engines stall at random points (seeded), to shake out ordering bugs in drivers.
CHAOS_VARIABLE = "MOCKGPU_CHAOS_SEED"


def gfx_version_of(target_version: int) -> tuple[int, int, int]:
    """KFD's gfx_target_version (e.g. 110000, 90402) as (major, minor, stepping)."""
    return target_version // 10000, (target_version // 100) % 100, target_version % 100


def parse_properties(text: str) -> dict[str, int]:
    """A topology node's `properties` file: one `name value` pair a line."""
    properties: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            properties[parts[0]] = int(parts[1])
    return properties


@dataclass(frozen=True)
class KFDNode:
    node_id: int
    gpu_id: int
    name: str
    properties: dict[str, int] = field(default_factory=dict)


def read_topology(root: str | Path = TOPOLOGY_NODES) -> list[KFDNode]:
    """The GPU nodes of the KFD topology under `root` (CPU nodes have gpu_id 0 and are left out), by node number."""
    nodes: list[KFDNode] = []
    base = Path(root)
    if not base.is_dir():
        return nodes
    for entry in sorted((p for p in base.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            gpu_id = int((entry / "gpu_id").read_text().strip() or 0)
        except (OSError, ValueError):
            continue
        if gpu_id == 0:
            continue
        name_file = entry / "name"
        name = name_file.read_text().strip() if name_file.exists() else ""
        nodes.append(KFDNode(int(entry.name), gpu_id, name, parse_properties((entry / "properties").read_text())))
    return nodes


def cwsr_sizes(properties: dict[str, int], gfx_version: tuple[int, int, int]) -> tuple[int, int, int]:
    """(ctx_save_restore_size, ctl_stack_size, debug_memory_size) per XCC, as the KFD computes them for the queue's
    context save/restore area: per-CU VGPR, SGPR, LDS and HWREG save space plus the control stack of every wave."""
    cus = properties["simd_count"] // properties["simd_per_cu"] // max(properties.get("num_xcc", 1), 1)
    waves = cus * properties["max_waves_per_simd"] * properties["simd_per_cu"]
    vgpr_size = 0x60000 if gfx_version[0] >= 11 else 0x40000
    wg_data_size = round_up((vgpr_size + 0x4000 + 0x10000 + 0x1000) * cus, PAGE_SIZE)
    ctl_stack_size = round_up((12 if gfx_version[0] >= 10 else 8) * waves + 8 + 40, PAGE_SIZE)
    debug_memory_size = round_up(waves * 32, 64)
    return ctl_stack_size + wg_data_size, ctl_stack_size, debug_memory_size


class KFDDoorbell:
    """A doorbell in the mapped doorbell page: a 64-bit store of the new write pointer."""

    def __init__(self, address: int) -> None:
        self._slot = ctypes.c_uint64.from_address(address)

    def write(self, value: int) -> None:
        self._slot.value = value


class KFDInterface:
    """The AMD driver surface over a real /dev/kfd (one GPU of the topology)."""

    def __init__(self, device_index: int = 0, kfd_path: str = KFD_PATH, topology: str | Path = TOPOLOGY_NODES) -> None:
        if not os.path.exists(kfd_path):
            raise RuntimeError(f"{kfd_path} does not exist: this machine has no AMD GPU with the amdgpu/KFD driver")
        nodes = read_topology(topology)
        if device_index >= len(nodes):
            raise RuntimeError(f"AMD:{device_index} does not exist ({len(nodes)} devices available)")
        from tg.drivers.autogen import kfd_ioctl as kfd

        self._kfd = kfd
        self.node = nodes[device_index]
        self.name = self.node.name
        self.properties = dict(self.node.properties)
        self.gfx_version = gfx_version_of(self.properties["gfx_target_version"])
        self.gpu_id = self.node.gpu_id
        self.fd = os.open(kfd_path, os.O_RDWR | os.O_CLOEXEC)
        self.drm_fd = os.open(f"/dev/dri/renderD{self.properties['drm_render_minor']}", os.O_RDWR | os.O_CLOEXEC)
        kfd.AMDKFD_IOC_ACQUIRE_VM(self.fd, drm_fd=self.drm_fd, gpu_id=self.gpu_id)
        self._handles: dict[int, int] = {}
        self._mapped: dict[int, int] = {}  # memory of other devices or of the CPU mapped to this GPU
        _KFD_INTERFACES.add(self)
        self._doorbell_page = 0
        self._queues: list[int] = []
        self.event_page = self.alloc(EVENT_PAGE_SIZE, host=False, uncached=True, cpu_access=True)
        kfd.AMDKFD_IOC_CREATE_EVENT(self.fd, event_page_offset=self._handles[self.event_page.va_addr])
        self.queue_event = kfd.AMDKFD_IOC_CREATE_EVENT(self.fd, event_type=kfd.KFD_IOC_EVENT_SIGNAL, auto_reset=1)
        self.memory_event = kfd.AMDKFD_IOC_CREATE_EVENT(self.fd, event_type=kfd.KFD_IOC_EVENT_MEMORY)
        self.hw_event = kfd.AMDKFD_IOC_CREATE_EVENT(self.fd, event_type=kfd.KFD_IOC_EVENT_HW_EXCEPTION)

    # -- memory ------------------------------------------------------------------------------------------------
    def alloc_flags(self, host: bool, uncached: bool, cpu_access: bool) -> int:
        return alloc_flags(self._kfd, host, uncached, cpu_access)

    def alloc(
        self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = False
    ) -> GPUAllocation:
        from tg.drivers.autogen import libc

        kfd = self._kfd
        requested, size = size, round_up(size, PAGE_SIZE)
        flags = self.alloc_flags(host, uncached, cpu_access)
        userptr = bool(flags & kfd.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR)
        protection = libc.PROT_READ | libc.PROT_WRITE if userptr else libc.PROT_NONE
        mapping = libc.MAP_SHARED | libc.MAP_ANONYMOUS if userptr else libc.MAP_PRIVATE | libc.MAP_ANONYMOUS
        address = libc.mmap(None, size, protection, mapping | libc.MAP_NORESERVE, -1, 0)
        if address in (None, libc.MAP_FAILED.value):
            raise MemoryError(f"cannot reserve {size:#x} bytes of address space")
        try:
            memory = kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU(
                self.fd,
                va_addr=address,
                size=size,
                gpu_id=self.gpu_id,
                flags=flags,
                mmap_offset=address if userptr else 0,
            )
        except OSError as error:
            libc.munmap(address, size)
            if error.errno == errno.EINVAL and cpu_access and not host:
                raise MemoryError(
                    f"cannot allocate {size:#x} bytes of CPU-visible VRAM (is resizable BAR on?)"
                ) from error
            if error.errno == errno.ENOMEM:
                raise MemoryError(f"cannot allocate {size:#x} bytes of {'host' if host else 'VRAM'}") from error
            raise
        visible = host or cpu_access
        if visible and not userptr:
            fixed = libc.mmap(
                address,
                size,
                libc.PROT_READ | libc.PROT_WRITE,
                libc.MAP_SHARED | libc.MAP_FIXED,
                self.drm_fd,
                memory.mmap_offset,
            )
            if fixed != address:
                raise OSError(f"mmap of the allocation at 0x{address:X} failed")
        ids = (ctypes.c_uint32 * 1)(self.gpu_id)
        mapped = kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU(
            self.fd, handle=memory.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1
        )
        if mapped.n_success != 1:
            raise RuntimeError(f"mapping 0x{address:X} to the GPU failed")
        self._handles[address] = memory.handle
        return GPUAllocation(address, requested, address if visible else 0, host)

    def free(self, mem: GPUAllocation) -> None:
        from tg.drivers.autogen import libc

        kfd = self._kfd
        handle = self._handles.pop(mem.va_addr)
        ids = (ctypes.c_uint32 * 1)(self.gpu_id)
        kfd.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU(
            self.fd, handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1
        )
        kfd.AMDKFD_IOC_FREE_MEMORY_OF_GPU(self.fd, handle=handle)
        libc.munmap(mem.va_addr, round_up(mem.size, PAGE_SIZE))

    # -- queues ------------------------------------------------------------------------------------------------
    def create_queue(
        self, kind: QueueKind, ring: GPUAllocation, read_ptr: GPUAllocation, write_ptr: GPUAllocation
    ) -> HardwareQueue:
        kfd = self._kfd
        extra: dict[str, int] = {}
        if kind == QueueKind.COMPUTE:
            save_size, ctl_stack_size, debug_size = cwsr_sizes(self.properties, self.gfx_version)
            eop = self.alloc(EOP_BUFFER_SIZE)
            cwsr = self.alloc(save_size + debug_size, cpu_access=True)
            extra = {
                "eop_buffer_address": eop.va_addr,
                "eop_buffer_size": eop.size,
                "ctx_save_restore_address": cwsr.va_addr,
                "ctx_save_restore_size": save_size,
                "ctl_stack_size": ctl_stack_size,
            }
        queue = create_queue_args(self.gpu_id, kind, ring, read_ptr, write_ptr, **extra)
        fcntl.ioctl(self.fd, int(kfd.AMDKFD_IOC_CREATE_QUEUE), queue, True)
        if not self._doorbell_page:
            from tg.drivers.autogen import libc

            page = libc.mmap(
                None, DOORBELL_PAGE_SIZE, libc.PROT_READ | libc.PROT_WRITE, libc.MAP_SHARED, self.fd,
                queue.doorbell_offset & ~(DOORBELL_PAGE_SIZE - 1),
            )  # fmt: skip
            if page in (None, libc.MAP_FAILED.value):
                raise OSError("cannot map the KFD doorbell page")
            self._doorbell_page = page
        doorbell = KFDDoorbell(self._doorbell_page + (queue.doorbell_offset & (DOORBELL_PAGE_SIZE - 1)))
        self._queues.append(queue.queue_id)
        return HardwareQueue(kind, ring, read_ptr, write_ptr, doorbell, queue.queue_id)

    # -- events ------------------------------------------------------------------------------------------------
    def sleep(self, timeout_ms: int) -> None:
        kfd = self._kfd
        events = (kfd.struct_kfd_event_data * 3)()
        for slot, event in zip(events, (self.queue_event, self.memory_event, self.hw_event), strict=True):
            slot.event_id = event.event_id
        kfd.AMDKFD_IOC_WAIT_EVENTS(
            self.fd, events_ptr=ctypes.addressof(events), num_events=3, wait_for_all=0, timeout=max(timeout_ms, 0)
        )
        self._raise_fault(events[1], events[2])

    def _raise_fault(self, memory: object, hardware: object) -> None:
        report = fault_report(memory, hardware)
        if report:
            raise RuntimeError(report)

    def recover(self) -> None:
        raise RuntimeError("the KFD cannot reset this process's queues; restart the process after a GPU fault")

    def map(self, mem: GPUAllocation) -> None:
        """Make `mem` visible to this GPU at its address: another GPU's allocation of this process (mapped to this
        GPU too) or CPU memory (registered as user pages at its own address)."""
        kfd = self._kfd
        if mem.va_addr in self._handles:
            return
        owner = next((other for other in list(_KFD_INTERFACES) if mem.va_addr in other._handles), None)
        if owner is not None:
            handle = owner._handles[mem.va_addr]
        else:
            flags = alloc_flags(kfd, host=True, uncached=False, cpu_access=True)
            address = mem.cpu_address or mem.va_addr
            handle = kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU(
                self.fd, va_addr=address, size=round_up(mem.size, PAGE_SIZE), gpu_id=self.gpu_id, flags=flags,
                mmap_offset=address,
            ).handle  # fmt: skip
        ids = (ctypes.c_uint32 * 1)(self.gpu_id)
        kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU(
            self.fd, handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1
        )
        self._mapped[mem.va_addr] = handle

    def close(self) -> None:
        """Destroy the queues and give the file descriptors back (the KFD frees the rest with the process)."""
        kfd = self._kfd
        for queue_id in self._queues:
            kfd.AMDKFD_IOC_DESTROY_QUEUE(self.fd, queue_id=queue_id)
        self._queues.clear()
        for fd in (self.drm_fd, self.fd):
            os.close(fd)


_KFD_INTERFACES: weakref.WeakSet[KFDInterface] = weakref.WeakSet()
_SIMULATED_GPUS: weakref.WeakSet[SimKFDInterface] = weakref.WeakSet()


def create_queue_args(
    gpu_id: int, kind: QueueKind, ring: GPUAllocation, read_ptr: GPUAllocation, write_ptr: GPUAllocation, **extra: int
) -> Any:
    """The AMDKFD_IOC_CREATE_QUEUE argument for a queue of `kind` on `ring` (`extra`: the EOP and CWSR fields of a
    compute queue)."""
    from tg.drivers.autogen import kfd_ioctl as kfd

    return kfd.struct_kfd_ioctl_create_queue_args(
        ring_base_address=ring.va_addr,
        ring_size=ring.size,
        gpu_id=gpu_id,
        queue_type=kfd.KFD_IOC_QUEUE_TYPE_COMPUTE if kind == QueueKind.COMPUTE else kfd.KFD_IOC_QUEUE_TYPE_SDMA,
        queue_percentage=kfd.KFD_MAX_QUEUE_PERCENTAGE,
        queue_priority=QUEUE_PRIORITY,
        write_pointer_address=write_ptr.va_addr,
        read_pointer_address=read_ptr.va_addr,
        **extra,
    )


def alloc_flags(kfd: object, host: bool, uncached: bool, cpu_access: bool) -> int:
    """The ALLOC_MEMORY_OF_GPU flags for an allocation: VRAM (PUBLIC when the CPU maps it), system memory as
    user pages, or uncached GTT; always writable and executable, never substituted."""
    k = kfd
    flags = k.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | k.KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE  # type: ignore[attr-defined]
    flags |= k.KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE  # type: ignore[attr-defined]
    if uncached:
        flags |= k.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT | k.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED  # type: ignore[attr-defined]
        flags |= k.KFD_IOC_ALLOC_MEM_FLAGS_GTT  # type: ignore[attr-defined]
    elif host:
        flags |= k.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR  # type: ignore[attr-defined]
    else:
        flags |= k.KFD_IOC_ALLOC_MEM_FLAGS_VRAM  # type: ignore[attr-defined]
        if cpu_access:
            flags |= k.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC  # type: ignore[attr-defined]
    return flags & 0xFFFFFFFF


def fault_report(memory: object, hardware: object) -> str:
    """The error text for the memory-exception and HW-exception event data a WAIT_EVENTS returned ('' if none)."""
    parts: list[str] = []
    data = memory.memory_exception_data  # type: ignore[attr-defined]
    if data.gpu_id:
        failure = data.failure
        bits = [n for n in ("NotPresent", "ReadOnly", "NoExecute", "imprecise") if getattr(failure, n)]
        parts.append(f"MMU fault: 0x{data.va:X} | {', '.join(bits) or 'unknown reason'}")
    hw = hardware.hw_exception_data  # type: ignore[attr-defined]
    if hw.gpu_id:
        parts.append(f"HW fault: reset_type={hw.reset_type} reset_cause={hw.reset_cause} memory_lost={hw.memory_lost}")
    return " ; ".join(parts)


def default_shader_engines() -> ShaderEngines:
    """The RDNA3 emulator (tg.drivers.amd.rdna3), imported only when a simulated device is built (it needs numpy)."""
    from tg.drivers.amd.rdna3 import RDNA3Emulator

    return RDNA3Emulator()


class SimKFDInterface:
    """The KFD surface over the simulated Navi31: what `DEV=MOCKKFD+AMD` opens. Same VA on CPU and GPU for every
    CPU-visible allocation, doorbells that wake the engine threads, RELEASE_MEM/TRAP interrupts for `sleep`, faults
    reported as the KFD's memory-exception event text, and `recover` (which the real KFD cannot do) resetting the
    queues: the driver must then restart its write pointers at 0."""

    name = "gfx1100"
    gfx_version = GFX_VERSION

    def __init__(
        self,
        shader_engines: ShaderEngines | None = None,
        vram_size: int = DEFAULT_VRAM_SIZE,
        chaos_seed: int | None = None,
    ) -> None:
        self.properties = dict(NAVI31_PROPERTIES)
        if chaos_seed is None and os.environ.get(CHAOS_VARIABLE):
            chaos_seed = int(os.environ[CHAOS_VARIABLE])
        engines = shader_engines if shader_engines is not None else default_shader_engines()
        self.device = Navi31(engines, vram_size, chaos_seed)
        _SIMULATED_GPUS.add(self)
        self._lock = threading.Lock()

    def alloc(
        self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = False
    ) -> GPUAllocation:
        with self._lock:
            address, _ = self.device.allocate(size, host=host or uncached)
        # The size asked for (the mapping is whole pages): a ring of 256 bytes wraps at 256 bytes.
        return GPUAllocation(address, size, address if (host or uncached or cpu_access) else 0, host or uncached)

    def free(self, mem: GPUAllocation) -> None:
        with self._lock:
            self.device.free(mem.va_addr)

    def map(self, mem: GPUAllocation) -> None:
        """Make `mem` visible to this GPU at its address (the KFD's MAP_MEMORY_TO_GPU): an allocation of another
        simulated GPU of this process (its bytes, shared: the simulated fabric) or CPU memory whose CPU address is
        `cpu_address` (or `va_addr`), mapped like the KFD's user pages. The mapping must not outlive the memory;
        `free` on this device removes only the mapping."""
        memory = self.device.memory
        if memory.find(mem.va_addr) is not None:
            return
        for other in list(_SIMULATED_GPUS):
            owned = None if other is self or other.device.closed else other.device.memory.find(mem.va_addr)
            if owned is not None:
                memory.map_foreign(mem.va_addr, owned.view[:])
                return
        address = mem.cpu_address or mem.va_addr
        memory.map_foreign(mem.va_addr, memoryview((ctypes.c_char * mem.size).from_address(address)).cast("B"))

    def create_queue(
        self, kind: QueueKind, ring: GPUAllocation, read_ptr: GPUAllocation, write_ptr: GPUAllocation
    ) -> HardwareQueue:
        engine = self.device.create_queue(kind, ring, read_ptr.va_addr, write_ptr.va_addr)
        return HardwareQueue(kind, ring, read_ptr, write_ptr, engine.doorbell, len(self.device.queues) - 1)

    def sleep(self, timeout_ms: int) -> None:
        injected = os.environ.get(FAULT_INJECTION_VARIABLE)
        if injected:  # as if the memory-exception event had fired for that address; the queues are left alone
            raise RuntimeError(f"MMU fault: 0x{int(injected, 0):X} | injected by {FAULT_INJECTION_VARIABLE}")
        self.device.sleep(timeout_ms)

    def recover(self) -> None:
        self.device.recover()

    def close(self) -> None:
        self.device.close()
