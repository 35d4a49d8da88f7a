"""Lowering: the stage functions that turn an optimized kernel AST into a linear program for a renderer.

Where they run, and in which order, is listed in one place: `tg.codegen.pipeline.KERNEL_STAGES`.
"""

from __future__ import annotations

from tg.codegen.lower.linearize import linearize
from tg.codegen.uop.ops import UOp


def lower(ast: UOp) -> UOp:
    """The LINEAR program of kernel `ast` with the flags as they are set now (`pipeline.lower_kernel`)."""
    from tg.codegen.pipeline import CodegenFlags, lower_kernel  # the pipeline imports the stages defined here

    return lower_kernel(ast, CodegenFlags.from_environment())


__all__ = ["linearize", "lower"]
