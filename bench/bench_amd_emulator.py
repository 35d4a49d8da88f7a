"""RDNA3 emulator speed: wave instructions executed per second (one instruction = one wave's, all 32 lanes).

Run: uv run python bench/bench_amd_emulator.py [--repeats N]

Three kernels in LLVM IR, compiled by llvmlite for gfx1100 (wave32) and launched by the emulator tests' harness
(tests/drivers/amd_emu: flat memory, kernargs, the launch a command processor would make):
- elementwise: out[i] = a[i] * b[i] + 1 over 65536 floats (1024 workgroups of straight-line code, memory heavy);
- dot loop: each of 4096 threads sums a[i] * b[k] over a 256-trip loop (ALU and branch heavy, few waves);
- lds reduce: the tests' 128-thread workgroup tree sum through LDS with a barrier per step, 128 workgroups.
The first run of each kernel also decodes it; the figure is the median over the repeats after one warm-up.
Reported: instructions, seconds (wall and process CPU), instructions per second. Each run includes the harness's
memory setup, which is small next to the emulation.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the tests' harness and kernels

from tests.drivers.amd_emu import kernels  # noqa: E402
from tests.drivers.amd_emu.harness import run_kernel  # noqa: E402
from tests.drivers.amd_emu.llvm_kernels import compile_ir  # noqa: E402
from tg.drivers.amd.rdna3 import RDNA3Emulator  # noqa: E402

OPERANDS = "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b"
ELEMENTWISE = kernels.kernel(
    "elementwise",
    OPERANDS,
    """
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %m = fmul float %x, %y
  %s = fadd float %m, 1.0
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %s, ptr addrspace(1) %po
  ret void""",
)
DOT_LOOP = (
    kernels.kernel(
        "dot_loop",
        OPERANDS,
        """
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
  ret void""",
    ).replace("#0 {\n", "#0 {\nentry:\n", 1)
    + '!0 = distinct !{!0, !1}\n!1 = !{!"llvm.loop.unroll.disable"}\n'
)


def tree_sum(a: np.ndarray, groups: int) -> np.ndarray:
    """The LDS kernel's order of additions: halves folded onto each other, 64 then 32 ... then 1 apart."""
    tree = a.reshape(groups, 128).copy()
    stride = 64
    while stride:
        tree[:, :stride] = tree[:, :stride] + tree[:, stride : 2 * stride]
        stride //= 2
    return tree[:, 0]


class Workload(NamedTuple):
    ir: str
    name: str
    threads: int
    local: int  # threads per workgroup
    outputs: int
    verify: Callable[[np.ndarray, np.ndarray, np.ndarray], bool]  # (out, a, b)


def product_plus_one(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(out, a * b + 1)


def dot_with_b(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    return np.allclose(out, a * b[:256].sum(), rtol=1e-4, atol=1e-3)


def workgroup_tree_sums(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(out, tree_sum(a, len(out)))


KERNELS = {
    "elementwise": Workload(ELEMENTWISE, "elementwise", 65536, 64, 65536, product_plus_one),
    "dot loop": Workload(DOT_LOOP, "dot_loop", 4096, 64, 4096, dot_with_b),
    "lds reduce": Workload(kernels.LDS_REDUCE, "lds_reduce", 16384, 128, 128, workgroup_tree_sums),
}


def run_once(emulator: RDNA3Emulator, code: bytes, work: Workload) -> tuple[int, float, float]:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(work.threads).astype(np.float32), rng.standard_normal(work.threads).astype(np.float32)
    out = np.zeros(work.outputs, dtype=np.float32)
    grid, local = (work.threads // work.local, 1, 1), (work.local, 1, 1)
    before = emulator.instructions_executed
    wall, cpu = time.perf_counter(), time.process_time()
    run = run_kernel("", [out, a, b], grid=grid, local=local, name=work.name, emulator=emulator, code=code)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if not work.verify(run.read(0, out), a, b):
        raise SystemExit(f"{work.name}: wrong result")
    return emulator.instructions_executed - before, wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'kernel':<12} {'instructions':>12} {'wall s':>8} {'cpu s':>8} {'inst/s (wall)':>14} {'inst/s (cpu)':>13}")
    for label, work in KERNELS.items():
        code = compile_ir(work.ir)
        emulator = RDNA3Emulator()
        run_once(emulator, code, work)  # warm-up: decodes and compiles each instruction once
        runs = [run_once(emulator, code, work) for _ in range(args.repeats)]
        count = runs[-1][0]
        wall = statistics.median(r[1] for r in runs)
        cpu = statistics.median(r[2] for r in runs)
        print(f"{label:<12} {count:>12} {wall:>8.3f} {cpu:>8.3f} {count / wall:>14,.0f} {count / cpu:>13,.0f}")


if __name__ == "__main__":
    main()
