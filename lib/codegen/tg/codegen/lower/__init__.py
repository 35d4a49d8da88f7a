"""Lowering: a kernel AST (SINK of STOREs over RANGEs) -> a linear program that renderers turn into source.

The stages, in order (each can be run, printed and timed alone):
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tg.codegen.flags import NOOPT
from tg.codegen.lower.linearize import linearize
from tg.codegen.lower.upcast import upcast_strided_reductions
from tg.codegen.opt import apply_opts
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import UOp
from tg.codegen.uop.pattern import graph_rewrite


@dataclass(frozen=True)
class Stage:
    """One named step of the pipeline: a function from UOp graph to UOp graph."""

    name: str
    run: Callable[[UOp], UOp]

    def __repr__(self) -> str:
        return f"Stage({self.name!r})"


def _simplify(ast: UOp) -> UOp:
    return graph_rewrite(ast, simplify_indices, name="simplify indices")


def _upcast_strided_reductions(ast: UOp) -> UOp:
    """Only for kernels the opts left alone (NOOPT=1 means no optimization at all)."""
    if NOOPT or (isinstance(ast.arg, KernelInfo) and ast.arg.applied_opts):
        return ast
    return upcast_strided_reductions(ast)


LOWERING: list[Stage] = [
    Stage("simplify indices", _simplify),  # symbolic algebra: movement-op index arithmetic back to strides
    Stage("apply opts", apply_opts),  # Opts from KernelInfo.opts_to_apply or the heuristics: split/pad/swap ranges
    Stage("upcast strided reductions", _upcast_strided_reductions),  # lanes of accumulators for sum(axis=0)
    Stage("linearize", linearize),  # ranges -> loops, REDUCE -> accumulators, values placed in their loop
]


def lower(ast: UOp) -> UOp:
    """The LINEAR program of kernel `ast`."""
    for stage in LOWERING:
        ast = stage.run(ast)
    return ast


__all__ = ["LOWERING", "Stage", "linearize", "lower"]
