"""The commands an `HWQueue` records: typed records whose integer fields may be symbolic until submit.

Commands name memory by address, as hardware does; `keep_alive` holds the Python objects that own that
memory (a signal, the copied buffers) so it cannot be freed and reused while the command may still run.

Backends execute these after `resolve_command` has replaced every symbolic value (a `UOp`) with its value, so a device
worker only ever sees plain integers (addresses, values, sizes), like hardware reading a command ring.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tg.hcq.symbolic import is_symbolic, resolve, sint


def memory_owners() -> Any:
    """The `keep_alive` field: the signal or buffers whose memory a command names, held so it is not freed.

    Not part of a command's value: it takes no part in comparisons and is left out of the repr.
    """
    return field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class SignalCommand:
    """Set the u64 at `value_addr` to `value` after all previous commands completed."""

    value_addr: sint
    value: sint
    keep_alive: Any = memory_owners()


@dataclass(frozen=True)
class WaitCommand:
    """Halt the queue until the u64 at `value_addr` is >= `value`."""

    value_addr: sint
    value: sint
    keep_alive: Any = memory_owners()


@dataclass(frozen=True)
class TimestampCommand:
    """Store the monotonic clock (ns) at `timestamp_addr` after all previous commands completed."""

    timestamp_addr: sint
    keep_alive: Any = memory_owners()


@dataclass(frozen=True)
class MemoryBarrierCommand:
    """Make host writes visible to the commands that follow."""


@dataclass(frozen=True)
class ExecCommand:
    """Run `program` with the kernel arguments stored at `args_addr` over `global_size` x `local_size`.

    `args_state` is carried along so that the argument memory stays alive while the command exists.
    """

    program: Any
    args_addr: sint
    args_state: Any
    global_size: tuple[sint, sint, sint]
    local_size: tuple[sint, sint, sint]


@dataclass(frozen=True)
class CopyCommand:
    """Copy `size` bytes from `src_addr` to `dest_addr`."""

    dest_addr: sint
    src_addr: sint
    size: sint
    keep_alive: Any = memory_owners()


@dataclass(frozen=True)
class WriteCommand:
    """Store `value` (u32, or u64 when `b64`) at `addr` after all previous commands completed."""

    addr: sint
    value: sint
    b64: bool = False
    keep_alive: Any = memory_owners()


@dataclass(frozen=True)
class PollBitCommand:
    """Halt the queue until `(u32 at addr) & mask == value`, where value is 0 or mask."""

    addr: sint
    value: sint
    mask: int
    keep_alive: Any = memory_owners()


Command = (
    SignalCommand
    | WaitCommand
    | TimestampCommand
    | MemoryBarrierCommand
    | ExecCommand
    | CopyCommand
    | WriteCommand
    | PollBitCommand
)


# Fields that hold objects, never integers: skipped when looking for symbolic values.
OBJECT_FIELDS = frozenset({"keep_alive", "program", "args_state", "b64", "mask"})


_INTEGER_FIELDS: dict[type, tuple[str, ...]] = {}


def _integer_fields(command_type: type) -> tuple[str, ...]:
    found = _INTEGER_FIELDS.get(command_type)
    if found is None:
        fields = dataclasses.fields(command_type)
        found = _INTEGER_FIELDS[command_type] = tuple(f.name for f in fields if f.name not in OBJECT_FIELDS)
    return found


def _is_symbolic_field(value: object) -> bool:
    if isinstance(value, tuple):  # a launch size: a loop, not a generator (every plain launch checks two of them)
        for item in value:
            if type(item) is not int and is_symbolic(item):
                return True
        return False
    return is_symbolic(value)


def is_symbolic_command(command: Command) -> bool:
    for name in _integer_fields(type(command)):
        value = getattr(command, name)
        if type(value) is not int and _is_symbolic_field(value):  # (ints, the common case, checked inline)
            return True
    return False


def symbolic_values(command: Command) -> list[Any]:
    """The symbolic values among `command`'s integer fields, a launch size's items one by one."""
    found: list[Any] = []
    for name in _integer_fields(type(command)):
        value = getattr(command, name)
        found.extend(item for item in (value if isinstance(value, tuple) else (value,)) if is_symbolic(item))
    return found


def resolve_command(command: Command, var_vals: dict[str, int], known: dict[Any, int] | None = None) -> Command:
    """The same command with every symbolic field replaced by its value; `known` holds values already resolved, by
    expression (many launches of one graph share a launch-size expression: it is worked out once)."""
    known = {} if known is None else known

    def value_of(item: Any) -> int:
        if not is_symbolic(item):
            return item
        if item not in known:
            known[item] = resolve(item, var_vals)
        return known[item]

    changes: dict[str, Any] = {}
    for name in _integer_fields(type(command)):
        value = getattr(command, name)
        if isinstance(value, tuple) and _is_symbolic_field(value):
            changes[name] = tuple(value_of(item) for item in value)
        elif is_symbolic(value):
            changes[name] = value_of(value)
    return dataclasses.replace(command, **changes) if changes else command
