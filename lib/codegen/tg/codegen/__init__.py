"""The tg compiler core: dtypes, the UOp IR, rewrites, scheduler, lowering, renderers.

Integer `//` and `%` on UOps truncate toward zero (C semantics); see tg.codegen.uop.ops.
"""

from tg.codegen.dtype import (
    AddrSpace,
    DType,
    PtrDType,
    dtypes,
    from_numpy,
    least_upper_dtype,
    least_upper_float,
    to_dtype,
    to_numpy,
    truncate,
)
from tg.codegen.uop.alu import exec_alu
from tg.codegen.uop.args import AxisType, KernelInfo, ParamArg, RangeArg, VarArg
from tg.codegen.uop.ops import GroupOp, Ops, UOp, Variable, sym_infer
from tg.codegen.uop.pattern import PatternMatcher, RewriteError, UPat, graph_rewrite, graph_rewrite_map
from tg.codegen.uop.spec import SpecError, type_verify
from tg.codegen.uop.symbolic import symbolic

__all__ = [
    "AddrSpace", "DType", "PtrDType", "dtypes", "from_numpy", "least_upper_dtype",
    "least_upper_float", "to_dtype", "to_numpy", "truncate", "AxisType", "KernelInfo", "ParamArg", "RangeArg", "VarArg",
    "GroupOp", "Ops", "UOp", "Variable", "sym_infer", "PatternMatcher", "RewriteError", "UPat", "graph_rewrite",
    "graph_rewrite_map", "exec_alu", "SpecError", "type_verify", "symbolic",
]  # fmt: skip
