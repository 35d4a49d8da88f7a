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

from tg.codegen.dtype import DType, dtypes
from tg.codegen.render.base import (
    KernelText,
    LinearRenderer,
    RenderedKernel,
    kernel_variables,
    loop_end,
    variable_argument,
)
from tg.codegen.render.emulate import converter_name
from tg.codegen.uop.ops import Ops, UOp


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
    if op is Ops.MULACC and dtype in (dtypes.float32, dtypes.float16):  # exec_alu's rounding, without its dispatch
        return f"{converter_name(dtype)}(multiply_add({x[0]}, {x[1]}, {x[2]}))"
    if op in (Ops.SHL, Ops.SHR) and dtype.kind == "int" and x[1].isdigit() and int(x[1]) < dtype.bitsize:
        # a signed shift by a literal in range: Python's shifts are C's (arithmetic right shift), then wrap
        return f"{converter_name(dtype)}({x[0]} {'<<' if op is Ops.SHL else '>>'} {x[1]})"
    return None


class PythonRenderer(LinearRenderer):
    """Python for the PYTHON device: buffers arrive as raw memory and are wrapped in TypedMemory; every call
    runs the whole kernel (core_id is accepted and ignored)."""

    device = "PYTHON"
    indent = "    "
    software_transcendentals = True

    def prologue(self, k: KernelText, params: list[UOp]) -> None:
        for p in params:
            k.line(f"data{p.arg.slot} = TypedMemory(raw{p.arg.slot}, {p.ptrdtype.base!r})")

    def finish(self, k: KernelText, params: list[UOp]) -> RenderedKernel:
        arguments = [f"raw{p.arg.slot}" for p in params] + [variable_argument(v) for v in kernel_variables(k.linear)]
        body = "\n".join(k.lines) if k.lines else k.indent + "pass"
        return RenderedKernel(k.name, f"def {k.name}({', '.join([*arguments, 'core_id'])}):\n{body}\n")

    def literal(self, value: object, dtype: DType) -> str:
        return python_literal(value, dtype)

    def alu(self, op: Ops, dtype: DType, operands_dtype: DType, operands: list[str]) -> str:
        return fast_alu(op, dtype, operands_dtype, operands) or f"alu({op!r}, {dtype!r}, {', '.join(operands)})"

    def cast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        return f"cast({dtype!r}, {x})"

    def bitcast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        pair = (source_dtype.scalar(), dtype.scalar())
        if pair == (dtypes.float32, dtypes.int32):
            return f"float32_bits({x})"
        if pair == (dtypes.int32, dtypes.float32):
            return f"float32_from_bits({x})"
        return f"bitcast({dtype!r}, {source_dtype!r}, {x})"

    def declare(self, k: KernelText, node: UOp, expression: str) -> None:
        name = k.fresh()
        k.line(f"{name} = {expression}")
        k.names[node] = name

    def accumulator(self, k: KernelText, node: UOp, name: str) -> None:
        k.line(f"{name} = [None] * {node.ptrdtype.size}")

    def load(self, node: UOp, address: str, gate: str | None, alternative: list[str]) -> str:
        return address if gate is None else f"({address} if {gate} else {alternative[0]})"

    def store(self, k: KernelText, node: UOp, address: str, value: str, gate: str | None) -> None:
        # a gated store (a padded output axis) writes only where its gate is true
        k.line(f"{address} = {value}" if gate is None else f"if {gate}: {address} = {value}")

    def open_loop(self, k: KernelText, rng: UOp, name: str) -> None:
        k.line(f"for {name} in range(0, {loop_end(k, rng)}):")

    def close_loop(self, k: KernelText, rng: UOp, name: str, body_start: int) -> None:
        if len(k.lines) == body_start + 1:  # an empty loop body
            k.line(k.indent + "pass")
