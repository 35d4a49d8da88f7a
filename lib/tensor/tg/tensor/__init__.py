"""tg Tensor: a lazy tensor whose graphs compile into fused kernels.

`from tg.tensor import Tensor, dtypes, Device, GlobalCounters, Context, TinyJit, Variable, UOp, KernelInfo,
function`.
"""

from typing import Any

from tg.codegen import UOp, dtypes
from tg.codegen.flags import Context
from tg.codegen.uop.args import KernelInfo
from tg.hcq import Device
from tg.tensor.flags import apply_default_float
from tg.tensor.function import function
from tg.tensor.symbolic import Variable
from tg.tensor.tensor import Tensor

apply_default_float()

__all__ = [
    "Context", "Device", "GlobalCounters", "KernelInfo", "Tensor", "TinyJit", "UOp", "Variable", "dtypes", "function",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    # the engine (scheduler, compilers) loads on first use, so `import tg.tensor` stays fast
    if name == "GlobalCounters":
        from tg.tensor.engine import GlobalCounters

        return GlobalCounters
    if name == "TinyJit":
        from tg.tensor.jit import TinyJit

        return TinyJit
    raise AttributeError(f"module 'tg.tensor' has no attribute {name!r}")
