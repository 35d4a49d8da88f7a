"""float16 -> float32 of a few million elements on the CPU device: the C renderer's `_Float16` cast against its integer
form (tg_half_bits_to_float, what a Target with scalar_half_conversion gets), each compiled by gcc and by clang.

Run: `uv run python bench/bench_half_cast.py [ELEMENTS]` (default 4 Mi). One process renders the widening kernel both
ways, compiles each with every installed compiler (bench/compilers.py) and times the four in turns, many rounds;
it prints the median per variant and the load average. The data are normal float16 values (a subnormal one makes
the integer form multiply a float32 denormal, slow on x86; see tg.codegen.render.c).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import numpy as np
from compilers import installed_compilers

from tg.codegen import KernelInfo, UOp, dtypes
from tg.codegen.compiler.c import CCompiler
from tg.codegen.lower import lower
from tg.codegen.render.c import CRenderer
from tg.hcq import Buffer, Device
from tg.hcq.host import cpu_target


def widening_kernel(n: int) -> UOp:
    out, a = UOp.param(0, dtypes.float32, n), UOp.param(1, dtypes.float16, n)
    i = UOp.range(n, 0)
    return UOp.sink(out.index(i).store(a.index(i).load().cast(dtypes.float32)), arg=KernelInfo("widen"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("elements", type=int, nargs="?", default=4 << 20)
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args()
    n, dev = args.elements, Device["CPU"]
    halves = np.random.default_rng(0).uniform(-4, 4, n).astype(np.float16)
    out, source = (
        Buffer("CPU", n, dtypes.float32).ensure_allocated(),
        Buffer("CPU", n, dtypes.float16).ensure_allocated(),
    )
    source.copyin(halves.tobytes())
    programs = {}
    for cc in installed_compilers():
        compiler = CCompiler(cc)
        for integer in (False, True):
            target = dataclasses.replace(cpu_target(CRenderer, 1, compiler), scalar_half_conversion=integer)
            rendered = CRenderer(target).render(lower(widening_kernel(n), target))
            program = dev.runtime(rendered.name, compiler.compile(rendered.src))
            programs[f"{cc} {'integer form' if integer else '_Float16 cast'}"] = (program, rendered.global_size)
    times: dict[str, list[float]] = {name: [] for name in programs}
    load = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name, (program, global_size) in programs.items():
            start = time.perf_counter()
            program(out.raw, source.raw, global_size=global_size, wait=True)
            times[name].append(time.perf_counter() - start)
    np.testing.assert_array_equal(np.frombuffer(out.as_buffer(), np.float32), halves.astype(np.float32))
    print(f"{n} float16 -> float32, one core, median of {args.rounds} interleaved rounds")
    for name, seconds in times.items():
        print(f"  {name:<24} {statistics.median(seconds) * 1e3:7.3f} ms")
    print(f"load average before/after: {load:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
