"""Pickling a TinyJit: `pickle.loads(pickle.dumps(jitted))` gives a jitted function that works in another process.

A captured TinyJit pickles its capture, not its Python function (which is often a closure or a local function that
pickle cannot name): every launch's kernel source and launch sizes, every buffer the launches use with the contents
of those that are not inputs (weights and other values baked in by the capture), which launch reads which buffer,
and where the outputs are. Loading compiles the sources again (binaries come from the on-disk cache when they are
there), allocates and fills the buffers, and rebuilds the replay graph: the first call replays. The loaded function
has no Python body, so it cannot capture again: after `reset()` a call raises JitError.

A TinyJit that has not captured yet pickles its function (a module-level function, as pickle requires) and its
options; the loaded one runs and captures as the original would.

Shared buffers: `dumps_capture(jit, shared_name)` stores a capture for a later process without the contents of the
buffers that `shared_name` names (a model's weights and caches, which that process loads itself); `loads_capture(data,
shared)` rebinds each to the buffer of the Tensor of that name, and reads through tg.codegen.serial's restricted
unpickler (the records of this module and tg IR only: a file on disk never runs code).

What cannot be pickled, with an error that says so: a capture that draws random numbers (its generator state is
not carried), and a capture whose buffers are views of other buffers.
"""

from __future__ import annotations

import functools
import pickle
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp, serial
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
    contents: bytes | None  # None: an input (the caller's buffer is swapped in at each replay), or shared
    shared: str | None = None  # the name of the loading process's buffer that takes this one's place


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


def captured_state(
    jit: TinyJit, shared_name: Callable[[Buffer], str | None] = lambda buf: None, scratch_empty: bool = False
) -> CapturedState:
    """The capture of `jit` as plain data (see the module docstring); a buffer `shared_name` names is stored by that
    name, without its contents. `scratch_empty=True` also leaves out the contents of scratch buffers, those a kernel
    writes before any launch reads them: for a caller that knows those writes are whole (a buffer made inside the
    function is written whole; a slice assigned into a closed-over buffer is not: name that one shared)."""
    if jit.draws:
        raise JitPickleError(f"{_function_name(jit)}: the capture draws random numbers; a pickled capture cannot carry "
                             "the generator's state")  # fmt: skip
    graph = jit.graph
    if graph is None:
        raise JitPickleError(f"{_function_name(jit)}: the capture kept no launches (prune=True dropped them all)")
    table: dict[int, int] = {}
    records: list[_BufferRecord] = []
    input_ids = {id(buf) for buf in graph.inputs}
    empty_ids = input_ids | (_written_first(graph.launches) if scratch_empty else set())

    def index(buf: Buffer) -> int:
        if id(buf) not in table:
            if buf.base is not buf:
                raise JitPickleError("the capture launches on a view of another buffer: it cannot be pickled")
            shared = None if id(buf) in input_ids else shared_name(buf)
            contents = None if id(buf) in empty_ids or shared is not None else bytes(buf.as_buffer())
            table[id(buf)] = len(records)
            records.append(_BufferRecord(buf.device, buf.size, buf.dtype, contents, shared))
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
    return CapturedState(_function_name(jit), jit.signature, tuple(records), tuple(launches), inputs, outputs,
                         _skeleton(jit.captured_result))  # fmt: skip


def _function_name(jit: TinyJit) -> str:
    """The jitted function's name (a functools.partial's is its function's)."""
    fn = jit.fn.func if isinstance(jit.fn, functools.partial) else jit.fn
    return getattr(fn, "__name__", type(fn).__name__)


def _written_first(launches: list[Launch]) -> set[int]:
    """The ids of the buffers that a launch writes before any launch reads them."""
    seen: set[int] = set()
    written: set[int] = set()
    for launch in launches:
        if isinstance(launch, KernelLaunch):
            reads, writes = launch.buffers[1:], (launch.buffers[0],)
        else:
            reads, writes = (launch.source,), (launch.dest,)
        seen.update(id(buf) for buf in reads)
        for buf in writes:
            if id(buf) not in seen:
                written.add(id(buf))
                seen.add(id(buf))
    return written


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


def restore(jit: TinyJit, state: CapturedState, shared: Mapping[str, UOp] | None = None) -> None:
    """Make `jit` (fresh, with no function) replay the pickled capture; `shared` gives the BUFFER node of each
    shared buffer by name."""
    from tg.codegen.schedule.realize import buffer_holding
    from tg.tensor.multi import multi_node
    from tg.tensor.tensor import Tensor

    nodes = [_buffer_node(record, shared or {}) for record in state.buffers]
    buffers = [buffer_of(node) for node in nodes]
    for record, buf in zip(state.buffers, buffers, strict=True):
        if record.contents and record.shared is None:
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


# the programs loaded for restored captures, by (device, source): a capture launches each kernel many times (one per
# model block), and many captures share kernels; loaded once each, they are not one shared object per launch
_loaded_programs: weakref.WeakValueDictionary[tuple[str, Any], CompiledProgram] = weakref.WeakValueDictionary()


def _compile(device_name: str, source: Any) -> CompiledProgram:
    found = _loaded_programs.get((device_name, source))
    if found is None:
        device = Device[device_name]
        found = CompiledProgram(device.device, source, device.runtime(source.name, device.compiler.compile(source.src)))
        _loaded_programs[(device_name, source)] = found
    return found


def _buffer_node(record: _BufferRecord, shared: Mapping[str, UOp]) -> UOp:
    """A new BUFFER node for the record, or the shared one it names (which must match it)."""
    if record.shared is None:
        return new_buffer(record.device, record.size, record.dtype)
    node = shared.get(record.shared)
    if node is None:
        raise JitPickleError(f"the capture uses the shared buffer {record.shared!r}, which was not given")
    buf = buffer_of(node)
    if (buf.device, buf.size, buf.dtype) != (record.device, record.size, record.dtype):
        raise JitPickleError(f"the shared buffer {record.shared!r} is {buf.size} x {buf.dtype} on {buf.device}, the "
                             f"capture's was {record.size} x {record.dtype} on {record.device}")  # fmt: skip
    return node


@dataclass(frozen=True)
class _StoredCapture:
    state: CapturedState
    plain_calls: int
    prune: bool


def dumps_capture(
    jit: TinyJit, shared_name: Callable[[Buffer], str | None] = lambda buf: None, scratch_empty: bool = False
) -> bytes:
    """The captured `jit` as bytes for `loads_capture` (see captured_state for `shared_name` and `scratch_empty`)."""
    if not jit.captured:
        raise JitPickleError(f"{_function_name(jit)}: nothing is captured yet")
    state = captured_state(jit, shared_name, scratch_empty)
    return serial.dumps(_StoredCapture(state, jit.plain_calls, jit.prune))


def loads_capture(data: bytes, shared: Mapping[str, UOp] | None = None) -> TinyJit:
    """A TinyJit replaying the capture `dumps_capture` stored, its shared buffers the BUFFER nodes `shared` names.
    Raises serial.IRLoadError for data that is not such a capture (nothing in it is called) and JitPickleError when
    a shared buffer is missing or differs."""
    from tg.tensor.jit import InputSignature, _unpickle_captured

    classes = (_BufferRecord, _KernelRecord, _CopyRecord, _OutputRecord, CapturedState, _StoredCapture, InputSignature)
    stored = serial.loads(data, allowed={(cls.__module__, cls.__qualname__): cls for cls in classes})
    if not isinstance(stored, _StoredCapture):
        raise serial.IRLoadError(f"not a stored capture but a {type(stored).__name__}")
    return _unpickle_captured(stored.state, stored.plain_calls, stored.prune, shared)
