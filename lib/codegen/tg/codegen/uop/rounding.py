"""Round half to even from elementwise steps, written once for both graphs that need it: a Tensor (Tensor.round) and
a kernel AST of UOps (the int8 matvec's IR reference in tg-llm). Both types have every method used here, with the
same meaning, so the steps cannot drift apart."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar


class ElementwiseValue(Protocol):
    """What the rounding steps need from a value: float arithmetic, truncation, comparisons, and a select."""

    def trunc(self) -> Any: ...
    def maximum(self, other: Any, /) -> Any: ...
    def ne(self, other: Any, /) -> Any: ...
    def eq(self, other: Any, /) -> Any: ...
    def where(self, x: Any, y: Any, /) -> Any: ...
    def const_like(self, value: Any, /) -> Any: ...
    def __add__(self, other: Any, /) -> Any: ...
    def __sub__(self, other: Any, /) -> Any: ...
    def __mul__(self, other: Any, /) -> Any: ...
    def __gt__(self, other: Any, /) -> Any: ...


Value = TypeVar("Value", bound=ElementwiseValue)


def round_half_to_even(x: Value) -> Value:
    """The nearest integer to float `x`, ties to the even one (as numpy.round and IEEE roundeven); NaN and inf pass
    through (their fraction is NaN, so no step moves them)."""
    truncated = x.trunc()
    fraction = (x - truncated).maximum(truncated - x)  # |x - trunc(x)|, exact: both share sign and exponent range
    truncated_is_odd = (truncated - (truncated * 0.5).trunc() * 2.0).ne(0.0)
    away_from_zero = (fraction > 0.5) | (fraction.eq(0.5) & truncated_is_odd)
    step = (x > 0.0).where(x.const_like(1.0), x.const_like(-1.0))
    result: Value = away_from_zero.where(truncated + step, truncated)
    return result
