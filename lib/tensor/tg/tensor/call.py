"""Calls: a tensor graph over placeholders, applied to tensors by substituting them for the placeholders.

    body = a.as_param(0) + b.as_param(1) * 2          # or UOp.param(0, dtypes.float, 100) + UOp.param(1, ...)
    c = Tensor.call(a, b, fxn=body)                   # the same value as a + b * 2
    c = Tensor.call(a, b, fxn=body, grad_fxn=bwd)     # gradients from bwd(gradient, call) instead of the body

A placeholder is `UOp.param(slot, dtype, size)`: flat storage of `size` elements; `t.as_param(slot)` is one with t's
dtype and element count, reshaped to t's shape. A call is inlined: each PARAM k becomes argument k (reshaped to
the flat size the PARAM has), so the scheduler fuses the body with what surrounds it like any other graph, and
gradients flow through the body by the ordinary rules. With `grad_fxn` the call's result is differentiated by
`grad_fxn(gradient, call)` instead, where `call` is `CALL(body, *arguments)` (the protocol of custom kernels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.dtype import PtrDType
from tg.codegen.schedule.graph import ShapeError, shape_of
from tg.tensor.autograd import custom_gradient
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.custom_kernel import CustomKernelError, GradFxn, _gradient_rule, custom_kernel, shape_size

if TYPE_CHECKING:
    from collections.abc import Callable

    from tg.tensor.tensor import Tensor


def as_param(t: Tensor, slot: int) -> Tensor:
    """A placeholder for argument `slot` of a call, with t's shape, dtype and device."""
    from tg.tensor.tensor import Tensor

    count = t.numel()
    if not isinstance(count, int):
        raise CustomKernelError(f"as_param needs a concrete shape, got {t.shape}")
    param = UOp.param(slot, t.dtype, count, name=f"param{slot}")
    # (always a RESHAPE, even to the same shape: the Tensor's dtype is the value's, the PARAM's is a pointer)
    return Tensor(UOp(Ops.RESHAPE, t.dtype, (param,), t.shape), device=t.device)


def params_of(body: UOp) -> dict[int, UOp]:
    """The PARAM placeholders of a call body, by slot (two different ones in one slot are an error)."""
    found: dict[int, UOp] = {}
    for node in body.toposort():
        if node.op is Ops.PARAM:
            if found.setdefault(node.arg.slot, node) is not node:
                raise CustomKernelError(f"the body has two different placeholders in slot {node.arg.slot}")
    return found


def inline(body: UOp, arguments: Sequence[UOp]) -> UOp:
    """`body` with PARAM k replaced by `arguments[k]` (checked: arity, dtype, element count)."""
    params = params_of(body)
    if sorted(params) != list(range(len(arguments))):
        got = len(arguments)
        raise CustomKernelError(f"the body's placeholders are slots {sorted(params)}, but it got {got} tensors")
    mapping: dict[UOp, UOp] = {}
    for slot, param in params.items():
        argument, pointer = arguments[slot], param.ptrdtype
        count = shape_size(argument)
        if pointer.base is not argument.dtype:
            raise CustomKernelError(f"placeholder {slot} is {pointer.base!r}, the tensor is {argument.dtype!r}")
        if pointer.size != count:
            raise ShapeError(f"placeholder {slot} holds {pointer.size} elements, the tensor {shape_of(argument)}")
        flat = argument if shape_of(argument) == (count,) else UOp(Ops.RESHAPE, argument.dtype, (argument,), (count,))
        mapping[param] = flat
    return _substitute_values(body, mapping)


def _substitute_values(body: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """body.substitute(mapping), where a node built on pointers (`param0 + param1` of UOp arithmetic) takes the
    value dtype once its PARAMs are values."""
    new: dict[UOp, UOp] = {}
    for node in body.toposort(lambda u: u not in mapping):
        if node in mapping:
            new[node] = mapping[node]
            continue
        src = tuple(new[s] for s in node.src)
        dtype = node.dtype.base if isinstance(node.dtype, PtrDType) else node.dtype
        new[node] = node if dtype is node.dtype and src == node.src else node.replace(src=src, dtype=dtype)
    return new[body]


def call(*tensors: Tensor, fxn: Any, grad_fxn: GradFxn | None = None) -> Tensor:
    """`fxn` (a Tensor or UOp over placeholders) applied to `tensors` (see the module doc)."""
    from tg.tensor.tensor import Tensor

    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise CustomKernelError(f"call takes one or more Tensors, got {[type(t).__name__ for t in tensors]}")
    body = fxn.uop if isinstance(fxn, Tensor) else fxn
    if not isinstance(body, UOp):
        raise CustomKernelError(f"fxn must be a Tensor or UOp over placeholders, got {type(fxn).__name__}")
    arguments = tuple(t.uop for t in tensors)
    result = Tensor(inline(body, arguments), device=tensors[0].device)
    if grad_fxn is not None:
        call_node = UOp(Ops.CALL, dtypes.void, (UOp.sink(body), *arguments))
        custom_gradient(result.uop, arguments, _gradient_rule(call_node, grad_fxn))
    return result


class CallOps(TensorBase):
    """`custom_kernel`, `call` and `as_param` as Tensor methods (each also works as `Tensor.name(a, b, fxn=...)`)."""

    __slots__ = ()

    # (no `self`: `t.custom_kernel(x, fxn=...)` passes t first, `Tensor.custom_kernel()` with none gets a clear error)
    def custom_kernel(*tensors: Tensor, fxn: Callable[..., UOp], grad_fxn: GradFxn | None = None) -> list[Tensor]:
        """Run the kernel AST `fxn(*placeholders)` on the tensors; see tg.tensor.custom_kernel."""
        return custom_kernel(*tensors, fxn=fxn, grad_fxn=grad_fxn)

    def call(*tensors: Tensor, fxn: Any, grad_fxn: GradFxn | None = None) -> Tensor:
        """The body `fxn` over placeholders applied to the tensors; see tg.tensor.call."""
        return call(*tensors, fxn=fxn, grad_fxn=grad_fxn)

    def as_param(self, slot: int) -> Tensor:
        """A placeholder for argument `slot` of a call, with this tensor's shape, dtype and device."""
        return as_param(as_tensor(self), slot)
