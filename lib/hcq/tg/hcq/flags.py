"""The runtime's flags (registered in the one flag registry of tg.codegen.flags, so `describe_flags` lists them)."""

from __future__ import annotations

from tg.codegen.flags import flag

PROGRAM_CACHE_SIZE = flag("PROGRAM_CACHE_SIZE", 1024, "compiled programs the engine keeps in memory (LRU; 0: none)")
