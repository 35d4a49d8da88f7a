"""The CPU engine's fixed cost per launch, with kernel calls made from C (tg.hcq.devices.cpu_calls) and through ctypes.

    CC=gcc uv run python bench/bench_launch.py [--launches 500] [--repeats 11] [--decode 20]

Rows, each timed in turns with the C call library and with calls through ctypes (the fallback without a C
compiler, as the engine ran before the library), in one process so that a change of load hits both alike:
  - a command list of N launches of a trivial one-call kernel (the norms and small elementwise kernels of a decode
    step), microseconds per launch;
  - the same with every launch split in 8 calls across the core threads (kept split whatever its speed);
  - with --decode: the SmolLM2-135M decode step replayed by TinyJit (milliseconds per step, and the CPU time of the
    thread that runs the list).
Medians of the repeats; the machine is shared, so the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

CALLS_PER_SPLIT_LAUNCH = 8
KERNEL = "void bump(float* restrict a, int core_id) { for (int i = 0; i < 16; i++) a[core_id * 16 + i] += 1.0f; }"


def launch_list(launches: int, calls: int) -> Callable[[], None]:
    """A function that submits one list of `launches` launches of `calls` calls each and waits for it."""
    from tg.codegen import dtypes
    from tg.hcq import Buffer, Device

    dev = Device["CPU"]
    program = dev.runtime("bump", dev.compiler.compile(KERNEL))
    buf = Buffer("CPU", 16 * calls, dtypes.float32).ensure_allocated()
    recorded = dev.hw_compute_queue_t()
    for _ in range(launches):
        recorded.exec(program, program.fill_kernargs((buf.raw,)), (calls, 1, 1), (1, 1, 1))

    def run() -> None:
        queue = dev.hw_compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
        queue.commands.extend(recorded.commands)
        queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
        dev.synchronize()

    return run


def decode_step() -> Callable[[], None]:
    from tg.hcq import Device
    from tg.llm import registry
    from tg.llm.generate import Generator
    from tg.llm.model import load_model

    model, _ = load_model(registry.resolve(registry.EMBEDDED_NAME), max_context=512)
    generator = Generator(model)
    generator.prefill([(17 * i + 5) % 40000 + 100 for i in range(256)])
    dev = Device["CPU"]

    def run() -> None:
        if len(generator.cached) >= 500:
            del generator.cached[300:]  # (stay inside the context: the step replays the same kernels)
        generator._forward([42], len(generator.cached))
        generator.cached.append(42)
        dev.synchronize()

    return run


def set_c_calls(on: bool, native: object) -> None:
    from tg.hcq import Device

    dev = Device["CPU"]
    dev.compute_engine.native = native if on else None
    dev.cores.native = native if on else None  # (core threads spin for the next launch only with the library)


def in_turns(run: Callable[[], None], repeats: int, native: object) -> dict[bool, tuple[float, float]]:
    """Median (wall seconds, CPU seconds of this thread) per mode, the modes alternating run by run."""
    for on in (True, False):
        set_c_calls(on, native)
        run()
    times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(repeats):
        for on in (True, False):
            set_c_calls(on, native)
            start, cpu = time.perf_counter(), time.thread_time()
            run()
            times[on].append((time.perf_counter() - start, time.thread_time() - cpu))
    set_c_calls(True, native)
    return {on: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)) for on, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--decode", type=int, default=0, help="decode steps per mode (0: skip the decode row)")
    args = parser.parse_args()

    from tg.hcq import Device
    from tg.hcq.devices import cpu_workers

    native = Device["CPU"].compute_engine._native_calls()
    if native is None:
        print("the C call library could not be built here (no C compiler): nothing to compare")
        return
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; medians of {args.repeats}")
    single = in_turns(launch_list(args.launches, 1), args.repeats, native)
    serial_below = cpu_workers.SERIAL_BELOW_S
    cpu_workers.SERIAL_BELOW_S = 0.0  # keep the split launches split, however fast they are
    split = in_turns(launch_list(args.launches, CALLS_PER_SPLIT_LAUNCH), args.repeats, native)
    cpu_workers.SERIAL_BELOW_S = serial_below
    for name, result in (("one-call launches", single), (f"{CALLS_PER_SPLIT_LAUNCH}-call launches", split)):
        c_us, ctypes_us = (result[on][0] / args.launches * 1e6 for on in (True, False))
        print(f"{name:18} C calls {c_us:6.2f} us/launch   ctypes {ctypes_us:6.2f} us/launch")
    if args.decode:
        decode = in_turns(decode_step(), args.decode, native)
        (c_s, c_cpu), (ctypes_s, ctypes_cpu) = decode[True], decode[False]
        print(f"decode step        C calls {c_s * 1e3:6.2f} ms ({c_cpu * 1e3:.2f} ms CPU on this thread)   "
              f"ctypes {ctypes_s * 1e3:6.2f} ms ({ctypes_cpu * 1e3:.2f} ms CPU)")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
