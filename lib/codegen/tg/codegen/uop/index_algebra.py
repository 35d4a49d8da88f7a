"""Index algebra shared by the scheduler, the optimizer and lowering: `simplify_indices` folds the index expressions
of movement ops back into plain strides (`(i*6 + j)//3` over ranges of known size becomes `i*2 + j//3`)."""

from __future__ import annotations

from tg.codegen.dtype import dtypes
from tg.codegen.uop.ops import Ops, UOp
from tg.codegen.uop.pattern import PatternMatcher, UPat
from tg.codegen.uop.symbolic import symbolic


def distribute_constant_factor(x: UOp, y: UOp, c: UOp) -> UOp | None:
    """(x + y) * c is x*c + y*c for index arithmetic, so that sums stay flat and div/mod pairs can merge
    (`(i*4 + j//4)*4 + j%4` becomes `i*16 + j`). Only for `index`: it is exact there and never wraps."""
    if x.dtype is not dtypes.index:
        return None
    return x * c + y * c


_sum_times_constant = UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), UPat.cvar("c")))
index_algebra = PatternMatcher(
    [(_sum_times_constant, distribute_constant_factor)],
    name="index_algebra",
)

simplify_indices = index_algebra + symbolic
