"""Pickling a TinyJit: `pickle.loads(pickle.dumps(jitted))` gives a jitted function that works in another process.

A captured TinyJit pickles its capture, not its Python function (which is often a closure or a local function that
pickle cannot name): every launch's kernel source and launch sizes, every buffer the launches use with the contents
of those that are not inputs (weights and other values baked in by the capture), which launch reads which buffer,
and where the outputs are. Loading compiles the sources again (binaries come from the on-disk cache when they are
there), allocates and fills the buffers, and rebuilds the replay graph: the first call replays. The loaded function
has no Python body, so it cannot capture again: after `reset()` a call raises JitError.

A TinyJit that has not captured yet pickles its function (a module-level function, as pickle requires) and its
options; the loaded one runs and captures as the original would.

What cannot be pickled, with an error that says so: a capture that draws random numbers (its generator state is
not carried), and a capture whose buffers are views of other buffers.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp
from tg.codegen.schedule.graph import new_buffer
from tg.hcq.buffer import Buffer
from tg.hcq.device import Device
from tg.hcq.engine.buffers import buffer_of
from tg.hcq.engine.capture import CopyLaunch, KernelLaunch, Launch, LaunchGraph
from tg.hcq.engine.programs import CompiledProgram

if TYPE_CHECKING:
    from tg.tensor.jit import TinyJit


class JitPickleError(pickle.PicklingError):
    """A TinyJit whose state cannot travel in a pickle; the message says why."""


@dataclass(frozen=True)
class _BufferRecord:
    device: str
    size: int
    dtype: Any
    contents: bytes | None  # None: an input (the caller's buffer is swapped in at each replay)


@dataclass(frozen=True)
class _KernelRecord:
    device: str
    source: Any  # ProgramSource
    buffers: tuple[int, ...]  # indexes into the buffer table
    var_vals: dict[str, int]


@dataclass(frozen=True)
class _CopyRecord:
    source: int
    dest: int


@dataclass(frozen=True)
class _OutputRecord:
    input_index: int | None  # the output is this input, or else:
    shards: tuple[tuple[int, UOp], ...]  # per device: (buffer index, the output's view over a placeholder BUFFER)
    axis: int | None  # the shard axis of a sharded output (see tg.tensor.multi)
    device: Any


@dataclass(frozen=True)
class CapturedState:
    """What a pickled, captured TinyJit carries."""

    name: str
    signature: Any
    buffers: tuple[_BufferRecord, ...]
    launches: tuple[_KernelRecord | _CopyRecord, ...]
    inputs: tuple[int, ...]  # the buffer indexes of the inputs, in the order a replay takes them
    outputs: tuple[_OutputRecord, ...]
    result_skeleton: Any  # the function's result with each Tensor replaced by None


def captured_state(jit: TinyJit) -> CapturedState:
    """The capture of `jit` as plain data (see the module docstring)."""
    if jit.draws:
        raise JitPickleError(f"{jit.fn.__name__}: the capture draws random numbers; a pickled capture cannot carry "
                             "the generator's state")  # fmt: skip
    graph = jit.graph
    if graph is None:
        raise JitPickleError(f"{jit.fn.__name__}: the capture kept no launches (prune=True dropped them all)")
    table: dict[int, int] = {}
    records: list[_BufferRecord] = []
    input_ids = {id(buf) for buf in graph.inputs}

    def index(buf: Buffer) -> int:
        if id(buf) not in table:
            if buf.base is not buf:
                raise JitPickleError("the capture launches on a view of another buffer: it cannot be pickled")
            contents = None if id(buf) in input_ids else bytes(buf.as_buffer())
            table[id(buf)] = len(records)
            records.append(_BufferRecord(buf.device, buf.size, buf.dtype, contents))
        return table[id(buf)]

    inputs = tuple(index(buf) for buf in graph.inputs)
    launches: list[_KernelRecord | _CopyRecord] = []
    for launch in graph.launches:
        if isinstance(launch, KernelLaunch):
            program = launch.program
            launches.append(_KernelRecord(program.device, program.source, tuple(index(b) for b in launch.buffers),
                                          dict(launch.var_vals)))  # fmt: skip
        else:
            launches.append(_CopyRecord(index(launch.source), index(launch.dest)))
    outputs = tuple(_output_record(source, index) for source in jit.output_sources)
    return CapturedState(jit.fn.__name__, jit.signature, tuple(records), tuple(launches), inputs, outputs,
                         _skeleton(jit.captured_result))  # fmt: skip


def _output_record(source: Any, index: Any) -> _OutputRecord:
    from tg.codegen.schedule.realize import buffer_holding

    if isinstance(source, int):
        return _OutputRecord(source, (), None, None)
    node = source.uop
    shards = node.src if node.op is Ops.MULTI else (node,)
    kept = []
    for shard in shards:
        buffer_node = buffer_holding(shard)
        assert buffer_node is not None, "a captured output is a realized whole buffer"
        kept.append((index(buffer_of(buffer_node)), shard))
    return _OutputRecord(None, tuple(kept), node.arg if node.op is Ops.MULTI else None, source.device)


def _skeleton(result: Any) -> Any:
    from tg.tensor.tensor import Tensor

    if isinstance(result, Tensor):
        return None
    if isinstance(result, dict):
        return {key: None for key in result}
    if isinstance(result, (tuple, list)):
        return type(result)(None for _ in result)
    return result


def restore(jit: TinyJit, state: CapturedState) -> None:
    """Make `jit` (fresh, with no function) replay the pickled capture."""
    from tg.codegen.schedule.realize import buffer_holding
    from tg.tensor.multi import multi_node
    from tg.tensor.tensor import Tensor

    nodes = [new_buffer(record.device, record.size, record.dtype) for record in state.buffers]
    buffers = [buffer_of(node) for node in nodes]
    for record, buf in zip(state.buffers, buffers, strict=True):
        if record.contents:
            buf.copyin(record.contents)
    launches: list[Launch] = []
    for item in state.launches:
        if isinstance(item, _KernelRecord):
            program = _compile(item.device, item.source)
            used = tuple(buffers[i] for i in item.buffers)
            launches.append(KernelLaunch(program, used, tuple(nodes[i] for i in item.buffers), item.var_vals))
        else:
            launches.append(
                CopyLaunch(buffers[item.source], buffers[item.dest], (nodes[item.source], nodes[item.dest]))
            )
    jit.graph = LaunchGraph(launches, [buffers[i] for i in state.inputs])
    jit.kept_nodes = nodes  # (the buffers' memory lives as long as their nodes)
    sources: list[Any] = []
    for output in state.outputs:
        if output.input_index is not None:
            sources.append(output.input_index)
            continue
        shards = []
        for buffer_index, view in output.shards:
            placeholder = buffer_holding(view)
            assert placeholder is not None, "an output view is over one BUFFER"
            shards.append(view.substitute({placeholder: nodes[buffer_index]}))
        node = multi_node(shards, output.axis) if isinstance(output.device, tuple) else shards[0]
        sources.append(Tensor(node, device=output.device))
    jit.output_sources = sources
    jit.signature = state.signature
    jit.captured_result = _with_tensors(state.result_skeleton, state.outputs)
    jit.captured = True
    jit.calls = jit.plain_calls + 1


def _with_tensors(skeleton: Any, outputs: tuple[_OutputRecord, ...]) -> Any:
    """The result's structure with a Tensor at each leaf: a replay reads only the structure (which leaves are
    Tensors, the keys), and puts each output's Tensor in its place."""
    from tg.tensor.tensor import Tensor

    if skeleton is None:
        return None if not outputs else Tensor(0.0)
    if isinstance(skeleton, dict):
        return {key: Tensor(0.0) for key in skeleton}
    if isinstance(skeleton, (tuple, list)):
        return type(skeleton)(Tensor(0.0) for _ in skeleton)
    return skeleton


def _compile(device_name: str, source: Any) -> CompiledProgram:
    device = Device[device_name]
    return CompiledProgram(device.device, source, device.runtime(source.name, device.compiler.compile(source.src)))
