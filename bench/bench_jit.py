"""TinyJit benchmark: a step of N tiny kernels, per kernel, plain realize() against a replay, and tinygrad's TinyJit.

    uv run --group bench python bench/bench_jit.py [--kernels 500] [--repeats 5]

The step is a chain of N elementwise kernels on 16 floats (each `.contiguous()` is its own kernel), so the time is
all overhead. Times are medians of the repeats, in microseconds per kernel; the machine is shared (load printed).
The ctypes row replays the same step with each kernel called through ctypes instead of the CPU engine's C call
library (the fallback where no C compiler is installed).
The symbolic row runs the same chain on `x[:n]` with a new value of the Variable n at every call: each replay
patches every kernel's variable argument and launch size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np


def per_kernel_us(run: Callable[[], object], kernels: int, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / kernels * 1e6


def tg_step(kernels: int) -> tuple[Callable[[], object], Callable[[], object]]:
    from tg.hcq import Device
    from tg.tensor import Tensor, TinyJit

    def chain(x: Tensor) -> Tensor:
        for _ in range(kernels):
            x = (x * 1.0001 + 0.5).contiguous()
        return x

    jitted = TinyJit(chain)
    data = np.ones(16, np.float32)

    def plain() -> None:
        chain(Tensor(data)).realize()
        Device["CPU"].synchronize()

    def replay() -> None:
        jitted(Tensor(data))
        Device["CPU"].synchronize()

    return plain, replay


def calls_through_ctypes(run: Callable[[], object]) -> Callable[[], object]:
    """`run` with the CPU engine calling each kernel through ctypes, as on a machine where the C call library
    (tg.hcq.devices.cpu_calls) cannot be built: the per-kernel cost that library removes."""
    from tg.hcq import Device

    engine = Device["CPU"].compute_engine

    def run_with_ctypes() -> object:
        native, engine.native = engine._native_calls(), None
        try:
            return run()
        finally:
            engine.native = native

    return run_with_ctypes


def tg_symbolic_replay(kernels: int) -> Callable[[], object]:
    import itertools

    from tg.hcq import Device
    from tg.tensor import Tensor, TinyJit, Variable

    n = Variable("n", 1, 16)

    @TinyJit
    def chain(x: Tensor, v: object) -> Tensor:
        x = x[:v]
        for _ in range(kernels):
            x = (x * 1.0001 + 0.5).contiguous()
        return x

    base = Tensor(np.ones(16, np.float32)).realize()
    values = itertools.cycle(range(9, 17))

    def replay() -> None:
        chain(base, n.bind(next(values)))
        Device["CPU"].synchronize()

    return replay


def tinygrad_replay(kernels: int) -> Callable[[], object] | None:
    import shutil

    os.environ["DEV"] = "CPU"
    clang = shutil.which("clang") or next((c for v in range(20, 13, -1) if (c := shutil.which(f"clang-{v}"))), None)
    if clang is None:
        print("tinygrad: its CPU backend needs clang, which is not installed", file=sys.stderr)
        return None
    os.environ["CC"] = clang  # tinygrad passes clang flags to CC (tg has already chosen its compiler)
    try:
        from tinygrad import Device, Tensor, TinyJit
    except ImportError:
        print("tinygrad: not installed (uv run --group bench ...)", file=sys.stderr)
        return None

    @TinyJit
    def chain(x: Tensor) -> Tensor:
        for _ in range(kernels):
            x = (x * 1.0001 + 0.5).contiguous()
        return x.realize()

    data = np.ones(16, np.float32)

    def replay() -> None:
        chain(Tensor(data).realize())
        Device[Device.DEFAULT].synchronize()

    return replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; a step of {args.kernels} kernels; median of {args.repeats}")
    plain, replay = tg_step(args.kernels)
    plain_us = per_kernel_us(plain, args.kernels, args.repeats)
    replay(), replay()  # plain call and capture
    replay_us = per_kernel_us(replay, args.kernels, args.repeats)
    print(f"tg plain realize   {plain_us:8.1f} us/kernel")
    print(f"tg TinyJit replay  {replay_us:8.1f} us/kernel  ({plain_us / replay_us:.1f}x lower; bar: >= 10x, <= 15 us)")
    ctypes_us = per_kernel_us(calls_through_ctypes(replay), args.kernels, args.repeats)
    print(f"tg replay, ctypes  {ctypes_us:8.1f} us/kernel  (each call through ctypes: no C call library)")
    symbolic = tg_symbolic_replay(args.kernels)
    symbolic(), symbolic()  # plain call and capture
    symbolic_us = per_kernel_us(symbolic, args.kernels, args.repeats)
    print(f"tg replay, new n   {symbolic_us:8.1f} us/kernel  (a new Variable value every call)")
    theirs = tinygrad_replay(args.kernels)
    if theirs is None:
        return
    theirs(), theirs()
    tinygrad_us = per_kernel_us(theirs, args.kernels, args.repeats)
    print(f"tinygrad TinyJit   {tinygrad_us:8.1f} us/kernel  (tg replay is {tinygrad_us / replay_us:.1f}x faster)")


if __name__ == "__main__":
    main()
