"""Value calls in the tensor graph: `CALL(body, a0, a1, ...)`, inlined at schedule time by parameter substitution.

A value call (tg.tensor's `Tensor.call`, `@function`) has the dtype and shape of its body, a tensor graph over
`PARAM` placeholders (flat storage: each sits under a RESHAPE to its value's shape). Scheduling replaces each PARAM
k with argument k reshaped to the PARAM's flat size, so the body fuses with what surrounds it like the expression
written out. A void CALL whose body is a kernel AST (a custom kernel) is not a value call and is left alone.
"""

from __future__ import annotations

from tg.codegen.dtype import PtrDType
from tg.codegen.schedule.graph import shape_of, symbolic_numel
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.ops import Ops, UOp


def is_value_call(node: UOp) -> bool:
    return node.op is Ops.CALL and not isinstance(node.src[0].arg, KernelInfo)


def outside_kernels(node: UOp) -> bool:
    """A walk gate: do not descend into a custom kernel's AST (a SINK that carries a KernelInfo)."""
    return not (node.op is Ops.SINK and isinstance(node.arg, KernelInfo))


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


def flat(argument: UOp) -> UOp:
    """`argument` as the flat storage a PARAM stands for (row-major order)."""
    shape = shape_of(argument)
    count = symbolic_numel(shape)
    return argument if shape == (count,) else UOp(Ops.RESHAPE, argument.dtype, (argument,), (count,))


def substitute_params(body: UOp, arguments: tuple[UOp, ...]) -> UOp:
    """`body` with each PARAM k replaced by flat(arguments[k]); a node typed as a pointer (UOp arithmetic on PARAMs)
    takes its value dtype."""
    new: dict[UOp, UOp] = {}
    for node in body.toposort(outside_kernels):
        if node.op is Ops.PARAM:
            new[node] = flat(arguments[node.arg.slot])
            continue
        src = tuple(new.get(s, s) for s in node.src)
        dtype = node.dtype.base if isinstance(node.dtype, PtrDType) else node.dtype
        new[node] = node if dtype is node.dtype and src == node.src else node.replace(src=src, dtype=dtype)
    return new[body]


def inline_value_calls(root: UOp) -> UOp:
    """`root` with every value call inlined (inner calls first, so a body that calls another is handled)."""
    if not any(is_value_call(node) for node in root.toposort(outside_kernels)):
        return root
    new: dict[UOp, UOp] = {}
    for node in root.toposort(outside_kernels):
        src = tuple(new.get(s, s) for s in node.src)
        if is_value_call(node):
            new[node] = substitute_params(src[0], src[1:])
        else:
            new[node] = node if src == node.src else node.replace(src=src)
    return new[root]


def inline_calls(roots: tuple[UOp, ...], target_of: object = None) -> tuple[UOp, ...]:
    """The scheduler stage: every value call among `roots` inlined."""
    return inline_value_calls(UOp.sink(*roots)).src
