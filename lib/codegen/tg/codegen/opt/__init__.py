"""Kernel optimization: `Opt`s split, pad and reorder a kernel's ranges; heuristics choose them.

apply_opts(ast) -> ast     replays KernelInfo.opts_to_apply, else (unless NOOPT=1) the hand-coded heuristics;
                           the result's KernelInfo.applied_opts records what was applied
"""

from __future__ import annotations

from tg.codegen.flags import NOOPT
from tg.codegen.opt.heuristics import MAX_LANES, hand_coded_optimizations
from tg.codegen.opt.optimizer import KernelOptimizer
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.ops import UOp


def apply_opts(
    ast: UOp,
    has_local: bool = False,
    noopt: bool | None = None,
    max_lanes: int = MAX_LANES,
    core_groups: bool = False,
    local_threads: int = 0,
    l2_bytes: int = 0,
    cores: int = 1,
) -> UOp:
    """The kernel with its optimizations applied (an AST that already records applied opts is returned as is).
    `noopt` (default: the NOOPT flag) skips the heuristics; opts the AST asks for still apply. `max_lanes`,
    `local_threads`, `l2_bytes` and `cores`: what the heuristics know of the machine (see hand_coded_optimizations)."""
    info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
    if info.applied_opts and info.opts_to_apply is None:
        return ast
    k = KernelOptimizer(ast, has_local, core_groups)
    if info.opts_to_apply is not None:
        opts = list(info.opts_to_apply)
    elif bool(NOOPT) if noopt is None else noopt:
        return ast
    else:
        opts = hand_coded_optimizations(k, max_lanes, local_threads, l2_bytes, cores)
    for opt in opts:
        k.apply_opt(opt)
    return k.get_optimized_ast()


__all__ = ["KernelOptError", "Opt", "OptOps", "KernelOptimizer", "apply_opts", "hand_coded_optimizations"]
