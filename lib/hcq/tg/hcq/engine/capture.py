"""Capturing the launches of a piece of work, and replaying them: what TinyJit stands on.

    with capture_launches() as launches:      # every kernel launch and copy the engine runs is also recorded
        ...realize some graphs...
    graph = LaunchGraph(launches, inputs)     # `inputs`: the Buffers a replay may swap for others
    graph.replay(new_input_buffers, var_vals) # the same launches, on the new inputs, no scheduling

On an HCQ device (CPU) whose launches are all kernels, the replay is one command-queue submit: the exec commands
are recorded once, with their kernel arguments in memory the graph owns, and a replay only rewrites the argument
slots that hold an input's address, then submits wait . exec ... exec . signal. Anything else (copies, the PYTHON
device, several devices) replays launch by launch from Python, with the same result.

Kernels of symbolic shape take their variables as int arguments and may have a launch size that depends on them.
The graph records those symbolically; `replay(inputs, var_vals)` gives the variables new values (each checked
against its range): the argument slots are patched and the launch sizes resolved at submit. A variable the
replay does not name keeps the value it had when captured.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tg.hcq.buffer import Buffer
from tg.hcq.compiled import HCQCompiled
from tg.hcq.program import HCQProgram
from tg.hcq.symbolic import resolve

ARGS_ALIGNMENT = 16


@dataclass(frozen=True)
class KernelLaunch:
    program: Any  # CompiledProgram
    buffers: tuple[Buffer, ...]
    nodes: tuple[Any, ...] = ()  # the BUFFER nodes: a Buffer's memory lives exactly as long as its node
    var_vals: dict[str, int] = field(default_factory=dict)  # the values of the variables it was launched with


@dataclass(frozen=True)
class CopyLaunch:
    source: Buffer
    dest: Buffer
    nodes: tuple[Any, ...] = ()


Launch = KernelLaunch | CopyLaunch
_active = threading.local()


@contextmanager
def capture_launches() -> Iterator[list[Launch]]:
    """Record every launch the engine runs on this thread inside the block (they still run)."""
    if getattr(_active, "launches", None) is not None:
        raise RuntimeError("capture_launches cannot be nested (a jitted function called inside another's capture)")
    launches: list[Launch] = []
    _active.launches = launches
    try:
        yield launches
    finally:
        _active.launches = None


def record(launch: Launch) -> None:
    """Called by the engine for each launch; a no-op unless a capture is active."""
    launches = getattr(_active, "launches", None)
    if launches is not None:
        launches.append(launch)


def is_capturing() -> bool:
    return getattr(_active, "launches", None) is not None


class LaunchGraph:
    """A captured list of launches whose input buffers can be swapped for others of the same size and dtype."""

    def __init__(self, launches: list[Launch], inputs: list[Buffer]) -> None:
        if not launches:
            raise ValueError("nothing was launched: there is nothing to replay")
        self.launches = launches
        self.inputs = inputs
        self.input_index = {id(buf): i for i, buf in enumerate(inputs)}
        self.device = _single_hcq_device(launches)
        self.current = list(inputs)
        self.captured_var_vals: dict[str, int] = {}
        for launch in launches:
            if isinstance(launch, KernelLaunch):
                self.captured_var_vals.update(launch.var_vals)
        self.variables = {v.arg.name: v for launch in launches for v in _launch_variables(launch)}
        self.current_var_vals: dict[str, int] | None = None
        if self.device is not None:
            self._record_queue()

    # ------------------------------------------------------------------------------------------- one-submit path

    def _record_queue(self) -> None:
        device = self.device
        sizes = [_aligned(len(launch.buffers) * 8 + len(_launch_variables(launch)) * 4)  # type: ignore[union-attr]
                 for launch in self.launches]  # fmt: skip
        self.args_memory = Buffer(device.device, max(sum(sizes), 8), _uint8()).ensure_allocated()
        queue = device.hw_compute_queue_t()
        self.patches: list[list[tuple[memoryview, int]]] = [[] for _ in self.inputs]
        offset = 0
        for launch, size in zip(self.launches, sizes, strict=True):
            assert isinstance(launch, KernelLaunch)
            raws = tuple(b.raw for b in launch.buffers)
            variables = launch.program.source.variables  # symbolic: written at each submit with its values
            memory = self.args_memory.raw.offset(offset, size)
            args = launch.program.program.fill_kernargs(raws, variables, kernargs=memory)
            queue.exec(launch.program.program, args, launch.program.source.global_size, (1, 1, 1))
            view = self.args_memory.raw.cpu_view()
            for slot, buf in enumerate(launch.buffers):
                if id(buf) in self.input_index:
                    self.patches[self.input_index[id(buf)]].append((view, offset + 8 * slot))
            offset += size
        self.exec_commands = list(queue.commands)
        self.exec_queue = queue  # keeps the argument states alive

    def _submit_once(self, inputs: list[Buffer], var_vals: dict[str, int]) -> None:
        device = self.device
        changed = [i for i, buf in enumerate(inputs) if buf is not self.current[i]]
        if changed or (self.variables and var_vals != self.current_var_vals):
            device.synchronize()  # the argument memory is in use until the previous replay has finished
        for index in changed:
            address = inputs[index].raw.va_addr
            for view, offset in self.patches[index]:
                struct.pack_into("<Q", view, offset, address)
        # the exec commands with this replay's launch sizes; symbolic kernel arguments are written in place
        commands = self.exec_queue.resolve(var_vals) if self.variables else self.exec_commands
        queue = device.hw_compute_queue_t().wait(device.timeline_signal, device.timeline_value - 1)
        queue.commands.extend(commands)
        queue.signal(device.timeline_signal, device.next_timeline()).submit(device)

    # ------------------------------------------------------------------------------------------- any launches

    def _launch_each(self, inputs: list[Buffer], var_vals: dict[str, int]) -> None:
        def swap(buf: Buffer) -> Buffer:
            index = self.input_index.get(id(buf))
            return buf if index is None else inputs[index]

        for launch in self.launches:
            if isinstance(launch, KernelLaunch):
                source = launch.program.source
                vals = tuple(resolve(v, var_vals) for v in source.variables)
                global_size = tuple(resolve(size, var_vals) for size in source.global_size)
                launch.program.program(*(swap(b).raw for b in launch.buffers), global_size=global_size, vals=vals)
            else:
                source, dest = swap(launch.source), swap(launch.dest)
                if source.nbytes:
                    dest.copyin(source.copyout(memoryview(bytearray(source.nbytes))))

    def replay(self, inputs: list[Buffer], var_vals: dict[str, int] | None = None) -> None:
        """Run every captured launch again with `inputs` in place of the captured input buffers and the variables
        set to `var_vals` (by name; unnamed ones keep their captured values)."""
        if len(inputs) != len(self.inputs):
            raise ValueError(f"the graph takes {len(self.inputs)} input buffers, got {len(inputs)}")
        values = self._variable_values(var_vals or {})
        if self.device is not None:
            self._submit_once(inputs, values)
        else:
            self._launch_each(inputs, values)
        self.current = list(inputs)
        self.current_var_vals = values

    def _variable_values(self, var_vals: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(var_vals) - set(self.variables))
        if unknown:
            raise KeyError(f"the graph has no variable {unknown[0]!r} (its variables: {sorted(self.variables)})")
        values = {**self.captured_var_vals, **var_vals}
        for variable in self.variables.values():
            resolve(variable, values)  # a clear error for a value outside the variable's range
        return values

    @property
    def one_submit(self) -> bool:
        """Whether a replay is a single command-queue submit."""
        return self.device is not None


def _launch_variables(launch: Launch) -> tuple[Any, ...]:
    return launch.program.source.variables if isinstance(launch, KernelLaunch) else ()


def _aligned(size: int) -> int:
    return (max(size, 8) + ARGS_ALIGNMENT - 1) // ARGS_ALIGNMENT * ARGS_ALIGNMENT


def _uint8() -> Any:
    from tg.codegen.dtype import dtypes

    return dtypes.uint8


def _single_hcq_device(launches: list[Launch]) -> Any:
    """The one HCQ device all launches are kernels on, else None (then the graph replays launch by launch)."""
    devices = set()
    for launch in launches:
        if not isinstance(launch, KernelLaunch):
            return None
        if not isinstance(launch.program.program, HCQProgram):
            return None
        devices.add(launch.program.program.dev)
    if len(devices) != 1:
        return None
    (device,) = devices
    return device if isinstance(device, HCQCompiled) else None
