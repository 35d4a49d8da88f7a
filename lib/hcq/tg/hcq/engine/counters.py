"""`GlobalCounters`: what the engine has launched since the last reset (kernels, estimated work, time)."""

from __future__ import annotations


class GlobalCounters:
    """Process-wide counters. `time_sum_s` only grows while kernels are timed (DEBUG >= 2)."""

    kernel_count: int = 0  # kernels launched
    global_ops: int = 0  # estimated ALU operations of those kernels
    global_mem: int = 0  # bytes of the buffers they read and write
    time_sum_s: float = 0.0  # measured kernel time

    @classmethod
    def count_launch(cls, ops: int, memory: int) -> None:
        """Count one kernel launch: its estimated operations and the bytes of its buffers."""
        cls.kernel_count += 1
        cls.global_ops += ops
        cls.global_mem += memory

    @classmethod
    def reset(cls) -> None:
        cls.kernel_count = 0
        cls.global_ops = 0
        cls.global_mem = 0
        cls.time_sum_s = 0.0
