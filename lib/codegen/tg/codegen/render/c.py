"""The C renderers: `CStyleLanguage` (the spellings every C-like language shares) and `CRenderer`, the CPU one.

The CPU kernel ABI (see tg.hcq.devices.cpu):

    void NAME(T* restrict data0, ..., int var_NAME, ..., int core_id)   (a buffer per PARAM, an int per variable)

The C is standard C11 with GNU extensions that gcc >= 12 and clang >= 14 both accept (`__builtin_*` math and
constants, `_Float16`); no compiler-specific pragma, so what runs fast under one compiler runs fast under the other.

Every value is its own typed local, so each op rounds to its dtype (float16 matches numpy's per-op rounding).
bfloat16 is not a C type every compiler has: its values live in `float` locals that are rounded to bfloat16 after
every op (round to nearest even, `tg_round_bf16`), and its memory is 16-bit integers converted on load and store.
Bit casts go through a union (C11 allows reading another member). Signed int32/int64 arithmetic goes through
unsigned types so that overflow wraps as numpy's does instead of being undefined; integer division by 0 gives 0
and INT_MIN / -1 wraps rather than trapping (tg.codegen.uop.alu.EDGE_CASES lists every such rule).

Large kernels use every core: the pipeline's "split across cores" stage (tg.codegen.lower.multicore) cuts the
first output loop into chunks in the IR, reading the call's index from a SPECIAL this renderer spells `core_id`;
the kernel is launched with global size (calls, 1, 1).

Vector lanes are explicit in the program: an UPCAST axis (see tg.codegen.opt) or a long reduction's partial sums
(see tg.codegen.lower.linearize) is an array of independent accumulators. The register loops of a kernel (UPCAST
lanes, UNROLL steps of a reduction) are written out as one block per step that binds the loop index to a constant
(`{ const long r4 = 2; ... }`), except the loop over the contiguous lanes, which the linearizer opens first
(register_nest) and which stays a loop around the written-out blocks. Accumulator indexes then fold to constants
and that one loop has a big body of independent lanes with constant trip count, which gcc and clang both
vectorize along the lanes, with no pragma or flag asking them to. (With the lane loop innermost and small, both
compilers unrolled it before vectorizing: gcc then vectorized a conv kernel across the lanes with shuffles, 20x
slower, and clang vectorized a matmul across rows with gathers, 10x slower.) Nothing reassociates: each
accumulator is updated in the same order as the PYTHON emulator updates it. A sum of products is an explicit fused
multiply-add (MULACC -> fmaf), computed identically by the PYTHON emulator.
"""

from __future__ import annotations

import math

from tg.codegen.dtype import AddrSpace, DType, dtypes, encode
from tg.codegen.lower.multicore import CORE_ID, launch_calls
from tg.codegen.render.base import (
    KernelText,
    LinearRenderer,
    RenderedKernel,
    Spelling,
    buffer_param,
    kernel_variables,
    loop_end,
    variable_argument,
)
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import Ops, UOp

C_RENDERER_NAMES = ("", "C", "CLANG")  # device-string renderer names that mean this renderer (DEV=CPU, CPU:C)

# Helpers a kernel defines when it uses them (by name), so that no kernel needs a header or a runtime library.
# bfloat16 conversions round to nearest even and keep NaN a (quiet) NaN.
HELPERS: dict[str, str] = {
    "tg_bf16_to_float": """static inline float tg_bf16_to_float(unsigned short bits) {
  unsigned int u = (unsigned int)bits << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}""",
    "tg_float_to_bf16": """static inline unsigned short tg_float_to_bf16(float x) {
  unsigned int u;
  __builtin_memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}""",
    "tg_round_bf16": """static inline float tg_round_bf16(float x) { return tg_bf16_to_float(tg_float_to_bf16(x)); }""",
    # double -> bfloat16 in one rounding: first to float rounding to odd (truncate, then set the last bit when
    # inexact), which keeps the information the second rounding needs.
    "tg_round_bf16_double": """static inline float tg_round_bf16_double(double x) {
  float f = (float)x;
  if (f == f && (double)f != x) {
    unsigned int u;
    __builtin_memcpy(&u, &f, 4);
    if (__builtin_fabs((double)f) > __builtin_fabs(x)) u -= 1u;
    u |= 1u;
    __builtin_memcpy(&f, &u, 4);
  }
  return tg_round_bf16(f);
}""",
    # float16 bits -> float32, exact, in integer ops that gcc 12 vectorizes (its _Float16 conversion it does not, see
    # CRenderer.widen_loaded_half). The bits, sign-extended and shifted up 13, hold the sign at float32's and exponent
    # and mantissa 13 bits up: masked, that is the value times 2**-112 (normal and subnormal alike), and inf and NaN
    # get float32's all-ones exponent. (A float16 subnormal makes the multiply's operand a float32 denormal, which an
    # x86 CPU multiplies slowly but exactly; in the attention kernels this form ran 2x faster than one without.)
    "tg_half_bits_to_float": """typedef short tg_half_bits __attribute__((may_alias));
static inline float tg_half_bits_to_float(short half) {
  int bits = half;
  int moved = (int)((unsigned int)bits << 13) & (int)0x8FFFE000u;
  int special = (bits & 0x7C00) == 0x7C00 ? 0x70000000 : 0;
  return ((union { int from; float to; }){ .from = moved | special }).to * 0x1p112f;
}""",
}
HELPER_DEPENDENCIES = {
    "tg_round_bf16": ("tg_bf16_to_float", "tg_float_to_bf16"),
    "tg_round_bf16_double": ("tg_round_bf16",),
}

C_TYPES: dict[DType, str] = {
    dtypes.bool: "_Bool",
    dtypes.int8: "signed char",
    dtypes.uint8: "unsigned char",
    dtypes.int16: "short",
    dtypes.uint16: "unsigned short",
    dtypes.int32: "int",
    dtypes.uint32: "unsigned int",
    dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long",
    dtypes.float16: "_Float16",
    dtypes.bfloat16: "float",  # a value; in memory it is `unsigned short` (see memory_type)
    dtypes.float32: "float",
    dtypes.float64: "double",
    dtypes.index: "long",
    # fp8 is stored as bytes; tg.tensor converts to and from it with integer ops, C never does fp8 arithmetic
    dtypes.fp8e4m3: "unsigned char",
    dtypes.fp8e5m2: "unsigned char",
    dtypes.fp8e4m3fnuz: "unsigned char",
    dtypes.fp8e5m2fnuz: "unsigned char",
}
UNSIGNED_OF = {dtypes.int32: "unsigned int", dtypes.int64: "unsigned long long"}
MATH_FUNCTIONS = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc"}
# ops whose C already gives a bfloat16 value: a choice between operands, or a double rounded by tg_round_bf16_double
KEEPS_BFLOAT16 = (Ops.WHERE, Ops.MAX, Ops.POW, Ops.EXP2, Ops.LOG2, Ops.SIN)


def c_type(dtype: DType) -> str:
    """The C type of a value of `dtype` (a local, an accumulator)."""
    try:
        return C_TYPES[dtype.scalar()]
    except KeyError:
        raise TypeError(f"the C renderer has no type for {dtype!r}") from None


def memory_type(dtype: DType) -> str:
    """The C type of an element of a buffer of `dtype`: bfloat16 is its 16 bits."""
    return "unsigned short" if dtype.scalar() is dtypes.bfloat16 else c_type(dtype)


def float_literal(value: float, dtype: DType) -> str:
    """An exact C literal (hex float) for a float constant of `dtype`."""
    suffix = "" if dtype is dtypes.float64 else "f"
    if math.isnan(value):
        text = f'__builtin_nan{suffix}("")'
    elif math.isinf(value):
        text = f"{'-' if value < 0 else ''}__builtin_inf{suffix}()"
    else:
        text = float(value).hex() + suffix
    if dtype is dtypes.bfloat16:  # a float value that is already a bfloat16 (constants are stored rounded)
        return text
    return text if dtype in (dtypes.float32, dtypes.float64) else f"(({c_type(dtype)}){text})"


def int_literal(value: int, dtype: DType) -> str:
    if dtype.kind == "uint":
        return f"{value}ull" if dtype.bitsize == 64 else f"{value}u"
    if dtype.bitsize == 64 or dtype is dtypes.index:
        return f"({value + 1}ll-1)" if value == dtypes.min(dtypes.int64) else f"{value}ll"
    if value == dtypes.min(dtypes.int32):
        return "(-2147483647-1)"
    return str(value)


def literal(value: object, dtype: DType) -> str:
    if dtype is dtypes.bool:
        return "1" if value else "0"
    if dtype.float_format is not None and dtype.itemsize == 1:  # fp8, stored as its byte
        return f"((unsigned char){encode(value, dtype)})"
    if dtypes.is_float(dtype):
        return float_literal(float(value), dtype)  # type: ignore[arg-type]
    return int_literal(int(value), dtype)  # type: ignore[call-overload]


def math_call(op: Ops, dtype: DType, x: str) -> str:
    """libm call of `op` in the precision of `dtype`. exp2, log2 and sin of narrower floats compute in double and
    round once, as the PYTHON emulator does (libm's float versions are not always correctly rounded, so they
    would differ from it in the last bit); sqrt and trunc are exact in float already. float32 and 16-bit exp2 and
    log2 reach this only with TRANSCENDENTAL=0: normally they arrive as float ops (tg.codegen.lower.transcendental),
    which vectorize where this scalar call does not."""
    name = "__builtin_" + MATH_FUNCTIONS[op]
    if dtype is dtypes.float64:
        return f"{name}({x})"
    if op in (Ops.SQRT, Ops.TRUNC):
        return (
            f"{name}f({x})" if dtype in (dtypes.float32, dtypes.bfloat16) else f"({c_type(dtype)}){name}f((float){x})"
        )
    return from_double(f"{name}((double){x})", dtype)


def from_double(x: str, dtype: DType) -> str:
    """A double expression rounded once to the float `dtype`."""
    if dtype is dtypes.float64:
        return x
    return f"tg_round_bf16_double({x})" if dtype is dtypes.bfloat16 else f"({c_type(dtype)}){x}"


def wrapping(op: str, dtype: DType, a: str, b: str) -> str:
    """a op b for a signed int32/int64 that wraps on overflow (through the unsigned type)."""
    unsigned = UNSIGNED_OF.get(dtype)
    if unsigned is None:
        return f"({a} {op} {b})"
    return f"({c_type(dtype)})(({unsigned}){a} {op} ({unsigned}){b})"


def render_int_division(op: Ops, dtype: DType, a: str, b: str) -> str:
    """Truncating division/remainder that never traps: x / 0 is 0 and INT_MIN / -1 wraps to INT_MIN."""
    symbol = "/" if op is Ops.IDIV else "%"
    if dtype is dtypes.index:
        return f"({a} {symbol} {b})"
    if dtype in UNSIGNED_OF:
        by_minus_one = wrapping("-", dtype, "0", a) if op is Ops.IDIV else "0"
        return f"({b} == 0 ? 0 : ({b} == -1 ? {by_minus_one} : {a} {symbol} {b}))"
    return f"({b} == 0 ? 0 : {a} {symbol} {b})"


def _division(op: Ops) -> Spelling:
    def spell(dtype: DType, operands: DType, x: list[str]) -> str:
        if dtypes.is_float(operands):
            return f"({x[0]} / {x[1]})"
        return render_int_division(op, dtype, x[0], x[1])

    return spell


def _maximum(dtype: DType, operands: DType, x: list[str]) -> str:
    if dtypes.is_float(operands):  # NaN in either operand gives NaN
        return f"(({x[0]} != {x[0]} || {x[0]} > {x[1]}) ? {x[0]} : {x[1]})"
    return f"({x[0]} > {x[1]} ? {x[0]} : {x[1]})"


def _negate(dtype: DType, operands: DType, x: list[str]) -> str:
    if dtype is dtypes.bool:
        return f"(!{x[0]})"
    return wrapping("-", dtype, "0", x[0]) if dtype in UNSIGNED_OF else f"(-{x[0]})"


def _shift(symbol: str) -> Spelling:
    """A shift; by a negative amount or the width or more it is 0 (EDGE_CASES), unless the amount is a literal
    in range."""

    def spell(dtype: DType, operands: DType, x: list[str]) -> str:
        shifted = wrapping(symbol, dtype, x[0], x[1]) if symbol == "<<" and dtype in UNSIGNED_OF else None
        shifted = shifted or f"({x[0]} {symbol} {x[1]})"
        if x[1].isdigit() and int(x[1]) < dtype.bitsize:
            return shifted
        return f"((unsigned long long){x[1]} < {dtype.bitsize}ull ? {shifted} : 0)"

    return spell


def _power(dtype: DType, operands: DType, x: list[str]) -> str:
    return from_double(f"__builtin_pow((double){x[0]}, (double){x[1]})", dtype)


def _fused_multiply_add(dtype: DType, operands: DType, x: list[str]) -> str:
    """a * b + c with one rounding (EDGE_CASES): the FMA instruction under -march=native, vectorized by both
    compilers; -ffp-contract=off keeps them from fusing anything else."""
    if dtype is dtypes.float32:
        return f"__builtin_fmaf({x[0]}, {x[1]}, {x[2]})"
    if dtype is dtypes.float64:
        return f"__builtin_fma({x[0]}, {x[1]}, {x[2]})"
    return f"(({x[0]} * {x[1]}) + {x[2]})"


def _infix(symbol: str) -> Spelling:
    return lambda dtype, operands, x: f"({x[0]} {symbol} {x[1]})"


def _wrapping_infix(symbol: str) -> Spelling:
    return lambda dtype, operands, x: wrapping(symbol, dtype, x[0], x[1])


def _math(op: Ops) -> Spelling:
    return lambda dtype, operands, x: math_call(op, dtype, x[0])


C_CODE_FOR_OP: dict[Ops, Spelling] = {
    Ops.CMPLT: _infix("<"),
    Ops.CMPNE: _infix("!="),
    Ops.CMPEQ: _infix("=="),
    Ops.AND: _infix("&"),
    Ops.OR: _infix("|"),
    Ops.XOR: _infix("^"),
    Ops.SHR: _shift(">>"),
    Ops.FDIV: _infix("/"),
    Ops.ADD: _wrapping_infix("+"),
    Ops.SUB: _wrapping_infix("-"),
    Ops.MUL: _wrapping_infix("*"),
    Ops.SHL: _shift("<<"),
    Ops.NEG: _negate,
    Ops.IDIV: _division(Ops.IDIV),
    Ops.MOD: _division(Ops.MOD),
    Ops.MAX: _maximum,
    Ops.WHERE: lambda dtype, operands, x: f"({x[0]} ? {x[1]} : {x[2]})",
    Ops.RECIPROCAL: lambda dtype, operands, x: f"(({c_type(dtype)})1 / {x[0]})",
    Ops.POW: _power,
    Ops.MULACC: _fused_multiply_add,
    **{op: _math(op) for op in MATH_FUNCTIONS},
}


def render_alu(op: Ops, dtype: DType, operand_dtype: DType, x: list[str]) -> str:
    """The C expression of an ALU op on rendered operands `x` (bfloat16 results rounded to bfloat16)."""
    spelling = C_CODE_FOR_OP.get(op)
    if spelling is None:
        raise NotImplementedError(f"the C renderer cannot render {op!r}")
    expression = spelling(dtype, operand_dtype, x)
    if dtype is dtypes.bfloat16 and op not in KEEPS_BFLOAT16:
        return f"tg_round_bf16({expression})"
    return expression


def render_cast(dtype: DType, source_dtype: DType, x: str) -> str:
    """A C cast with the emulator's semantics. Float -> int goes through long long (so out-of-range values wrap as
    numpy's do; uint64 converts non-negative values directly, a negative one through long long: converting it
    straight to unsigned is undefined, and a GPU saturates it to 0), with NaN and inf giving 0 (`x - x` is 0 only
    for finite x). uint32 -> float goes through long long too: clang 19 with -march=native vectorizes
    `(float)(unsigned)(signed char)v` as a zero-extension of v, which is wrong for negative v; the conversion
    through long long is exact and not affected. To bfloat16: one rounding from the exact value (through double
    for doubles and integers)."""
    target = c_type(dtype)
    if dtype is dtypes.bfloat16:
        if source_dtype in (dtypes.float32, dtypes.float16, dtypes.bfloat16):
            return f"tg_round_bf16((float){x})"
        return f"tg_round_bf16_double((double){x})"
    if dtypes.is_float(source_dtype) and dtype.kind in ("int", "uint"):
        converted = f"({target})(long long){x}"
        if dtype is dtypes.uint64:  # 2**63 and up only fit unsigned; a negative value wraps through long long
            converted = f"({x} < 0 ? {converted} : ({target}){x})"
        return f"({x} - {x} != 0 ? 0 : {converted})"
    if source_dtype is dtypes.uint32 and dtypes.is_float(dtype):
        return f"({target})(long long){x}"
    return f"({target}){x}"


def render_bitcast(dtype: DType, source_dtype: DType, x: str) -> str:
    """The bits of `x` read as `dtype`, through a union (bfloat16 values through their 16 bits)."""
    source, target = memory_type(source_dtype), memory_type(dtype)
    if source_dtype is dtypes.bfloat16:
        x = f"tg_float_to_bf16({x})"
    bits = f"((union {{ {source} from; {target} to; }}){{ .from = {x} }}).to"
    return f"tg_bf16_to_float({bits})" if dtype is dtypes.bfloat16 else bits


def needed_helpers(src: str) -> list[str]:
    """The names of the helpers `src` calls, each after the helpers it calls itself."""
    needed: list[str] = []

    def need(name: str) -> None:
        for dependency in HELPER_DEPENDENCIES.get(name, ()):
            need(dependency)
        if name not in needed:
            needed.append(name)

    for name in HELPERS:
        if name + "(" in src:
            need(name)
    return needed


def with_helpers(src: str) -> str:
    """`src` preceded by the definitions of the helpers it calls (and of the helpers those call)."""
    return "".join(HELPERS[name] + "\n" for name in needed_helpers(src)) + src


class CStyleLanguage(LinearRenderer):
    """The spellings C-like languages share: typed locals, braces, ternaries, C casts and literals.

    A C-style language for another device subclasses this and implements the ABI: `finish` (the function
    signature and qualifiers) and, where threads replace loops, `open_loop`/`close_loop` for those ranges."""

    code_for_op = C_CODE_FOR_OP
    buffer_qualifier = ""  # e.g. "__global " for OpenCL
    write_out_register_loops = False  # see is_written_out (the CPU renderer does)

    def literal(self, value: object, dtype: DType) -> str:
        return literal(value, dtype)

    def alu(self, op: Ops, dtype: DType, operands_dtype: DType, operands: list[str]) -> str:
        return render_alu(op, dtype, operands_dtype, operands)

    def cast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        return render_cast(dtype, source_dtype, x)

    def bitcast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        return render_bitcast(dtype, source_dtype, x)

    def declare(self, k: KernelText, node: UOp, expression: str) -> None:
        name = k.fresh()
        k.line(f"{c_type(node.dtype)} {name} = {expression};")
        k.names[node] = name

    def accumulator(self, k: KernelText, node: UOp, name: str) -> None:
        k.line(f"{c_type(node.ptrdtype.base)} {name}[{node.ptrdtype.size}];")

    def buffer_arguments(self, params: list[UOp]) -> list[str]:
        return [f"{self.buffer_qualifier}{memory_type(p.ptrdtype.base)}* restrict data{p.arg.slot}" for p in params]

    def load(self, node: UOp, address: str, gate: str | None, alternative: list[str]) -> str:
        if _in_memory_as_bits(node.src[0], node.dtype):
            address = f"tg_bf16_to_float({address})"
        return address if gate is None else f"({gate} ? {address} : {alternative[0]})"

    def store(self, k: KernelText, node: UOp, address: str, value: str, gate: str | None) -> None:
        if _in_memory_as_bits(node.src[0], node.src[1].dtype):
            value = f"tg_float_to_bf16({value})"
        k.line(f"{address} = {value};" if gate is None else f"if ({gate}) {address} = {value};")

    def open_loop(self, k: KernelText, rng: UOp, name: str) -> None:
        k.abi.setdefault("open loops", []).append(rng)
        k.line(f"for (long {name} = 0; {name} < {loop_end(k, rng)}; {name}++) {{")

    def close_loop(self, k: KernelText, rng: UOp, name: str, body_start: int) -> None:
        k.line("}")
        enclosing = k.abi.get("open loops", [])
        if enclosing and enclosing[-1] is rng:  # a language that opens some ranges as threads did not push them
            enclosing.pop()
        if self.write_out_register_loops and is_written_out(rng, enclosing):
            write_out(k, rng, name, body_start)


REGISTER_AXES = (AxisType.UPCAST, AxisType.UNROLL)
MAX_WRITTEN_OUT_LINES = 1 << 13  # a loop whose copies would be longer stays a loop (compile time)


def is_written_out(rng: UOp, enclosing: list[UOp]) -> bool:
    """Whether the loop over `rng` is written out in the source: every unrolled reduce loop, and every lane loop
    inside another register loop. The one loop left is the outermost loop over lanes (the linearizer puts the
    contiguous lanes there, see register_nest), with all other register loops written out inside it."""
    if rng.arg.axis_type is AxisType.UNROLL:
        return True
    return rng.arg.axis_type is AxisType.UPCAST and any(r.arg.axis_type in REGISTER_AXES for r in enclosing)


def write_out(k: KernelText, rng: UOp, name: str, body_start: int) -> None:
    """Replace the just-closed loop over `rng` by one block per iteration, each binding `name` to its constant.
    Accumulator indexes then fold to constants, so the compilers keep the accumulators in registers."""
    trip = rng.src[0].arg if rng.src[0].op is Ops.CONST else None
    body = k.lines[body_start + 1 : -1]
    if trip is None or trip * (len(body) + 3) > MAX_WRITTEN_OUT_LINES:
        return
    header = k.lines[body_start]
    indent = header[: len(header) - len(header.lstrip())]
    copies: list[str] = []
    for step in range(trip):
        copies += [indent + "{", f"{indent}{k.indent}const long {name} = {step};", *body, indent + "}"]
    k.lines[body_start:] = copies


GROUP = AxisType.GROUP_REDUCE


def group_accumulator(linear: UOp, rng: UOp) -> tuple[UOp, Ops]:
    """The accumulator a GROUP_REDUCE range updates and the op that combines two of its values (a fused
    multiply-add accumulates by adding)."""
    end = next(u for u in linear.src if u.op is Ops.END and u.src[0] is rng)
    update = end.src[1] if len(end.src) > 1 else None
    while update is not None and update.op is Ops.END:
        update = update.src[1] if len(update.src) > 1 else None
    if update is None or update.op is not Ops.STORE:
        raise NotImplementedError("a GROUP_REDUCE that does not update an accumulator")
    op = update.src[1].op
    return buffer_param(update.src[0]), Ops.ADD if op is Ops.MULACC else op


def is_loaded_half_widened(node: UOp) -> bool:
    """Whether `node` casts a float16 read from a buffer in memory (not an accumulator) to float32."""
    if node.op is not Ops.CAST or node.dtype is not dtypes.float32 or node.src[0].dtype is not dtypes.float16:
        return False
    load = node.src[0]
    return load.op is Ops.LOAD and buffer_param(load.src[0]).addrspace is not AddrSpace.REG


def loads_only_widened(linear: UOp) -> set[UOp]:
    """The float16 loads of a linear program whose every user casts them to float32 (is_loaded_half_widened)."""
    users: dict[UOp, list[UOp]] = {}
    for node in linear.src:
        for source in node.src:
            users.setdefault(source, []).append(node)
    return {
        node for node in linear.src
        if node.op is Ops.LOAD and users.get(node) and all(is_loaded_half_widened(user) for user in users[node])
    }  # fmt: skip


def _in_memory_as_bits(address: UOp, dtype: DType) -> bool:
    return dtype.scalar() is dtypes.bfloat16 and buffer_param(address).addrspace is not AddrSpace.REG


class CRenderer(CStyleLanguage):
    """C for the CPU device: the ABI passes `core_id`, and big kernels are split into a few chunks per core.
    Its Target (tg.codegen.target) gives the cores a kernel is split across and, for the heuristics, the
    accumulators the CPU's vector registers hold (128: 16 AVX2 registers; the CPU device gives 256 where the compiler
    uses AVX-512).

    A GROUP_REDUCE range of G (a reduction split across cores, see tg.codegen.opt) makes G calls: call g reduces
    share g into its accumulators and writes them to a partial-results array in the shared object; the call that
    finishes last (an atomic arrival count) combines the G partials in share order and runs the rest of the kernel.
    The order is fixed by G, not by which core ran which call, so the bits do not depend on the core count. The
    arrays are per loaded program, and a device runs one launch of a program at a time."""

    device = "CPU"
    write_out_register_loops = True
    core_groups = True
    software_transcendentals = True
    has_prefetch = True

    def declare(self, k: KernelText, node: UOp, expression: str) -> None:
        super().declare(k, node, expression)
        if node.op is Ops.CAST and node.dtype is dtypes.index and node.src[0].dtype is not dtypes.index:
            # a value read from memory becomes an address (a GATHER): the empty asm keeps gcc 12 from vectorizing
            # the loop that computes it, where it turned an index made from a comparison (`x.cast(bool)`, then
            # int) into -1 instead of 1 in some lanes and read outside the buffer (-O3 -march=native, AVX2 and SSE)
            k.line(f'__asm__("" : "+r"({k.names[node]}));')

    def prefetch(self, k: KernelText, address: str, gate: str | None) -> None:
        # read (0), keep in L2 and beyond (2): the line is wanted within a few thousand cycles, not the next few
        request = f"__builtin_prefetch(&{address}, 0, 2);"
        k.line(request if gate is None else f"if ({gate}) {request}")

    def render_node(self, k: KernelText, node: UOp) -> None:
        if self.target.scalar_half_conversion and is_loaded_half_widened(node):
            self.declare(k, node, self.widen_loaded_half(k, node.src[0]))
        elif node not in k.abi["loads only widened"]:
            super().render_node(k, node)

    def widen_loaded_half(self, k: KernelText, load: UOp) -> str:
        """A float16 element of memory as float32, from its 16 bits (tg_half_bits_to_float). For a compiler that
        converts `_Float16` one element at a time (Target.scalar_half_conversion: gcc 12), which kept the loop around
        the cast scalar: the attention over a float16 KV cache ran 3.5x slower than over a float32 one. The element
        is read as bits rather than bit-cast from the load's `_Float16` local, which is not written where nothing else
        uses it: with AVX2, a `_Float16` load in the loop limited gcc 12 to 8-byte vectors (32 without)."""
        bits = f"*(const tg_half_bits*)&{k.names[load.src[0]]}"
        widened = f"tg_half_bits_to_float({bits})"
        gate = k.gates.get(load.src[0])
        return widened if gate is None else f"({gate} ? {widened} : (float){k.names[load.src[1]]})"

    def index_of(self, k: KernelText, node: UOp, operands: list[str]) -> str:
        """`(data1 + base)[r3]` for an ungated buffer position `base + loop variable`, else `data1[position]`.

        Both mean the same element. Written as one sum, clang (19) turns `base + r3` into a bitwise or when base is
        a multiple of the loop's length, and its vectorizer then loads the lanes with gathers: the matmul tile ran
        at 75 GFLOP/s on one core against 117 in this form (gcc gives 112 -> 117). The gate test keeps masked
        positions, whose base may lie before the buffer, as one index."""
        position = node.src[1]
        is_global = node.src[0].op is Ops.PARAM
        if is_global and len(node.src) == 2 and position.op is Ops.ADD and position.src[1].op is Ops.RANGE:
            base, loop = (k.names[source] for source in position.src)
            return f"({operands[0]} + {base})[{loop}]"
        return self.index(operands[0], operands[1])

    def prologue(self, k: KernelText, params: list[UOp]) -> None:
        k.abi["group"] = next((u for u in k.linear.src if u.op is Ops.RANGE and u.arg.axis_type is GROUP), None)
        k.abi["statics"] = []
        k.abi["loads only widened"] = loads_only_widened(k.linear) if self.target.scalar_half_conversion else set()

    def hardware_index(self, node: UOp) -> str:
        if node.arg != CORE_ID:
            return super().hardware_index(node)
        return "(long)core_id"

    def open_loop(self, k: KernelText, rng: UOp, name: str) -> None:
        if rng is k.abi["group"]:
            k.line(f"{{ const long {name} = core_id; /* GROUP_REDUCE {rng.src[0].arg} */")
            return
        super().open_loop(k, rng, name)

    def close_loop(self, k: KernelText, rng: UOp, name: str, body_start: int) -> None:
        if rng is not k.abi["group"]:
            super().close_loop(k, rng, name, body_start)
            return
        accumulator, op = group_accumulator(k.linear, rng)
        acc, lanes, shares = k.names[accumulator], accumulator.ptrdtype.size, rng.src[0].arg
        type_name = c_type(accumulator.ptrdtype.base)
        partials, arrived = f"tg_partials_{k.name}", f"tg_arrived_{k.name}"
        k.abi["statics"] += [f"static {type_name} {partials}[{shares * lanes}];", f"static int {arrived};"]
        k.line(f"  for (int tg_lane = 0; tg_lane < {lanes}; tg_lane++) {{")
        k.line(f"    {partials}[{name} * {lanes} + tg_lane] = {acc}[tg_lane];")
        k.line("  }")
        k.line("}")
        k.line(f"if (__atomic_add_fetch(&{arrived}, 1, __ATOMIC_ACQ_REL) != {shares}) return;  /* not the last call */")
        k.line(f"__atomic_store_n(&{arrived}, 0, __ATOMIC_RELAXED);")
        k.line(f"for (int tg_lane = 0; tg_lane < {lanes}; tg_lane++) {{")
        k.line(f"  {acc}[tg_lane] = {partials}[tg_lane];")
        k.line(f"  for (int tg_share = 1; tg_share < {shares}; tg_share++) {{")
        combined = self.alu(op, accumulator.ptrdtype.base, accumulator.ptrdtype.base,
                            [f"{acc}[tg_lane]", f"{partials}[tg_share * {lanes} + tg_lane]"])  # fmt: skip
        k.line(f"    {acc}[tg_lane] = {combined};")
        k.line("  }")
        k.line("}")

    def finish(self, k: KernelText, params: list[UOp]) -> RenderedKernel:
        variables = [f"int {variable_argument(v)}" for v in kernel_variables(k.linear)]
        signature = ", ".join([*self.buffer_arguments(params), *variables, "int core_id"])
        calls = launch_calls(k.linear)
        unused = "" if isinstance(calls, UOp) or calls > 1 else "  (void)core_id;\n"
        body = "\n".join(k.lines)
        statics = "".join(line + "\n" for line in k.abi["statics"])
        src = with_helpers(f"{statics}void {k.name}({signature}) {{\n{unused}{body}\n}}\n")
        # a launch size that depends on the variables is resolved at each launch (and patched in a replayed graph)
        return RenderedKernel(k.name, src, (calls, 1, 1))
