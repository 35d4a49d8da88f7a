"""The runtime's flags. They register in the one registry of tg.codegen.flags, so `Context` and `describe_flags`
know them (this module is listed under the `tg.flags` entry points of tg-hcq)."""

from __future__ import annotations

from tg.codegen.flags import flag

CPU_COUNT = flag("CPU_COUNT", 0, "worker threads of the CPU device (0: one per core)")
NULL_ALLOW_COPYOUT = flag("NULL_ALLOW_COPYOUT", 0, "let the NULL device return (meaningless) data on copyout")
HCQDEV_WAIT_TIMEOUT_MS = flag("HCQDEV_WAIT_TIMEOUT_MS", 30000, "milliseconds a signal wait may make no progress")
PROFILE = flag("PROFILE", 0, "record profiling events (kernel and copy time ranges) on HCQ devices")
PROGRAM_CACHE_SIZE = flag("PROGRAM_CACHE_SIZE", 1024, "compiled programs the engine keeps in memory (LRU; 0: none)")
BEAM_WORKERS = flag("BEAM_WORKERS", 2, "processes that compile BEAM candidates (0: compile in this process)")
BEAM_TIMEOUT_SEC = flag("BEAM_TIMEOUT_SEC", 20, "seconds a BEAM candidate may take to compile before it is dropped")
BEAM_RUN_TIMEOUT_SEC = flag("BEAM_RUN_TIMEOUT_SEC", 10, "seconds the first BEAM candidate may run (later: 3x the best)")
BEAM_TIME_BUDGET = flag(
    "BEAM_TIME_BUDGET", 60, "seconds one kernel's BEAM search may take; then the best so far wins (0: no limit)"
)
JITBEAM = flag("JITBEAM", 0, "beam width for kernels compiled inside a TinyJit capture (0: BEAM's value)")
TG_DUMP_KERNELS = flag("TG_DUMP_KERNELS", "", "folder where each newly compiled kernel AST is pickled (tg-beam dump)")
