"""The Python renderer: a linear program -> a Python function that executes it op by op, exactly.

The function has the same shape as the C kernel (same loops, same accumulators, one statement per value), but each
op is a call into tg.codegen.render.emulate, which computes it with Python numbers and rounds or wraps it to its
dtype. It is the reference the C renderer is compared against, and what the PYTHON device runs:

    def E_4(raw0, raw1, core_id):
        data0 = TypedMemory(raw0, dtypes.float)
        data1 = TypedMemory(raw1, dtypes.float)
        for r0 in range(0, 4):
            v0 = data1[r0]
            v1 = to_float(v0 + v0)
            v2 = alu(Ops.EXP2, dtypes.float, v1)
            data0[r0] = v2

Index arithmetic, comparisons and + - * are plain Python (then converted to the dtype), which is what `alu` would
compute, only without its dispatch; everything else calls `alu`.
"""

from __future__ import annotations

import math

from tg.codegen.dtype import AddrSpace, DType, dtypes
from tg.codegen.render.base import RenderedKernel, Renderer, global_params
from tg.codegen.render.emulate import converter_name
from tg.codegen.uop.ops import GroupOp, Ops, UOp


def python_literal(value: object, dtype: DType) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "math.nan"
        if math.isinf(value):
            return "math.inf" if value > 0 else "-math.inf"
        return repr(value)
    return repr(value)


PYTHON_OPERATORS = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}
COMPARISONS = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}


def fast_alu(op: Ops, dtype: DType, operand_dtype: DType, x: list[str]) -> str | None:
    """Plain Python for the ops where it computes exactly what `emulate.alu` does, else None.

    Index arithmetic is unbounded Python ints; comparisons are Python's (IEEE for floats); + - * & | ^ on ints and
    + - * on floats are Python's exact or double-precision result converted to the dtype."""
    if op in COMPARISONS:
        return f"({x[0]} {COMPARISONS[op]} {x[1]})"
    if op is Ops.WHERE:
        return f"({x[1]} if {x[0]} else {x[2]})"
    if dtype is dtypes.index:
        if op in PYTHON_OPERATORS:
            return f"({x[0]} {PYTHON_OPERATORS[op]} {x[1]})"
        if op in (Ops.IDIV, Ops.MOD):
            return f"{'trunc_div' if op is Ops.IDIV else 'trunc_mod'}({x[0]}, {x[1]})"
        if op is Ops.MAX:
            return f"max({x[0]}, {x[1]})"
        return None
    if dtype is dtypes.bool and op in (Ops.AND, Ops.OR, Ops.XOR):
        return f"({x[0]} {PYTHON_OPERATORS[op]} {x[1]})"
    is_int = dtype.kind in ("int", "uint")
    if op in PYTHON_OPERATORS and (is_int or (dtypes.is_float(dtype) and op in (Ops.ADD, Ops.SUB, Ops.MUL))):
        return f"{converter_name(dtype)}({x[0]} {PYTHON_OPERATORS[op]} {x[1]})"
    return None


class PythonRenderer(Renderer):
    device = "PYTHON"

    def render(self, linear: UOp) -> RenderedKernel:
        return _PythonFunction(linear).render()


class _PythonFunction:
    def __init__(self, linear: UOp) -> None:
        self.linear = linear
        self.name = linear.arg.function_name
        self.names: dict[UOp, str] = {}
        self.gates: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self.block_sizes: list[int] = []  # lines at each loop start, to add `pass` to empty loops

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def value(self, node: UOp, expression: str) -> None:
        variable = f"v{self.counter}"
        self.counter += 1
        self.line(f"{variable} = {expression}")
        self.names[node] = variable

    def render(self) -> RenderedKernel:
        params = global_params(self.linear)
        arguments = [f"raw{p.arg.slot}" for p in params]
        for p in params:
            self.names[p] = f"data{p.arg.slot}"
            self.line(f"data{p.arg.slot} = TypedMemory(raw{p.arg.slot}, {p.dtype.base!r})")
        for node in self.linear.src:
            self.render_node(node)
        if len(self.lines) == 0:
            self.line("pass")
        body = "\n".join(self.lines)
        return RenderedKernel(self.name, f"def {self.name}({', '.join([*arguments, 'core_id'])}):\n{body}\n")

    def render_node(self, node: UOp) -> None:
        op = node.op
        n = [self.names.get(s, "") for s in node.src]
        if op is Ops.PARAM:
            if node.addrspace is AddrSpace.REG:
                name = f"acc{node.arg.slot}"
                self.line(f"{name} = [None] * {node.dtype.size}")
                self.names[node] = name
        elif op is Ops.CONST:
            self.names[node] = python_literal(node.arg, node.dtype)
        elif op is Ops.RANGE:
            name = f"r{node.arg.axis_id}" if node.arg.axis_id >= 0 else f"rn{-node.arg.axis_id}"
            self.names[node] = name
            self.line(f"for {name} in range(0, {node.src[0].arg}):")
            self.depth += 1
            self.block_sizes.append(len(self.lines))
        elif op is Ops.END:
            if self.block_sizes.pop() == len(self.lines):
                self.line("pass")
            self.depth -= 1
        elif op is Ops.AFTER:
            self.names[node] = n[0]
        elif op is Ops.INDEX:
            self.names[node] = f"{n[0]}[{n[1]}]"
            if len(node.src) > 2:
                self.gates[node] = n[2]
        elif op is Ops.LOAD:
            gate = self.gates.get(node.src[0])
            self.value(node, n[0] if gate is None else f"({n[0]} if {gate} else {n[1]})")
        elif op is Ops.STORE:
            self.line(f"{n[0]} = {n[1]}")
        elif op is Ops.CAST:
            self.value(node, f"cast({node.dtype!r}, {n[0]})")
        elif op is Ops.BITCAST:
            self.value(node, f"bitcast({node.dtype!r}, {node.src[0].dtype!r}, {n[0]})")
        elif op in GroupOp.ALU:
            self.value(
                node, fast_alu(op, node.dtype, node.src[-1].dtype, n) or f"alu({op!r}, {node.dtype!r}, {', '.join(n)})"
            )
        else:
            raise NotImplementedError(f"the Python renderer cannot render {op!r}")
