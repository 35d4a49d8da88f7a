"""The KFD interface without a GPU: topology parsing, ioctl arguments, fault text, and the error when there is no KFD.

What needs /dev/kfd (allocation, queue creation, doorbells, events on a real GPU) cannot run on this machine."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tg.drivers.amd.iface import GPUAllocation, QueueKind
from tg.drivers.amd.kfd import (
    KFDInterface,
    alloc_flags,
    create_queue_args,
    cwsr_sizes,
    fault_report,
    gfx_version_of,
    parse_properties,
    read_topology,
)
from tg.drivers.amd.navi31 import NAVI31_PROPERTIES
from tg.drivers.autogen import kfd_ioctl


def fake_node(root: Path, number: int, gpu_id: int, name: str, properties: dict[str, int]) -> None:
    node = root / str(number)
    node.mkdir(parents=True)
    (node / "gpu_id").write_text(f"{gpu_id}\n")
    (node / "name").write_text(f"{name}\n")
    (node / "properties").write_text("".join(f"{key} {value}\n" for key, value in properties.items()))


def test_topology_lists_gpu_nodes_only(tmp_path: Path) -> None:
    fake_node(tmp_path, 0, 0, "", {"cpu_cores_count": 16, "simd_count": 0})  # the CPU node
    fake_node(tmp_path, 2, 4242, "gfx1100", {"simd_count": 192, "gfx_target_version": 110000, "drm_render_minor": 129})
    fake_node(tmp_path, 1, 1111, "gfx1100", {"simd_count": 192, "gfx_target_version": 110000, "drm_render_minor": 128})
    (tmp_path / "not-a-node").mkdir()
    nodes = read_topology(tmp_path)
    assert [(n.node_id, n.gpu_id, n.name) for n in nodes] == [(1, 1111, "gfx1100"), (2, 4242, "gfx1100")]
    assert nodes[1].properties["drm_render_minor"] == 129
    assert read_topology(tmp_path / "absent") == []


def test_properties_and_target_versions() -> None:
    assert parse_properties("simd_count 192\nlds_size_in_kb 64\n\nbogus\n") == {"simd_count": 192, "lds_size_in_kb": 64}
    assert gfx_version_of(110000) == (11, 0, 0)
    assert gfx_version_of(90402) == (9, 4, 2)
    assert gfx_version_of(NAVI31_PROPERTIES["gfx_target_version"]) == (11, 0, 0)


def test_no_kfd_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="does not exist: this machine has no AMD GPU"):
        KFDInterface(kfd_path=str(tmp_path / "kfd"), topology=tmp_path)
    fake_kfd = tmp_path / "kfd"
    fake_kfd.write_bytes(b"")
    with pytest.raises(RuntimeError, match=r"AMD:0 does not exist \(0 devices available\)"):
        KFDInterface(kfd_path=str(fake_kfd), topology=tmp_path / "nodes")


def test_create_queue_arguments_follow_the_kernel_layout() -> None:
    ring = GPUAllocation(0x7F0000001000, 0x10000, 0x7F0000001000, True)
    rptr = GPUAllocation(0x7F0000020000, 8, 0x7F0000020000, True)
    wptr = GPUAllocation(0x7F0000030000, 8, 0x7F0000030000, True)
    args = create_queue_args(7, QueueKind.SDMA, ring, rptr, wptr)
    raw = bytes(args)
    assert len(raw) == 88  # sizeof(struct kfd_ioctl_create_queue_args)
    # offsets from linux/kfd_ioctl.h: ring base, write ptr, read ptr (u64) at 0/8/16, ring_size @32, gpu_id @36,
    # queue_type @40 (1 = SDMA), percentage @44, priority @48
    assert struct.unpack_from("<QQQ", raw, 0) == (0x7F0000001000, 0x7F0000030000, 0x7F0000020000)
    assert struct.unpack_from("<IIIII", raw, 32) == (0x10000, 7, 1, 100, 7)
    compute = create_queue_args(
        7, QueueKind.COMPUTE, ring, rptr, wptr, eop_buffer_address=0x5000, eop_buffer_size=0x1000,
        ctx_save_restore_address=0x9000, ctx_save_restore_size=0x2000, ctl_stack_size=0x1000,
    )  # fmt: skip
    raw = bytes(compute)
    assert struct.unpack_from("<I", raw, 40) == (0,)  # KFD_IOC_QUEUE_TYPE_COMPUTE
    assert struct.unpack_from("<QQQII", raw, 56) == (0x5000, 0x1000, 0x9000, 0x2000, 0x1000)
    assert int(kfd_ioctl.AMDKFD_IOC_CREATE_QUEUE) == 0xC0584B02  # _IOWR('K', 2, 88 bytes)


def test_allocation_flags() -> None:
    k = kfd_ioctl
    always = 1 << 31 | 1 << 30 | 1 << 28  # WRITABLE, EXECUTABLE, NO_SUBSTITUTE
    assert alloc_flags(k, host=False, uncached=False, cpu_access=False) == always | 1  # VRAM
    assert alloc_flags(k, host=False, uncached=False, cpu_access=True) == always | 1 | 1 << 29  # + PUBLIC
    assert alloc_flags(k, host=True, uncached=False, cpu_access=False) == always | 1 << 2  # USERPTR
    assert alloc_flags(k, host=True, uncached=True, cpu_access=True) == always | 1 << 1 | 1 << 26 | 1 << 25  # GTT


def test_fault_report_from_event_data() -> None:
    events = (kfd_ioctl.struct_kfd_event_data * 2)()
    assert fault_report(events[0], events[1]) == ""
    memory = events[0].memory_exception_data
    memory.gpu_id, memory.va = 4242, 0xDEADBEE1000
    memory.failure.NotPresent = 1
    assert fault_report(events[0], events[1]) == "MMU fault: 0xDEADBEE1000 | NotPresent"
    events[1].hw_exception_data.gpu_id = 4242
    assert "HW fault: reset_type=0" in fault_report(events[0], events[1])


def test_cwsr_sizes_are_page_multiples_and_cover_every_wave() -> None:
    save, ctl_stack, debug = cwsr_sizes(NAVI31_PROPERTIES, (11, 0, 0))
    waves = 96 * 16 * 2  # CUs x waves per SIMD x SIMDs per CU
    assert ctl_stack % 0x1000 == 0 and ctl_stack >= 12 * waves + 48
    assert save % 0x1000 == 0 and save > ctl_stack
    assert debug == waves * 32
