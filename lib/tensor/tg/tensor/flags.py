"""The Tensor front end's flags (registered in tg.codegen.flags' registry; a `tg.flags` entry point of tg-tensor)."""

from __future__ import annotations

from tg.codegen.dtype import dtypes
from tg.codegen.flags import flag

DEFAULT_FLOAT = flag(
    "DEFAULT_FLOAT", "float32", "default float dtype of tensors: float32, float16 (half), bfloat16, ..."
)
JIT = flag("JIT", 1, "TinyJit captures and replays (1) or runs every call plainly (0)")
RING = flag("RING", 1, "all-reduce of a sharded reduce: 0 naive, 1 ring above the size threshold on 3+ devices, 2 ring")
ALL2ALL = flag("ALL2ALL", 0, "all-reduce: 1 all-to-all above the size threshold on 3+ devices, 2 always (before RING)")


def apply_default_float() -> None:
    """Make `dtypes.default_float` the dtype DEFAULT_FLOAT names (tg.tensor does this when it is imported)."""
    dtypes.default_float = dtypes.by_name(DEFAULT_FLOAT.value)
