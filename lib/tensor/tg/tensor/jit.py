"""TinyJit: run a function of Tensors once, capture its kernel launches the second time, replay them after that.

    @TinyJit
    def step(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).relu().sum(axis=1)

    for x in batches:
        out = step(x, w)          # call 1 runs plainly, call 2 captures, calls 3+ replay with no scheduling

A replay swaps the new input buffers into the captured launches (on the CPU devices: one command-queue submit for
all kernels and copies) and returns Tensors over the captured output buffers. What a replay does not do, by design:
  - it does not run the function's Python again: side effects (prints, appends, counters, values read with
    .item() or .numpy() inside the function, Tensors built there from Python or numpy data) happen only in the
    first two calls; their values are baked into the capture;
  - it does not allocate outputs: each replay writes the same output buffers, so the Tensors returned by one call
    show the next call's results after that call. Copy them (`.numpy()`, `.clone().realize()`) to keep them.
Inputs are the Tensor arguments, positional and keyword, also inside lists, tuples and dicts (at any depth); they
must keep their shapes, dtypes and devices from call to call. Every other argument is baked into the capture and
must compare equal on later calls. The function returns Tensors (one, or a tuple/list/dict of them) or None (a
function run for its assigns). Anything else is an error that names what changed. JIT=0 runs the function plainly
on every call. What a replay does do like an eager call:
  - random draws (`Tensor.rand`, dropout) take the next counters of the generator, so every call draws anew;
  - an assign to a Tensor the function closes over (`state.assign(state + 1)`) runs once per call;
  - an output of the previous call passed back as an input is read before the replay overwrites it;
  - the replayed kernels count in GlobalCounters.
Sharded inputs and outputs (tg.tensor.multi) are one buffer per device; a replay swaps each. Inputs are leaves
for autograd inside the function: a gradient does not flow back into the graph an input was computed from (a
replay could not recompute it). A TinyJit pickles (tg.tensor.jit_pickle): a captured one carries its capture.
`TinyJit(fn, prune=True)` drops from the replays the launches that depend on no input (weights prepared inside
the function): they ran once, in the capture.

Symbolic shapes: a bound Variable passed as an argument (`step(x, pos.bind(p))`), or a Tensor input whose shape
has one (`x[:n.bind(k)]`), may take another value on every call: the capture's kernels take the variable as an
argument, and a replay patches those arguments and the launch sizes that depend on them. The outputs' shapes
carry the new values. Each call must bind the same variables (same names and ranges) in the same places; an
unbound Variable, another variable, or a value outside the range is an error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tg.codegen import Ops, UOp
from tg.codegen.schedule.graph import bind_graph, shape_of, unbind_graph
from tg.codegen.schedule.realize import buffer_holding
from tg.codegen.schedule.schedule import device_of
from tg.hcq.buffer import Buffer
from tg.hcq.engine.buffers import buffer_of
from tg.hcq.engine.capture import KernelLaunch, Launch, LaunchGraph, capture_launches, is_capturing
from tg.tensor.autograd import forget_computed_from
from tg.tensor.flags import JIT
from tg.tensor.random import Draw, draw_words, record_draws
from tg.tensor.tensor import Tensor, pending_assigns

R = TypeVar("R")


class JitError(RuntimeError):
    """A jitted function was used in a way a replay cannot honour; the message says what changed."""


@dataclass(frozen=True)
class InputSignature:
    names: tuple[str, ...]  # "arg 0", "kwarg x", "arg 1[0]", "kwarg d['w']", ...
    shapes: tuple[tuple[Any, ...], ...]  # symbolic sizes with their variables unbound (any value matches)
    dtypes: tuple[Any, ...]
    devices: tuple[str, ...]
    variables: tuple[tuple[str, str], ...] = ()  # per Variable argument: (where, "name in [min, max]")
    constants: tuple[tuple[str, Any], ...] = ()  # every other argument (a capture bakes them in): (where, value)


def _leaves(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every argument that is not a list, tuple or dict, named by where it sits ("arg 1[0]", "kwarg d['w']")."""
    found: list[tuple[str, Any]] = []

    def walk(name: str, value: Any) -> None:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(f"{name}[{i}]", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{name}[{key!r}]", item)
        else:
            found.append((name, value))

    for i, arg in enumerate(args):
        walk(f"arg {i}", arg)
    for key in sorted(kwargs):
        walk(f"kwarg {key}", kwargs[key])
    return found


def _variable_arguments(leaves: list[tuple[str, Any]]) -> list[tuple[str, UOp]]:
    """The bound Variables passed as arguments (a DEFINE_VAR without a value is an error)."""
    found = []
    for name, value in leaves:
        if isinstance(value, UOp) and value.op is Ops.DEFINE_VAR:
            raise JitError(f"{name}: Variable {value.arg.name} is passed without a value; pass it bound (.bind(v))")
        if isinstance(value, UOp) and value.op is Ops.BIND:
            found.append((name, value))
    return found


def _constants(leaves: list[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    return tuple((name, v) for name, v in leaves if not isinstance(v, (Tensor, UOp)))


def _same_constant(before: Any, now: Any) -> bool:
    if before is now:
        return True
    try:
        return bool(before == now) and type(before) is type(now)
    except (TypeError, ValueError):  # (numpy arrays and the like: compared by identity only)
        return False


def _describe(variable: UOp) -> str:
    return f"{variable.arg.name} in [{variable.arg.vmin}, {variable.arg.vmax}]"


def _call_variables(
    variable_args: list[tuple[str, UOp]], inputs: list[Tensor]
) -> tuple[dict[str, int], list[tuple[Any, ...]], tuple[tuple[str, str], ...]]:
    """The values of every variable of the call (Variable arguments and symbolic input shapes), the input shapes
    with their variables unbound, and a description of the Variable arguments for the signature."""
    var_vals: dict[str, int] = {}
    shapes = []
    for t in inputs:
        (unbound,), values = unbind_graph((t.uop,))
        shapes.append(shape_of(unbound))
        var_vals.update(values)
    described = []
    for where, bound in variable_args:
        variable, value = bound.unbind()
        if var_vals.setdefault(variable.arg.name, value) != value:
            raise JitError(f"variable {variable.arg.name} has two values in one call: {var_vals[variable.arg.name]} "
                           f"and {value}")  # fmt: skip
        described.append((where, _describe(variable)))
    return var_vals, shapes, tuple(described)


def _tensor_inputs(leaves: list[tuple[str, Any]]) -> tuple[list[str], list[Tensor]]:
    tensors = [(name, value) for name, value in leaves if isinstance(value, Tensor)]
    return [name for name, _ in tensors], [value for _, value in tensors]


def _shards(node: UOp) -> tuple[UOp, ...]:
    """A sharded tensor's per-device nodes (tg.tensor.multi); a tensor on one device is its one shard."""
    return node.src if node.op is Ops.MULTI else (node,)


def _as_buffer_tensor(t: Tensor) -> Tensor:
    """`t` realized into a whole buffer of its own (a view or computed value is copied into one; sharded: one per
    device)."""
    t.realize()
    if any(buffer_holding(shard) is None for shard in _shards(t.uop)):
        t = t.contiguous().realize()
    return t


def _buffers(t: Tensor) -> list[Buffer]:
    """The Buffers of a realized whole-buffer tensor: one, or one per device of a sharded tensor."""
    nodes = [buffer_holding(shard) for shard in _shards(t.uop)]
    assert all(node is not None for node in nodes), "inputs and outputs are realized whole buffers"
    return [buffer_of(node) for node in nodes if node is not None]


def _flatten_outputs(result: Any) -> list[Tensor]:
    if result is None:  # a function run for its assigns
        return []
    if isinstance(result, Tensor):
        return [result]
    values: list[Any] | None = None
    if isinstance(result, dict):
        values = list(result.values())
    elif isinstance(result, (tuple, list)):
        values = list(result)
    if values is None or not all(isinstance(v, Tensor) for v in values):
        raise JitError(f"a jitted function must return Tensors (one, or a tuple/list/dict of them) or None, "
                       f"not {result!r}")  # fmt: skip
    return values


def _rebound(node: UOp, var_vals: dict[str, int]) -> UOp:
    """`node` with the variables in its shape bound to `var_vals` (an output of a replay with new values)."""
    if not var_vals:
        return node
    (unbound,), _ = unbind_graph((node,))
    return bind_graph((unbound,), var_vals)[0]


def _rebuild_outputs(
    result: Any, sources: list[Tensor | int], inputs: list[Tensor], var_vals: dict[str, int] | None = None
) -> Any:
    """The function's result again: each output a new Tensor over its captured buffer, or the input it was."""
    if result is None:
        return None
    values = var_vals or {}
    fresh = iter([inputs[s] if isinstance(s, int) else Tensor(_rebound(s.uop, values), device=s.device)
                  for s in sources])  # fmt: skip
    if isinstance(result, Tensor):
        return next(fresh)
    if isinstance(result, dict):
        return {key: next(fresh) for key in result}
    return type(result)(next(fresh) for _ in result)


def _new_pending_assigns(before: set[UOp]) -> list[Tensor]:
    """The assigns made since `before` (the pending ones then) that are not realized yet, as Tensors to realize."""
    return [Tensor(node, device=device_of(node)) for node in pending_assigns() if node not in before]


class TinyJit(Generic[R]):
    """Wraps `fn` (a function of Tensors returning Tensors or None): see the module docstring.

    `plain_calls` is how many calls run plainly before the capture (default 1, so one-time work such as realizing
    lazily built weights stays out of the capture). 0 captures the first call, for a function known to do the same
    work on every call: its first replay then comes one call earlier. The captured kernels are compiled for replay
    (tg.codegen.pipeline.CodegenFlags.replayed): a replay runs them in one C call per core thread on the CPU, so
    smaller kernels are split across its cores than in a plain call.

    `prune=True` drops from the replays every captured launch that does not depend on an input (a Tensor or
    Variable argument, or a random draw): such work ran once, in the capture, and its result stays in its buffer."""

    def __init__(self, fn: Callable[..., R], plain_calls: int = 1, prune: bool = False) -> None:
        self.fn = fn
        self.plain_calls = plain_calls
        self.prune = prune
        self.reset()
        functools.update_wrapper(self, fn)

    def reset(self) -> None:
        """Forget the capture: the next call runs plainly again."""
        self.calls = 0
        self.signature: InputSignature | None = None
        self.graph: LaunchGraph | None = None
        self.captured_result: R | None = None
        self.captured = False  # (a pruned capture may have no launches left: then graph stays None)
        self.output_sources: list[Tensor | int] = []  # per output: its captured buffer's Tensor, or an input index
        self.draws: list[Draw] = []  # the random draws of the capture: each replay uploads fresh counters
        self.replay_draws: list[Tensor] = []
        self.kept_nodes: list[UOp] = []  # a capture loaded from a pickle: its BUFFER nodes (their memory lives as long)

    def __reduce__(self) -> tuple:
        """Pickle the capture (kernels, baked-in buffers, outputs), or, before there is one, the function and options
        (see tg.tensor.jit_pickle)."""
        if not self.captured:
            return (TinyJit, (self.fn, self.plain_calls, self.prune))
        from tg.tensor.jit_pickle import captured_state

        return (_unpickle_captured, (captured_state(self), self.plain_calls, self.prune))

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return functools.partial(self.__call__, obj) if obj is not None else self  # jitted methods

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if not int(JIT) or is_capturing():
            return self.fn(*args, **kwargs)
        leaves = _leaves(args, kwargs)
        names, inputs = _tensor_inputs(leaves)
        variable_args = _variable_arguments(leaves)
        buffered = [self._unaliased(_as_buffer_tensor(t)) for t in inputs]
        for t in buffered:  # (inputs are leaves: a replay swaps their buffers, not what they were computed from)
            forget_computed_from(t.uop)
        var_vals, shapes, variables = _call_variables(variable_args, buffered)
        signature = InputSignature(tuple(names), tuple(shapes), tuple(t.dtype for t in buffered),
                                   tuple(t.device for t in buffered), variables, _constants(leaves))  # fmt: skip
        self._check_signature(signature)
        args, kwargs = _substitute(args, kwargs, inputs, buffered)
        self.calls += 1
        if self.calls <= self.plain_calls:
            return self._plain_call(args, kwargs)
        if not self.captured:
            return self._capture(args, kwargs, buffered)
        if self.graph is not None:
            used = {name: value for name, value in var_vals.items() if name in self.graph.variables}  # (others: views)
            draws = [Tensor(draw_words(d.count), device=d.params.device) for d in self.draws]
            self.graph.replay([buf for t in buffered + draws for buf in _buffers(t)], used)
            self.replay_draws = draws  # (their memory must outlive this replay, which may still be running)
        return _rebuild_outputs(self.captured_result, self.output_sources, buffered, var_vals)

    def _unaliased(self, t: Tensor) -> Tensor:
        """`t`, or a copy of it when its buffer is one the replay writes (an output fed back as the next input:
        the replay would overwrite what it still has to read)."""
        mine = _buffers(t)
        if self.graph is not None and any(id(b) in self.graph.written_ids for b in mine):
            return t.clone().realize()
        return t

    def _plain_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        pending = set(pending_assigns())
        result = self.fn(*args, **kwargs)
        _flatten_outputs(result)
        assigned = _new_pending_assigns(pending)  # realized now: the capture must not run this call's assigns again
        if assigned:
            Tensor.realize(*assigned)
        return result

    def _check_signature(self, signature: InputSignature) -> None:
        if self.signature is None:
            self.signature = signature
            return
        old = self.signature
        if old.names != signature.names:
            raise JitError(f"{self.fn.__name__}: the Tensor inputs changed from {list(old.names)} to "
                           f"{list(signature.names)}; a capture replays with the same inputs")  # fmt: skip
        if old.variables != signature.variables:
            raise JitError(f"{self.fn.__name__}: the Variable arguments changed from {_variables_text(old)} to "
                           f"{_variables_text(signature)}; a capture replays with the same variables")  # fmt: skip
        for name, before, now, what in _differences(old, signature):
            raise JitError(f"{self.fn.__name__}: {name} changed {what} from {before} to {now}; a capture only "
                           "replays inputs like the ones it was made with (call .reset() first)")  # fmt: skip
        for (name, before), (_, now) in zip(old.constants, signature.constants, strict=True):
            if not _same_constant(before, now):
                raise JitError(f"{self.fn.__name__}: {name} changed from {before!r} to {now!r}; a capture bakes in "
                               "the arguments that are not Tensors or Variables (call .reset() first)")  # fmt: skip

    def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Tensor]) -> R:
        pending = set(pending_assigns())
        with capture_launches() as launches, record_draws() as draws:
            result = self.fn(*args, **kwargs)
            outputs = _flatten_outputs(result)
            assigned = _new_pending_assigns(pending)
            if assigned:  # first, as a later read of their storage would run them first outside a capture
                Tensor.realize(*assigned)
            if outputs or inputs:
                Tensor.realize(*outputs, *inputs)  # outputs, and any assign into an input
            outputs = [_as_buffer_tensor(t) for t in outputs]
        if not launches:
            raise JitError(f"{self.fn.__name__}: the function launched no kernels, so there is nothing to replay")
        self.draws = draws
        input_buffers = [buf for t in inputs for buf in _buffers(t)] + [_buffers(d.params)[0] for d in draws]
        kept = _launches_reading(launches, input_buffers) if self.prune else launches
        self.graph = LaunchGraph(kept, input_buffers) if kept else None
        self.captured = True
        by_buffer = {id(_buffers(t)[0]): i for i, t in enumerate(inputs)}
        self.output_sources = [by_buffer.get(id(_buffers(t)[0]), t) for t in outputs]
        self.captured_result = result
        return _rebuild_outputs(result, self.output_sources, inputs)


def _unpickle_captured(state: Any, plain_calls: int, prune: bool, shared: Any = None) -> TinyJit:
    from tg.tensor.jit_pickle import restore

    def replay_only(*args: Any, **kwargs: Any) -> Any:
        raise JitError(f"{state.name}: this TinyJit was loaded from a pickle and has no Python function; it only "
                       "replays its capture, which reset() dropped")  # fmt: skip

    replay_only.__name__ = replay_only.__qualname__ = state.name
    jit: TinyJit = TinyJit(replay_only, plain_calls, prune)
    restore(jit, state, shared)
    return jit


def _launches_reading(launches: list[Launch], inputs: list[Buffer]) -> list[Launch]:
    """The launches that depend on `inputs`: read one, read what such a launch wrote, or take a variable."""
    dependent = {id(buf) for buf in inputs}
    kept = []
    for launch in launches:
        if isinstance(launch, KernelLaunch):
            written, read = launch.buffers[0], launch.buffers[1:]
            takes_variable = bool(launch.program.source.variables)
        else:
            written, read, takes_variable = launch.dest, (launch.source,), False
        if takes_variable or any(id(buf) in dependent for buf in read):
            dependent.add(id(written))
            kept.append(launch)
    return kept


def _variables_text(signature: InputSignature) -> str:
    return "[" + ", ".join(f"{where}: {what}" for where, what in signature.variables) + "]"


def _shape_text(shape: tuple[Any, ...]) -> str:
    return "(" + ", ".join(s.render() if isinstance(s, UOp) else str(s) for s in shape) + ")"


def _differences(old: InputSignature, new: InputSignature) -> list[tuple[str, Any, Any, str]]:
    found = []
    for i, name in enumerate(old.names):
        compared: tuple[tuple[str, Any, Any], ...] = (
            ("shape", old.shapes[i], new.shapes[i]),
            ("dtype", old.dtypes[i], new.dtypes[i]),
            ("device", old.devices[i], new.devices[i]),
        )
        for what, before, now in compared:
            if before != now:  # (symbolic sizes compare as unbound expressions: a variable's range counts)
                if what == "shape":
                    before, now = _shape_text(before), _shape_text(now)
                found.append((name, before, now, what))
    return found


def _substitute(
    args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Tensor], buffered: list[Tensor]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments, containers rebuilt, with each input replaced by its whole-buffer version (the same
    object when it was one)."""
    replacement = {id(old): new for old, new in zip(inputs, buffered, strict=True)}
    if all(old is new for old, new in zip(inputs, buffered, strict=True)):
        return args, kwargs

    def swap(value: Any) -> Any:
        if isinstance(value, Tensor):
            return replacement.get(id(value), value)
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, tuple):
            items = [swap(v) for v in value]
            return type(value)._make(items) if hasattr(value, "_make") else tuple(items)  # (namedtuples too)
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    return tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()}
