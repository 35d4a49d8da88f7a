"""End to end on the simulated Navi31: a kernel compiled by llvmlite for gfx1100, loaded from its code object, launched
by hand-built PM4 packets through the command processor and run by the RDNA3 emulator (the default shader engines of
the simulated KFD)."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator

import pytest

from tg.drivers.amd.code_object import AMDProgramData, build_program
from tg.drivers.amd.iface import GPUAllocation, QueueKind
from tg.drivers.amd.kfd import SimKFDInterface

from .amd_emu.llvm_kernels import compile_ir
from .amd_sim_helpers import DriverQueue, RecordingEngines, dispatch_direct, release_mem, set_sh_reg, u32, wait_for

ADD_ONE = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()

define amdgpu_kernel void @add_one(ptr addrspace(1) noalias %b, ptr addrspace(1) noalias %a, i32 %n) #0 {
entry:
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %gid = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %gid, 32
  %i = add i32 %base, %lid
  %inside = icmp slt i32 %i, %n
  br i1 %inside, label %body, label %done
body:
  %index = sext i32 %i to i64
  %pa = getelementptr float, ptr addrspace(1) %a, i64 %index
  %v = load float, ptr addrspace(1) %pa
  %r = fadd float %v, 1.0
  %pb = getelementptr float, ptr addrspace(1) %b, i64 %index
  store float %r, ptr addrspace(1) %pb
  br label %done
done:
  ret void
}
"""
WORKGROUP = 32


@pytest.fixture(scope="module")
def program() -> AMDProgramData:
    return build_program(compile_ir(ADD_ONE, max_workgroup=WORKGROUP), "add_one")


@pytest.fixture
def sim() -> Iterator[SimKFDInterface]:
    iface = SimKFDInterface(vram_size=1 << 28)
    assert iface.device.shader_engines is not None, "the simulated KFD should run dispatches on the RDNA3 emulator"
    yield iface
    iface.close()


def load(sim: SimKFDInterface, program: AMDProgramData) -> int:
    """Copy the code object image into GPU memory; the address of its first instruction."""
    code = sim.alloc(len(program.image) + 0x100, host=True)
    image = program.code_object.image_at(code.va_addr)
    ctypes.memmove(code.cpu_address, image, len(image))
    return code.va_addr + program.entry_point_offset


def launch_packets(program: AMDProgramData, entry: int, kernargs: int, groups: int) -> list[int]:
    """COMPUTE_* registers from the kernel descriptor, the kernarg pointer in the first user SGPRs, DISPATCH_DIRECT."""
    user = [kernargs & 0xFFFFFFFF, kernargs >> 32]
    user += [0] * (program.user_sgpr_count - len(user))
    initiator = 1 | 1 << 2 | (1 << 15 if program.wave32 else 0)  # COMPUTE_SHADER_EN, FORCE_START_AT_000, CS_W32_EN
    return (
        set_sh_reg(0x2E0C, (entry >> 8) & 0xFFFFFFFF, entry >> 40)  # COMPUTE_PGM_LO/HI
        + set_sh_reg(0x2E12, program.rsrc1, program.rsrc2)  # COMPUTE_PGM_RSRC1/2
        + set_sh_reg(0x2E28, program.rsrc3)  # COMPUTE_PGM_RSRC3
        + set_sh_reg(0x2E18, 0)  # COMPUTE_TMPRING_SIZE: no scratch
        + set_sh_reg(0x2E40, *user)  # COMPUTE_USER_DATA_0..
        + set_sh_reg(0x2E04, 0, 0, 0, WORKGROUP, 1, 1)  # COMPUTE_START_X/Y/Z, NUM_THREAD_X/Y/Z
        + dispatch_direct(groups, 1, 1, initiator)
    )


def kernargs_for(sim: SimKFDInterface, b: int, a: int, n: int) -> GPUAllocation:
    args = sim.alloc(0x100, host=True)
    ctypes.memmove(args.cpu_address, struct.pack("<QQi", b, a, n), 20)
    return args


def run(sim: SimKFDInterface, queue: DriverQueue, packets: list[int], signal: GPUAllocation, value: int) -> None:
    queue.submit(packets + release_mem(signal.va_addr, value, int_sel=2))
    wait_for(lambda: u32(signal) == value or sim.device.fault is not None, "the kernel's signal")
    sim.sleep(0)  # raises if the device faulted


def test_the_cp_programs_the_launch_from_the_kernel_descriptor(program: AMDProgramData) -> None:
    engines = RecordingEngines()
    sim = SimKFDInterface(shader_engines=engines, vram_size=1 << 28)
    try:
        entry = load(sim, program)
        args = kernargs_for(sim, 0x1000, 0x2000, 5)
        queue = DriverQueue(sim, QueueKind.COMPUTE)
        queue.submit(launch_packets(program, entry, args.va_addr, 4))
        queue.drain()
        (launch,) = engines.launches
        assert launch.program_address == entry and entry % 256 == 0
        assert (launch.rsrc1, launch.rsrc2, launch.rsrc3) == (program.rsrc1, program.rsrc2, program.rsrc3)
        assert launch.user_data[:2] == (args.va_addr & 0xFFFFFFFF, args.va_addr >> 32)
        assert len(launch.user_data) == program.user_sgpr_count
        assert (launch.grid, launch.workgroup, launch.wave32) == ((4, 1, 1), (WORKGROUP, 1, 1), True)
        # the code the launch points at is the kernel's: LLVM's kernels end with s_endpgm (0xBFB00000)
        code = sim.device.memory.read(entry, program.code_object.kernel().code_size)
        assert 0xBFB00000 in struct.unpack(f"<{len(code) // 4}I", code)
    finally:
        sim.close()


def test_kernel_runs_through_the_cp_and_the_emulator(sim: SimKFDInterface, program: AMDProgramData) -> None:
    entry = load(sim, program)
    n = 80  # three workgroups of 32; the last one is partly outside
    a = sim.alloc(4 * 96, cpu_access=True)
    b = sim.alloc(4 * 96, cpu_access=True)
    inputs = [i * 0.5 - 7.0 for i in range(96)]
    ctypes.memmove(a.cpu_address, struct.pack("<96f", *inputs), 4 * 96)
    ctypes.memmove(b.cpu_address, struct.pack("<96f", *[-1.0] * 96), 4 * 96)
    queue = DriverQueue(sim, QueueKind.COMPUTE)
    signal = sim.alloc(0x1000, host=True)
    run(sim, queue, launch_packets(program, entry, kernargs_for(sim, b.va_addr, a.va_addr, n).va_addr, 3), signal, 1)
    out = struct.unpack("<96f", ctypes.string_at(b.cpu_address, 4 * 96))
    assert list(out[:n]) == [x + 1.0 for x in inputs[:n]]
    assert list(out[n:]) == [-1.0] * (96 - n)  # the guarded lanes stored nothing


def test_kernel_storing_to_an_unmapped_address_faults_and_the_device_recovers(
    sim: SimKFDInterface, program: AMDProgramData
) -> None:
    entry = load(sim, program)
    a = sim.alloc(4 * 32, cpu_access=True)
    queue = DriverQueue(sim, QueueKind.COMPUTE)
    signal = sim.alloc(0x1000, host=True)
    bad = 0xDEAD00000000
    queue.submit(launch_packets(program, entry, kernargs_for(sim, bad, a.va_addr, 32).va_addr, 1))
    wait_for(lambda: sim.device.fault is not None, "the page fault")
    with pytest.raises(RuntimeError) as raised:
        sim.sleep(0)
    assert "MMU fault: 0xDEAD0000" in str(raised.value) and "DISPATCH_DIRECT" in str(raised.value)
    sim.recover()
    queue.reset_after_recover()
    b = sim.alloc(4 * 32, cpu_access=True)
    ctypes.memmove(a.cpu_address, struct.pack("<32f", *range(32)), 4 * 32)
    run(sim, queue, launch_packets(program, entry, kernargs_for(sim, b.va_addr, a.va_addr, 32).va_addr, 1), signal, 2)
    assert struct.unpack("<32f", ctypes.string_at(b.cpu_address, 4 * 32)) == tuple(float(i + 1) for i in range(32))
