"""`@function`: a Python function of Tensors made into one call.

    @function
    def f(x, y): return x * 2 + y

    @function(precompile=True, allow_implicit=False, grad_fxn=None)
    def g(x): return x.exp(), x.sum()                 # tuple returns give a tuple of Tensors

At each call the wrapper (1) collects the input Tensors: every Tensor in the arguments, in lists, tuples and
dicts, and in the attributes of objects passed in (so `self.weight` of a decorated method is an input), each once;
(2) runs the function lazily (nothing executes); (3) replaces each input's graph with a placeholder `Param(k)`
(`Tensor.as_param`); (4) applies each returned body to the inputs as a call (tg.tensor.call), which inlines it.

A returned value that reads a realized buffer which is none of the inputs (a tensor captured from the enclosing
scope, or made from Python data inside the function; not `Tensor.empty`, which has no memory yet) is an implicit
buffer: an `ImplicitBufferError` unless `allow_implicit=True` (then that buffer stays in the body as a constant input
of the call).

Options:
* `precompile=True`: every returned value comes from one precompiled call (tg.tensor.precompiled): the body runs as
  one opaque unit, over its inputs' buffers, into output buffers of its own, rather than being inlined and fused
  with what uses the results. Gradients still flow through the body (or come from grad_fxn).
* `precompile_backward=True`: the gradient through the call is computed by autograd of the body and materialized
  (`.contiguous()`) before it flows on.
* `grad_fxn(gradient, call)`: the gradients of the inputs, as for `Tensor.call`.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from tg.codegen import Ops, UOp
from tg.codegen.schedule.calls import outer_nodes
from tg.tensor import autograd
from tg.tensor.autograd import Gradients, compute_gradient, custom_gradient
from tg.tensor.call import call, precompiled_call
from tg.tensor.custom_kernel import CustomKernelError, GradFxn

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


class ImplicitBufferError(CustomKernelError):
    """A @function body reads a realized buffer that is not one of its arguments (and allow_implicit is off)."""


_MAX_DEPTH = 8  # how deep inputs are looked for in nested containers and object attributes


def collect_inputs(values: Any) -> list[Tensor]:
    """Every Tensor in `values` (containers and object attributes searched), each once, in the order found."""
    from tg.tensor.tensor import Tensor

    found: dict[int, Tensor] = {}
    seen: set[int] = set()

    def walk(value: Any, depth: int) -> None:
        if isinstance(value, Tensor):
            found.setdefault(id(value), value)
            return
        if depth > _MAX_DEPTH or id(value) in seen or isinstance(value, (str, bytes, int, float, bool, type(None))):
            return
        seen.add(id(value))
        if isinstance(value, dict):
            for item in value.values():
                walk(item, depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                walk(item, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, _NOT_STATE):  # an object's state: a model's weights
            for item in vars(value).values():
                walk(item, depth + 1)

    walk(values, 0)
    return list(found.values())


_NOT_STATE = (type, types.FunctionType, types.MethodType, types.ModuleType, functools.partial)


class Function:
    """A Python function of Tensors wrapped as one call per invocation (see the module doc)."""

    def __init__(
        self,
        fxn: Callable[..., Any],
        precompile: bool = False,
        precompile_backward: bool = False,
        allow_implicit: bool = False,
        grad_fxn: GradFxn | None = None,
    ) -> None:
        self.fxn, self.precompile, self.precompile_backward = fxn, precompile, precompile_backward
        self.allow_implicit, self.grad_fxn = allow_implicit, grad_fxn
        self.__name__: str = getattr(fxn, "__name__", type(fxn).__name__)
        functools.update_wrapper(self, fxn)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """As a method decorator: bound to the instance, whose Tensor attributes are then inputs."""
        return self if instance is None else functools.partial(self.__call__, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tg.tensor.tensor import Tensor

        inputs = collect_inputs((args, kwargs))
        returned = self.fxn(*args, **kwargs)
        is_tuple = isinstance(returned, (tuple, list))
        outputs = tuple(returned) if is_tuple else (returned,)
        if not outputs or not all(isinstance(o, Tensor) for o in outputs):
            kinds = [type(o).__name__ for o in outputs]
            raise CustomKernelError(f"@function {self.__name__} must return a Tensor or tuple of Tensors, got {kinds}")
        if not inputs:
            raise CustomKernelError(f"@function {self.__name__} got no Tensor arguments")
        if self.precompile:
            results = self._precompiled(outputs, inputs)
        else:
            results = tuple(self._call(output, inputs) for output in outputs)
        return type(returned)(results) if is_tuple else results[0]

    def _bodies(self, outputs: tuple[Tensor, ...], inputs: list[Tensor]) -> tuple[list[Tensor], tuple[UOp, ...]]:
        """The inputs the outputs read (each a placeholder `Param(k)` in the bodies) and the bodies over them."""
        arguments, bodies = inputs, tuple(output.uop for output in outputs)
        for _ in range(2):  # (again when an input is read only inside another input's graph: it gets no slot)
            mapping = {t.uop: t.as_param(k).uop for k, t in enumerate(arguments)}
            bodies = tuple(output.uop.substitute(mapping) for output in outputs)
            used = {node.arg.slot for node in outer_nodes(UOp.sink(*bodies)) if node.op is Ops.PARAM}
            if len(used) == len(arguments):
                break
            arguments = [t for k, t in enumerate(arguments) if k in used]
        for body in bodies:
            self._check_implicit(body)
        return arguments, bodies

    def _call(self, output: Tensor, inputs: list[Tensor]) -> Tensor:
        arguments, (body,) = self._bodies((output,), inputs)
        if not arguments:  # a result that reads no input (a constant): nothing to call
            return output
        result = call(*arguments, fxn=body, grad_fxn=self.grad_fxn)
        if self.precompile_backward and self.grad_fxn is None:
            self._materialize_gradients(result, arguments)
        return result

    def _precompiled(self, outputs: tuple[Tensor, ...], inputs: list[Tensor]) -> tuple[Tensor, ...]:
        """All the outputs from one precompiled call (tg.tensor.precompiled): one opaque unit, buffers of its own."""
        from tg.tensor.tensor import Tensor

        arguments, bodies = self._bodies(outputs, inputs)
        if not arguments:
            return tuple(output.contiguous() for output in outputs)
        uops = precompiled_call(bodies, tuple(t.uop for t in arguments), self.grad_fxn)
        results = tuple(Tensor(uop, device=arguments[0].device) for uop in uops)
        if self.precompile_backward and self.grad_fxn is None:
            for result in results:
                self._materialize_gradients(result, arguments)
        return results

    @staticmethod
    def _materialize_gradients(result: Tensor, arguments: list[Tensor]) -> None:
        sources = tuple(t.uop for t in arguments)
        custom_gradient(result.uop, sources, _materialized_gradient(result.uop, sources))

    def _check_implicit(self, body: UOp) -> None:
        if self.allow_implicit:
            return
        from tg.hcq.engine.buffers import has_memory

        for node in body.toposort():
            if node.op is Ops.BUFFER and has_memory(node):  # (an unrealized one, `Tensor.empty`, is an output)
                raise ImplicitBufferError(
                    f"@function {self.__name__} reads a buffer that is not one of its arguments ({node.arg.size} "
                    f"elements of {node.dtype!r}: a tensor captured from the enclosing scope or made from data inside "
                    "it); pass it as an argument, or use @function(allow_implicit=True)"
                )


def _materialized_gradient(value: UOp, sources: tuple[UOp, ...]) -> Callable[[UOp, tuple[bool, ...]], Gradients]:
    """Autograd of the inlined body, each gradient made contiguous (its own buffer) before it flows on."""

    def rule(grad: UOp, wanted: tuple[bool, ...]) -> Gradients:
        own = autograd._custom_gradients.pop(value)  # (this rule: the body's own primitives differentiate it here)
        try:
            grads = compute_gradient(value, grad, sources)
        finally:
            autograd._custom_gradients[value] = own
        return tuple(
            UOp(Ops.CONTIGUOUS, grads[s].dtype, (grads[s],)) if want and s in grads else None
            for s, want in zip(sources, wanted, strict=True)
        )

    return rule


@overload
def function(fxn: Callable[..., Any]) -> Function: ...
@overload
def function(
    fxn: None = None,
    *,
    precompile: bool = False,
    precompile_backward: bool = False,
    allow_implicit: bool = False,
    grad_fxn: GradFxn | None = None,
) -> Callable[[Callable[..., Any]], Function]: ...
def function(
    fxn: Callable[..., Any] | None = None,
    *,
    precompile: bool = False,
    precompile_backward: bool = False,
    allow_implicit: bool = False,
    grad_fxn: GradFxn | None = None,
) -> Function | Callable[[Callable[..., Any]], Function]:
    """Decorate a function of Tensors as one call (`@function` or `@function(precompile=True, ...)`)."""

    def wrap(f: Callable[..., Any]) -> Function:
        return Function(f, precompile, precompile_backward, allow_implicit, grad_fxn)

    return wrap if fxn is None else wrap(fxn)
