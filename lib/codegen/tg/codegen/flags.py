"""The compiler's flags, registered in the one registry of tg.env.flags (which also holds DEBUG, read everywhere).

Read a flag with `DEBUG.value` (or `int(DEBUG)`, `bool(DEBUG)`); override it for a block of code with
`with Context(DEBUG=2): ...`. The registry's names are re-exported here, where the rest of tg has always found them.
"""

from __future__ import annotations

import os

from tg.env.flags import (
    DEBUG,
    FLAG_MODULES_GROUP,
    FLAGS,
    Context,
    Flag,
    describe_flags,
    flag,
    flags_from_environment,
    load_all_flags,
)

DEV = flag("DEV", "", "default device: [IFACE+]NAME[:RENDERER[:ARCH]], e.g. CPU, PYTHON, NULL:CUDA")
SPEC = flag("SPEC", 0, "type-check UOp graphs at every stage (1) or strictly (2)")
NOOPT = flag("NOOPT", 0, "apply no kernel optimizations")
TRANSCENDENTAL = flag(
    "TRANSCENDENTAL", 1, "float32 exp2/log2 from plain float ops: 0 never, 1 where the renderer asks (CPU), 2 always"
)
BEAM = flag("BEAM", 0, "beam width for kernel optimization search (0: hand-coded heuristics)")
IGNORE_BEAM_CACHE = flag("IGNORE_BEAM_CACHE", 0, "search again even when a BEAM result is cached")
CACHELEVEL = flag("CACHELEVEL", 2, "0 disables every on-disk cache")
TG_CACHE_DIR = flag("TG_CACHE_DIR", "", "directory of the on-disk caches (default ~/.cache/tg)")
CC = flag("CC", "", "C compiler for CPU kernels (default: clang when installed, else gcc)")
CAPTURE_PROCESS_REPLAY = flag("CAPTURE_PROCESS_REPLAY", 0, "record every compiled kernel for tg-replay (1)")
TG_REPLAY_DB = flag("TG_REPLAY_DB", "", "sqlite file of process-replay captures (default: in the cache directory)")
REWRITE_STACK_LIMIT = flag("REWRITE_STACK_LIMIT", 250_000, "pending steps after which graph_rewrite gives up")


def cache_dir() -> str:
    """The directory that holds tg's sqlite caches."""
    return TG_CACHE_DIR.value or os.path.join(os.path.expanduser("~"), ".cache", "tg")


__all__ = [
    "BEAM", "CACHELEVEL", "CAPTURE_PROCESS_REPLAY", "CC", "DEBUG", "DEV", "FLAGS", "FLAG_MODULES_GROUP",
    "IGNORE_BEAM_CACHE", "NOOPT", "REWRITE_STACK_LIMIT", "SPEC", "TG_CACHE_DIR", "TG_REPLAY_DB", "TRANSCENDENTAL",
    "Context", "Flag", "describe_flags", "flag", "flags_from_environment", "load_all_flags",
]  # fmt: skip
