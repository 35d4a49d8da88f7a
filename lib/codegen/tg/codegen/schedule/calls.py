"""Calls in the tensor graph: a body over `PARAM` placeholders applied to arguments, `CALL(body, a0, a1, ...)`.

Two forms:
* a value call (tg.tensor's `Tensor.call`, `@function`) has the dtype and shape of its body, a tensor graph over
  PARAMs (flat storage: each sits under a RESHAPE to its value's shape);
* a call with outputs (`UOp.call_with_output`, `UOp.call_with_outputs`, precompiled calls) is void: its body is
  `SINK(STORE(PARAM(m), v0), STORE(PARAM(m+1), v1), ...)`, its arguments are the m inputs and then one fresh,
  unbound output BUFFER per value (scoped to the call), and output i is `AFTER(output buffer i, CALL)`.

The "inline calls" stage replaces each PARAM k with argument k reshaped to the PARAM's flat size, so the body fuses
with what surrounds it like the expression written out (output i of a call with outputs becomes v_i). A precompiled
call (`CallInfo.precompile`) is not inlined: tg.tensor runs it before scheduling, as one opaque call over its
arguments' buffers. A void CALL whose body is a kernel AST or a PROGRAM (a custom kernel) is not inlined either.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from tg.codegen.dtype import PtrDType, dtypes
from tg.codegen.schedule.graph import ShapeError, device_of, new_buffer, shape_of, symbolic_numel
from tg.codegen.uop.args import CallInfo, KernelInfo
from tg.codegen.uop.ops import Ops, UOp

# the body of every call alive that runs at realize rather than being inlined (precompiled calls, and tg.tensor's
# custom kernels): while there are none (most programs), a realize does not walk its graph looking for such calls
# (the bodies, not the CALL nodes: a graph rewrite rebuilds a CALL over new arguments, but keeps its body)
live_bodies: weakref.WeakSet[UOp] = weakref.WeakSet()


class CallError(ValueError, RuntimeError):
    """A call that cannot be built: wrong arity, a placeholder whose dtype or size does not match its argument."""


def is_kernel(node: UOp) -> bool:
    """A custom kernel's body: a kernel AST (a SINK that carries a KernelInfo), or a PROGRAM compiled from one."""
    return node.op is Ops.PROGRAM or (node.op is Ops.SINK and isinstance(node.arg, KernelInfo))


def is_value_call(node: UOp) -> bool:
    return node.op is Ops.CALL and node.src[0].op not in (Ops.SINK, Ops.PROGRAM)


def is_output_call(node: UOp) -> bool:
    """A call with output buffers: void, its body a SINK of STOREs into output PARAMs (not a kernel AST)."""
    return node.op is Ops.CALL and node.src[0].op is Ops.SINK and not is_kernel(node.src[0])


def is_precompiled(node: UOp) -> bool:
    return node.op is Ops.CALL and isinstance(node.arg, CallInfo) and node.arg.precompile


def grad_fxn_of(call: UOp) -> Any:
    """The call's grad_fxn, or None (autograd through the body, where it has one)."""
    return call.arg.grad_fxn if isinstance(call.arg, CallInfo) else None


def outside_kernels(node: UOp) -> bool:
    """A walk gate: do not descend into a custom kernel's AST or program."""
    return not is_kernel(node)


def outside_bodies(node: UOp) -> bool:
    """A walk gate: do not descend into the body of a call (a SINK) inside a body, whose PARAMs are its own."""
    return node.op is not Ops.SINK


def outer_nodes(root: UOp) -> list[UOp]:
    """The nodes of `root`'s graph outside the bodies of the calls in it (a call's body has placeholders of its
    own: PARAM k there is that call's argument k), in no particular order."""
    seen: set[UOp] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.src[1:] if node.op is Ops.CALL else node.src)
    return list(seen)


# ---------------------------------------------------------------------------------------------------- building


def params_of(body: UOp) -> dict[int, UOp]:
    """The PARAM placeholders of a call body, by slot (two different ones in one slot are an error)."""
    found: dict[int, UOp] = {}
    for node in outer_nodes(body):  # (a call inside the body has placeholders of its own)
        if node.op is Ops.PARAM:
            if found.setdefault(node.arg.slot, node) is not node:
                raise CallError(f"the body has two different placeholders in slot {node.arg.slot}")
    return found


def check_arguments(body: UOp, arguments: Sequence[UOp]) -> None:
    """Arity, dtype and element count of each argument against the body's placeholders (clear errors)."""
    params = params_of(body)
    if sorted(params) != list(range(len(arguments))):
        got = len(arguments)
        raise CallError(f"the body's placeholders are slots {sorted(params)}, but it got {got} tensors")
    for slot, param in params.items():
        argument, pointer = arguments[slot], param.ptrdtype
        if pointer.base is not argument.dtype:
            raise CallError(f"placeholder {slot} is {pointer.base!r}, the tensor is {argument.dtype!r}")
        if pointer.size != symbolic_numel(shape_of(argument)):
            raise ShapeError(f"placeholder {slot} holds {pointer.size} elements, the tensor {shape_of(argument)}")


def value_body(body: UOp) -> UOp:
    """`body` as a tensor graph: each PARAM under a RESHAPE of its value dtype (`as_param` builds that already; UOp
    arithmetic on bare PARAMs gets it here), pointer-typed nodes given their value dtype."""
    params = [n for n in outer_nodes(body) if n.op is Ops.PARAM]
    bare = {n: UOp(Ops.RESHAPE, n.ptrdtype.base, (n,), (n.ptrdtype.size,)) for n in params}
    new: dict[UOp, UOp] = {}
    for node in body.toposort(outside_bodies):  # (the body of a call in the body stays as it is)
        if node.op is Ops.PARAM:
            new[node] = node
            continue
        pointer_arithmetic = isinstance(node.dtype, PtrDType)  # (`param0 + param1`: its PARAMs are read as values)
        src = tuple(bare[s] if s in bare and pointer_arithmetic else new.get(s, s) for s in node.src)
        dtype = node.dtype.base if isinstance(node.dtype, PtrDType) else node.dtype
        new[node] = node if dtype is node.dtype and src == node.src else node.replace(src=src, dtype=dtype)
    result = new[body]
    return bare[result] if result.op is Ops.PARAM else result


def call_with_outputs(
    bodies: Sequence[UOp], *arguments: UOp, grad_fxn: Any = None, precompile: bool = False
) -> tuple[UOp, ...]:
    """One call that computes each of `bodies` (graphs over PARAM 0..m-1, the m `arguments`) into an output buffer of
    its own; the outputs, `AFTER(buffer_i, CALL)`, in the bodies' order (see the module doc)."""
    if not bodies or not arguments:
        raise CallError(f"a call needs one or more bodies and arguments, got {len(bodies)} and {len(arguments)}")
    if any(node.op is Ops.MULTI for node in UOp.sink(*arguments).toposort()):
        raise CallError("a call with output buffers takes tensors on one device, not sharded ones")
    values = [value_body(body) for body in bodies]
    for value in values:
        check_arguments(value, arguments)
    device = device_of(arguments[0])
    outputs, stores = [], []
    for i, value in enumerate(values):
        shape = shape_of(value)
        size = symbolic_numel(shape)
        if not isinstance(size, int):
            raise CallError(f"a call's outputs need concrete shapes, output {i} has {shape}")
        buffer = new_buffer(device, size, value.dtype)
        outputs.append(buffer if shape == (size,) else UOp(Ops.RESHAPE, value.dtype, (buffer,), shape))
        stores.append(UOp.param(len(arguments) + i, value.dtype, size, name=f"out{i}").store(value))
    call = UOp(Ops.CALL, dtypes.void, (UOp.sink(*stores), *arguments, *outputs), CallInfo(grad_fxn, precompile))
    if precompile:
        live_bodies.add(call.src[0])
    return tuple(UOp(Ops.AFTER, out.dtype, (out, call)) for out in outputs)


def stored_slots(body: UOp) -> list[int]:
    """The PARAM slots a call's body (a SINK of stores, or a kernel AST) stores into, in the order stored."""
    slots: list[int] = []
    for node in body.toposort():
        if node.op is Ops.STORE:
            target = node.src[0]
            while target.op is not Ops.PARAM and target.src:
                target = target.src[0]
            if target.op is Ops.PARAM and target.arg.slot not in slots:
                slots.append(target.arg.slot)
    return slots


def unbound_outputs(call: UOp) -> tuple[UOp, ...]:
    """What a call writes: each argument its body stores into, after the call (a grad_fxn reads the forward's results
    from these). For a call with outputs, its output buffers; for a custom kernel, the tensors the kernel writes."""
    if call.op is not Ops.CALL or call.dtype is not dtypes.void:
        raise CallError(f"unbound_outputs are a void CALL's (a call with outputs or a custom kernel), not {call.op!r}")
    arguments = call.src[1:]
    return tuple(UOp(Ops.AFTER, arguments[k].dtype, (arguments[k], call)) for k in stored_slots(call.src[0]))


# ---------------------------------------------------------------------------------------------------- inlining


def flat(argument: UOp) -> UOp:
    """`argument` as the flat storage a PARAM stands for (row-major order)."""
    shape = shape_of(argument)
    count = symbolic_numel(shape)
    return argument if shape == (count,) else UOp(Ops.RESHAPE, argument.dtype, (argument,), (count,))


def substitute_params(body: UOp, arguments: tuple[UOp, ...]) -> UOp:
    """`body` with each PARAM k replaced by flat(arguments[k]) (a placeholder seen in argument k's shape by
    arguments[k]); a node typed as a pointer (UOp arithmetic on PARAMs) takes its value dtype."""
    new: dict[UOp, UOp] = {}
    for node in body.toposort(outside_bodies):
        if node.op is Ops.PARAM:
            new[node] = flat(arguments[node.arg.slot])
            continue
        if node.op is Ops.RESHAPE and node.src[0].op is Ops.PARAM:  # a placeholder in its argument's own shape: the
            argument = arguments[node.src[0].arg.slot]  # argument itself (a sharded one stays split as it is)
            if shape_of(argument) == node.arg:
                new[node] = argument
                continue
        src = tuple(new.get(s, s) for s in node.src)
        dtype = node.dtype.base if isinstance(node.dtype, PtrDType) else node.dtype
        new[node] = node if dtype is node.dtype and src == node.src else node.replace(src=src, dtype=dtype)
    return new[body]


def output_value(output: UOp, call: UOp) -> UOp:
    """The output `output` (an output buffer argument) of `call`, a call with outputs, as the value its body stores
    there, over the call's arguments."""
    slot = call.src[1:].index(output)
    (value,) = (store.src[1] for store in call.src[0].src if store.src[0].arg.slot == slot)
    result = substitute_params(value, call.src[1:])
    shape = shape_of(output)
    return result if shape_of(result) == shape else UOp(Ops.RESHAPE, result.dtype, (result,), shape)


def _inlinable_output(node: UOp) -> bool:
    return node.op is Ops.AFTER and is_output_call(node.src[1]) and not is_precompiled(node.src[1])


def inline_value_calls(root: UOp) -> UOp:
    """`root` with every value call and every output of an inlinable call with outputs inlined (inner calls first,
    so a body that calls another is handled)."""
    if not any(is_value_call(n) or _inlinable_output(n) for n in root.toposort(outside_kernels)):
        return root
    new: dict[UOp, UOp] = {}
    for node in root.toposort(outside_kernels):
        src = tuple(new.get(s, s) for s in node.src)
        if is_value_call(node):
            new[node] = substitute_params(src[0], src[1:])
        elif _inlinable_output(node):
            new[node] = output_value(*src)
        else:
            new[node] = node if src == node.src else node.replace(src=src)
    return new[root]


def inline_calls(roots: tuple[UOp, ...], target_of: object = None) -> tuple[UOp, ...]:
    """The scheduler stage: every value call among `roots` inlined."""
    return inline_value_calls(UOp.sink(*roots)).src
