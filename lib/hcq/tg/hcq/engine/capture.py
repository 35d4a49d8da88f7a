"""Capturing the launches of a piece of work, and replaying them: what TinyJit stands on.

    with capture_launches() as launches:      # every kernel launch and copy the engine runs is also recorded
        ...realize some graphs...
    graph = LaunchGraph(launches, inputs)     # `inputs`: the Buffers a replay may swap for others
    graph.replay(new_input_buffers, var_vals) # the same launches, on the new inputs, no scheduling

On the CPU devices (CPU, CPU:1, ..., C or LLVM) the replay is one command-queue submit: the exec and copy
commands are recorded once, with their kernel arguments in memory the graph owns, and a replay only rewrites the
argument slots that hold an input's address (a copy's input address is resolved at submit), then submits
wait . exec/copy ... . signal on the first device's queue, which waits for and advances every device's timeline.
Anything else (the PYTHON device) replays launch by launch from Python, with the same result.

A kept copy (a matmul's packed weight, tg.hcq.engine.kept) of a buffer the graph only reads runs ahead of the rest
and only when that buffer was written since the graph last copied it (`copies_on_change`): a replayed forward pass
packs its weights once, a replayed training step (which writes them) at every replay, as before.

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

from tg.codegen import UOp, dtypes
from tg.hcq.buffer import Buffer
from tg.hcq.compiled import HCQCompiled
from tg.hcq.device import Device
from tg.hcq.engine.counters import GlobalCounters
from tg.hcq.engine.kept import is_remembered, remember
from tg.hcq.program import HCQProgram
from tg.hcq.symbolic import resolve

ARGS_ALIGNMENT = 16


@dataclass(frozen=True)
class KernelLaunch:
    program: Any  # CompiledProgram
    buffers: tuple[Buffer, ...]
    nodes: tuple[Any, ...] = ()  # the BUFFER nodes: a Buffer's memory lives exactly as long as its node
    var_vals: dict[str, int] = field(default_factory=dict)  # the values of the variables it was launched with
    kept: bool = False  # a copy kernel whose output the engine may keep while its source is unchanged (engine.kept)


@dataclass(frozen=True)
class CopyLaunch:
    source: Buffer
    dest: Buffer
    nodes: tuple[Any, ...] = ()


Launch = KernelLaunch | CopyLaunch
_active = threading.local()


@contextmanager
def capture_launches() -> Iterator[list[Launch]]:
    """Record every launch the engine runs on this thread inside the block (they still run). Kernels compiled inside
    the block are compiled for replay (CodegenFlags.replayed): smaller ones are split across cores, as a replay runs
    the launches in one C call per core thread."""
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
        # kept copies of buffers the graph only reads (a weight packed for a matmul): run ahead of the rest, and only
        # when the buffer they copy was written since (see refresh_copies); the rest is the graph's body
        self.copies_on_change = copies_on_change(launches, inputs)
        on_change = {id(launch) for launch, _ in self.copies_on_change}
        self.body = [launch for launch in launches if id(launch) not in on_change]
        self.devices = _host_queue_devices(launches)
        self.device: Any = self.devices[0] if self.devices else None
        self.current = list(inputs)
        self.captured_var_vals: dict[str, int] = {}
        for launch in launches:
            if isinstance(launch, KernelLaunch):
                self.captured_var_vals.update(launch.var_vals)
        self.variables = {v.arg.name: v for launch in launches for v in _launch_variables(launch)}
        # what a replay writes (kernel outputs, copy destinations): each replay notes the writes (Buffer.note_write), so
        # a copy the engine keeps of one of them (tg.hcq.engine.kept) is dropped. Inputs by their position.
        written = {id(b): b for b in (_written_buffer(launch) for launch in launches)}
        self.written_inputs = [self.input_index[key] for key in written if key in self.input_index]
        self.written_buffers = [buf for key, buf in written.items() if key not in self.input_index]
        self.written_ids = {id(buf) for buf in self.written_buffers}
        self.written_bases = list({id(buf.base): buf.base for buf in self.written_buffers}.values())
        self._prepare_counts()
        self.current_var_vals: dict[str, int] | None = None
        if self.device is not None:
            self._record_queue()

    # ------------------------------------------------------------------------------------------- one-submit path

    def _record_queue(self) -> None:
        device = self.device
        kernels = [launch for launch in self.body if isinstance(launch, KernelLaunch)]
        sizes = [_aligned(len(k.buffers) * 8 + len(_launch_variables(k)) * 4) for k in kernels]
        self.args_memory = Buffer(device.device, max(sum(sizes), 8), dtypes.uint8).ensure_allocated()
        view = self.args_memory.raw.cpu_view()
        queue = device.hw_compute_queue_t()
        self.patches: list[list[tuple[memoryview, int]]] = [[] for _ in self.inputs]
        # a copy's addresses live in its command, not in memory: an input's is a variable resolved at submit
        self.address_variables = [UOp.variable(f"graph_input{i}", 0, 2**64 - 1, dtypes.uint64) for i in
                                  range(len(self.inputs))]  # fmt: skip
        self.copies_read_inputs = False
        self.variable_slots: dict[str, list[int]] = {}  # variable name -> its int32 slots in the argument memory
        self.argument_words = view.cast("i")
        offset, size_of = 0, iter(sizes)
        for launch in self.body:
            if isinstance(launch, CopyLaunch):
                if launch.source.nbytes:
                    queue.copy(self._address(launch.dest), self._address(launch.source), launch.source.nbytes)
                continue
            size = next(size_of)
            raws = tuple(b.raw for b in launch.buffers)
            variables = launch.program.source.variables
            for i, variable in enumerate(variables):  # int32 slots after the addresses, written at each submit
                self.variable_slots.setdefault(variable.arg.name, []).append((offset + 8 * len(raws) + 4 * i) // 4)
            memory = self.args_memory.raw.offset(offset, size)
            args = launch.program.program.fill_kernargs(raws, (0,) * len(variables), kernargs=memory)
            source = launch.program.source
            queue.exec(launch.program.program, args, source.global_size, source.local_size)
            for slot, buf in enumerate(launch.buffers):
                if id(buf) in self.input_index:
                    self.patches[self.input_index[id(buf)]].append((view, offset + 8 * slot))
            offset += size
        self.exec_commands = list(queue.commands)
        self.exec_queue = queue  # keeps the argument states alive

    def _address(self, buf: Buffer) -> Any:
        index = self.input_index.get(id(buf))
        if index is None:
            return buf.raw.va_addr
        self.copies_read_inputs = True
        return self.address_variables[index]

    def _submit_once(self, inputs: list[Buffer], var_vals: dict[str, int]) -> None:
        device = self.device
        changed = [i for i, buf in enumerate(inputs) if buf is not self.current[i]]
        if changed or (self.variables and var_vals != self.current_var_vals):
            device.synchronize()  # the argument memory is in use until the previous replay has finished
        for index in changed:
            address = inputs[index].raw.va_addr
            for view, offset in self.patches[index]:
                struct.pack_into("<Q", view, offset, address)
        if var_vals != self.current_var_vals:
            for name, slots in self.variable_slots.items():
                value = var_vals[name]
                for slot in slots:
                    self.argument_words[slot] = value
        # the commands with this replay's launch sizes and copy addresses (resolved into a copy of the list)
        commands = self.exec_commands
        if self.exec_queue.has_symbolic_commands:
            addresses = {v.arg.name: buf.raw.va_addr for v, buf in zip(self.address_variables, inputs, strict=True)}
            commands = self.exec_queue.resolve({**var_vals, **addresses})
        # one queue on the first device runs everything (CPU devices share host memory); it starts after each
        # device's earlier work and advances each device's timeline, so work submitted there later waits for it
        queue = device.hw_compute_queue_t()
        for dev in self.devices:
            queue.wait(dev.timeline_signal, dev.timeline_value - 1)
        queue.commands.extend(commands)
        for dev in self.devices:
            queue.signal(dev.timeline_signal, dev.next_timeline())
        queue.submit(device)

    # ------------------------------------------------------------------------------------------- any launches

    def _launch_each(self, inputs: list[Buffer], var_vals: dict[str, int]) -> None:
        def swap(buf: Buffer) -> Buffer:
            index = self.input_index.get(id(buf))
            return buf if index is None else inputs[index]

        for launch in self.body:
            if isinstance(launch, KernelLaunch):
                source = launch.program.source
                vals = tuple(resolve(v, var_vals) for v in source.variables)
                global_size = tuple(resolve(size, var_vals) for size in source.global_size)
                launch.program.program(
                    *(swap(b).raw for b in launch.buffers), global_size=global_size, local_size=source.local_size,
                    vals=vals,
                )  # fmt: skip
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
        for base in self.written_bases:
            base.note_write()
        for index in self.written_inputs:
            inputs[index].note_write()
        self.refresh_copies()
        if self.device is not None:
            self._submit_once(inputs, values)
        else:
            self._launch_each(inputs, values)
        self._count(inputs)
        self.current = list(inputs)
        self.current_var_vals = values

    def _prepare_counts(self) -> None:
        """What a replay adds to GlobalCounters, worked out once: all but the inputs' bytes, which depend on the
        buffers a replay is given (counted by how many kernel arguments each input fills)."""
        kernels = [launch for launch in self.body if isinstance(launch, KernelLaunch)]
        self.kernel_count = len(kernels)
        self.kernel_ops = sum(k.program.source.ops for k in kernels)
        arguments = [buf for k in kernels for buf in k.buffers]
        self.other_bytes = sum(buf.nbytes for buf in arguments if id(buf) not in self.input_index)
        self.input_arguments = [0] * len(self.inputs)
        for buf in arguments:
            if id(buf) in self.input_index:
                self.input_arguments[self.input_index[id(buf)]] += 1

    def refresh_copies(self) -> None:
        """Launch each kept copy whose source was written since this graph last copied it (or never copied), each
        alone: submitted before the body, so the body's kernels read the fresh copy. A write of the source
        (Buffer.note_write: a kernel, copyin, an optimizer step, another graph's replay) drops the mark that says the
        copy is current."""
        for launch, mark in self.copies_on_change:
            source = launch.buffers[1].base
            if is_remembered(source, mark):
                continue
            program = launch.program
            program.program(*(b.raw for b in launch.buffers), global_size=program.source.global_size,
                            local_size=program.source.local_size)  # fmt: skip
            remember(source, mark, True)
            GlobalCounters.count_launch(program.source.ops, sum(b.nbytes for b in launch.buffers))

    def _count(self, inputs: list[Buffer]) -> None:
        """Add the replayed kernels to GlobalCounters as if they had been launched one by one."""
        GlobalCounters.kernel_count += self.kernel_count
        GlobalCounters.global_ops += self.kernel_ops
        input_bytes = sum(n * buf.nbytes for n, buf in zip(self.input_arguments, inputs, strict=True))
        GlobalCounters.global_mem += self.other_bytes + input_bytes

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


def copies_on_change(launches: list[Launch], inputs: list[Buffer]) -> list[tuple[KernelLaunch, object]]:
    """The kept copies a replay may run only when their source changed, each with the mark it leaves in the source's
    `derived` (tg.hcq.engine.kept): copies of a buffer that is not an input and that no launch of the graph writes,
    into a buffer that no other launch writes and none reads before the copy (so running it first changes nothing).
    A TinyJit of a forward pass packs its weights once instead of at every replay; a training step, which writes
    its weights, keeps copying them in place."""
    input_bases = {id(buf.base) for buf in inputs}
    writers: dict[int, int] = {}  # base buffer -> how many launches write it
    for launch in launches:
        base = _written_buffer(launch).base
        writers[id(base)] = writers.get(id(base), 0) + 1
    found: list[tuple[KernelLaunch, object]] = []
    read_so_far: set[int] = set()
    for launch in launches:
        if isinstance(launch, KernelLaunch) and launch.kept and not launch.program.source.variables:
            dest, source = launch.buffers[0], launch.buffers[1]
            if (
                id(source.base) not in input_bases
                and id(source.base) not in writers
                and id(dest.base) not in input_bases
                and writers[id(dest.base)] == 1
                and id(dest) not in read_so_far
            ):
                found.append((launch, object()))
        reads = launch.buffers[1:] if isinstance(launch, KernelLaunch) else (launch.source,)
        read_so_far.update(id(buf) for buf in reads)
    return found


def _launch_variables(launch: Launch) -> tuple[Any, ...]:
    return launch.program.source.variables if isinstance(launch, KernelLaunch) else ()


def _written_buffer(launch: Launch) -> Buffer:
    return launch.buffers[0] if isinstance(launch, KernelLaunch) else launch.dest


def _aligned(size: int) -> int:
    return (max(size, 8) + ARGS_ALIGNMENT - 1) // ARGS_ALIGNMENT * ARGS_ALIGNMENT


def _host_queue_devices(launches: list[Launch]) -> list[Any]:
    """The HCQ devices of the launches, first the one whose queue runs the graph, when one queue can run them all:
    CPU devices (one queue class, host memory: a CPU:1 kernel or a copy between CPU:0 and CPU:1 runs on CPU:0's
    engine as well). Else [] (the PYTHON device, other devices): the graph replays launch by launch."""
    devices: dict[Any, None] = {}
    for launch in launches:
        if isinstance(launch, KernelLaunch):
            if not isinstance(launch.program.program, HCQProgram):
                return []
            devices[launch.program.program.dev] = None
        else:
            for buf in (launch.source, launch.dest):
                devices[Device[buf.device]] = None
    if not all(isinstance(d, HCQCompiled) for d in devices):
        return []
    only_kernels = all(isinstance(launch, KernelLaunch) for launch in launches)
    if len(devices) == 1 and only_kernels:  # any HCQ device runs its own kernels
        return list(devices)
    queue_types = {d.hw_compute_queue_t for d in devices}
    return list(devices) if len(queue_types) == 1 and all(d.peer_group == "CPU" for d in devices) else []
