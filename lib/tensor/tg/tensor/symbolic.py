"""Symbolic sizes: `Variable("n", 1, 4096).bind(k)` as a dimension, so that one kernel serves every value of n.

    n = Variable("n", 1, 4096)
    x = Tensor.empty(n.bind(7), 64)          # storage for 4096 rows, seen as 7
    cache[:, 0 : pos.bind(p) + 1]             # the KV-cache pattern: a symbolic slice of a larger buffer

A size, a slice bound or a padding may be an int or a symbolic integer (an index UOp of bound variables, such as
`n.bind(7) + 1`). The scheduler unbinds the variables (tg.codegen.schedule.graph.unbind_graph): a kernel takes
each variable as a runtime int argument, so it is compiled once and launched with every value; a value of
symbolic shape lives in a buffer of its largest size. `var.unbind()` gives back (variable, value).
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.schedule.graph import ShapeError, canonical_size, is_symbolic_shape

__all__ = [
    "SymbolicSizeError",
    "Variable",
    "concrete_size",
    "fits_in",
    "is_symbolic",
    "is_symbolic_shape",
    "known_le",
    "shape_text",
    "size_value",
]


def Variable(name: str, min_val: int, max_val: int, dtype: Any = None) -> UOp:  # noqa: N802 - tinygrad's spelling
    """A symbolic integer `name` in [min_val, max_val]; `.bind(value)` attaches the value a shape uses.

    `dtype` (an integer dtype, default the index type of sizes) is the type the variable has as a value:
    `Tensor(v.bind(3))` and `v.bind(3) + t` compute in it; a size must be of the index type."""
    from tg.tensor.promotion import dtype_argument

    dtype = dtype_argument(dtype) or dtypes.index
    if dtype is not dtypes.index and not dtypes.is_int(dtype):
        raise TypeError(f"variable {name}: dtype must be an integer dtype, got {dtype!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a variable's name must be an identifier (it names a kernel argument), got {name!r}")
    for bound in (min_val, max_val):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise TypeError(f"variable {name}: bounds must be ints, got {min_val!r}, {max_val!r}")
    if not 0 <= min_val <= max_val:
        raise ValueError(f"variable {name}: need 0 <= min <= max, got [{min_val}, {max_val}]")
    if dtype is not dtypes.index and not dtypes.min(dtype) <= min_val <= max_val <= dtypes.max(dtype):
        raise ValueError(f"variable {name}: [{min_val}, {max_val}] does not fit in {dtype!r}")
    return UOp.variable(name, min_val, max_val, dtype)


def is_symbolic(size: Any) -> bool:
    return isinstance(size, UOp)


def check_size(size: Any, what: str) -> int | UOp:
    """A size, slice bound or padding as given: a non-negative int, or an index UOp whose variables are bound."""
    if isinstance(size, UOp):
        if size.op is Ops.BIND and dtypes.is_int(size.dtype):  # a Variable made with a dtype: as a size, an index
            variable, value = size.unbind()
            size = UOp.variable(variable.arg.name, variable.arg.vmin, variable.arg.vmax).bind(value)
        if size.dtype is not dtypes.index:
            raise ShapeError(f"{what}: a symbolic size must be an index expression, got dtype {size.dtype!r}")
        unbound = [u.arg.name for u in size.toposort(lambda u: u.op is not Ops.BIND) if u.op is Ops.DEFINE_VAR]
        if unbound:
            raise ShapeError(f"{what}: variable {unbound[0]} has no value; use it bound, e.g. var.bind(3)")
        return ordered_size(size)
    if isinstance(size, bool) or not hasattr(size, "__index__"):
        raise ShapeError(f"{what}: sizes must be ints or bound Variables, got {size!r}")
    return operator.index(size)  # numpy ints become ints


def ordered_size(size: int | UOp) -> int | UOp:
    """`canonical_size` with the operands of every sum and product in one order, so that `i+j` and `j+i` are the
    same size (the simplifier keeps the order it was given)."""
    size = canonical_size(size)
    if not isinstance(size, UOp):
        return size
    return canonical_size(_ordered(size))


def _ordered(node: UOp) -> UOp:
    if node.op in (Ops.ADD, Ops.MUL):
        operands: list[UOp] = []
        stack = [node]
        while stack:
            current = stack.pop()
            if current.op is node.op:
                stack.extend(current.src)
            else:
                operands.append(_ordered(current))
        operands.sort(key=lambda u: u.render())
        combine = operator.add if node.op is Ops.ADD else operator.mul
        return functools.reduce(combine, operands)
    if node.op in (Ops.BIND, Ops.DEFINE_VAR, Ops.CONST) or not node.src:
        return node
    return node.replace(src=tuple(_ordered(s) for s in node.src))


def known_le(a: int | UOp, b: int | UOp) -> bool:
    """Whether a <= b for every value of the variables (known from the bounds of b - a)."""
    if not isinstance(a, UOp) and not isinstance(b, UOp):
        return a <= b
    difference = canonical_size(b - a)
    return difference >= 0 if isinstance(difference, int) else difference.vmin >= 0


def fits_in(end: int | UOp, size: int | UOp) -> bool:
    """Whether `end` <= `size` may be relied on: for every value of the variables, or, when the size itself is
    symbolic, at the values bound now (a view of symbolic shape lives in a buffer of its largest size, so the
    elements are in memory; tinygrad and torch allow `x[:, :2]` of an (3, n=2) tensor)."""
    if known_le(end, size):
        return True
    return isinstance(size, UOp) and size_value(end) <= size_value(size)


def size_value(size: int | UOp) -> int:
    """The value a size has now (a symbolic size at its bound values)."""
    if not isinstance(size, UOp):
        return size
    from tg.codegen import sym_infer

    return int(sym_infer(size, {}))


class SymbolicSizeError(ShapeError, TypeError):
    """A symbolic size where an operation needs a concrete int (a TypeError too: what Python raises where a
    symbolic size reaches `range` or `len`)."""


def concrete_size(size: int | UOp, what: str) -> int:
    """`size` for an operation (`what`) that works only with concrete sizes; a symbolic one is refused."""
    if isinstance(size, UOp):
        raise SymbolicSizeError(f"{what} needs a concrete size, not the symbolic {size.render()}")
    return size


def shape_text(shape: tuple) -> str:
    """A shape for messages and reprs: `(2, n=7, 64)`; a symbolic size is its expression with bound values."""
    return (
        "("
        + ", ".join(s.render() if isinstance(s, UOp) else str(s) for s in shape)
        + ("," if len(shape) == 1 else "")
        + ")"
    )
