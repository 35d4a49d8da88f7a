"""CPU device scaling: the same compute-bound kernel on a 1-core and a 2-core CPU device.

    uv run python bench/bench_cpu_cores.py [--repeats 9] [--cores 2]

A launch of 64 core_ids is split across the device's core threads; ctypes releases the GIL during each
C call, so N cores should give close to Nx. Prints the median of several repeats per core count and the
ratio (target >= 1.8x on 2 cores). The machine may be shared: medians, not minimums, and expect noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from tg.codegen.flags import Context
from tg.hcq import Device

# Each core_id runs a chunk of independent, long dependency chains: pure arithmetic, no memory traffic.
KERNEL = """
void chains(float* restrict out, int iterations, int core_id) {
  float acc[8];
  for (int j = 0; j < 8; j++) acc[j] = (float)(core_id + j) * 1e-3f;
  for (int i = 0; i < iterations; i++)
    for (int j = 0; j < 8; j++) acc[j] = acc[j] * 0.999999f + 1e-7f;
  float total = 0.0f;
  for (int j = 0; j < 8; j++) total += acc[j];
  out[core_id] = total;
}
"""
LAUNCH = 64


def open_device(cores: int, iterations: int):
    """A fresh CPU device with `cores` core threads and a launcher for the benchmark kernel on it."""
    with Context(CPU_COUNT=cores):
        dev = Device[f"CPU:{100 + cores}"]
    assert dev.cores.count == cores
    prg = dev.runtime("chains", dev.compiler.compile(KERNEL))
    out = dev.allocator.alloc(4 * LAUNCH)

    def launch() -> tuple[float, float]:
        """(wall seconds, process CPU seconds) of one launch, waited for."""
        wall, cpu = time.perf_counter(), time.process_time()
        prg(out, global_size=(LAUNCH, 1, 1), vals=(iterations,), wait=True)
        return time.perf_counter() - wall, time.process_time() - cpu

    launch()  # warm-up: starts the threads, loads the code
    return launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=400_000)
    args = parser.parse_args()
    launchers = {1: open_device(1, args.iterations), args.cores: open_device(args.cores, args.iterations)}
    samples: dict[int, list[tuple[float, float]]] = {1: [], args.cores: []}
    for _ in range(args.repeats):  # interleaved, so background load hits both configurations alike
        for cores, launch in launchers.items():
            samples[cores].append(launch())
    print(f"kernel: {LAUNCH} core_ids x {args.iterations} iterations x 8 chains; median of {args.repeats}, interleaved")
    for cores, runs in samples.items():
        wall = statistics.median(w for w, _ in runs)
        busy = statistics.median(c / w for w, c in runs)
        print(f"CPU_COUNT={cores:<3d} {wall * 1e3:8.1f} ms   cores busy during the launch: {busy:.2f}")
    one = statistics.median(w for w, _ in samples[1])
    many = statistics.median(w for w, _ in samples[args.cores])
    print(f"speed-up {args.cores} cores vs 1: {one / many:.2f}x (target >= {0.9 * args.cores:.1f}x)")
    load = os.getloadavg()[0]
    print(f"machine load average {load:.2f} on {os.cpu_count()} cores; a busy machine caps the speed-up")


if __name__ == "__main__":
    main()
