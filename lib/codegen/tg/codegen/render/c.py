"""The C renderer: a linear program -> one C function in the CPU kernel ABI (see tg.hcq.devices.cpu).

    void NAME(T* restrict data0, ..., int core_id)

Every value is its own typed local, so each op rounds to its dtype (float16 matches numpy's per-op rounding).
Signed int32/int64 arithmetic goes through unsigned types so that overflow wraps as numpy's does instead of
being undefined; integer division by 0 gives 0 and INT_MIN / -1 wraps rather than trapping. Float MAX
propagates NaN, as numpy's maximum does.

Large kernels use every core: the outermost loop is cut into one chunk per core and the kernel is launched
with global size (chunks, 1, 1); call `core_id` runs chunk `core_id`. Float ADD/MUL reduction loops allow
reassociation (`#pragma clang fp reassociate`) so clang can vectorize them with several partial sums, and
contraction of a*b+c into one FMA there (the sum's rounding already depends on that order).

UPCAST and UNROLL loops (see tg.codegen.opt) are unrolled fully: their register accumulator arrays are then
indexed by constants, clang promotes them to registers and packs the lanes into SIMD vectors.
"""

from __future__ import annotations

import math

from tg.codegen.dtype import AddrSpace, DType, dtypes, encode
from tg.codegen.render.base import RenderedKernel, Renderer, global_params, loop_iterations
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import GroupOp, Ops, UOp

MULTICORE_MIN_ITERATIONS = 1 << 16
MAX_FULL_UNROLL = 32  # UPCAST/UNROLL loops up to this size are unrolled fully (their accumulators become registers)
C_RENDERER_NAMES = ("", "C", "CLANG")  # device-string renderer names that mean this renderer (DEV=CPU, CPU:C)

# clang lowers float -> __bf16 conversions to calls into compiler-rt, which kernels are not linked with; this is
# the same conversion (round to nearest even, NaN stays NaN), defined in the kernel itself.
BFLOAT16_PRELUDE = """__bf16 __truncsfbf2(float x) {
  unsigned int u = __builtin_bit_cast(unsigned int, x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __builtin_bit_cast(__bf16, (unsigned short)((u >> 16) | 0x40u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return __builtin_bit_cast(__bf16, (unsigned short)(u >> 16));
}
__bf16 __truncdfbf2(double x) { return __truncsfbf2((float)x); }
"""

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
    dtypes.bfloat16: "__bf16",
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


def c_type(dtype: DType) -> str:
    try:
        return C_TYPES[dtype.scalar()]
    except KeyError:
        raise TypeError(f"the C renderer has no type for {dtype!r}") from None


def float_literal(value: float, dtype: DType) -> str:
    """An exact C literal (hex float) for a float constant of `dtype`."""
    suffix = "" if dtype is dtypes.float64 else "f"
    if math.isnan(value):
        text = f'__builtin_nan{suffix}("")'
    elif math.isinf(value):
        text = f"{'-' if value < 0 else ''}__builtin_inf{suffix}()"
    else:
        text = float(value).hex() + suffix
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
    """libm call of `op` in the precision of `dtype` (16-bit floats compute in float, then round)."""
    name = "__builtin_" + MATH_FUNCTIONS[op]
    if dtype is dtypes.float64:
        return f"{name}({x})"
    if dtype is dtypes.float32:
        return f"{name}f({x})"
    return f"({c_type(dtype)}){name}f((float){x})"


def wrapping(op: str, dtype: DType, a: str, b: str) -> str:
    """a op b for a signed int32/int64 that wraps on overflow (through the unsigned type)."""
    unsigned = UNSIGNED_OF.get(dtype)
    if unsigned is None:
        return f"({a} {op} {b})"
    return f"({c_type(dtype)})(({unsigned}){a} {op} ({unsigned}){b})"


def render_alu(op: Ops, dtype: DType, operand_dtype: DType, x: list[str]) -> str:
    """The C expression of an ALU op on rendered operands `x`."""
    is_float = dtypes.is_float(operand_dtype)
    simple = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}
    if op in simple:
        return f"({x[0]} {simple[op]} {x[1]})"
    if op in (Ops.ADD, Ops.SUB, Ops.MUL):
        return wrapping({Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*"}[op], dtype, x[0], x[1])
    if op is Ops.NEG:
        if dtype is dtypes.bool:
            return f"(!{x[0]})"
        return wrapping("-", dtype, "0", x[0]) if dtype in UNSIGNED_OF else f"(-{x[0]})"
    if op is Ops.FDIV:
        return f"({x[0]} / {x[1]})"
    if op in (Ops.IDIV, Ops.MOD):
        return render_int_division(op, dtype, x[0], x[1]) if not is_float else f"({x[0]} / {x[1]})"
    if op is Ops.MAX:
        if is_float:  # NaN in either operand gives NaN
            return f"(({x[0]} != {x[0]} || {x[0]} > {x[1]}) ? {x[0]} : {x[1]})"
        return f"({x[0]} > {x[1]} ? {x[0]} : {x[1]})"
    if op is Ops.SHL:
        return wrapping("<<", dtype, x[0], x[1]) if dtype in UNSIGNED_OF else f"({x[0]} << {x[1]})"
    if op is Ops.SHR:
        return f"({x[0]} >> {x[1]})"
    if op is Ops.WHERE:
        return f"({x[0]} ? {x[1]} : {x[2]})"
    if op is Ops.RECIPROCAL:
        return f"(({c_type(dtype)})1 / {x[0]})"
    if op in MATH_FUNCTIONS:
        return math_call(op, dtype, x[0])
    if op is Ops.POW:
        if dtype is dtypes.float64:
            return f"__builtin_pow({x[0]}, {x[1]})"
        return f"({c_type(dtype)})__builtin_powf((float){x[0]}, (float){x[1]})"
    if op is Ops.MULACC:
        return f"(({x[0]} * {x[1]}) + {x[2]})"
    raise NotImplementedError(f"the C renderer cannot render {op!r}")


def render_int_division(op: Ops, dtype: DType, a: str, b: str) -> str:
    """Truncating division/remainder that never traps: x / 0 is 0 and INT_MIN / -1 wraps to INT_MIN."""
    symbol = "/" if op is Ops.IDIV else "%"
    if dtype is dtypes.index:
        return f"({a} {symbol} {b})"
    if dtype in UNSIGNED_OF:
        by_minus_one = wrapping("-", dtype, "0", a) if op is Ops.IDIV else "0"
        return f"({b} == 0 ? 0 : ({b} == -1 ? {by_minus_one} : {a} {symbol} {b}))"
    return f"({b} == 0 ? 0 : {a} {symbol} {b})"


def render_cast(dtype: DType, source_dtype: DType, x: str) -> str:
    """A C cast with the emulator's semantics. Float -> int goes through long long (so out-of-range values wrap
    as numpy's do), with NaN and inf giving 0 (`x - x` is 0 only for finite x). uint32 -> float goes through
    long long too: clang 19 with -march=native vectorizes `(float)(unsigned)(signed char)v` as a zero-extension
    of v, which is wrong for negative v; the conversion through long long is exact and not affected."""
    target = c_type(dtype)
    if dtypes.is_float(source_dtype) and dtype.kind in ("int", "uint"):
        converted = f"({target}){x}" if dtype is dtypes.uint64 else f"({target})(long long){x}"
        return f"({x} - {x} != 0 ? 0 : {converted})"
    if source_dtype is dtypes.uint32 and dtypes.is_float(dtype):
        return f"({target})(long long){x}"
    return f"({target}){x}"


class CRenderer(Renderer):
    device = "CPU"

    def __init__(self, cores: int = 1) -> None:
        self.cores = max(1, cores)

    def render(self, linear: UOp) -> RenderedKernel:
        return _CFunction(linear, self.cores).render()


class _CFunction:
    """Renders one linear program; `names` maps each linear node to the C expression that holds its value."""

    def __init__(self, linear: UOp, cores: int) -> None:
        self.linear = linear
        self.name = linear.arg.function_name
        self.names: dict[UOp, str] = {}
        self.gates: dict[UOp, str] = {}  # gated INDEX -> its gate
        self.lines: list[str] = []
        self.depth = 1
        self.chunks = self._chunks(cores)
        self.counter = 0

    def _chunks(self, cores: int) -> int:
        program = self.linear.src
        first = next((u for u in program if u.op is Ops.RANGE), None)
        if first is None or first.arg.axis_type is not AxisType.LOOP or cores == 1:
            return 1
        if loop_iterations(self.linear) < MULTICORE_MIN_ITERATIONS:
            return 1
        return min(cores, first.src[0].arg)

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def value(self, node: UOp, expression: str) -> None:
        variable = f"v{self.counter}"
        self.counter += 1
        self.line(f"{c_type(node.dtype)} {variable} = {expression};")
        self.names[node] = variable

    def render(self) -> RenderedKernel:
        params = global_params(self.linear)
        signature = [f"{c_type(p.dtype.base)}* restrict data{p.arg.slot}" for p in params]
        for p in params:
            self.names[p] = f"data{p.arg.slot}"
        first_range = True
        for node in self.linear.src:
            if node.op is Ops.RANGE:
                self.render_range(node, split=first_range and self.chunks > 1)
                first_range = False
            else:
                self.render_node(node)
        body = "\n".join(self.lines)
        unused = "" if self.chunks > 1 else "  (void)core_id;\n"
        src = f"void {self.name}({', '.join([*signature, 'int core_id'])}) {{\n{unused}{body}\n}}\n"
        if "__bf16" in src:
            src = BFLOAT16_PRELUDE + src
        return RenderedKernel(self.name, src, (self.chunks, 1, 1))

    def render_range(self, rng: UOp, split: bool) -> None:
        name = f"r{rng.arg.axis_id}" if rng.arg.axis_id >= 0 else f"rn{-rng.arg.axis_id}"
        self.names[rng] = name
        end = rng.src[0].arg
        if split:
            self.line(f"long {name}_start = {end}ll * core_id / {self.chunks};")
            self.line(f"long {name}_end = {end}ll * (core_id + 1) / {self.chunks};")
            self.line(f"for (long {name} = {name}_start; {name} < {name}_end; {name}++) {{")
        else:
            if rng.arg.axis_type in (AxisType.UPCAST, AxisType.UNROLL) and end <= MAX_FULL_UNROLL:
                self.line("#pragma clang loop unroll(full)")
            self.line(f"for (long {name} = 0; {name} < {end}; {name}++) {{")
        self.depth += 1
        if rng.arg.axis_type is AxisType.REDUCE:
            pragma = self._fp_pragma(rng)
            if pragma:
                self.line(pragma)

    def _fp_pragma(self, rng: UOp) -> str | None:
        """The float pragma for the reduction loop over `rng`, when it only feeds float ADD/MUL accumulators.

        One accumulator: partial sums may reorder (so clang vectorizes) and a*b+c may fuse. Accumulators per
        unrolled lane: only fusing; the lanes are the vector already, and reordering makes clang build
        horizontal sums instead."""
        ends = [u for u in self.linear.src if u.op is Ops.END and u.src[0] is rng]
        lanes = False
        for end in ends:
            update = end.src[1] if len(end.src) > 1 else None
            while update is not None and update.op is Ops.END:
                lanes = lanes or update.src[0].arg.axis_type in (AxisType.UPCAST, AxisType.UNROLL)
                update = update.src[1] if len(update.src) > 1 else None
            if update is None or update.op is not Ops.STORE:
                return None
            combined = update.src[1]
            if combined.op not in (Ops.ADD, Ops.MUL) or not dtypes.is_float(combined.dtype):
                return None
        if not ends:
            return None
        return "#pragma clang fp contract(fast)" if lanes else "#pragma clang fp reassociate(on) contract(fast)"

    def render_node(self, node: UOp) -> None:
        op = node.op
        n = [self.names.get(s, "") for s in node.src]
        if op is Ops.PARAM:
            if node.addrspace is AddrSpace.REG:
                name = f"acc{node.arg.slot}"
                self.line(f"{c_type(node.dtype.base)} {name}[{node.dtype.size}];")
                self.names[node] = name
        elif op is Ops.CONST:
            self.names[node] = literal(node.arg, node.dtype)
        elif op is Ops.AFTER:
            self.names[node] = n[0]
        elif op is Ops.INDEX:
            self.names[node] = f"{n[0]}[{n[1]}]"
            if len(node.src) > 2:
                self.gates[node] = n[2]
        elif op is Ops.LOAD:
            gate = self.gates.get(node.src[0])
            self.value(node, n[0] if gate is None else f"({gate} ? {n[0]} : {n[1]})")
        elif op is Ops.STORE:
            gate = self.gates.get(node.src[0])
            self.line(f"{n[0]} = {n[1]};" if gate is None else f"if ({gate}) {n[0]} = {n[1]};")
        elif op is Ops.END:
            self.depth -= 1
            self.line("}")
        elif op is Ops.CAST:
            self.value(node, render_cast(node.dtype, node.src[0].dtype, n[0]))
        elif op is Ops.BITCAST:
            self.value(node, f"__builtin_bit_cast({c_type(node.dtype)}, {n[0]})")
        elif op in GroupOp.ALU:
            operand_dtype = node.src[-1].dtype if op is Ops.WHERE else node.src[0].dtype
            self.value(node, render_alu(op, node.dtype, operand_dtype, n))
        else:
            raise NotImplementedError(f"the C renderer cannot render {op!r}")
