"""Symbolic integers for queue templates: a value named now and supplied at submit time.

A queue recorded with variables (a launch size, a signal value, a buffer address) can be submitted many
times with different `var_vals`; only the entries that changed are patched. The variables are the IR's own
symbolic integers, `UOp.variable(name, vmin, vmax)` (also spelled `Variable(name, vmin, vmax)`), so an
expression of them (`n * 4 + 8`) works too. `sint` is "int or UOp".
"""

from __future__ import annotations

from tg.codegen import Ops, UOp, sym_infer

sint = int | UOp


def is_symbolic(value: object) -> bool:
    return isinstance(value, UOp)


def resolve(value: sint, var_vals: dict[str, int]) -> int:
    """The concrete value of an int or a symbolic expression, after checking each variable's value."""
    if not isinstance(value, UOp):
        return int(value)
    if value.op is Ops.DEFINE_VAR:  # the common case, a bare variable: no graph walk needed
        return _checked_value(value, var_vals)
    _check_variable_values(value, var_vals)
    return int(sym_infer(value, var_vals))


def concrete(value: sint) -> int:
    """`value` where it must already be an int: an address or size of a command that the queue has resolved."""
    if isinstance(value, UOp):
        raise TypeError(f"expected a concrete integer here, got the symbolic {value.render()}")
    return value


def _check_variable_values(expression: UOp, var_vals: dict[str, int]) -> None:
    """Every free variable needs a value in its range; a bound one (BIND) may be overridden by `var_vals`."""
    for node in expression.toposort(lambda u: u.op is not Ops.BIND):
        if node.op is Ops.DEFINE_VAR:
            _checked_value(node, var_vals)
        elif node.op is Ops.BIND and node.src[0].arg.name in var_vals:
            _checked_value(node.src[0], var_vals)


def _checked_value(variable: UOp, var_vals: dict[str, int]) -> int:
    name, low, high = variable.arg.name, variable.arg.vmin, variable.arg.vmax
    if name not in var_vals:
        raise KeyError(f"no value for variable {name!r} (var_vals has {sorted(var_vals)})")
    value = int(var_vals[name])
    if not low <= value <= high:
        raise ValueError(f"variable {name}={value} is outside its range [{low}, {high}]")
    return value
