"""Shared helpers for the tg.hcq tests, handed to tests as the `kit` fixture.

Test kernels are small C functions compiled with the real compiler wrapper (tg.codegen.compiler).
"""

from __future__ import annotations

import ctypes
import struct
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tg.codegen.dtype import dtypes
from tg.codegen.flags import Context
from tg.hcq import Buffer

float32, uint8, int32 = dtypes.float32, dtypes.uint8, dtypes.int32

# b[i] = a[i] + 1 for i = core_id: one element per call, the kernel of the spec's conformance suite.
ADD_ONE = """
void add_one(float* restrict b, const float* restrict a, int core_id) {
  b[core_id] = a[core_id] + 1.0f;
}
"""

# out[i] = x[i] * scale + shift over a chunk of 64 elements per core_id (buffers, then values, then core_id).
SCALE_SHIFT = """
void scale_shift(float* restrict out, const float* restrict x, int n, int scale, int shift, int core_id) {
  int start = core_id * 64;
  int end = start + 64 < n ? start + 64 : n;
  for (int i = start; i < end; i++) out[i] = x[i] * (float)scale + (float)shift;
}
"""

# out[core_id] = 1: shows exactly which core_ids a launch ran.
MARK = """
void mark(float* restrict out, int core_id) { out[core_id] = 1.0f; }
"""


# The same kernels for the AMD device, as LLVM IR for amdgcn (what tg.codegen's AMD compiler takes): one workgroup
# of one thread per core_id, the workgroup id standing for core_id. mark's index is x + 3y + 9z (the fuzz test's
# grids are at most 3x3x3), so every workgroup of a grid marks its own element.
_AMD_ATTRIBUTES = (
    'attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,1" "amdgpu-no-dispatch-ptr" "amdgpu-no-queue-ptr" '
    '"amdgpu-no-dispatch-id" "amdgpu-no-implicitarg-ptr" "amdgpu-no-hostcall-ptr" "amdgpu-no-heap-ptr" '
    '"amdgpu-no-multigrid-sync-arg" "amdgpu-no-default-queue" "amdgpu-no-completion-action" '
    '"amdgpu-no-lds-kernel-id" }\n'
)
_AMD_IDS = "".join(f"declare i32 @llvm.amdgcn.workgroup.id.{d}()\n" for d in "xyz")
_ONE_NANO = f"0x{struct.unpack('<Q', struct.pack('<d', struct.unpack('<f', struct.pack('<f', 1e-9))[0]))[0]:016X}"
AMD_KERNELS = {
    "add_one": """
define amdgpu_kernel void @add_one(ptr addrspace(1) noalias %b, ptr addrspace(1) noalias %a) #0 {
  %id = call i32 @llvm.amdgcn.workgroup.id.x()
  %i = zext i32 %id to i64
  %src = getelementptr inbounds float, ptr addrspace(1) %a, i64 %i
  %v = load float, ptr addrspace(1) %src, align 4
  %r = fadd float %v, 1.0
  %dst = getelementptr inbounds float, ptr addrspace(1) %b, i64 %i
  store float %r, ptr addrspace(1) %dst, align 4
  ret void
}
""",
    "mark": """
define amdgpu_kernel void @mark(ptr addrspace(1) noalias %out) #0 {
  %x = call i32 @llvm.amdgcn.workgroup.id.x()
  %y = call i32 @llvm.amdgcn.workgroup.id.y()
  %z = call i32 @llvm.amdgcn.workgroup.id.z()
  %y3 = mul i32 %y, 3
  %z9 = mul i32 %z, 9
  %xy = add i32 %x, %y3
  %xyz = add i32 %xy, %z9
  %i = zext i32 %xyz to i64
  %p = getelementptr inbounds float, ptr addrspace(1) %out, i64 %i
  store float 1.0, ptr addrspace(1) %p, align 4
  ret void
}
""",
    "scale_shift": """
define amdgpu_kernel void @scale_shift(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %x, i32 %n,
                                       i32 %scale, i32 %shift) #0 {
entry:
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %start = mul i32 %wg, 64
  %end64 = add i32 %start, 64
  %less = icmp slt i32 %end64, %n
  %end = select i1 %less, i32 %end64, i32 %n
  %fs = sitofp i32 %scale to float
  %fh = sitofp i32 %shift to float
  %any = icmp slt i32 %start, %end
  br i1 %any, label %loop, label %done
loop:
  %i = phi i32 [ %start, %entry ], [ %next, %loop ]
  %i64 = sext i32 %i to i64
  %px = getelementptr inbounds float, ptr addrspace(1) %x, i64 %i64
  %v = load float, ptr addrspace(1) %px, align 4
  %m = fmul float %v, %fs
  %r = fadd float %m, %fh
  %po = getelementptr inbounds float, ptr addrspace(1) %out, i64 %i64
  store float %r, ptr addrspace(1) %po, align 4
  %next = add i32 %i, 1
  %more = icmp slt i32 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}
""",
    "spin": f"""
define amdgpu_kernel void @spin(ptr addrspace(1) noalias %out, i32 %n) #0 {{
entry:
  %any = icmp sgt i32 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %loop ]
  %acc = phi float [ 0.0, %entry ], [ %acc2, %loop ]
  %fi = sitofp i32 %i to float
  %t = fmul float %fi, {_ONE_NANO}
  %acc2 = fadd float %acc, %t
  %next = add i32 %i, 1
  %more = icmp slt i32 %next, %n
  br i1 %more, label %loop, label %done
done:
  %res = phi float [ 0.0, %entry ], [ %acc2, %loop ]
  store float %res, ptr addrspace(1) %out, align 4
  ret void
}}
""",
}


def is_amd(device: Any) -> bool:
    return getattr(getattr(device, "spec", None), "name", "") == "AMD"


def amd_source(body: str) -> str:
    """A module for tg.codegen's AMD compiler around kernel IR `body` (attribute group #0, workgroup-id intrinsics)."""
    return _AMD_IDS + body + _AMD_ATTRIBUTES


def load_program(device: Any, name: str, source: str) -> Any:
    """Compile and load test kernel `name`: `source` (C) on the CPU, its LLVM IR twin on AMD."""
    if is_amd(device):
        source = amd_source(AMD_KERNELS[name])
    return device.runtime(name, device.compiler.compile(source))


def spin_iterations(device: Any) -> int:
    """Loop trips of the spin kernel: enough to take measurable time, few enough for the RDNA3 emulator."""
    return 2_000 if is_amd(device) else 3_000_000


def settles_idle(device: Any, limit_s: float = 60.0) -> bool:
    """Whether the device's engines stop executing within `limit_s`. A reached signal does not mean an idle engine:
    a submission's signal is written from inside its indirect buffer, and the ring's read pointer passes the IB packet
    only after the IB ends, so under load the host can see the value while the engine still counts as executing (a
    CI failure, reproduced with two `yes` loops). GRBM_STATUS.GUI_ACTIVE on hardware lags the same way."""
    deadline = time.monotonic() + limit_s
    while device.is_busy():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def float_buffer(device: str, values: list[float]) -> Buffer:
    buf = Buffer(device, len(values), float32).allocate()
    buf.copyin(struct.pack(f"{len(values)}f", *values))
    return buf


def read_floats(raw: Any, count: int) -> list[float]:
    """Read floats straight from device memory (no synchronize): what the device has written so far."""
    return list(struct.unpack(f"{count}f", ctypes.string_at(raw.va_addr, 4 * count)))


def write_floats(raw: Any, values: list[float]) -> None:
    ctypes.memmove(raw.va_addr, struct.pack(f"{len(values)}f", *values), 4 * len(values))


@pytest.fixture
def kit() -> SimpleNamespace:
    return SimpleNamespace(
        ADD_ONE=ADD_ONE,
        SCALE_SHIFT=SCALE_SHIFT,
        MARK=MARK,
        float32=float32,
        uint8=uint8,
        int32=int32,
        load_program=load_program,
        spin_iterations=spin_iterations,
        settles_idle=settles_idle,
        amd_source=amd_source,
        AMD_KERNELS=AMD_KERNELS,
        is_amd=is_amd,
        float_buffer=float_buffer,
        read_floats=read_floats,
        write_floats=write_floats,
    )


@pytest.fixture
def fresh_cache_dir(tmp_path: Any) -> Iterator[Any]:
    """Point the on-disk caches at an empty directory for one test (compiles run in the test thread)."""
    with Context(TG_CACHE_DIR=str(tmp_path)):
        yield tmp_path
