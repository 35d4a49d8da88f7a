"""Lowering: the stage functions that turn an optimized kernel AST into a linear program for a renderer.

Where they run, and in which order, is listed in one place: `tg.codegen.pipeline.KERNEL_STAGES`.
"""

from __future__ import annotations

from tg.codegen.lower.linearize import linearize
from tg.codegen.target import Target
from tg.codegen.uop.ops import UOp


def lower(ast: UOp, target: Target | None = None) -> UOp:
    """The LINEAR program of kernel `ast` with the flags as they are set now (`pipeline.lower_kernel`), for `target`
    (what its opts may use and the cores a big kernel is cut across) or, without one, for one core."""
    from tg.codegen.pipeline import CodegenFlags, for_target, lower_kernel  # the pipeline imports these stages

    flags = CodegenFlags.from_environment()
    return lower_kernel(ast, flags if target is None else for_target(flags, target))


__all__ = ["linearize", "lower"]
