"""Launch cost of the AMD device on the simulated Navi31 (DEV=MOCKKFD+AMD): a TinyJit step of N tiny kernels.

    uv run python bench/bench_amd_launch.py [--kernels 500] [--repeats 3]

The step is a chain of N elementwise kernels on 16 floats (each `.contiguous()` is its own kernel), so the time is
all overhead: on the AMD device a replay is one submit (one indirect buffer of N dispatches on the PM4 ring), each
dispatch run by the RDNA3 emulator. Rows, in microseconds per kernel (medians of the repeats):
  - replay, host side: until the replay's submit returns (encode the queue, write the IB, ring the doorbell);
  - replay, launch cost: end to end with shader engines that run nothing, so what is left is the driver and the
    simulated command processor (fetching the IB, the register writes, DISPATCH_DIRECT, the signal and interrupt);
  - replay, end to end: until the device finished every dispatch (the emulator's time included);
  - plain realize: the same chain launched kernel by kernel, each its own submit;
  - the CPU device's replay of the same step, measured in the same run (the peer the simulator is compared with).
The machine is shared: the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

AMD = "MOCKKFD+AMD"


def chain_step(device: str, kernels: int) -> tuple[Callable[[], object], Callable[[], object], Callable[[], float]]:
    """(plain, replay, replay_submit_seconds) runs of the chain on `device`; each waits for the device at its end."""
    from tg.hcq import Device
    from tg.tensor import Tensor, TinyJit

    def chain(x: Tensor) -> Tensor:
        for _ in range(kernels):
            x = (x * 1.0001 + 0.5).contiguous()
        return x

    jitted = TinyJit(chain)
    data = np.ones(16, np.float32)
    dev = Device[device]

    def plain() -> None:
        chain(Tensor(data, device=device)).realize()
        dev.synchronize()

    def replay() -> None:
        jitted(Tensor(data, device=device))
        dev.synchronize()

    def replay_submit() -> float:
        x = Tensor(data, device=device).realize()
        dev.synchronize()
        start = time.perf_counter()
        jitted(x)
        submitted = time.perf_counter() - start
        dev.synchronize()
        return submitted

    return plain, replay, replay_submit


class NoShaderEngines:
    """Shader engines that run nothing: what a dispatch costs without the emulator."""

    def run_dispatch(self, memory: object, launch: object) -> None:
        pass


def median_us(run: Callable[[], object], kernels: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / kernels * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, repeats = args.kernels, args.repeats
    print(f"load average {os.getloadavg()[0]:.2f}; a step of {n} kernels on 16 floats; median of {repeats}")

    from tg.hcq import Device

    plain, replay, replay_submit = chain_step(AMD, n)
    replay(), replay(), replay()  # plain call, the capture, a first replay (which encodes the launches)
    submit_us = statistics.median(replay_submit() for _ in range(repeats)) / n * 1e6
    simulated_gpu = Device[AMD].iface.device
    emulator, simulated_gpu.shader_engines = simulated_gpu.shader_engines, NoShaderEngines()
    try:
        launch_us = median_us(replay, n, repeats)
    finally:
        simulated_gpu.shader_engines = emulator
    replay_us = median_us(replay, n, repeats)
    plain_us = median_us(plain, n, repeats)
    cpu_plain, cpu_replay, _ = chain_step("CPU", n)
    cpu_replay(), cpu_replay()
    cpu_replay_us = median_us(cpu_replay, n, repeats)

    print(f"{AMD} replay, host side (one submit)   {submit_us:9.1f} us/kernel")
    print(f"{AMD} replay, launch cost (no emulator) {launch_us:9.1f} us/kernel")
    print(f"{AMD} replay, end to end (emulated)     {replay_us:9.1f} us/kernel")
    print(f"{AMD} plain realize, end to end         {plain_us:9.1f} us/kernel")
    print(f"CPU replay, end to end                  {cpu_replay_us:9.1f} us/kernel")
    print(f"ratios: AMD launch cost / CPU replay {launch_us / cpu_replay_us:.1f}x; AMD replay / CPU replay "
          f"{replay_us / cpu_replay_us:.1f}x; AMD plain / AMD replay {plain_us / replay_us:.1f}x")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
