"""Running a schedule: each kernel call launches its cached program on the buffers behind its BUFFER nodes, the
consecutive launches on one HCQ device in one command list (LaunchBatch).

DEBUG=2 prints one line per kernel launch (device, name, shape, time, GFLOP/s, GB/s) and per copy. A copy kernel
marked `kept` whose output is still valid from an earlier run (tg.hcq.engine.kept) is not launched: the kernels after
it read the kept copy instead (DEBUG=3 says so).
"""

from __future__ import annotations

import time
from typing import Any

from tg.codegen.flags import DEBUG
from tg.codegen.schedule.schedule import CopyCall, KernelCall, Schedule
from tg.codegen.uop.ops import UOp
from tg.hcq.engine.buffers import buffer_of
from tg.hcq.engine.capture import CopyLaunch, KernelLaunch, is_capturing, record
from tg.hcq.engine.counters import GlobalCounters
from tg.hcq.engine.kept import keep_copy, kept_copy
from tg.hcq.engine.programs import CompiledProgram, get_program
from tg.hcq.flags import PROFILE
from tg.hcq.memory import HCQBuffer
from tg.hcq.program import HCQProgram
from tg.hcq.symbolic import resolve

_NO_VALUES: dict[str, int] = {}


def run_schedule(schedule: Schedule) -> None:
    """Run every kernel call and copy of `schedule`, in order. A TinyJit capture gets every kernel (a replay must
    copy again whatever the source holds then), and keeps no copy. Consecutive kernels on one HCQ device go to it as
    one command list (see LaunchBatch)."""
    reused: dict[UOp, UOp] = {}  # a kept copy kernel's output buffer -> the kept copy that stands for it
    capturing = is_capturing()
    batch = None if capturing or DEBUG >= 2 or PROFILE else LaunchBatch()  # (those time or record each launch)
    try:
        for item in schedule.items:
            if not isinstance(item, KernelCall):
                if batch is not None:
                    batch.submit()  # (a copy reads what the kernels before it wrote)
                run_copy(CopyCall(item.dest, reused.get(item.src, item.src)) if reused else item)
                continue
            if reused and any(b in reused for b in item.buffers):
                item = KernelCall(item.ast, tuple(reused.get(b, b) for b in item.buffers), item.kept)
            if not item.kept or capturing:
                run_kernel(item, schedule.var_vals, batch)
            elif (copy := kept_copy(item)) is not None:
                reused[item.buffers[0]] = copy
                if DEBUG >= 3:
                    print(f"kept copy reused: {item.ast.arg.name} (no launch)")
            else:
                run_kernel(item, schedule.var_vals, batch)
                keep_copy(item)
    finally:  # (a launch that failed to start leaves the ones before it submitted, as when each went alone)
        if batch is not None:
            batch.submit()


class LaunchBatch:
    """Kernel launches on one HCQ device recorded into one command list: `wait(timeline) . memory_barrier . exec
    ... exec . signal(next timeline)`, submitted once. Each launch of a list runs after the one before has finished
    (the CPU engine waits for a launch's last call; an AMD dispatch ends with a CS partial flush), as a TinyJit
    replay's list does. The CPU engine runs the list's launches in one C call instead of taking a list per kernel
    (a hand-off, a wake-up and Python per kernel), and the host records one queue instead of one per kernel."""

    def __init__(self) -> None:
        self.device: Any = None
        self.queue: Any = None

    def add(self, kernel: CompiledProgram, buffers: list[Any], global_size: tuple, vals: tuple[int, ...]) -> bool:
        """Record the launch; False when it cannot be batched (not an HCQ program, or arguments that are not HCQ
        buffers): the caller launches it alone, where HCQProgram.run reports a wrong argument."""
        program, raws = kernel.program, tuple(b.raw for b in buffers)
        if not isinstance(program, HCQProgram) or not all(isinstance(raw, HCQBuffer) for raw in raws):
            self.submit()  # (the launches before it first, in order)
            return False
        device = program.dev
        if device is not self.device:
            self.submit()
            self.device = device
            self.queue = device.hw_compute_queue_t().wait(device.timeline_signal, device.timeline_value - 1)
            self.queue.memory_barrier()
        arguments = program.fill_kernargs(raws, vals)
        self.queue.exec(program, arguments, global_size, kernel.source.local_size)
        return True

    def submit(self) -> None:
        if self.queue is not None:
            device = self.device
            self.queue.signal(device.timeline_signal, device.next_timeline()).submit(device)
        self.device = self.queue = None


def launch_values(kernel: CompiledProgram, var_vals: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The int arguments (one per variable the kernel takes) and the launch size for these variable values."""
    vals = tuple(resolve(variable, var_vals) for variable in kernel.source.variables)
    return vals, tuple(resolve(size, var_vals) for size in kernel.source.global_size)


def run_kernel(call: KernelCall, var_vals: dict[str, int] | None = None, batch: LaunchBatch | None = None) -> None:
    kernel = get_program(call.device, call.ast)
    buffers = [buffer_of(node) for node in call.buffers]
    buffers[0].note_write()
    timed = DEBUG >= 2
    start = time.perf_counter()
    if kernel.source.variables:
        vals, global_size = launch_values(kernel, var_vals or {})
    else:
        vals, global_size = (), kernel.source.global_size
    if batch is not None and batch.add(kernel, buffers, global_size, vals):
        seconds = None
    else:
        seconds = kernel.program(
            *(b.raw for b in buffers), global_size=global_size, local_size=kernel.source.local_size, vals=vals,
            wait=timed,
        )  # fmt: skip
    if is_capturing():
        record(KernelLaunch(kernel, tuple(buffers), call.buffers, var_vals or _NO_VALUES, call.kept))  # (never mutated)
    memory = sum(b.nbytes for b in buffers)
    GlobalCounters.count_launch(kernel.source.ops, memory)
    if timed:
        seconds = seconds if seconds is not None else time.perf_counter() - start
        GlobalCounters.time_sum_s += seconds
        print(debug_line(call.device, kernel, seconds, memory))


def debug_line(device: str, kernel: CompiledProgram, seconds: float, memory: int) -> str:
    """The DEBUG=2 line of one launch."""
    gflops = kernel.source.ops / seconds / 1e9 if seconds > 0 else 0.0
    gbytes = memory / seconds / 1e9 if seconds > 0 else 0.0
    shape = "(" + ",".join(map(str, kernel.source.loop_sizes)) + ")"
    return (
        f"*** {device:<8} {GlobalCounters.kernel_count:5d} {kernel.name:<28} shape {shape:<20} "
        f"{seconds * 1e6:10.2f} us {gflops:9.2f} GFLOP/s {gbytes:8.2f} GB/s"
    )


def run_copy(call: CopyCall) -> None:
    source, dest = buffer_of(call.src), buffer_of(call.dest)
    record(CopyLaunch(source, dest, (call.src, call.dest)))
    if source.nbytes:
        dest.copyin(source.copyout(memoryview(bytearray(source.nbytes))))
    if DEBUG >= 2:
        print(f"*** copy {source.device} -> {dest.device} {source.nbytes} bytes")
