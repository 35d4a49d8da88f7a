"""Calls: a tensor graph over placeholders, applied to tensors by substituting them for the placeholders.

    body = a.as_param(0) + b.as_param(1) * 2          # or UOp.param(0, dtypes.float, 100) + UOp.param(1, ...)
    c = Tensor.call(a, b, fxn=body)                   # the same value as a + b * 2
    c = Tensor.call(a, b, fxn=body, grad_fxn=bwd)     # gradients from bwd(gradient, call) instead of the body

A placeholder is `UOp.param(slot, dtype, size)`: flat storage of `size` elements; `t.as_param(slot)` is one with t's
dtype and element count, reshaped to t's shape. The call is a node `CALL(body, *arguments)` of the body's dtype and
shape. It is inlined at schedule time (tg.codegen.schedule.calls, the scheduler's first stage): each PARAM k
becomes argument k (reshaped to the flat size the PARAM has), so the body fuses with what surrounds it like the
expression written out. Gradients flow through the body: autograd's rule for CALL differentiates the inlined body.
With `grad_fxn` the call is differentiated by `grad_fxn(gradient, call)` instead (the protocol of custom kernels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp
from tg.codegen.dtype import PtrDType
from tg.codegen.schedule.calls import outer_nodes, outside_kernels
from tg.codegen.schedule.graph import ShapeError, shape_of
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.custom_kernel import CustomKernelError, GradFxn, custom_kernel, shape_size

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
    for node in outer_nodes(body):  # (a call inside the body has placeholders of its own)
        if node.op is Ops.PARAM:
            if found.setdefault(node.arg.slot, node) is not node:
                raise CustomKernelError(f"the body has two different placeholders in slot {node.arg.slot}")
    return found


def check_arguments(body: UOp, arguments: Sequence[UOp]) -> None:
    """Arity, dtype and element count of each argument against the body's placeholders (clear errors)."""
    params = params_of(body)
    if sorted(params) != list(range(len(arguments))):
        got = len(arguments)
        raise CustomKernelError(f"the body's placeholders are slots {sorted(params)}, but it got {got} tensors")
    for slot, param in params.items():
        argument, pointer = arguments[slot], param.ptrdtype
        if pointer.base is not argument.dtype:
            raise CustomKernelError(f"placeholder {slot} is {pointer.base!r}, the tensor is {argument.dtype!r}")
        if pointer.size != shape_size(argument):
            raise ShapeError(f"placeholder {slot} holds {pointer.size} elements, the tensor {shape_of(argument)}")


def value_body(body: UOp) -> UOp:
    """`body` as a tensor graph: each PARAM under a RESHAPE of its value dtype (`as_param` builds that already; UOp
    arithmetic on bare PARAMs gets it here), pointer-typed nodes given their value dtype."""
    params = [n for n in outer_nodes(body) if n.op is Ops.PARAM]
    bare = {n: UOp(Ops.RESHAPE, n.ptrdtype.base, (n,), (n.ptrdtype.size,)) for n in params}
    new: dict[UOp, UOp] = {}
    for node in body.toposort(outside_kernels):  # (a custom kernel's AST in the body stays as it is)
        if node.op is Ops.PARAM:
            new[node] = node
            continue
        pointer_arithmetic = isinstance(node.dtype, PtrDType)  # (`param0 + param1`: its PARAMs are read as values)
        src = tuple(bare[s] if s in bare and pointer_arithmetic else new.get(s, s) for s in node.src)
        dtype = node.dtype.base if isinstance(node.dtype, PtrDType) else node.dtype
        new[node] = node if dtype is node.dtype and src == node.src else node.replace(src=src, dtype=dtype)
    result = new[body]
    return bare[result] if result.op is Ops.PARAM else result


def call(*tensors: Tensor, fxn: Any, grad_fxn: GradFxn | None = None) -> Tensor:
    """`fxn` (a Tensor or UOp over placeholders) applied to `tensors` (see the module doc)."""
    from tg.tensor.tensor import Tensor

    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise CustomKernelError(f"call takes one or more Tensors, got {[type(t).__name__ for t in tensors]}")
    body = fxn.uop if isinstance(fxn, Tensor) else fxn
    if not isinstance(body, UOp):
        raise CustomKernelError(f"fxn must be a Tensor or UOp over placeholders, got {type(fxn).__name__}")
    arguments = tuple(t.uop for t in tensors)
    check_arguments(body, arguments)
    body = value_body(body)
    return Tensor(UOp(Ops.CALL, body.dtype, (body, *arguments), grad_fxn), device=tensors[0].device)


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
