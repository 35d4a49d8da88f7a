"""The engine: from kernel ASTs and schedules to programs running on devices. Lives below the Tensor.

    realize(*nodes), buffer_from_bytes(...), read_bytes(node)   tensor graphs in, realized memory out
    buffer_over(memory)                                          a BUFFER node over an existing Buffer (DISK views)
    buffer_at_address(address, size, dtype, device)              a BUFFER node over host memory the caller owns
    run_schedule(schedule)                                       launch a schedule's kernels and copies
    get_program(device, ast)                                     a cached, compiled program (bounded LRU)
    time_kernel(ast, device, flags)                              compile and time one kernel on scratch buffers
    GlobalCounters                                               kernels launched, estimated ops and bytes, time

Source comes from the one pipeline function `tg.codegen.pipeline.kernel_to_program`; this package adds what
needs a device: compiling, loading, caching, launching, counting and the DEBUG lines. tg.tensor, tg-beam,
tg-replay and the JIT all go through it. Import it explicitly (`import tg.hcq` does not load it, so that the
runtime alone starts no compiler).
"""

from tg.hcq.engine.buffers import buffer_of
from tg.hcq.engine.counters import GlobalCounters
from tg.hcq.engine.programs import (
    CompiledProgram,
    clear_program_cache,
    compile_program,
    get_program,
    program_cache_size,
    program_cache_stats,
)
from tg.hcq.engine.realize import buffer_at_address, buffer_from_bytes, buffer_over, read_bytes, realize
from tg.hcq.engine.run import run_schedule
from tg.hcq.engine.timing import KernelTiming, scratch_buffers, time_kernel, time_program

__all__ = [
    "CompiledProgram", "GlobalCounters", "KernelTiming", "buffer_at_address", "buffer_from_bytes", "buffer_of",
    "buffer_over", "clear_program_cache", "compile_program", "get_program", "program_cache_size", "program_cache_stats",
    "read_bytes", "realize", "run_schedule", "scratch_buffers", "time_kernel", "time_program",
]  # fmt: skip
