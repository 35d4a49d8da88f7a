"""Exceptions for wrong arguments, typed so that code written for torch or for tg's earlier ValueErrors catches them.

torch reports most bad arguments from its C++ checks as RuntimeError, and unknown modes as NotImplementedError;
tg raised ValueError for both. Each class here is both, as tg.codegen's ShapeError is for shapes.
"""

from __future__ import annotations

from tg.codegen.schedule.calls import CallError


class ArgumentError(ValueError, RuntimeError):
    """An argument value the op cannot take (torch: RuntimeError)."""


class IndexDtypeError(TypeError, IndexError, RuntimeError):
    """An index tensor or array that does not hold integers (torch and tinygrad: IndexError when indexing; torch's
    gather and scatter: RuntimeError; tg raised TypeError)."""


class UnsupportedModeError(ValueError, NotImplementedError):
    """A mode string the op does not implement (torch: NotImplementedError)."""


# A custom kernel or call that cannot be built or differentiated: wrong arity, a bad kernel AST, a shape or dtype
# mismatch, a gradient asked for without grad_fxn (tg.tensor.custom_kernel, tg.tensor.call). tg.codegen builds the
# calls and checks their arguments, so the class is its CallError (a ValueError and a RuntimeError, as ArgumentError).
CustomKernelError = CallError
