"""Lifetime, errors and shutdown of the CPU HCQ device."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tg.hcq import Device, hcq_profile

# A device bug shows up as a hang: fail that test quickly instead of stalling the suite.
pytestmark = pytest.mark.timeout(60)


def test_queued_commands_keep_their_signal_memory_alive() -> None:
    dev = Device["CPU"]
    sig = dev.new_signal()
    address = sig.value_addr
    queue = dev.hw_compute_queue_t().timestamp(sig)
    del sig
    assert dev.new_signal().value_addr != address  # the slot is not handed out while the queue names it
    del queue
    assert dev.new_signal().value_addr == address


def test_a_failing_command_is_reported_by_synchronize(kit) -> None:
    from tg.codegen.flags import Context

    with Context(CPU_COUNT=1):
        dev = Device["CPU:61"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = dev.allocator.alloc(4)
    args = prg.fill_kernargs((out,))

    class NotAProgram:
        name = "broken"

    queue = dev.hw_compute_queue_t().exec(NotAProgram(), args, (1, 1, 1), (1, 1, 1))
    queue.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    with pytest.raises(RuntimeError, match="CPU:61 failed earlier.*function"):
        dev.synchronize()


def test_hcq_profile_without_a_queue_stamps_with_its_own_queues(kit) -> None:
    dev = Device["CPU"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = dev.allocator.alloc(4 * 8)
    with hcq_profile(dev, enabled=True, desc="mark") as (start, end):
        prg(out, global_size=(8, 1, 1))
    dev.synchronize()
    assert 0 < start.timestamp <= end.timestamp


def test_hcq_profile_stamps_are_written_when_synchronize_returns(kit) -> None:
    # regression: the end stamp's own queue signalled nothing, so synchronize could return before it ran
    dev = Device["CPU"]
    prg = kit.load_program(dev, "mark", kit.MARK)
    out = dev.allocator.alloc(4 * 8)
    for _ in range(50):
        with hcq_profile(dev, enabled=True, desc="mark") as (start, end):
            prg(out, global_size=(8, 1, 1))
        dev.synchronize()
        assert end.timestamp > 0


def test_disabled_profiling_creates_no_signals() -> None:
    with hcq_profile(Device["CPU"], enabled=False, desc="nothing") as (start, end):
        pass
    assert start is None and end is None


SCRIPT = """
import struct
from tg.hcq import Device
dev = Device["CPU"]
src = "void mark(float* restrict out, int core_id) { out[core_id] = 1.0f; }"
prg = dev.runtime("mark", dev.compiler.compile(src))
out = dev.allocator.alloc(4 * 64)
for _ in range(20):
    prg(out, global_size=(64, 1, 1))
{extra}
print("done")
"""


@pytest.mark.parametrize(
    "extra",
    [
        "dev.synchronize()",
        "",  # exit with work still queued
        "dev.hw_compute_queue_t().wait(dev.new_signal(), 1).submit(dev)",  # an engine blocked forever
    ],
)
def test_process_exits_cleanly_with_worker_threads(extra: str) -> None:
    code = textwrap.dedent(SCRIPT).replace("{extra}", extra)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"


def test_a_kernel_longer_than_the_timeout_is_not_a_hang(kit) -> None:
    from tg.codegen.flags import Context

    sleeper = "#include <unistd.h>\nvoid nap(int ms, int core_id) { usleep(ms * 1000); }\n"
    with Context(CPU_COUNT=1):
        dev = Device["CPU:63"]
    prg = kit.load_program(dev, "nap", sleeper)
    prg(vals=(700,))
    dev.synchronize(timeout=200)  # 700 ms without a signal change, but the device is busy all along
    # while a device blocked on a signal nobody sets is not busy: that wait still times out
    never = dev.new_signal()
    target = dev.next_timeline()
    dev.hw_compute_queue_t().wait(never, 1).signal(dev.timeline_signal, target).submit(dev)
    with pytest.raises(RuntimeError, match="Wait timeout"):
        dev.timeline_signal.wait(target, timeout=150)
    never.value = 1
    dev.synchronize()
