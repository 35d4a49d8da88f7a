"""Symbolic integers for queue templates: a value named now and supplied at submit time.

A queue recorded with `Variable`s (a launch size, a signal value, a buffer address) can be submitted many
times with different `var_vals`; only the entries that changed are patched. `sint` is "int or Variable".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """A named integer with an inclusive range, resolved from `var_vals[name]` at submit time."""

    name: str
    min: int
    max: int

    def resolve(self, var_vals: dict[str, int]) -> int:
        if self.name not in var_vals:
            raise KeyError(f"no value for variable {self.name!r} (var_vals has {sorted(var_vals)})")
        value = int(var_vals[self.name])
        if not self.min <= value <= self.max:
            raise ValueError(f"variable {self.name}={value} is outside its range [{self.min}, {self.max}]")
        return value


sint = int | Variable


def resolve(value: sint, var_vals: dict[str, int]) -> int:
    """The concrete value of an int or a Variable."""
    return value.resolve(var_vals) if isinstance(value, Variable) else int(value)


def is_symbolic(value: object) -> bool:
    return isinstance(value, Variable)
