"""Type verification of UOp graphs: each op's rules on sources, dtype and arg.

`type_verify(root)` raises `SpecError` on the first node that breaks its op's rule. graph_rewrite calls it on every
result when the SPEC flag is set; SPEC=1 accepts ops without a rule, SPEC=2 (strict) rejects them.
"""

from __future__ import annotations

from collections.abc import Callable

from tg.codegen.dtype import PtrDType, dtypes
from tg.codegen.flags import SPEC
from tg.codegen.uop.args import ParamArg, RangeArg, VarArg
from tg.codegen.uop.ops import GroupOp, Ops, UOp


class SpecError(TypeError):
    """A graph node breaks the rules of its op."""


def _is_index_like(u: UOp) -> bool:
    return u.dtype.scalar().kind in ("int", "uint", "index")


def _const_ok(u: UOp) -> bool:
    kind = u.dtype.scalar().kind
    expected = {"bool": (bool,), "float": (float,), "int": (int,), "uint": (int,), "index": (int,)}.get(kind)
    return not u.src and expected is not None and type(u.arg) in expected


def _alu_ok(u: UOp) -> bool:
    if u.op is Ops.WHERE:
        cond, a, b = u.src
        return cond.dtype.scalar() is dtypes.bool and a.dtype is b.dtype is u.dtype
    operand = u.src[0].dtype
    if u.op in (Ops.SHL, Ops.SHR):
        return u.dtype is operand and _is_index_like(u.src[1])
    if any(s.dtype is not operand for s in u.src):
        return False
    if u.op in GroupOp.Comparison:
        return u.dtype.scalar() is dtypes.bool and u.dtype.count == operand.count
    if u.op in (Ops.IDIV, Ops.MOD):
        return u.dtype is operand and operand.scalar().kind != "float"
    return u.dtype is operand


def _index_ok(u: UOp) -> bool:
    buf, *rest = u.src
    if not isinstance(buf.dtype, PtrDType) or u.dtype is not buf.dtype or not rest:
        return False
    if not _is_index_like(rest[0]):
        return False
    return len(rest) == 1 or (len(rest) == 2 and rest[1].dtype is dtypes.bool)


def _load_ok(u: UOp) -> bool:
    address = u.src[0].dtype
    return isinstance(address, PtrDType) and u.dtype.scalar() is address.base.scalar() and len(u.src) <= 2


def _store_ok(u: UOp) -> bool:
    address = u.src[0].dtype
    return u.dtype is dtypes.void and isinstance(address, PtrDType) and u.src[1].dtype.scalar() is address.base.scalar()


def _ranges_after_first(u: UOp) -> bool:
    return all(s.op is Ops.RANGE for s in u.src[1:])


SPEC_RULES: dict[Ops, Callable[[UOp], bool]] = {
    Ops.CONST: _const_ok,
    Ops.DEFINE_VAR: lambda u: not u.src and isinstance(u.arg, VarArg) and _is_index_like(u),
    Ops.BIND: lambda u: u.src[0].op is Ops.DEFINE_VAR and u.src[1].op is Ops.CONST and u.dtype is u.src[0].dtype,
    Ops.RANGE: lambda u: isinstance(u.arg, RangeArg) and _is_index_like(u) and u.src[0].dtype is u.dtype,
    Ops.SPECIAL: lambda u: isinstance(u.arg, str) and _is_index_like(u) and u.src[0].dtype is u.dtype,
    Ops.PARAM: lambda u: not u.src and isinstance(u.arg, (ParamArg, int)),
    Ops.INDEX: _index_ok,
    Ops.LOAD: _load_ok,
    Ops.STORE: _store_ok,
    Ops.END: lambda u: u.dtype is dtypes.void and len(u.src) >= 2 and _ranges_after_first(u),
    Ops.REDUCE: lambda u: u.arg in (Ops.ADD, Ops.MUL, Ops.MAX) and _ranges_after_first(u) and u.dtype is u.src[0].dtype,
    Ops.AFTER: lambda u: u.dtype is u.src[0].dtype,
    Ops.SINK: lambda u: u.dtype is dtypes.void,
    Ops.GROUP: lambda u: u.dtype is dtypes.void,
    Ops.BARRIER: lambda u: u.dtype is dtypes.void,
    Ops.NOOP: lambda u: True,
    Ops.CAST: lambda u: len(u.src) == 1,
    Ops.BITCAST: lambda u: len(u.src) == 1 and u.dtype.itemsize == u.src[0].dtype.itemsize,
    Ops.VECTORIZE: lambda u: u.dtype is u.src[0].dtype.scalar().vec(len(u.src)) and len({s.dtype for s in u.src}) == 1,
    Ops.GEP: lambda u: isinstance(u.arg, tuple) and u.dtype.scalar() is u.src[0].dtype.scalar(),
}
for _op in GroupOp.ALU:
    SPEC_RULES[_op] = _alu_ok


def type_verify(root: UOp, strict: bool | None = None) -> None:
    """Check every node of `root`'s graph; `strict` (default: SPEC >= 2) also rejects ops that have no rule."""
    if strict is None:
        strict = SPEC >= 2
    for node in root.toposort():
        rule = SPEC_RULES.get(node.op)
        if rule is None:
            if strict:
                raise SpecError(f"no spec rule for {node.op!r} (SPEC=2 is strict):\n{node!r}")
            continue
        try:
            ok = rule(node)
        except (IndexError, ValueError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise SpecError(f"{node.op!r} breaks its spec:\n{node!r}")
