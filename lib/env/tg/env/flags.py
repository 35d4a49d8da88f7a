"""Every environment flag tg reads, in one registry, each with a one-line description.

The registry and DEBUG live here, in tg.env (which imports nothing of tg), so that every package and tool reads flags
the same way; each package declares its own flags with `flag` (tg.codegen.flags, tg.hcq.flags, ...).

Read a flag with `DEBUG.value` (or `int(DEBUG)`, `bool(DEBUG)`); override it for a block of code with
`with Context(DEBUG=2): ...`. Values come from the environment once, when first read; a Context override
is thread- and task-local (it uses contextvars), so tests and worker threads do not leak settings.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Generic, TypeVar

T = TypeVar("T", int, str)


@dataclass(eq=False)
class Flag(Generic[T]):
    """One environment flag: its name, its default (which fixes its type) and what it does."""

    name: str
    default: T
    description: str
    _override: contextvars.ContextVar = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._override = contextvars.ContextVar(f"tg_flag_{self.name}", default=None)

    @cached_property
    def _from_environment(self) -> T:
        raw = os.environ.get(self.name)
        if raw is None or raw == "":  # `DEBUG=` (set but empty) means unset, as in a shell's `${DEBUG:-0}`
            return self.default
        if isinstance(self.default, int):
            try:
                return int(raw)
            except ValueError:
                raise ValueError(f"environment variable {self.name}={raw!r} must be an integer") from None
        return raw

    @property
    def value(self) -> T:
        override = self._override.get()
        return self._from_environment if override is None else override

    def __int__(self) -> int:
        return int(self.value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, other: int) -> bool:
        return int(self.value) >= other

    def __gt__(self, other: int) -> bool:
        return int(self.value) > other

    def __le__(self, other: int) -> bool:
        return int(self.value) <= other

    def __lt__(self, other: int) -> bool:
        return int(self.value) < other


FLAGS: dict[str, Flag] = {}


def flag(name: str, default: T, description: str) -> Flag[T]:
    """Register a flag; registering the same name twice is a programming error."""
    if name in FLAGS:
        raise ValueError(f"flag {name} is registered twice")
    FLAGS[name] = new = Flag(name, default, description)
    return new


FLAG_MODULES_GROUP = "tg.flags"  # entry-point group: each tg package that owns flags lists its flag module there


def load_all_flags() -> None:
    """Import the flag module of every installed tg package, so that FLAGS holds every flag tg has.

    Flags live with the package that reads them (CPU_COUNT in tg.hcq, DEFAULT_FLOAT in tg.tensor); this base
    package finds them through entry points instead of importing packages above it."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=FLAG_MODULES_GROUP):
        entry.load()


@contextmanager
def Context(**overrides: int | str) -> Iterator[None]:  # noqa: N802 - reads like the tinygrad API it mirrors
    """Override flags for the duration of a with-block: `with Context(DEBUG=2, NOOPT=1): ...`."""
    if set(overrides) - set(FLAGS):
        load_all_flags()
    unknown = sorted(set(overrides) - set(FLAGS))
    if unknown:
        raise KeyError(f"unknown flag(s) {', '.join(unknown)}; known flags: {', '.join(sorted(FLAGS))}")
    tokens = [(FLAGS[name], FLAGS[name]._override.set(value)) for name, value in overrides.items()]
    try:
        yield
    finally:
        for registered, token in reversed(tokens):
            registered._override.reset(token)


def flags_from_environment(exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """Every registered flag set in this process's environment, as NAME -> text, less `exclude`: what a process
    on another machine (a cluster worker) needs to run under the same settings."""
    load_all_flags()
    return {name: os.environ[name] for name in FLAGS if name in os.environ and name not in exclude}


def describe_flags() -> str:
    """A listing of every flag of every installed tg package, its current value and what it does."""
    load_all_flags()
    width = max(len(name) for name in FLAGS)
    return "\n".join(f"{name:<{width}}  {f.value!s:<8} {f.description}" for name, f in sorted(FLAGS.items()))


DEBUG = flag("DEBUG", 0, "verbosity: 1 tool tracebacks, 2 a line per kernel, 4 kernel source, 5 stages and rules fired")
