"""Custom kernels: a kernel written in tg's IR, used on Tensors like any op.

    outs = Tensor.custom_kernel(out, x, fxn=kernel, grad_fxn=None)   # -> list[Tensor], one per input
    out = Tensor.empty(16).custom_kernel(x, fxn=kernel)[0]            # the method form

`fxn` gets one placeholder per tensor, in order: a PARAM pointing at the tensor's elements in C-contiguous order,
seen in the tensor's shape (a RESHAPE of the PARAM): `A.shape`, `A[i, j]` / `A.index(i, j)` (row-major; one index
is a flat position), `A.flatten()` and `A.base` (the flat PARAM). It returns a kernel AST: a SINK of STOREs at
indices built from `UOp.range`, written as tg.codegen.uop.kernel_form describes (`.end(ranges)`, addresses used as
values), or a PROGRAM (`tg.hcq.engine.programs.to_program`: a kernel compiled already), which runs as it is. The
result is every input "after" the kernel, so callers pick the outputs by position.

In the tensor graph a custom kernel is `CALL(ast, *inputs)` and output k is `AFTER(input_k, CALL)`. Nothing runs
until a realize: then `run_calls` realizes each call's inputs into whole buffers (a lazy input gets a fresh one; a
realized tensor is written in place, as the kernel's writes are the point), launches the kernel on them, and the
graph reads those buffers from then on. It runs precompiled calls (tg.tensor.precompiled) at the same point.

On sharded tensors (all sharded across the same devices) the placeholders have one shard's shape, and the graph is
split per device first (tg.tensor.multi): the same kernel runs once on each device, on that device's shards.

`grad_fxn(gradient, call)` gives the gradients: `gradient` is the UOp of the gradient of the output being
differentiated, `call` the CALL UOp (`call.src[1:]` are the inputs' UOps, `call.unbound_outputs` the written ones
after the kernel); it returns one UOp (or Tensor, or None) per input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.flags import SPEC
from tg.codegen.schedule.calls import is_kernel, is_precompiled, live_bodies, outside_kernels
from tg.codegen.schedule.graph import shape_of
from tg.codegen.uop.args import CallInfo
from tg.codegen.uop.kernel_form import lowerable_kernel
from tg.codegen.uop.spec import KERNEL_SPEC, TENSOR_SPEC, SpecError, type_verify
from tg.tensor.errors import CustomKernelError

__all__ = ["CustomKernelError", "custom_kernel", "outputs_of"]

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

GradFxn = Callable[[UOp, UOp], Sequence[Any]]


def placeholders(tensors: Sequence[Tensor]) -> list[UOp]:
    """One placeholder per tensor: slot k points at tensor k's elements, C-contiguous, seen in its shape (one shard's
    shape for a sharded tensor: the kernel runs on each shard)."""
    found = []
    for k, t in enumerate(tensors):
        shape = tuple(size for size in t.shard_shape if isinstance(size, int))
        if len(shape) != len(t.shard_shape):
            raise CustomKernelError(f"custom kernels need concrete shapes, got {t.shape}")
        param = UOp.param(k, t.dtype, math.prod(shape), name=f"data{k}")
        found.append(UOp(Ops.RESHAPE, param.dtype, (param,), tuple(shape)))
    return found


def custom_kernel(*tensors: Tensor, fxn: Callable[..., UOp], grad_fxn: GradFxn | None = None) -> list[Tensor]:
    """Run the kernel `fxn(*placeholders)` on `tensors`; returns each tensor after the kernel (see module doc)."""
    from tg.tensor.tensor import Tensor

    if not tensors:
        raise CustomKernelError("custom_kernel needs at least one tensor")
    if not all(isinstance(t, Tensor) for t in tensors):
        raise CustomKernelError(f"custom_kernel takes Tensors, got {[type(t).__name__ for t in tensors]}")
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise CustomKernelError(f"custom_kernel's tensors must be on one device, or all sharded across the same "
                                f"devices, got {sorted(map(str, devices))}")  # fmt: skip
    shaped = placeholders(tensors)
    ast = kernel_ast(fxn(*shaped), [p.base for p in shaped])
    call = UOp(Ops.CALL, dtypes.void, (ast, *(t.uop for t in tensors)), CallInfo(grad_fxn))  # (autograd reads it)
    live_bodies.add(ast)
    return [Tensor(UOp(Ops.AFTER, t.dtype, (t.uop, call)), device=t.device) for t in tensors]


def outputs_of(call: UOp) -> list[UOp]:
    """The output nodes of a custom kernel's CALL (input k after the kernel): what a grad_fxn reads the forward's
    results from."""
    if not is_kernel_call(call):
        raise CustomKernelError(f"outputs_of takes a custom kernel's CALL, got {call.op!r}")
    return [UOp(Ops.AFTER, source.dtype, (source, call)) for source in call.src[1:]]


def kernel_ast(body: Any, params: Sequence[UOp]) -> UOp:
    """`body` as a kernel AST tg's codegen lowers, after checking it reads only `params` (clear errors); a PROGRAM
    (tg.hcq.engine.programs.to_program: a kernel compiled already) after checking its AST, as it is."""
    if isinstance(body, UOp) and body.op is Ops.PROGRAM:
        kernel_ast(body.src[0], params)
        return body
    if not isinstance(body, UOp) or body.op is not Ops.SINK:
        got = body.op if isinstance(body, UOp) else type(body).__name__
        raise CustomKernelError(
            f"fxn must return a kernel AST (a SINK of stores, `x.store(v).sink()`) or a PROGRAM, got {got}"
        )
    ast = lowerable_kernel(body)
    by_slot = {p.arg.slot: p for p in params}
    for node in ast.toposort():
        if node.op is Ops.PARAM and by_slot.get(node.arg.slot) is not node:  # (one made by hand: slot and type count)
            slot = node.arg.slot
            if slot not in by_slot:
                raise CustomKernelError(f"the kernel reads parameter slot {slot}, but got {len(params)} tensors")
            expected = by_slot[slot].dtype
            if node.dtype is not expected:
                raise CustomKernelError(f"parameter slot {slot} is {node.dtype!r}, the tensor is {expected!r}")
        if node.op is Ops.BUFFER:
            raise CustomKernelError("a kernel AST cannot read a tensor's BUFFER: pass the tensor to custom_kernel")
    if not any(node.op is Ops.STORE for node in ast.toposort()):
        raise CustomKernelError("the kernel stores nothing: its SINK must hold STOREs into the placeholders")
    type_verify(ast, strict=False, spec=KERNEL_SPEC)
    return ast


# -------------------------------------------------------------------------------- running calls at realize


def has_calls(roots: Sequence[UOp]) -> bool:
    if not live_bodies:
        return False
    return any(_runs_at_realize(node) for node in UOp.sink(*roots).toposort(outside_kernels))


def is_kernel_call(node: UOp) -> bool:
    """A custom kernel's CALL (void, its body a kernel AST or PROGRAM), not a value call (Tensor.call, inlined)."""
    return node.op is Ops.CALL and node.dtype is dtypes.void and is_kernel(node.src[0])


def _runs_at_realize(node: UOp) -> bool:
    return is_kernel_call(node) or is_precompiled(node)


def run_calls(roots: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """Run every custom kernel `roots` depend on (inputs first); the roots with each output read from its buffer."""
    from tg.codegen.schedule.calls import inline_calls
    from tg.tensor.engine import realize
    from tg.tensor.multi import lower, needs_lowering
    from tg.tensor.precompiled import input_arguments, ran_outputs, run_precompiled

    roots = inline_calls(roots)  # (a custom kernel in a value call's body runs on that call's arguments)
    if needs_lowering(roots):  # sharded tensors: a custom kernel on them runs once per device, on its shards
        roots = tuple(lower(roots))
    root = UOp.sink(*roots)
    if SPEC:
        verify_tensor_graph(root)
    order = root.toposort(lambda node: node is root or node.op is not Ops.SINK)  # (not into a call's body)
    done: dict[UOp, UOp] = {}
    # computed inputs that their kernel only read, each mapped to the buffer it was realized into: the roots read
    # them there instead of computing them again (kernels read them as before: a later kernel may write its input)
    computed: dict[UOp, UOp] = {}
    for node in order:
        if is_precompiled(node):
            if (ran := ran_outputs(node)) is None:
                inputs = [source.substitute(done) if done else source for source in input_arguments(node)]
                ran = run_precompiled(node, list(realize(*inputs)))
            done.update(ran)
        elif is_kernel_call(node):
            done.update(_run_kernel_call(node, done, computed))
    return UOp.sink(*roots).substitute({**computed, **done}).src if done else roots


def _run_kernel_call(node: UOp, done: dict[UOp, UOp], computed: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """Run a custom kernel on whole buffers holding its inputs; each output mapped to the buffer that holds it.
    Each input that had to be computed and that the kernel does not write is added to `computed`, mapped to the
    buffer holding its value."""
    from tg.codegen.schedule.realize import buffer_holding
    from tg.codegen.schedule.schedule import KernelCall
    from tg.hcq.engine.buffers import buffer_of
    from tg.hcq.engine.run import run_kernel
    from tg.tensor.engine import realize

    buffers = []
    for source in node.src[1:]:
        source = source.substitute(done) if done else source
        (realized,) = realize(source)
        buf = buffer_holding(realized)
        if buf is None:  # a strided view or a computation: the kernel gets a contiguous copy
            (realized,) = realize(UOp(Ops.CONTIGUOUS, source.dtype, (realized,)))
            buf = buffer_holding(realized)
        assert buf is not None and buf.arg.size == shape_size(source), "a realized input is a whole buffer"
        buffers.append(buf)
    for buf in buffers[1:]:
        buffer_of(buf).note_write()  # (slot 0 is noted by run_kernel; the kernel may write any of them)
    run_kernel(KernelCall(node.src[0], tuple(buffers)))
    outputs, written = {}, _written_slots(node.src[0])
    for slot, (source, buf) in enumerate(zip(node.src[1:], buffers, strict=True)):
        shape = shape_of(source)
        held = buf if shape == (buf.arg.size,) else UOp(Ops.RESHAPE, buf.dtype, (buf,), shape)
        outputs[UOp(Ops.AFTER, source.dtype, (source, node))] = held
        if slot not in written and buffer_holding(source) is None:
            computed[source] = held
    return outputs


def _written_slots(body: UOp) -> set[int]:
    """The argument slots a kernel body (an AST, or a PROGRAM holding one) stores to."""
    ast = body.src[0] if body.op is Ops.PROGRAM else body
    slots = set()
    for node in ast.toposort():
        if node.op is Ops.STORE:
            target = node.src[0]
            while target.op is not Ops.PARAM and target.src:
                target = target.src[0]
            if target.op is Ops.PARAM:
                slots.add(target.arg.slot)
    return slots


def shape_size(node: UOp) -> int:
    size = 1
    for s in shape_of(node):
        if not isinstance(s, int):
            raise CustomKernelError(f"custom kernels and calls need concrete shapes, got {shape_of(node)}")
        size *= s
    return size


def verify_tensor_graph(root: UOp) -> None:
    """SPEC: the tensor graph against TENSOR_SPEC and each custom kernel's AST against KERNEL_SPEC (the tensor spec
    plus the kernel spec, each where it applies); SPEC=2 also rejects an op without a rule in its part."""
    strict = SPEC >= 2
    tensor_part = root.toposort(outside_kernels)
    for node in tensor_part:
        if is_kernel(node):
            type_verify(node.src[0] if node.op is Ops.PROGRAM else node, strict=strict, spec=KERNEL_SPEC)
        elif node is not root:
            rule = TENSOR_SPEC.get(node.op)
            if rule is None and strict:
                raise SpecError(f"no spec rule for {node.op!r} in a tensor graph (SPEC=2 is strict):\n{node!r}")
            if rule is not None and not rule(node):
                raise SpecError(f"{node.op!r} breaks its spec in a tensor graph:\n{node!r}")
