"""The AMD device (tg.hcq.devices.amd) on the simulated Navi31 (DEV=MOCKKFD+AMD): device strings, signals in GPU
memory, the rings (wrap, IB reuse, back-pressure), copies both ways, faults and hangs and the recovery after them.
Kernels on the emulator are in test_amd_kernels.py; the HCQ conformance suite runs on MOCKKFD+AMD too."""

from __future__ import annotations

import ctypes
import struct
import threading
from decimal import Decimal

import pytest

from tg.codegen.dtype import dtypes
from tg.codegen.flags import Context
from tg.drivers.amd.iface import GPUAllocation
from tg.hcq import Buffer, BufferSpec, Device, UnknownDeviceError
from tg.hcq.device import DeviceSpec
from tg.hcq.devices import amd, amd_queues
from tg.hcq.devices.amd_memory import AMDDeviceError

MOCK = "MOCKKFD+AMD"
DEADLINE_MS = 120_000
UNMAPPED = 0xDEAD_0000_0000  # no allocation of the simulator lies there

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def dev():
    device = Device[MOCK]
    device.synchronize()
    return device


def run_and_wait(dev, queue) -> None:
    target = dev.next_timeline()
    queue.signal(dev.timeline_signal, target).submit(dev)
    dev.timeline_signal.wait(target, timeout=DEADLINE_MS)


def device_works(dev) -> bool:
    """A copy and a compute-queue signal both complete with the right data."""
    src, dest = dev.allocator.alloc(64), dev.allocator.alloc(64)
    src.cpu_view()[:] = bytes(range(64))
    dest.cpu_view()[:] = bytes(64)
    run_and_wait(dev, dev.hw_copy_queue_t().copy(dest, src, 64))
    run_and_wait(dev, dev.hw_compute_queue_t())
    return bytes(dest.cpu_view()) == bytes(range(64))


# --- device strings ---


def test_kfd_without_dev_kfd_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(amd, "KFD_PATH", str(tmp_path / "kfd"))
    with pytest.raises(RuntimeError, match=r"kfd does not exist: this machine has no AMD GPU kernel driver.*MOCKKFD"):
        amd.open_interface(DeviceSpec("AMD"))


def test_pci_without_an_amd_board_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pci_iface = pytest.importorskip("tg.drivers.amd.pci_iface")
    monkeypatch.setattr(pci_iface, "scan_pci", lambda vendor, matches: [])
    with pytest.raises(RuntimeError, match=r"PCI\+AMD:0 does not exist \(0 devices available\).*MOCKPCI\+AMD"):
        amd.open_interface(DeviceSpec("AMD", iface="PCI"))


def test_pci_on_a_real_board_refuses_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's register map is the simulator's: a real Navi31 is refused, not programmed with wrong numbers."""
    pci_iface = pytest.importorskip("tg.drivers.amd.pci_iface")
    monkeypatch.setattr(pci_iface, "scan_pci", lambda vendor, matches: ["0000:03:00.0 1002:744c"])
    with pytest.raises(RuntimeError, match=r"only knows the simulated Navi31's register map"):
        amd.open_interface(DeviceSpec("AMD", iface="PCI"))


def test_an_unknown_interface_lists_the_known_ones() -> None:
    with pytest.raises(UnknownDeviceError, match=r"no interface FOO\+.*KFD\+, MOCKKFD\+, PCI\+, MOCKPCI\+"):
        Device["FOO+AMD"]


def test_the_target_is_an_amd_gpu(dev) -> None:
    target = dev.target
    assert (target.family, target.has_local, target.shared_max) == ("AMD", True, 64 << 10)
    assert type(dev.renderer).__name__ == "AMDRenderer"
    assert dev.device == MOCK and Device.canonicalize("mockkfd+amd:0") == MOCK


# --- memory and signals ---


def test_signals_live_in_gpu_memory_the_gpu_writes(dev) -> None:
    sig = dev.new_signal(value=5)
    allocation = sig.base_buf.meta
    assert isinstance(allocation, GPUAllocation) and allocation.host
    assert dev.iface.device.memory.is_mapped(sig.value_addr, 16)  # in the simulated GPU's page table
    run_and_wait(dev, dev.hw_compute_queue_t().signal(sig, 0x1234))
    assert sig.value == 0x1234 == struct.unpack("<Q", ctypes.string_at(sig.base_buf.va_addr, 8))[0]
    run_and_wait(dev, dev.hw_copy_queue_t().signal(sig, 0x4321))
    assert sig.value == 0x4321


def test_timestamps_count_100_gpu_ticks_per_microsecond(dev) -> None:
    sig = dev.new_signal()
    ctypes.c_uint64.from_address(sig.base_buf.va_addr + 8).value = 123_456
    assert sig.timestamp == Decimal("1234.56")
    first, second = dev.new_signal(), dev.new_signal()
    run_and_wait(dev, dev.hw_compute_queue_t().timestamp(first))
    run_and_wait(dev, dev.hw_copy_queue_t().timestamp(second))
    assert 0 < first.timestamp < second.timestamp  # one GPU clock for both engines


def test_host_memory_and_vram_allocations(dev) -> None:
    vram = dev.allocator.alloc(100)
    host = dev.allocator.alloc(100, BufferSpec(host=True))
    assert not vram.meta.host and host.meta.host
    assert vram.size == 100 and len(vram.cpu_view()) == 100  # the driver's page rounding is not visible


def test_buffer_copyin_copyout_through_the_mapping_and_through_sdma(dev) -> None:
    """Idle: the host copies through the CPU mapping. Busy (the compute queue waits on a gate): copyin snapshots into
    a staging buffer that the SDMA queue copies after the queued work, and copyout waits for everything."""
    data = struct.pack("<64f", *range(64))
    buf = Buffer(MOCK, 64, dtypes.float32).allocate()
    buf.copyin(data)
    assert bytes(buf.copyout(bytearray(256))) == data
    gate = dev.new_signal(value=0)
    dev.hw_compute_queue_t().wait(gate, 1).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    later = struct.pack("<64f", *range(100, 164))
    buf.copyin(later)  # the device is busy: goes through staging + SDMA, ordered after the gate
    assert bytes(buf.raw.cpu_view()) == data  # not yet copied: the SDMA queue waits for the timeline
    gate.value = 1
    assert bytes(buf.copyout(bytearray(256))) == later


# --- rings ---


@pytest.fixture
def small_rings(monkeypatch: pytest.MonkeyPatch):
    """A fresh MOCKKFD+AMD device (its own simulated GPU) with tiny rings and IB area, so a test wraps them often."""
    monkeypatch.setattr(amd_queues, "SDMA_RING_SIZE", 0x400)
    monkeypatch.setattr(amd_queues, "PM4_RING_SIZE", 0x100)  # 16 INDIRECT_BUFFER packets
    monkeypatch.setattr(amd_queues, "IB_AREA_SIZE", 0x1000)
    device = amd.AMDDevice(DeviceSpec("AMD", index=31, iface="MOCKKFD"))
    yield device
    device.synchronize()
    device.iface.close()


def test_sdma_ring_wraps_with_zeroed_tails(small_rings) -> None:
    dev = small_rings
    src, dest = dev.allocator.alloc(4 * 100), dev.allocator.alloc(4 * 100)
    src.cpu_view()[:] = struct.pack("<100I", *range(1000, 1100))
    dest.cpu_view()[:] = bytes(400)
    submission = 4 * (7 + 6 + 4)  # a copy, a signal (fence + trap), the driver's retired fence: 68 bytes
    for i in range(100):
        queue = dev.hw_copy_queue_t().copy(dest.offset(4 * i, 4), src.offset(4 * i, 4), 4)
        queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize()
    assert struct.unpack("<100I", dest.cpu_view()) == tuple(range(1000, 1100))
    # 68 does not divide the 1024-byte ring: submissions that did not fit before its end started over at 0
    assert dev.sdma_ring.put > 100 * submission


def test_pm4_ring_and_ib_area_are_reused_after_the_engine_retires_them(small_rings) -> None:
    dev = small_rings
    for _ in range(300):  # ~19 trips around a 16-packet ring, ~20 around the IB area
        dev.hw_compute_queue_t().signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize()
    assert dev.timeline_signal.value == dev.timeline_value - 1 and dev.compute_ring.put == 300 * 4


def test_a_full_ring_behind_a_blocked_queue_times_out_clearly(small_rings) -> None:
    dev = small_rings
    gate = dev.new_signal(value=0)
    dev.hw_compute_queue_t().wait(gate, 1).submit(dev)
    with Context(HCQDEV_WAIT_TIMEOUT_MS=300), pytest.raises(RuntimeError, match="compute queue has no room"):
        for _ in range(40):
            dev.hw_compute_queue_t().signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    gate.value = 1
    dev.recover()  # drop what the failed submit left half-done
    assert device_works(dev)


def test_a_submission_longer_than_an_indirect_buffer_is_split(dev, monkeypatch: pytest.MonkeyPatch) -> None:
    # 40-dword IBs: 30 signals (8 dwords each) need several IBs on the ring
    monkeypatch.setattr(amd_queues.p, "INDIRECT_BUFFER_MAX_DWORDS", 40 + 16)
    sigs = [dev.new_signal() for _ in range(30)]
    queue = dev.hw_compute_queue_t()
    for i, sig in enumerate(sigs):
        queue.signal(sig, i + 1)
    before = dev.compute_ring.put
    run_and_wait(dev, queue)
    assert [s.value for s in sigs] == list(range(1, 31))
    assert dev.compute_ring.put - before > 4 * 5


# --- hangs, faults, recovery ---


def test_a_hung_wait_fails_with_a_clear_timeout_and_the_device_recovers(dev) -> None:
    never = dev.new_signal(value=0)
    dev.hw_compute_queue_t().wait(never, 1).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    with pytest.raises(AMDDeviceError, match=r"hang detected \(Wait timeout: 300 ms!.*\); the queues were reset"):
        dev.synchronize(timeout=300)
    assert dev.error_state is None and device_works(dev)


def test_an_sdma_fault_names_the_address_and_the_device_recovers(dev) -> None:
    dest = dev.allocator.alloc(64)
    dev.hw_copy_queue_t().copy(dest.va_addr, UNMAPPED, 64).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    with pytest.raises(AMDDeviceError, match=r"MMU fault: 0xDEAD00000000 \| queue sdma\d+, packet SDMA COPY"):
        dev.synchronize()
    assert device_works(dev)


def test_a_pm4_fault_seen_by_a_signal_wait_recovers_the_device(dev) -> None:
    # a WRITE_DATA to an unmapped address, waited for directly on the signal rather than by synchronize
    queue = dev.hw_compute_queue_t().write(dev.allocator.alloc(8), 1)
    queue._add(amd_queues.WriteCommand(UNMAPPED, 7))
    target = dev.next_timeline()
    queue.signal(dev.timeline_signal, target).submit(dev)
    with pytest.raises(AMDDeviceError, match=r"MMU fault: 0xDEAD00000000 \| queue compute\d+, packet WRITE_DATA"):
        dev.timeline_signal.wait(target, timeout=DEADLINE_MS)
    dev.synchronize()  # already recovered: nothing left to report
    assert device_works(dev)


# --- program loading ---

# A kernel that reads its dispatch packet (grid_size_x, at byte 12): the descriptor enables the dispatch pointer SGPRs
# before the kernarg pointer, and the device must write an hsa_kernel_dispatch_packet_t for it.
GRID_SIZE_X = """
declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
define amdgpu_kernel void @grid_x(ptr addrspace(1) noalias %out) #1 {
  %packet = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %field = getelementptr i8, ptr addrspace(4) %packet, i64 12
  %v = load i32, ptr addrspace(4) %field, align 4
  store i32 %v, ptr addrspace(1) %out, align 4
  ret void
}
attributes #1 = { nounwind "amdgpu-flat-work-group-size"="1,64" "amdgpu-no-queue-ptr" "amdgpu-no-dispatch-id"
  "amdgpu-no-implicitarg-ptr" "amdgpu-no-hostcall-ptr" "amdgpu-no-heap-ptr" "amdgpu-no-multigrid-sync-arg"
  "amdgpu-no-default-queue" "amdgpu-no-completion-action" "amdgpu-no-lds-kernel-id" }
"""


def test_a_kernel_reading_its_dispatch_packet_gets_one_after_its_arguments(dev) -> None:
    prg = dev.runtime("grid_x", dev.compiler.compile(GRID_SIZE_X))
    assert prg.data.enable_dispatch_ptr and prg.kernargs_alloc_size == 16 + 64  # 8-byte argument, aligned, + packet
    out = dev.allocator.alloc(4)
    args = prg.fill_kernargs((out,))
    command = amd_queues.ExecCommand(prg, args.buf.va_addr, args, (5, 2, 1), (4, 1, 1))
    user = prg.dispatch(command).user_data
    packet = args.buf.va_addr + 16
    assert user[:4] == (packet & 0xFFFFFFFF, packet >> 32, args.buf.va_addr & 0xFFFFFFFF, args.buf.va_addr >> 32)
    assert all(word == 0 for word in user[4:])  # the gfx11 wave32 padding
    setup, wg_x, wg_y, wg_z, _, grid_x, grid_y, grid_z = struct.unpack("<2x5H3I", ctypes.string_at(packet, 24))
    assert (setup, wg_x, wg_y, wg_z, grid_x, grid_y, grid_z) == (2, 4, 1, 1, 20, 2, 1)
    assert struct.unpack("<Q", ctypes.string_at(packet + 40, 8))[0] == args.buf.va_addr  # kernarg_address


def test_program_image_is_relocated_and_aligned_in_gpu_memory(dev, kit) -> None:
    prg = kit.load_program(dev, "add_one", kit.ADD_ONE)
    assert prg.program_address % 256 == 0
    image = prg.data.code_object.image_at(prg.image_memory.va_addr)
    assert ctypes.string_at(prg.image_memory.va_addr, len(image)) == image
    assert dev.iface.device.memory.is_mapped(prg.program_address, 4)


class RecordingEngines:
    """Shader engines that only record each dispatch's WaveLaunch and the kernel arguments it points at."""

    def __init__(self) -> None:
        self.launches: list = []
        self.kernargs: list[bytes] = []

    def run_dispatch(self, memory, launch) -> None:
        self.launches.append(launch)
        pointer = launch.user_data[0] | launch.user_data[1] << 32
        self.kernargs.append(memory.read(pointer, 16))


def test_a_launch_programs_the_registers_the_shader_engines_see(monkeypatch: pytest.MonkeyPatch, kit) -> None:
    from tg.drivers.amd.kfd import SimKFDInterface

    engines = RecordingEngines()
    monkeypatch.setattr(amd, "open_interface", lambda spec: SimKFDInterface(engines))
    dev = amd.AMDDevice(DeviceSpec("AMD", index=32, iface="MOCKKFD"))
    try:
        prg = kit.load_program(dev, "add_one", kit.ADD_ONE)
        a, b = dev.allocator.alloc(8), dev.allocator.alloc(8)
        prg(b, a, global_size=(3, 2, 1), local_size=(8, 1, 1), wait=True)
        (launch,) = engines.launches
        assert launch.program_address == prg.program_address
        assert (launch.rsrc1, launch.rsrc2, launch.rsrc3) == (prg.data.rsrc1, prg.data.rsrc2, prg.data.rsrc3)
        assert launch.rsrc1 & (1 << 20)  # gfx11: PRIV set for the firmware's wave save/restore
        assert len(launch.user_data) == prg.data.user_sgpr_count
        assert (launch.grid, launch.workgroup, launch.wave32) == ((3, 2, 1), (8, 1, 1), True)
        assert struct.unpack("<QQ", engines.kernargs[0]) == (b.va_addr, a.va_addr)  # buffers in parameter order
    finally:
        dev.synchronize()
        dev.iface.close()


def test_copies_of_memory_the_cpu_cannot_see_go_through_sdma_staging(dev, monkeypatch: pytest.MonkeyPatch) -> None:
    """VRAM without a CPU mapping (a small BAR): copyin and copyout move the bytes with the SDMA queue through host
    staging buffers, in chunks of the staging size."""
    from tg.hcq.devices import amd_memory
    from tg.hcq.memory import HCQBuffer

    monkeypatch.setattr(amd_memory, "STAGING_SIZE", 4096)  # a fresh allocator below makes staging buffers this size
    allocator = amd_memory.AMDAllocator(dev)
    visible = dev.allocator.alloc(10_000)
    hidden = HCQBuffer(visible.va_addr, visible.size, None, dev, visible.meta)  # the same memory, no CPU view
    data = bytes((i * 13 + 7) % 256 for i in range(10_000))
    allocator._copyin(hidden, memoryview(data))
    dev.synchronize()
    assert bytes(visible.cpu_view()) == data
    back = bytearray(10_000)
    visible.cpu_view()[:] = data[::-1]
    allocator._copyout(memoryview(back), hidden)
    assert bytes(back) == data[::-1]


def test_a_freed_block_is_handed_out_again_only_after_its_last_user_finished(dev) -> None:
    """A copy into a block is queued behind a gate; the block is freed (into the allocator's cache) and asked for
    again: the allocator waits for the copy, so the host's writes to the new owner are not overwritten by it later
    (what corrupted a TinyJit graph's kernel arguments: they reused the previous test's still-written output)."""
    import threading

    size = 4096 + 8  # a size no other test caches
    src, block = dev.allocator.alloc(size), dev.allocator.alloc(size)
    src.cpu_view()[:] = bytes([0xAA]) * size
    gate = dev.new_signal(value=0)
    queue = dev.hw_copy_queue_t().wait(gate, 1).copy(block, src, size)
    queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.allocator.free(block, size)
    opener = threading.Timer(0.3, lambda: setattr(gate, "value", 1))
    opener.start()
    again = dev.allocator.alloc(size)
    assert again is block and dev.is_idle()  # the cached block, after the copy ran
    again.cpu_view()[:] = bytes(size)  # the new owner's data stays
    dev.synchronize()
    assert bytes(again.cpu_view()) == bytes(size)
    opener.join()


def test_a_free_waits_for_nothing_and_the_block_is_released_after_its_last_use(dev, monkeypatch) -> None:
    """Regression: a free waited for the device. Run by the garbage collector inside a simulated SDMA engine's copy,
    it waited for that copy to finish, so the engine hung and every later wait on the device timed out (CI). A free
    now only queues the block; the next allocation gives it back once the work queued before the free finished."""
    released: list[GPUAllocation] = []
    free = dev.iface.free
    monkeypatch.setattr(dev.iface, "free", lambda allocation: (released.append(allocation), free(allocation)))
    spec = BufferSpec(nolru=True)
    block = dev.allocator.alloc(4096, spec)
    allocation = block.meta
    never = dev.new_signal(value=0)
    dev.hw_compute_queue_t().wait(never, 1).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    freed = threading.Event()
    threading.Thread(target=lambda: (dev.allocator.free(block, 4096, spec), freed.set()), daemon=True).start()
    assert freed.wait(60)  # (a hang guard: before, the free waited as long as the queue, here for ever)
    dev.allocator.alloc(4096, spec)  # the queue still waits: the block stays the driver's to keep
    assert released == []
    never.value = 1
    dev.synchronize()
    dev.allocator.alloc(4096, spec)
    assert released == [allocation]
