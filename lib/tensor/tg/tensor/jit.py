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
Inputs are the Tensor arguments (positional and keyword); they must keep their shapes, dtypes and devices from call
to call, and the function must return Tensors (one, or a tuple/list/dict of them). Anything else is an error that
names what changed. JIT=0 runs the function plainly on every call.

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
from tg.hcq.buffer import Buffer
from tg.hcq.engine.buffers import buffer_of
from tg.hcq.engine.capture import LaunchGraph, capture_launches, is_capturing
from tg.tensor.flags import JIT
from tg.tensor.tensor import Tensor

R = TypeVar("R")


class JitError(RuntimeError):
    """A jitted function was used in a way a replay cannot honour; the message says what changed."""


@dataclass(frozen=True)
class InputSignature:
    names: tuple[str, ...]  # "arg 0", "kwarg x", ...
    shapes: tuple[tuple[Any, ...], ...]  # symbolic sizes with their variables unbound (any value matches)
    dtypes: tuple[Any, ...]
    devices: tuple[str, ...]
    variables: tuple[tuple[str, str], ...] = ()  # per Variable argument: (where, "name in [min, max]")


def _variable_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, UOp]]:
    """The bound Variables passed as arguments (a DEFINE_VAR without a value is an error)."""
    named = [(f"arg {i}", a) for i, a in enumerate(args)] + [(f"kwarg {k}", v) for k, v in sorted(kwargs.items())]
    found = []
    for name, value in named:
        if isinstance(value, UOp) and value.op is Ops.DEFINE_VAR:
            raise JitError(f"{name}: Variable {value.arg.name} is passed without a value; pass it bound (.bind(v))")
        if isinstance(value, UOp) and value.op is Ops.BIND:
            found.append((name, value))
    return found


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


def _tensor_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[str], list[Tensor]]:
    named = [(f"arg {i}", a) for i, a in enumerate(args)] + [(f"kwarg {k}", v) for k, v in sorted(kwargs.items())]
    tensors = [(name, value) for name, value in named if isinstance(value, Tensor)]
    return [name for name, _ in tensors], [value for _, value in tensors]


def _as_buffer_tensor(t: Tensor) -> Tensor:
    """`t` realized into a whole buffer of its own (a view or computed value is copied into one)."""
    t.realize()
    if buffer_holding(t.uop) is None:
        t = t.contiguous().realize()
    return t


def _buffer(t: Tensor) -> Buffer:
    node = buffer_holding(t.uop)
    assert node is not None, "inputs and outputs are realized whole buffers"
    return buffer_of(node)


def _flatten_outputs(result: Any) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    values: list[Any] | None = None
    if isinstance(result, dict):
        values = list(result.values())
    elif isinstance(result, (tuple, list)):
        values = list(result)
    if values is None or not all(isinstance(v, Tensor) for v in values):
        raise JitError(f"a jitted function must return Tensors (one, or a tuple/list/dict of them), not {result!r}")
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
    values = var_vals or {}
    fresh = iter([inputs[s] if isinstance(s, int) else Tensor(_rebound(s.uop, values), device=s.device)
                  for s in sources])  # fmt: skip
    if isinstance(result, Tensor):
        return next(fresh)
    if isinstance(result, dict):
        return {key: next(fresh) for key in result}
    return type(result)(next(fresh) for _ in result)


class TinyJit(Generic[R]):
    """Wraps `fn` (a function of Tensors returning Tensors): see the module docstring.

    `plain_calls` is how many calls run plainly before the capture (default 1, so one-time work such as realizing
    lazily built weights stays out of the capture). 0 captures the first call, for a function known to do the same
    work on every call: its first replay then comes one call earlier. `one_call=True` compiles the captured kernels
    one call on one core each (tg.codegen.target.Target.one_call): for small kernels replayed back to back, which
    lose more to handing calls to other cores than those cores give them."""

    def __init__(self, fn: Callable[..., R], plain_calls: int = 1, one_call: bool = False) -> None:
        self.fn = fn
        self.plain_calls = plain_calls
        self.one_call = one_call
        self.calls = 0
        self.signature: InputSignature | None = None
        self.graph: LaunchGraph | None = None
        self.captured_result: Any = None
        self.output_sources: list[Tensor | int] = []  # per output: its captured buffer's Tensor, or an input index
        functools.update_wrapper(self, fn)

    def reset(self) -> None:
        """Forget the capture: the next call runs plainly again."""
        self.calls, self.signature, self.graph, self.captured_result, self.output_sources = 0, None, None, None, []

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return functools.partial(self.__call__, obj) if obj is not None else self  # jitted methods

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if not int(JIT) or is_capturing():
            return self.fn(*args, **kwargs)
        names, inputs = _tensor_inputs(args, kwargs)
        variable_args = _variable_arguments(args, kwargs)
        buffered = [_as_buffer_tensor(t) for t in inputs]
        var_vals, shapes, variables = _call_variables(variable_args, buffered)
        signature = InputSignature(tuple(names), tuple(shapes), tuple(t.dtype for t in buffered),
                                   tuple(t.device for t in buffered), variables)  # fmt: skip
        self._check_signature(signature)
        args, kwargs = _substitute(args, kwargs, inputs, buffered)
        self.calls += 1
        if self.calls <= self.plain_calls:
            result = self.fn(*args, **kwargs)
            _flatten_outputs(result)
            return result
        if self.graph is None:
            return self._capture(args, kwargs, buffered)
        assert self.graph is not None
        used = {name: value for name, value in var_vals.items() if name in self.graph.variables}  # (others: views)
        self.graph.replay([_buffer(t) for t in buffered], used)
        return _rebuild_outputs(self.captured_result, self.output_sources, buffered, var_vals)

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

    def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Tensor]) -> R:
        with capture_launches(one_call=self.one_call) as launches:
            result = self.fn(*args, **kwargs)
            outputs = _flatten_outputs(result)
            if outputs or inputs:
                Tensor.realize(*outputs, *inputs)  # outputs, and any assign into an input
            outputs = [_as_buffer_tensor(t) for t in outputs]
        if not launches:
            raise JitError(f"{self.fn.__name__}: the function launched no kernels, so there is nothing to replay")
        input_buffers = [_buffer(t) for t in inputs]
        self.graph = LaunchGraph(launches, input_buffers)
        by_buffer = {id(buf): i for i, buf in enumerate(input_buffers)}
        self.output_sources = [by_buffer.get(id(_buffer(t)), t) for t in outputs]
        self.captured_result = result
        return _rebuild_outputs(result, self.output_sources, inputs)


def _variables_text(signature: InputSignature) -> str:
    return "[" + ", ".join(f"{where}: {what}" for where, what in signature.variables) + "]"


def _shape_text(shape: tuple[Any, ...]) -> str:
    return "(" + ", ".join(s.render() if isinstance(s, UOp) else str(s) for s in shape) + ")"


def _differences(old: InputSignature, new: InputSignature) -> list[tuple[str, Any, Any, str]]:
    found = []
    for i, name in enumerate(old.names):
        for what, before, now in (("shape", old.shapes[i], new.shapes[i]), ("dtype", old.dtypes[i], new.dtypes[i]),
                                  ("device", old.devices[i], new.devices[i])):  # fmt: skip
            if before != now:  # (symbolic sizes compare as unbound expressions: a variable's range counts)
                if what == "shape":
                    before, now = _shape_text(before), _shape_text(now)
                found.append((name, before, now, what))
    return found


def _substitute(
    args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Tensor], buffered: list[Tensor]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with each input replaced by its whole-buffer version (the same object when it was one)."""
    replacement = {id(old): new for old, new in zip(inputs, buffered, strict=True)}
    new_args = tuple(replacement.get(id(a), a) for a in args)
    new_kwargs = {k: replacement.get(id(v), v) for k, v in kwargs.items()}
    return new_args, new_kwargs
