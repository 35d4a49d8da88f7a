"""RDNA3 emulator speed: wave instructions executed per second (one instruction = one wave's, all 32 lanes).

Run: uv run python bench/bench_amd_emulator.py [--repeats N]

Three kernels written as LLVM IR here, compiled by llvmlite for gfx1100 (wave32) and run by
tg.drivers.amd.rdna3.RDNA3Emulator on a flat test memory:
- elementwise: out[i] = a[i] * b[i] + 1 over 65536 floats (2048 waves of straight-line code, memory heavy);
- dot loop: each of 4096 threads sums a[i] * b[k] over a 256-trip loop (ALU and branch heavy, few waves);
- lds reduce: a 256-thread workgroup tree-sums through LDS with a barrier per step (8 waves), 64 workgroups.
The first run of each kernel also decodes it; the figure is the median over the repeats after one warm-up.
Reported: instructions, seconds (wall and process CPU), instructions per second.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time

import llvmlite.binding as llvm
import numpy as np

from tg.drivers.amd.code_object import build_program
from tg.drivers.amd.iface import GPUFault, WaveLaunch
from tg.drivers.amd.rdna3 import RDNA3Emulator

HEADER = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
"""
ATTRS = (
    'attributes #0 = { "amdgpu-flat-work-group-size"="1,256" "amdgpu-no-dispatch-ptr" "amdgpu-no-queue-ptr" '
    '"amdgpu-no-dispatch-id" "amdgpu-no-implicitarg-ptr" }'
)
GID = """
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, 256
  %i = add i32 %base, %lid
"""
ELEMENTWISE = f"""{HEADER}
define amdgpu_kernel void @elementwise(ptr addrspace(1) %out, ptr addrspace(1) %a, ptr addrspace(1) %b) #0 {{
{GID}
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %m = fmul float %x, %y
  %s = fadd float %m, 1.0
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %s, ptr addrspace(1) %po
  ret void
}}
{ATTRS}"""
DOT_LOOP = f"""{HEADER}
define amdgpu_kernel void @dot_loop(ptr addrspace(1) %out, ptr addrspace(1) %a, ptr addrspace(1) %b) #0 {{
entry:
{GID}
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  br label %loop
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %acc = phi float [ 0.0, %entry ], [ %acc1, %loop ]
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %k
  %y = load float, ptr addrspace(1) %pb
  %m = fmul float %x, %y
  %acc1 = fadd float %acc, %m
  %k1 = add i32 %k, 1
  %more = icmp ult i32 %k1, 256
  br i1 %more, label %loop, label %exit, !llvm.loop !0
exit:
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %acc1, ptr addrspace(1) %po
  ret void
}}
!0 = distinct !{{!0, !1}}
!1 = !{{!"llvm.loop.unroll.disable"}}
{ATTRS}"""
LDS_REDUCE = f"""@shared = internal addrspace(3) global [256 x float] undef, align 4
{HEADER}
define amdgpu_kernel void @lds_reduce(ptr addrspace(1) %out, ptr addrspace(1) %a, ptr addrspace(1) %b) #0 {{
entry:
{GID}
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %slot = getelementptr [256 x float], ptr addrspace(3) @shared, i32 0, i32 %lid
  store float %x, ptr addrspace(3) %slot
  br label %step
step:
  %stride = phi i32 [ 128, %entry ], [ %half, %next ]
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %active = icmp ult i32 %lid, %stride
  br i1 %active, label %add, label %next
add:
  %other = add i32 %lid, %stride
  %po = getelementptr [256 x float], ptr addrspace(3) @shared, i32 0, i32 %other
  %v0 = load float, ptr addrspace(3) %slot
  %v1 = load float, ptr addrspace(3) %po
  %sum = fadd float %v0, %v1
  store float %sum, ptr addrspace(3) %slot
  br label %next
next:
  %half = lshr i32 %stride, 1
  %more = icmp ne i32 %half, 0
  br i1 %more, label %step, label %write
write:
  %first = icmp eq i32 %lid, 0
  br i1 %first, label %store, label %end
store:
  %total = load float, ptr addrspace(3) @shared
  %pout = getelementptr float, ptr addrspace(1) %out, i32 %wg
  store float %total, ptr addrspace(1) %pout
  br label %end
end:
  ret void
}}
{ATTRS}"""

# name -> (IR, threads, verify(out, a, b) -> bool)
KERNELS = {
    "elementwise": (ELEMENTWISE, 65536, lambda out, a, b: np.array_equal(out, a * b + np.float32(1))),
    "dot loop": (DOT_LOOP, 4096, lambda out, a, b: np.allclose(out, a * b[:256].sum(), rtol=1e-4, atol=1e-3)),
    "lds reduce": (LDS_REDUCE, 16384, lambda out, a, b: np.allclose(out[:64], a.reshape(64, 256).sum(1), atol=1e-3)),
}


class FlatMemory:
    def __init__(self) -> None:
        self.regions: list[tuple[int, bytearray]] = []
        self.next = 0x1_0000_0000

    def alloc(self, data: bytes) -> int:
        address = self.next
        self.regions.append((address, bytearray(data)))
        self.next += (len(data) + 0xFFFF) // 0x10000 * 0x10000 + 0x10000
        return address

    def _find(self, address: int, size: int, access: str) -> tuple[bytearray, int]:
        for base, region in self.regions:
            if base <= address and address + size <= base + len(region):
                return region, address - base
        raise GPUFault(address, access, "bench memory")

    def read(self, address: int, size: int) -> bytes:
        region, offset = self._find(address, size, "read")
        return bytes(region[offset : offset + size])

    def write(self, address: int, data: bytes) -> None:
        region, offset = self._find(address, len(data), "write")
        region[offset : offset + len(data)] = data


def compile_ir(ir: str) -> bytes:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple("amdgcn-amd-amdhsa")
    machine = target.create_target_machine(cpu="gfx1100", features="+wavefrontsize32", opt=2, reloc="pic")
    module = llvm.parse_assembly('target triple = "amdgcn-amd-amdhsa"\n' + ir)
    return bytes(machine.emit_object(module))


def run_once(emulator: RDNA3Emulator, code: bytes, threads: int) -> tuple[int, float, float, np.ndarray, list]:
    program = build_program(code)
    memory = FlatMemory()
    rng = np.random.default_rng(0)
    a = rng.standard_normal(threads).astype(np.float32)
    b = rng.standard_normal(threads).astype(np.float32)
    image = memory.alloc(program.code_object.image_at(0x1_0000_0000))
    out_address = memory.alloc(bytes(4 * threads))
    addresses = [out_address, memory.alloc(a.tobytes()), memory.alloc(b.tobytes())]
    kernargs = memory.alloc(b"".join(struct.pack("<Q", x) for x in addresses).ljust(program.kernargs_alloc_size))
    user = [kernargs & 0xFFFFFFFF, kernargs >> 32] + [0] * (program.user_sgpr_count - 2)
    launch = WaveLaunch(
        image + program.entry_point_offset,
        program.rsrc1,
        program.rsrc2,
        program.rsrc3,
        tuple(user),
        (threads // 256, 1, 1),
        (256, 1, 1),
    )
    before = emulator.instructions_executed
    wall, cpu = time.perf_counter(), time.process_time()
    emulator.run_dispatch(memory, launch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = np.frombuffer(memory.read(out_address, 4 * threads), np.float32)
    return emulator.instructions_executed - before, wall, cpu, out, [a, b]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'kernel':<12} {'instructions':>12} {'wall s':>8} {'cpu s':>8} {'inst/s (wall)':>14} {'inst/s (cpu)':>13}")
    for name, (ir, threads, verify) in KERNELS.items():
        code = compile_ir(ir)
        emulator = RDNA3Emulator()
        count, *_ = run_once(emulator, code, threads)  # warm-up: decodes and compiles each instruction once
        runs = [run_once(emulator, code, threads) for _ in range(args.repeats)]
        count, _, _, out, (a, b) = runs[-1]
        if not verify(out, a, b):
            raise SystemExit(f"{name}: wrong result")
        wall = statistics.median(r[1] for r in runs)
        cpu = statistics.median(r[2] for r in runs)
        print(f"{name:<12} {count:>12} {wall:>8.3f} {cpu:>8.3f} {count / wall:>14,.0f} {count / cpu:>13,.0f}")


if __name__ == "__main__":
    main()
