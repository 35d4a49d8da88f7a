"""Text forms of a graph: a deterministic listing (the repr, made for diffs) and a one-line expression."""

from __future__ import annotations

from tg.codegen.dtype import dtypes
from tg.codegen.uop.ops import GroupOp, Ops, UOp

_INFIX = {
    Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
    Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.FDIV: "/",
}  # fmt: skip


_SIZE_OPS = frozenset({Ops.CONST, Ops.BIND, Ops.DEFINE_VAR, Ops.MAX, Ops.NEG, *_INFIX})


def _node_line(node: UOp, names: dict[UOp, str]) -> str:
    parts = [repr(node.op), repr(node.dtype)]
    if node.src:
        parts.append("src=(" + ", ".join(names[s] for s in node.src) + ("," if len(node.src) == 1 else "") + ")")
    if node.arg is not None:
        parts.append(f"arg={node.arg!r}")
    if node.tag is not None:
        parts.append(f"tag={node.tag!r}")
    return f"UOp({', '.join(parts)})"


def bound_size_text(root: UOp) -> str | None:
    """A symbolic size with bound values (what a Tensor shape holds) in one line: `Variable('n', 1, 10).bind(3)`
    for a bound variable, its expression with values for more (`(n=3+1)`); None for any other graph."""
    if root.dtype is not dtypes.index:
        return None
    if root.op is Ops.BIND:
        variable = root.src[0].arg
        return f"Variable({variable.name!r}, {variable.vmin}, {variable.vmax}).bind({root.src[1].arg})"
    nodes = root.toposort(lambda u: u.op is not Ops.BIND)
    if not any(u.op is Ops.BIND for u in nodes) or not all(u.op in _SIZE_OPS for u in nodes):
        return None
    return render_expr(root)


def graph_listing(root: UOp) -> str:
    """One line per node in dependency order; a single node prints as `UOp(Ops.CONST, dtypes.index, arg=4)`."""
    nodes = root.toposort()
    if len(nodes) == 1:
        return _node_line(root, {})
    names: dict[UOp, str] = {}
    lines = []
    for i, node in enumerate(nodes):
        names[node] = f"x{i}"
        lines.append(f"  x{i} = {_node_line(node, names)}")
    return "\n".join([f"<graph of {len(nodes)} nodes, root x{len(nodes) - 1}>", *lines])


def render_expr(root: UOp) -> str:
    """A compact one-line expression: variables by name, constants by value, `(a+b)`, `max(a,b)`, `(c?a:b)`."""
    text: dict[UOp, str] = {}
    for node in root.toposort():
        text[node] = _render_node(node, [text[s] for s in node.src])
    return text[root]


def _render_node(node: UOp, src: list[str]) -> str:
    if node.op is Ops.CONST:
        return str(node.arg)
    if node.op is Ops.DEFINE_VAR:
        return node.arg.name
    if node.op is Ops.BIND:
        return f"{src[0]}={src[1]}"
    if node.op is Ops.RANGE:
        return f"r{node.arg.axis_id}"
    if node.op is Ops.SPECIAL:
        return node.arg
    if node.op in _INFIX:
        return f"({src[0]}{_INFIX[node.op]}{src[1]})"
    if node.op is Ops.MAX:
        return f"max({src[0]}, {src[1]})"
    if node.op is Ops.WHERE:
        return f"({src[0]}?{src[1]}:{src[2]})"
    if node.op is Ops.CAST:
        return f"{node.dtype.name}({src[0]})"
    if node.op in GroupOp.Unary:
        return f"{node.op.name.lower()}({src[0]})"
    return f"{node.op.name}({', '.join(src)})"
