"""Type verification of UOp graphs: each op's rules on sources, dtype and arg, one rule set per pipeline stage.

The pipeline passes three kinds of graph, and each has its own spec:

    TENSOR_SPEC  the tensor graph the front end builds (DEVICE, BUFFER, CONST on a device, movement ops,
                 REDUCE_AXIS, ALU, ...), checked after each of the scheduler's graph stages
    KERNEL_SPEC  a kernel AST (SINK of STOREs over RANGEs, PARAM buffers, REDUCE), checked after each kernel
                 stage that returns one
    LINEAR_SPEC  the linear program (LINEAR of loops, register accumulators, AFTER), checked after linearize

`verify_stage(name, root, spec)` is what the stage runners call when the SPEC flag is set: SPEC=1 checks the ops
that have a rule, SPEC=2 (strict) also rejects an op that has no rule in that stage's spec. `type_verify(root)`
checks against the union of the three (what graph_rewrite uses when it does not know its stage).
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


Rule = Callable[[UOp], bool]
Spec = dict[Ops, Rule]


def _tensor_const_ok(u: UOp) -> bool:
    """A tensor-graph constant lives on a device (its only source), or is a bare scalar while graphs are built. Its
    value is a Python scalar of its dtype's kind, or a symbolic int (an index UOp of variables: `x * n`)."""
    symbolic = isinstance(u.arg, UOp) and u.arg.dtype is dtypes.index
    value_ok = symbolic or _const_ok(u.replace(src=()))
    return value_ok and all(s.op is Ops.DEVICE for s in u.src) and len(u.src) <= 1


def _same_dtype_as_source(u: UOp) -> bool:
    return len(u.src) >= 1 and u.dtype is u.src[0].dtype


def _movement_ok(u: UOp) -> bool:
    if u.op is Ops.RESHAPE and u.src[0].op is Ops.PARAM:  # a call's placeholder read as a value of its element dtype
        return isinstance(u.src[0].dtype, PtrDType) and u.dtype is u.src[0].dtype.base and isinstance(u.arg, tuple)
    return _same_dtype_as_source(u) and isinstance(u.arg, tuple)


def _reduce_axis_ok(u: UOp) -> bool:
    return _same_dtype_as_source(u) and getattr(u.arg, "op", None) in (Ops.ADD, Ops.MUL, Ops.MAX)


def _gather_ok(u: UOp) -> bool:
    """GATHER(source, *indices): one integer index tensor per axis named in the arg, the source's dtype."""
    indices = u.src[1:]
    return (
        _same_dtype_as_source(u)
        and isinstance(u.arg, tuple)
        and len(u.arg) == len(indices) >= 1
        and all(_is_index_like(index) for index in indices)
    )


def _call_ok(u: UOp) -> bool:
    """A custom kernel's CALL is void over a kernel AST; a value call has its body's dtype."""
    if len(u.src) < 2:
        return False
    return u.src[0].op in (Ops.SINK, Ops.PROGRAM) if u.dtype is dtypes.void else u.dtype is u.src[0].dtype


def _ops(*names: str) -> list[Ops]:
    """The Ops of these names that exist (the IR drops ops nothing uses; a spec does not keep them alive)."""
    return [getattr(Ops, name) for name in names if hasattr(Ops, name)]


COMMON_SPEC: Spec = {
    Ops.SINK: lambda u: u.dtype is dtypes.void,
    Ops.CAST: lambda u: len(u.src) == 1,
    Ops.BITCAST: lambda u: len(u.src) == 1 and u.dtype.itemsize == u.src[0].dtype.itemsize,
    Ops.DEFINE_VAR: lambda u: not u.src and isinstance(u.arg, VarArg) and _is_index_like(u),
    Ops.BIND: lambda u: u.src[0].op is Ops.DEFINE_VAR and u.src[1].op is Ops.CONST and u.dtype is u.src[0].dtype,
    **{op: _alu_ok for op in GroupOp.ALU},
}

TENSOR_SPEC: Spec = {
    **COMMON_SPEC,
    Ops.CONST: _tensor_const_ok,
    Ops.DEVICE: lambda u: not u.src and isinstance(u.arg, (str, tuple)),
    Ops.BUFFER: lambda u: [s.op for s in u.src] == [Ops.DEVICE] and isinstance(getattr(u.arg, "size", None), int),
    Ops.REDUCE_AXIS: _reduce_axis_ok,
    Ops.GATHER: _gather_ok,
    **{op: _movement_ok for op in _ops("RESHAPE", "EXPAND", "PERMUTE", "PAD", "SHRINK", "FLIP")},
    **{op: _same_dtype_as_source for op in _ops("COPY", "CONTIGUOUS", "DETACH", "ASSIGN", "BUFFER_VIEW")},
    # custom kernels (tg.tensor.custom_kernel): CALL(kernel AST, *tensors), each output AFTER(tensor, CALL); the
    # kernel AST under a CALL is checked against KERNEL_SPEC when the call is made. A value call (Tensor.call) is
    # CALL(body over PARAMs, *tensors) with its body's dtype, inlined by the scheduler's first stage
    Ops.CALL: _call_ok,
    Ops.PARAM: lambda u: not u.src and isinstance(u.arg, ParamArg) and isinstance(u.dtype, PtrDType),
    Ops.AFTER: lambda u: len(u.src) == 2 and u.src[1].op is Ops.CALL and u.dtype is u.src[0].dtype,
    # the body of a call with outputs (UOp.call_with_outputs): each value stored into its output PARAM
    Ops.STORE: lambda u: len(u.src) == 2 and u.src[0].op is Ops.PARAM and u.dtype is dtypes.void,
}

KERNEL_SPEC: Spec = {
    **COMMON_SPEC,
    Ops.CONST: _const_ok,
    Ops.RANGE: lambda u: isinstance(u.arg, RangeArg) and _is_index_like(u) and u.src[0].dtype is u.dtype,
    Ops.SPECIAL: lambda u: isinstance(u.arg, str) and _is_index_like(u) and u.src[0].dtype is u.dtype,
    Ops.PARAM: lambda u: not u.src and isinstance(u.arg, (ParamArg, int)),
    Ops.INDEX: _index_ok,
    Ops.LOAD: _load_ok,
    Ops.STORE: _store_ok,
    Ops.REDUCE: lambda u: u.arg in (Ops.ADD, Ops.MUL, Ops.MAX) and _ranges_after_first(u) and u.dtype is u.src[0].dtype,
    Ops.END: lambda u: u.dtype is dtypes.void and len(u.src) >= 2 and _ranges_after_first(u),
    Ops.AFTER: lambda u: u.dtype is u.src[0].dtype,
    Ops.GROUP: lambda u: u.dtype is dtypes.void,
    Ops.NOOP: lambda u: True,
    Ops.VECTORIZE: lambda u: u.dtype is u.src[0].dtype.scalar().vec(len(u.src)) and len({s.dtype for s in u.src}) == 1,
}


def _closes_a_loop(u: UOp) -> bool:
    """A linear program's END: the loop it closes, then optionally the last thing done inside it."""
    return u.dtype is dtypes.void and 1 <= len(u.src) <= 2 and u.src[0].op is Ops.RANGE


def _linear_ok(u: UOp) -> bool:
    """The program is flat and balanced: every END closes the innermost open loop."""
    open_loops: list[UOp] = []
    for node in u.src:
        if node.op is Ops.RANGE:
            open_loops.append(node)
        elif node.op is Ops.END and _closes_a_loop(node):
            if not open_loops or node.src[0] is not open_loops.pop():
                return False
    return u.dtype is dtypes.void and not open_loops


LINEAR_SPEC: Spec = {
    **{op: rule for op, rule in KERNEL_SPEC.items() if op is not Ops.REDUCE},  # reductions are accumulators now
    Ops.LINEAR: _linear_ok,
    Ops.END: lambda u: _closes_a_loop(u) or KERNEL_SPEC[Ops.END](u),
    # a hint that the memory an INDEX of a global buffer names is read soon (tg.codegen.lower.prefetch): no value
    Ops.PREFETCH: lambda u: u.dtype is dtypes.void and len(u.src) == 1 and u.src[0].op is Ops.INDEX,
}


# graph_rewrite does not know which stage it serves: a node passes if its op's rule holds in some stage's spec
def _any_of(*rules: Rule) -> Rule:
    def rule(u: UOp) -> bool:
        return any(r(u) for r in rules)

    return rule


_STAGE_SPECS = (TENSOR_SPEC, KERNEL_SPEC, LINEAR_SPEC)
SPEC_RULES: Spec = {
    op: _any_of(*(spec[op] for spec in _STAGE_SPECS if op in spec)) for op in set().union(*_STAGE_SPECS)
}


def verify_stage(stage: str, root: UOp, spec: Spec) -> None:
    """After pipeline stage `stage`: check `root` against that stage's spec when the SPEC flag is set."""
    if SPEC:
        try:
            type_verify(root, spec=spec)
        except SpecError as error:
            raise SpecError(f"after stage {stage!r}: {error}") from None


def type_verify(root: UOp, strict: bool | None = None, spec: Spec | None = None) -> None:
    """Check every node of `root`'s graph against `spec` (default: every stage's rules); `strict` (default:
    SPEC >= 2) also rejects ops that have no rule there."""
    if strict is None:
        strict = SPEC >= 2
    rules = SPEC_RULES if spec is None else spec
    for node in root.toposort():
        rule = rules.get(node.op)
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
