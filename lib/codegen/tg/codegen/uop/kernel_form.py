"""A kernel AST as a person writes it (a custom kernel's fxn) in the form tg's codegen lowers.

    i = UOp.range(4, 0)
    C[i].store(A[i] + 1).end(i).sink(arg=KernelInfo(name="plus_one"))   # as written
    lowerable_kernel(ast)                                               # what the lowering passes take

Three differences, each made good here: `.end(ranges)` closes loops, which tg's linearizer does itself (END is
dropped); a shaped placeholder is a RESHAPE of its flat PARAM, which `index` has already turned row-major positions
into addresses for (the RESHAPE is dropped); an address (INDEX) used as a value is loaded, and arithmetic typed as a
pointer because an operand was an address takes the element dtype. A SINK without a KernelInfo gets one.
"""

from __future__ import annotations

from tg.codegen.dtype import PtrDType
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.ops import GroupOp, Ops, UOp


def lowerable_kernel(ast: UOp) -> UOp:
    """`ast` (a SINK of stores, as written) in the form the lowering passes take (see the module doc)."""
    ast = _without_ends(ast)
    if not isinstance(ast.arg, KernelInfo):
        ast = ast.replace(arg=KernelInfo(name="custom"))
    return _with_explicit_loads(_flat_placeholders(ast))


def _without_ends(ast: UOp) -> UOp:
    while ends := {node: node.src[0] for node in ast.toposort() if node.op is Ops.END}:  # (nested: .end(i).end(j))
        ast = ast.substitute(ends)
    return ast


def _flat_placeholders(ast: UOp) -> UOp:
    shaped = {node: node.src[0] for node in ast.toposort() if node.op is Ops.RESHAPE and node.src[0].op is Ops.PARAM}
    return ast.substitute(shaped) if shaped else ast


def _with_explicit_loads(ast: UOp) -> UOp:
    new: dict[UOp, UOp] = {}
    for node in ast.toposort():
        src = tuple(new.get(s, s) for s in node.src)
        value_op = node.op in GroupOp.ALU or node.op is Ops.REDUCE
        if value_op:
            src = tuple(s.load() if s.op is Ops.INDEX else s for s in src)
        elif node.op is Ops.STORE and src[1].op is Ops.INDEX:
            src = (src[0], src[1].load())
        dtype = node.dtype.base if value_op and isinstance(node.dtype, PtrDType) else node.dtype
        new[node] = node if src == node.src and dtype is node.dtype else node.replace(src=src, dtype=dtype)
    return new[ast]
