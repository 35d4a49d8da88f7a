"""`HWQueue`: record commands now, submit them to a device later, as many times as you like.

    HWQueue().wait(sig, v).exec(prg, args, global_size, local_size).signal(sig2, v2).submit(dev)

Any integer (a launch size, a signal value, a buffer or signal address, a kernel argument) may be a
symbolic `UOp` (a variable or an expression of variables); `submit(dev, var_vals)` patches those, and only
those, each time. `bind(dev)` ties a queue to one device. An args state passed to `exec` stays alive at
least as long as the queue that holds it.

Symbolic launch sizes and addresses are resolved into each submission's own copy of the commands, so
back-to-back submits with different values are safe. Symbolic kernel arguments live in argument memory,
as on hardware: they are patched in place at submit, so resubmit with new argument values only after the
previous submission has run (wait on its signal), or give each submission its own args state.
Queues and the timeline are driven from one host thread at a time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from tg.hcq.commands import (
    Command,
    CopyCommand,
    ExecCommand,
    MemoryBarrierCommand,
    PollBitCommand,
    SignalCommand,
    TimestampCommand,
    WaitCommand,
    WriteCommand,
    is_symbolic_command,
    resolve_command,
    symbolic_values,
)
from tg.hcq.memory import HCQBuffer
from tg.hcq.symbolic import is_symbolic, resolve, sint


@dataclass(frozen=True)
class BoundSint:
    """A value that lives in device-visible memory (e.g. a kernel argument) and is patched at submit."""

    view: memoryview
    offset: int
    fmt: str
    value: sint

    def write(self, var_vals: dict[str, int]) -> None:
        struct.pack_into(self.fmt, self.view, self.offset, resolve(self.value, var_vals))


def _launch_dims(size: tuple[sint, ...] | list[sint]) -> tuple[sint, sint, sint]:
    dims = tuple(size)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"launch size needs 1 to 3 dimensions, got {size!r}")
    x, y, z = (*dims, 1, 1)[:3]
    return (x, y, z)


class HWQueue:
    """A device-independent command recorder. Backends subclass it and implement `_submit`."""

    supports_exec = True
    supports_copy = True

    def __init__(self) -> None:
        self.commands: list[Command] = []
        self.bound_sints: list[BoundSint] = []
        self.binded_device: Any = None
        self._resolved: list[Command] | None = None
        self._symbolic_indices: list[int] = []
        self._prev_var_vals: dict[str, int] | None = None
        self._expressions: list[Any] = []  # the distinct symbolic values of the symbolic commands
        self._prev_values: tuple[int, ...] | None = None  # theirs at the last resolve

    def _add(self, command: Command) -> HWQueue:
        if is_symbolic_command(command):
            self._symbolic_indices.append(len(self.commands))
        self.commands.append(command)
        self._resolved = None
        return self

    # --- commands every queue has ---

    def signal(self, signal: Any, value: sint) -> HWQueue:
        """Set `signal` to `value` after every previous command completed."""
        return self._add(SignalCommand(signal.value_addr, value, keep_alive=signal))

    def wait(self, signal: Any, value: sint) -> HWQueue:
        """Halt this queue until `signal.value >= value`."""
        return self._add(WaitCommand(signal.value_addr, value, keep_alive=signal))

    def timestamp(self, signal: Any) -> HWQueue:
        """Record the device clock into `signal`'s timestamp after every previous command completed."""
        return self._add(TimestampCommand(signal.timestamp_addr, keep_alive=signal))

    def write(self, buf: HCQBuffer, value: sint, b64: bool = False) -> HWQueue:
        """Store `value` (u32, or u64 with `b64`) at the start of `buf` once previous commands completed."""
        return self._add(WriteCommand(buf.va_addr, value, b64, keep_alive=buf))

    def poll_bit(self, buf: HCQBuffer, value: int, mask: int) -> HWQueue:
        """Halt until `(u32 at buf) & mask == value`; `value` must be 0 (bits clear) or `mask` (bits set)."""
        if value not in (0, mask):
            raise ValueError(f"poll_bit value must be 0 or the mask {mask:#x}, got {value:#x}")
        return self._add(PollBitCommand(buf.va_addr, value, mask, keep_alive=buf))

    # --- compute ---

    def memory_barrier(self) -> HWQueue:
        return self._add(MemoryBarrierCommand())

    def exec(
        self, program: Any, args_state: Any, global_size: tuple[sint, ...], local_size: tuple[sint, ...]
    ) -> HWQueue:
        if not self.supports_exec:
            raise NotImplementedError(f"{type(self).__name__} cannot run programs")
        self.bind_args_state(args_state)
        command = ExecCommand(
            program, args_state.buf.va_addr, args_state, _launch_dims(global_size), _launch_dims(local_size)
        )
        return self._add(command)

    def bind_args_state(self, args_state: Any) -> None:
        self.bound_sints.extend(b for b in args_state.bind_data if is_symbolic(b.value))

    # --- copy ---

    def copy(self, dest: HCQBuffer | sint, src: HCQBuffer | sint, copy_size: sint) -> HWQueue:
        if not self.supports_copy:
            raise NotImplementedError(f"{type(self).__name__} cannot copy")
        dest_addr = dest.va_addr if isinstance(dest, HCQBuffer) else dest
        src_addr = src.va_addr if isinstance(src, HCQBuffer) else src
        return self._add(CopyCommand(dest_addr, src_addr, copy_size, keep_alive=(dest, src)))

    # --- submission ---

    def bind(self, device: Any) -> HWQueue:
        """Tie this queue to `device`; it keeps its resolved commands and patches only symbolic ones."""
        self.binded_device = device
        return self

    def _apply_var_vals(self, var_vals: dict[str, int]) -> list[Command]:
        if self._resolved is None:
            self._resolved = list(self.commands)
            self._prev_var_vals = self._prev_values = None
            distinct = {id(e): e for i in self._symbolic_indices for e in symbolic_values(self.commands[i])}
            self._expressions = list(distinct.values())
        if var_vals != self._prev_var_vals:
            self._resolve_symbolic_commands(var_vals)
            for bound in self.bound_sints:
                bound.write(var_vals)
        self._prev_var_vals = dict(var_vals)
        return self._resolved

    def _resolve_symbolic_commands(self, var_vals: dict[str, int]) -> None:
        """Each distinct expression is resolved once, and the commands are rebuilt only when one of them took a new
        value (a launch size of (pos // 16 + 1) rows changes every 16 positions, not every position)."""
        values = tuple(resolve(expression, var_vals) for expression in self._expressions)
        if values == self._prev_values:
            return
        assert self._resolved is not None
        known = dict(zip(self._expressions, values, strict=True))
        for index in self._symbolic_indices:
            self._resolved[index] = resolve_command(self.commands[index], var_vals, known)
        self._prev_values = values

    @property
    def has_symbolic_commands(self) -> bool:
        """Whether a command (a launch size, an address) or a bound kernel argument waits for `var_vals`."""
        return bool(self._symbolic_indices or self.bound_sints)

    def resolve(self, var_vals: dict[str, int]) -> list[Command]:
        """The commands with every variable set from `var_vals`: symbolic launch sizes and addresses resolved into
        the returned copy, symbolic kernel arguments written into their argument memory (what `submit` sends; a
        graph that splices these commands into a queue of its own calls this)."""
        return list(self._apply_var_vals(var_vals))

    def submit(self, device: Any, var_vals: dict[str, int] | None = None) -> HWQueue:
        """Send the recorded commands to `device`, with `var_vals` filling in every variable."""
        if self.binded_device is not None and self.binded_device is not device:
            raise RuntimeError(f"queue is bound to {self.binded_device}, cannot submit to {device}")
        resolved = self._apply_var_vals(var_vals or {})
        self._submit(device, tuple(resolved))
        return self

    def _submit(self, device: Any, commands: tuple[Command, ...]) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no backend")
