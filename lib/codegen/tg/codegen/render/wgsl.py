"""WGSL, the WebGPU Shading Language (`NULL:WGSL`): render-only on this machine.

The grid mapping is the C-style GPU languages' (tg.codegen.render.gpu): outer output loops become workgroup ids,
LOCAL ranges local invocation ids. WGSL's own rules shape the rest:

* types: f32, f16 (`enable f16;`), i32, u32, bool. No 8/16/64-bit integers and no f64 (an error, naming the dtype);
  index arithmetic is i32. bool cannot live in a buffer, so bool buffers are u32 (0 or 1).
* every value is a `let`, loops are `for (var r: i32 = 0; ...)`, accumulators `var acc: array<T, N>`.
* a GROUP_REDUCE combines its threads' partials in `var<workgroup>` memory behind `workgroupBarrier()`, as the
  other GPU languages do in their local memory.
* a gated load is `select(alternative, value, gate)`: WGSL makes an out-of-bounds read of a storage buffer safe
  (it returns some in-bounds value or 0), so the load need not be skipped; a gated store is an `if`.
* edge cases follow tg.codegen.uop.alu.EDGE_CASES: integer division by 0 is 0 (WGSL would give the dividend), shifts
  by the width or more give 0 (WGSL takes the amount modulo the width), float max keeps NaN and float -> int casts
  give 0 for NaN and inf (both tested on the bits: WGSL lets compilers assume finite floats), a float MULACC is `fma`.
* NaN and infinities have no literal: they are bit casts of u32 constants.
"""

from __future__ import annotations

import math
import struct

from tg.codegen.dtype import AddrSpace, DType, dtypes
from tg.codegen.render.base import KernelText, buffer_param
from tg.codegen.render.gpu import GPUKernel, GPULanguage
from tg.codegen.uop.ops import Ops, UOp

WGSL_TYPES: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int32: "i32",
    dtypes.uint32: "u32",
    dtypes.float32: "f32",
    dtypes.float16: "f16",
    dtypes.index: "i32",
}
MATH = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc"}
INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}
COMPARE = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}


def wgsl_type(dtype: DType) -> str:
    try:
        return WGSL_TYPES[dtype.scalar()]
    except KeyError:
        raise NotImplementedError(f"WGSL has no type for {dtype!r}") from None


def float_bits_above(x: str, dtype: DType, bits: int) -> str:
    """Whether |x|'s float32 bits exceed `bits` (0x7F800000: x is NaN; 0x7F7FFFFF: NaN or inf), tested on the bits:
    WGSL lets a compiler assume floats are finite, so `x != x` may fold to false (lavapipe's does)."""
    as_f32 = x if dtype is dtypes.float32 else f"f32({x})"
    return f"((bitcast<u32>({as_f32}) & 0x7fffffffu) > {bits}u)"


def wgsl_literal(value: object, dtype: DType) -> str:
    if dtype is dtypes.bool:
        return "true" if value else "false"
    if dtype in (dtypes.float32, dtypes.float16):
        number = float(value)  # type: ignore[arg-type]
        if math.isfinite(number) and dtype is dtypes.float16:  # naga reads no hex f16 literal: the exact decimal
            return repr(struct.unpack("<e", struct.pack("<e", number))[0]) + "h"
        if math.isfinite(number):
            return number.hex() + "f"
        bits = struct.unpack("<I", struct.pack("<f", number))[0]
        as_f32 = f"bitcast<f32>({bits}u)"
        return as_f32 if dtype is dtypes.float32 else f"f16({as_f32})"
    number = int(value)  # type: ignore[call-overload]
    if dtype is dtypes.uint32:
        return f"{number & 0xFFFFFFFF}u"
    return f"i32({number})" if number == -(2**31) else f"{number}i"


class WGSLRenderer(GPULanguage):
    device = "WEBGPU"

    def type_name(self, dtype: DType) -> str:
        return wgsl_type(dtype)

    def memory_type_name(self, dtype: DType) -> str:
        return "u32" if dtype.scalar() is dtypes.bool else wgsl_type(dtype)

    def literal(self, value: object, dtype: DType) -> str:
        return wgsl_literal(value, dtype)

    def declare(self, k: KernelText, node: UOp, expression: str) -> None:
        name = k.fresh()
        k.line(f"let {name}: {wgsl_type(node.dtype)} = {expression};")
        k.names[node] = name

    def accumulator(self, k: KernelText, node: UOp, name: str) -> None:
        k.line(f"var {name}: array<{wgsl_type(node.ptrdtype.base)}, {node.ptrdtype.size}>;")

    def load(self, node: UOp, address: str, gate: str | None, alternative: list[str]) -> str:
        if node.dtype is dtypes.bool and buffer_param(node.src[0]).addrspace is not AddrSpace.REG:
            address = f"({address} != 0u)"
        return address if gate is None else f"select({alternative[0]}, {address}, {gate})"

    def store(self, k: KernelText, node: UOp, address: str, value: str, gate: str | None) -> None:
        if node.src[1].dtype is dtypes.bool and buffer_param(node.src[0]).addrspace is not AddrSpace.REG:
            value = f"select(0u, 1u, {value})"
        k.line(f"{address} = {value};" if gate is None else f"if ({gate}) {{ {address} = {value}; }}")

    def open_loop(self, k: KernelText, rng: UOp, name: str) -> None:
        dim = k.abi["grid"].get(rng, k.abi["group"].get(rng))
        if dim is None:
            k.line(f"for (var {name}: i32 = 0; {name} < {rng.src[0].arg}; {name}++) {{")
            return
        builtin = "gid" if rng in k.abi["grid"] and rng.arg.axis_type.name != "LOCAL" else "lid"
        k.line(f"{{ let {name}: i32 = i32({builtin}.{'xyz'[dim]}); // {rng.arg.axis_type.name} {rng.src[0].arg}")

    def close_loop(self, k: KernelText, rng: UOp, name: str, body_start: int) -> None:
        if rng in k.abi["group"]:
            self.combine_group(k, rng, name)
        else:
            k.line("}")

    def local_declaration(self, type_name: str, name: str, size: int) -> str:
        return f"var<workgroup> {name}: array<{type_name}, {size}>;"

    def barrier(self) -> str:
        return "workgroupBarrier();"

    def thread_loop(self, name: str, start: int, end: int) -> str:
        return f"for (var {name}: i32 = {start}; {name} < {end}; {name}++) {{"

    def alu(self, op: Ops, dtype: DType, operands_dtype: DType, x: list[str]) -> str:
        t = wgsl_type(dtype)
        is_float = operands_dtype in (dtypes.float32, dtypes.float16)
        if op in COMPARE:
            return f"({x[0]} {COMPARE[op]} {x[1]})"
        if op in INFIX:
            return f"({x[0]} {INFIX[op]} {x[1]})"
        if op is Ops.NEG:
            return f"(!{x[0]})" if dtype is dtypes.bool else f"(-{x[0]})"
        if op in (Ops.IDIV, Ops.MOD):
            symbol = "/" if op is Ops.IDIV else "%"
            if is_float:
                return f"trunc({x[0]} / {x[1]})" if op is Ops.IDIV else f"({x[0]} % {x[1]})"
            return f"select({x[0]} {symbol} {x[1]}, {wgsl_literal(0, dtype)}, {x[1]} == {wgsl_literal(0, dtype)})"
        if op in (Ops.SHL, Ops.SHR):
            symbol = "<<" if op is Ops.SHL else ">>"
            amount = f"u32({x[1]})"
            return f"select({wgsl_literal(0, dtype)}, {x[0]} {symbol} {amount}, {amount} < 32u)"
        if op is Ops.MAX and dtype is dtypes.bool:  # WGSL orders no bools
            return f"({x[0]} || {x[1]})"
        if op is Ops.MAX:
            keep_first = (
                f"({float_bits_above(x[0], operands_dtype, 0x7F800000)} || {x[0]} > {x[1]})"
                if is_float
                else (f"({x[0]} > {x[1]})")
            )
            return f"select({x[1]}, {x[0]}, {keep_first})"
        if op is Ops.WHERE:
            return f"select({x[2]}, {x[1]}, {x[0]})"
        if op is Ops.RECIPROCAL:
            return f"({wgsl_literal(1.0, dtype)} / {x[0]})"
        if op in MATH:
            return f"{MATH[op]}({x[0]})"
        if op is Ops.POW:
            return f"pow({x[0]}, {x[1]})"
        if op is Ops.MULACC:
            return f"fma({x[0]}, {x[1]}, {x[2]})" if is_float else f"(({x[0]} * {x[1]}) + {x[2]})"
        raise NotImplementedError(f"the WGSL renderer cannot render {op!r} ({t})")

    def cast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        target = wgsl_type(dtype)
        if dtype is dtypes.bool:
            return f"({x} != {wgsl_literal(0, source_dtype)})"
        if source_dtype is dtypes.bool:
            return f"select({wgsl_literal(0, dtype)}, {wgsl_literal(1, dtype)}, {x})"
        if source_dtype in (dtypes.float32, dtypes.float16) and dtype in (dtypes.int32, dtypes.uint32):
            not_finite = float_bits_above(x, source_dtype, 0x7F7FFFFF)
            return f"select({target}({x}), {wgsl_literal(0, dtype)}, {not_finite})"
        return f"{target}({x})"

    def bitcast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        return f"bitcast<{wgsl_type(dtype)}>({x})"

    def finish(self, k: KernelText, params: list[UOp]) -> GPUKernel:
        bindings = [
            f"@group(0) @binding({i}) var<storage, read_write> data{p.arg.slot}: "
            f"array<{self.memory_type_name(p.ptrdtype.base)}>;"
            for i, p in enumerate(params)
        ]
        lx, ly, lz = k.abi["local_size"]
        header = "enable f16;\n" if any("f16" in line for line in k.lines) else ""
        body = "\n".join(k.lines)
        src = (
            header
            + "\n".join([*bindings, *k.abi["locals"]])
            + f"\n@compute @workgroup_size({lx}, {ly}, {lz})\nfn {k.name}(@builtin(workgroup_id) gid: vec3<u32>, "
            f"@builtin(local_invocation_id) lid: vec3<u32>) {{\n{body}\n}}\n"
        )
        return GPUKernel(k.name, src, k.abi["global_size"], k.abi["local_size"])
