"""Calls: a tensor graph over placeholders, applied to tensors by substituting them for the placeholders.

    body = a.as_param(0) + b.as_param(1) * 2          # or UOp.param(0, dtypes.float, 100) + UOp.param(1, ...)
    c = Tensor.call(a, b, fxn=body)                   # the same value as a + b * 2
    c = Tensor.call(a, b, fxn=body, grad_fxn=bwd)     # gradients from bwd(gradient, call) instead of the body
    c = Tensor.call(a, b, fxn=body, precompile=True)  # one opaque call into a buffer of its own (tg.tensor.precompiled)

A placeholder is `UOp.param(slot, dtype, size)`: flat storage of `size` elements; `t.as_param(slot)` is one with t's
dtype and element count, reshaped to t's shape. The call is a node `CALL(body, *arguments)` of the body's dtype and
shape. It is inlined at schedule time (tg.codegen.schedule.calls, the scheduler's first stage): each PARAM k
becomes argument k (reshaped to the flat size the PARAM has), so the body fuses with what surrounds it like the
expression written out. Gradients flow through the body: autograd's rule for CALL differentiates the inlined body.
With `grad_fxn` the call is differentiated by `grad_fxn(gradient, call)` instead (the protocol of custom kernels).
On sharded tensors the call is inlined before the graph is split per device (tg.tensor.multi.lower).

With `precompile=True` the call is instead a call with an output buffer (`UOp.call_with_output`), which is not
inlined: tg.tensor.precompiled runs it as one opaque unit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp
from tg.codegen.schedule.calls import check_arguments, value_body
from tg.codegen.uop.args import CallInfo
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.custom_kernel import CustomKernelError, GradFxn, custom_kernel

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


def call(*tensors: Tensor, fxn: Any, grad_fxn: GradFxn | None = None, precompile: bool = False) -> Tensor:
    """`fxn` (a Tensor or UOp over placeholders) applied to `tensors` (see the module doc)."""
    from tg.tensor.tensor import Tensor

    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise CustomKernelError(f"call takes one or more Tensors, got {[type(t).__name__ for t in tensors]}")
    body = fxn.uop if isinstance(fxn, Tensor) else fxn
    if not isinstance(body, UOp):
        raise CustomKernelError(f"fxn must be a Tensor or UOp over placeholders, got {type(fxn).__name__}")
    arguments = tuple(t.uop for t in tensors)
    if precompile:
        (output,) = precompiled_call((body,), arguments, grad_fxn)
        return Tensor(output, device=tensors[0].device)
    check_arguments(body, arguments)
    body = value_body(body)
    return Tensor(UOp(Ops.CALL, body.dtype, (body, *arguments), CallInfo(grad_fxn)), device=tensors[0].device)


def precompiled_call(bodies: tuple[UOp, ...], arguments: tuple[UOp, ...], grad_fxn: GradFxn | None) -> tuple[UOp, ...]:
    """The outputs of one precompiled call of `bodies` on `arguments` (tg.tensor.precompiled runs it)."""
    return UOp.call_with_outputs(bodies, *arguments, grad_fxn=grad_fxn, precompile=True)


class CallOps(TensorBase):
    """`custom_kernel`, `call` and `as_param` as Tensor methods (each also works as `Tensor.name(a, b, fxn=...)`)."""

    __slots__ = ()

    # (no `self`: `t.custom_kernel(x, fxn=...)` passes t first, `Tensor.custom_kernel()` with none gets a clear error)
    def custom_kernel(*tensors: Tensor, fxn: Callable[..., UOp], grad_fxn: GradFxn | None = None) -> list[Tensor]:
        """Run the kernel AST `fxn(*placeholders)` on the tensors; see tg.tensor.custom_kernel."""
        return custom_kernel(*tensors, fxn=fxn, grad_fxn=grad_fxn)

    def call(*tensors: Tensor, fxn: Any, grad_fxn: GradFxn | None = None, precompile: bool = False) -> Tensor:
        """The body `fxn` over placeholders applied to the tensors; see tg.tensor.call."""
        return call(*tensors, fxn=fxn, grad_fxn=grad_fxn, precompile=precompile)

    def as_param(self, slot: int) -> Tensor:
        """A placeholder for argument `slot` of a call, with this tensor's shape, dtype and device."""
        return as_param(as_tensor(self), slot)
