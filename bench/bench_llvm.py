"""CPU:LLVM against the C path, same run: compile latency per kernel and kernel speed on the bench_opt workloads.

    uv run python bench/bench_llvm.py [--repeats 5]

Compile latency: every kernel the workloads compile is rendered both ways and compiled with the cache off, by the C
compiler(s) on PATH (gcc; clang when installed) and by llvmlite in process; the median over kernels and the total are
printed. Kernel speed: each workload runs on `CPU` (C, compiled by the C compiler) and on `CPU:LLVM`, timed in turns
(median of --repeats); the ratio is C time / LLVM time (above 1: LLVM is faster). The machine is shared: the load
average is printed first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(__file__))

from bench_opt import alternating_medians, inputs  # noqa: E402


def workloads(device: str, data: dict) -> dict[str, Callable[[], object]]:
    from tg.hcq import Device
    from tg.tensor import Tensor

    def timed(build: Callable[[], Tensor]) -> Callable[[], object]:
        def run() -> None:
            build().realize()
            Device[device].synchronize()

        return run

    a, b = Tensor(data["a1024"], device=device).realize(), Tensor(data["b1024"], device=device).realize()
    x, w = Tensor(data["conv_x"], device=device).realize(), Tensor(data["conv_w"], device=device).realize()
    v = Tensor(data["v"], device=device).realize()
    p, q, r = (Tensor(data[k], device=device).realize() for k in ("p", "q", "r"))
    return {
        "matmul 1024": timed(lambda: a @ b),
        "conv2d": timed(lambda: x.conv2d(w, padding=1)),
        "sum 16M": timed(lambda: v.sum()),
        "chain 16M": timed(lambda: (p * q + r).maximum(0)),
    }


def compile_seconds(compile_one: Callable[[str], bytes], sources: list[str]) -> list[float]:
    times = []
    for src in sources:
        start = time.perf_counter()
        compile_one(src)
        times.append(time.perf_counter() - start)
    return times


def kernel_asts(build: Callable[[], object]) -> list:
    """The kernel ASTs a workload's schedule runs (what the engine would compile)."""
    from tg.codegen.schedule.schedule import KernelCall, create_schedule

    schedule = create_schedule((build().uop,))
    return [item.ast for item in schedule.items if isinstance(item, KernelCall)]


def compile_latency(asts: list) -> None:
    """Render every kernel both ways, compile it uncached with each compiler; print median and total per compiler."""
    from tg.codegen.compiler import CCompiler
    from tg.codegen.compiler.llvm import LLVMCompiler
    from tg.codegen.pipeline import CodegenFlags, kernel_to_program
    from tg.codegen.render.c import CRenderer
    from tg.codegen.render.llvmir import LLVMRenderer

    flags = CodegenFlags()
    c_sources = [kernel_to_program(ast, CRenderer.for_machine(cores=2), flags).src for ast in asts]
    llvm_sources = [kernel_to_program(ast, LLVMRenderer.for_machine(cores=2), flags).src for ast in asts]
    compilers: list[tuple[str, Callable[[str], bytes], list[str]]] = []
    for name in ("gcc", "clang", "clang-15"):
        if shutil.which(name):
            compilers.append((name, CCompiler(name).compile_uncached, c_sources))
        else:
            print(f"  {name}: not installed, no column")
    llvm = LLVMCompiler()
    llvm.compile_uncached(llvm_sources[0])  # first use initializes LLVM's targets
    compilers.append(("llvmlite (in process)", llvm.compile_uncached, llvm_sources))
    print(f"compile latency over {len(asts)} kernels (cache off):")
    for name, compile_one, sources in compilers:
        times = compile_seconds(compile_one, sources)
        print(f"  {name:<24} median {statistics.median(times) * 1e3:8.1f} ms   total {sum(times) * 1e3:8.1f} ms")


def kernel_asts_of(data: dict) -> list:
    from tg.tensor import Tensor

    a, b = Tensor(data["a1024"]), Tensor(data["b1024"])
    x, w = Tensor(data["conv_x"]), Tensor(data["conv_w"])
    v, p, q, r = (Tensor(data[k]) for k in ("v", "p", "q", "r"))
    asts: list = []
    for build in (lambda: a @ b, lambda: x.conv2d(w, padding=1), lambda: v.sum(), lambda: (p * q + r).maximum(0)):
        asts += kernel_asts(build)
    return list(dict.fromkeys(asts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("CC", "gcc")
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    data = inputs()
    runs = {device: workloads(device, data) for device in ("CPU", "CPU:LLVM")}
    names = list(runs["CPU"])
    print(f"kernel speed (median of {args.repeats}, timed in turns):")
    print(f"  {'workload':<14}{'C (gcc) ms':>12}{'LLVM ms':>12}{'C/LLVM':>9}")
    for name in names:
        c_time, llvm_time = alternating_medians([runs["CPU"][name], runs["CPU:LLVM"][name]], args.repeats)
        print(f"  {name:<14}{c_time * 1e3:12.2f}{llvm_time * 1e3:12.2f}{c_time / llvm_time:9.2f}")
    compile_latency(kernel_asts_of(data))


if __name__ == "__main__":
    main()
