"""The LLVM IR renderer: a linear program -> one LLVM function in the CPU kernel ABI (see tg.hcq.devices.cpu).

    define void @NAME(ptr noalias %data0, ..., i32 %core_id)

It computes exactly what the C renderer's kernel computes (tg.codegen.render.c), so `DEV=CPU:LLVM` and `DEV=CPU` agree
bit for bit, following tg.codegen.uop.alu.EDGE_CASES: integers wrap, integer division by 0 gives 0 and INT_MIN / -1
wraps, shifts by the width or more give 0, float MAX propagates NaN, float -> int casts go through int64 with NaN/inf
giving 0, exp2/log2/sin/pow of narrower floats compute in double and round once (float32 exp2 and log2 arrive as
float ops instead, tg.codegen.lower.transcendental, unless TRANSCENDENTAL=0). Small integers (8/16 bit) are
divided and shifted in i32, as C's integer promotion does.

Control flow is explicit basic blocks: a RANGE opens a loop (header with a phi counter, body), its END closes it,
a gated load or store becomes a small diamond. Accumulators (REG params) are allocas in the entry block; the O3
pipeline turns them into registers. The same multi-core split as C: the outermost LOOP range is cut into one chunk
per `core_id`. No fast-math flags, as the C path: float results are bit for bit the PYTHON emulator's. UPCAST/UNROLL
loops carry `llvm.loop.unroll.full` metadata (C unrolls them in the source), so their accumulators become registers
that the SLP vectorizer packs into SIMD vectors.
"""

from __future__ import annotations

import math
import struct

from tg.codegen.dtype import AddrSpace, DType, dtypes
from tg.codegen.render.base import (
    RenderedKernel,
    Renderer,
    first_output_loop,
    global_params,
    kernel_variables,
    loop_iterations,
    max_trip_count,
    variable_argument,
)
from tg.codegen.target import Target
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import GroupOp, Ops, UOp

MULTICORE_MIN_ITERATIONS = 1 << 16  # the C renderer's threshold: smaller kernels run on one core
MAX_FULL_UNROLL = 32

LLVM_TYPES: dict[DType, str] = {
    dtypes.bool: "i1",
    dtypes.int8: "i8",
    dtypes.uint8: "i8",
    dtypes.int16: "i16",
    dtypes.uint16: "i16",
    dtypes.int32: "i32",
    dtypes.uint32: "i32",
    dtypes.int64: "i64",
    dtypes.uint64: "i64",
    dtypes.float16: "half",
    dtypes.bfloat16: "bfloat",
    dtypes.float32: "float",
    dtypes.float64: "double",
    dtypes.index: "i64",
    # fp8 is stored as its byte; tg.tensor converts to and from it with integer ops
    dtypes.fp8e4m3: "i8",
    dtypes.fp8e5m2: "i8",
    dtypes.fp8e4m3fnuz: "i8",
    dtypes.fp8e5m2fnuz: "i8",
}
# LLVM lowers float -> bfloat to a call of compiler-rt's __truncsfbf2, which the process does not have (gcc 12's
# libgcc lacks it); kernels that use bfloat define it (round to nearest even, NaN stays a quiet NaN), as render.c does.
BFLOAT16_HELPER = """define weak bfloat @__truncsfbf2(float %x) nounwind {
  %bits = bitcast float %x to i32
  %magnitude = and i32 %bits, 2147483647
  %is_nan = icmp ugt i32 %magnitude, 2139095040
  %high = lshr i32 %bits, 16
  %quiet = or i32 %high, 64
  %odd = and i32 %high, 1
  %bias = add i32 %odd, 32767
  %rounded = add i32 %bits, %bias
  %rounded_high = lshr i32 %rounded, 16
  %result = select i1 %is_nan, i32 %quiet, i32 %rounded_high
  %short = trunc i32 %result to i16
  %value = bitcast i16 %short to bfloat
  ret bfloat %value
}"""
MATH_INTRINSICS = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc"}


def llvm_type(dtype: DType) -> str:
    if dtype.count != 1:
        raise NotImplementedError(f"the LLVM renderer has no vector types yet ({dtype!r})")
    try:
        return LLVM_TYPES[dtype.scalar()]
    except KeyError:
        raise TypeError(f"the LLVM renderer has no type for {dtype!r}") from None


def memory_type(dtype: DType) -> str:
    """How a value of `dtype` is stored: bool is a byte in memory (as C's _Bool), an i1 in registers."""
    return "i8" if dtype.scalar() is dtypes.bool else llvm_type(dtype)


def is_fp(dtype: DType) -> bool:
    """A float held in an LLVM float type (fp8 is a float dtype but lives in a byte)."""
    return llvm_type(dtype) in ("half", "bfloat", "float", "double")


def is_signed(dtype: DType) -> bool:
    return dtype.kind in ("int", "index")


def float_literal(value: float, dtype: DType) -> str:
    """An exact LLVM constant: double-width hex for float/double, the raw bits for half (0xH) and bfloat (0xR)."""
    if dtype is dtypes.float16:
        return f"0xH{struct.unpack('<H', struct.pack('<e', value))[0]:04X}"
    if dtype is dtypes.bfloat16:
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        if math.isnan(value):
            return "0xR7FC0"
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even, as the C prelude does
        return f"0xR{(bits >> 16) & 0xFFFF:04X}"
    if dtype is dtypes.float32 and math.isfinite(value):
        value = struct.unpack("<f", struct.pack("<f", value))[0]  # LLVM wants the float's exact value
    return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


def literal(value: object, dtype: DType) -> str:
    if dtype is dtypes.bool:
        return "true" if value else "false"
    if dtype.float_format is not None and dtype.itemsize == 1:
        from tg.codegen.dtype import encode

        return str(encode(value, dtype))
    if is_fp(dtype):
        return float_literal(float(value), dtype)  # type: ignore[arg-type]
    bits = dtype.itemsize * 8
    number = int(value) & ((1 << bits) - 1)  # type: ignore[call-overload]
    return str(number - (1 << bits) if number >= 1 << (bits - 1) else number)


class LLVMRenderer(Renderer):
    """`DEV=CPU:LLVM`: LLVM IR for the host CPU, compiled in process by tg.codegen.compiler.llvm."""

    device = "CPU"
    software_transcendentals = True

    def render(self, linear: UOp, target: Target | None = None) -> RenderedKernel:
        return _LLVMFunction(linear, (self.target if target is None else target).call_cores).render()


class _LLVMFunction:
    """Renders one linear program. `names` maps each node to the LLVM value (or constant) that holds it."""

    def __init__(self, linear: UOp, cores: int) -> None:
        self.linear = linear
        self.name = linear.arg.function_name
        self.names: dict[UOp, str] = {}
        self.gates: dict[UOp, str] = {}  # gated INDEX -> its i1 gate
        self.entry: list[str] = []  # allocas, hoisted into the entry block
        self.lines: list[str] = []
        self.counter = 0
        self.block = "entry"
        self.loops: list[tuple[UOp, str, str, str]] = []  # (range, counter, header label, preheader label)
        self.declarations: set[str] = set()
        self.metadata: list[str] = []
        self.chunks = self._chunks(cores)
        self.global_size: int | UOp = self.chunks

    def _chunks(self, cores: int) -> int:
        first = first_output_loop(self.linear)
        if first is None or first.arg.axis_type is not AxisType.LOOP or cores == 1:
            return 1
        if loop_iterations(self.linear) < MULTICORE_MIN_ITERATIONS:
            return 1
        return min(cores, max_trip_count(first))  # a symbolic trip count may launch fewer (see open_loop)

    # --- emitting -------------------------------------------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def emit(self, text: str) -> str:
        """Emit `%new = text` and return %new."""
        value = self.fresh()
        self.lines.append(f"  {value} = {text}")
        return value

    def statement(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def intrinsic(self, name: str, result: str, *args: str) -> str:
        self.declarations.add(f"declare {result} @{name}({', '.join(a.split(' ')[0] for a in args)})")
        return self.emit(f"call {result} @{name}({', '.join(args)})")

    # --- the function ---------------------------------------------------------------------------------------
    def render(self) -> RenderedKernel:
        signature = self.arguments("ptr")
        body = self.body(first_output_loop(self.linear) if self.chunks > 1 else None)
        header = f"define void @{self.name}({', '.join([*signature, 'i32 %core_id'])}) nounwind {{"
        parts = [header, body, "}", *sorted(self.declarations), *self.metadata]
        if "bfloat" in body:
            parts.append(BFLOAT16_HELPER)
        # a launch size that depends on the variables is resolved at each launch (and patched in a replayed graph)
        return RenderedKernel(self.name, "\n".join(parts) + "\n", (self.global_size, 1, 1))

    def arguments(self, pointer: str) -> list[str]:
        """The kernel's parameters: its buffers (pointers of type `pointer`) in slot order, then its int variables,
        each bound to the name that holds it."""
        params = global_params(self.linear)
        for p in params:
            self.names[p] = f"%data{p.arg.slot}"
        variables = kernel_variables(self.linear)
        for v in variables:  # int arguments, widened once in the entry block (which dominates every use)
            self.names[v] = f"%{variable_argument(v)}_i64"
            self.entry.append(f"  {self.names[v]} = sext i32 %{variable_argument(v)} to i64")
        return [f"{pointer} noalias %data{p.arg.slot}" for p in params] + [
            f"i32 %{variable_argument(v)}" for v in variables
        ]

    def body(self, split: UOp | None) -> str:
        """The function body: every node of the program in order (`split`: the loop cut into per-core chunks)."""
        for node in self.linear.src:
            if node.op is Ops.RANGE:
                self.open_loop(node, split=node is split)
            else:
                self.render_node(node)
        self.statement("ret void")
        return "\n".join(["entry:", *self.entry, *self.lines])

    def open_loop(self, rng: UOp, split: bool) -> None:
        tag = f"r{rng.arg.axis_id}" if rng.arg.axis_id >= 0 else f"rn{-rng.arg.axis_id}"
        tag = f"{tag}_{self.counter}"
        end = str(rng.src[0].arg) if rng.src[0].op is Ops.CONST else self.names[rng.src[0]]
        start = "0"
        if split:
            chunks = str(self.chunks)
            if rng.src[0].op is not Ops.CONST:  # a symbolic trip count: `chunks` calls, fewer for a short loop
                self.global_size = rng.src[0].minimum(self.chunks)
                short = self.emit(f"icmp slt i64 {end}, {chunks}")
                chunks = self.emit(f"select i1 {short}, i64 {end}, i64 {chunks}")
            core = self.emit("sext i32 %core_id to i64")
            start = self.emit(f"sdiv i64 {self.emit(f'mul i64 {end}, {core}')}, {chunks}")
            core_next = self.emit(f"add i64 {core}, 1")
            end = self.emit(f"sdiv i64 {self.emit(f'mul i64 {end}, {core_next}')}, {chunks}")
        preheader = self.block
        self.statement(f"br label %{tag}_head")
        self.label(f"{tag}_head")
        counter = f"%{tag}"
        # the phi's back edge comes from the block that ends the body; END patches it in
        self.lines.append(f"  {counter} = phi i64 [{start}, %{preheader}], [%{tag}_next, %@LATCH_{tag}@]")
        more = self.emit(f"icmp slt i64 {counter}, {end}")
        self.statement(f"br i1 {more}, label %{tag}_body, label %{tag}_exit")
        self.label(f"{tag}_body")
        self.names[rng] = counter
        self.loops.append((rng, counter, tag, preheader))

    def close_loop(self) -> None:
        rng, counter, tag, _ = self.loops.pop()
        self.lines.append(f"  %{tag}_next = add nsw i64 {counter}, 1")
        latch = self.block
        self.lines = [line.replace(f"%@LATCH_{tag}@", f"%{latch}") for line in self.lines]
        unroll = rng.arg.axis_type in (AxisType.UPCAST, AxisType.UNROLL) and max_trip_count(rng) <= MAX_FULL_UNROLL
        loop_md = ""
        if unroll:
            index = len(self.metadata)
            self.metadata.append(f"!{index} = distinct !{{!{index}, !{index + 1}}}")
            self.metadata.append(f'!{index + 1} = !{{!"llvm.loop.unroll.full"}}')
            loop_md = f", !llvm.loop !{index}"
        self.statement(f"br label %{tag}_head{loop_md}")
        self.label(f"{tag}_exit")

    # --- nodes ----------------------------------------------------------------------------------------------
    def render_node(self, node: UOp) -> None:
        op = node.op
        n = [self.names.get(s, "") for s in node.src]
        if op is Ops.PARAM:
            if node.addrspace is AddrSpace.REG:
                name = f"%acc{node.arg.slot}"
                self.entry.append(f"  {name} = {self.allocation(node.ptrdtype.size, memory_type(node.ptrdtype.base))}")
                self.names[node] = name
            elif node.addrspace is not AddrSpace.GLOBAL:
                raise NotImplementedError(f"the LLVM renderer cannot render a {node.addrspace} buffer")
        elif op is Ops.CONST:
            self.names[node] = literal(node.arg, node.dtype)
        elif op is Ops.DEFINE_VAR:  # named in the entry block (see render)
            pass
        elif op is Ops.AFTER:
            self.names[node] = n[0]
        elif op is Ops.INDEX:
            element = memory_type(node.src[0].ptrdtype.base)
            self.names[node] = self.emit(f"getelementptr {element}, {self.pointer_type(node)} {n[0]}, i64 {n[1]}")
            if len(node.src) > 2:
                self.gates[node] = n[2]
        elif op is Ops.LOAD:
            self.render_load(node, n)
        elif op is Ops.STORE:
            self.render_store(node, n)
        elif op is Ops.END:
            self.close_loop()
        elif op is Ops.CAST:
            self.names[node] = self.cast(node.src[0].dtype, node.dtype, n[0])
        elif op is Ops.BITCAST:
            self.names[node] = self.bitcast(node.src[0].dtype, node.dtype, n[0])
        elif op in GroupOp.ALU:
            self.names[node] = self.alu(node, n)
        else:
            raise NotImplementedError(f"the LLVM renderer cannot render {op!r}")

    def bitcast(self, source: DType, target: DType, x: str) -> str:
        """Reinterpret the bits; bool is its byte (0 or 1), as C's _Bool."""
        if source is dtypes.bool:
            x, source = self.emit(f"zext i1 {x} to i8"), dtypes.uint8
        if target is dtypes.bool:
            return self.emit(f"trunc {llvm_type(source)} {self.bitcast(source, dtypes.uint8, x)} to i1")
        st, tt = llvm_type(source), llvm_type(target)
        return x if st == tt else self.emit(f"bitcast {st} {x} to {tt}")

    def pointer_type(self, address: UOp) -> str:
        """The LLVM type of a pointer into the buffer `address` (an INDEX or a PARAM) points into: one flat address
        space on the CPU (a GPU renderer names the buffer's address space)."""
        return "ptr"

    def allocation(self, size: int, element: str) -> str:
        """The instruction that allocates an accumulator (a REG param) of `size` elements in the entry block."""
        return f"alloca [{size} x {element}]"

    def load(self, dtype: DType, pointer: str, pointer_type: str = "ptr") -> str:
        value = self.emit(f"load {memory_type(dtype)}, {pointer_type} {pointer}")
        return self.emit(f"trunc i8 {value} to i1") if dtype is dtypes.bool else value

    def store(self, dtype: DType, value: str, pointer: str, pointer_type: str = "ptr") -> None:
        """Store a value of `dtype` (a bool as its byte)."""
        if dtype is dtypes.bool:
            value = self.emit(f"zext i1 {value} to i8")
        self.statement(f"store {memory_type(dtype)} {value}, {pointer_type} {pointer}")

    def render_load(self, node: UOp, n: list[str]) -> None:
        gate, pointer_type = self.gates.get(node.src[0]), self.pointer_type(node.src[0])
        if gate is None:
            self.names[node] = self.load(node.dtype, n[0], pointer_type)
            return
        tag = self.fresh("gl")[1:]
        before = self.block
        self.statement(f"br i1 {gate}, label %{tag}_load, label %{tag}_join")
        self.label(f"{tag}_load")
        loaded = self.load(node.dtype, n[0], pointer_type)
        loaded_in = self.block
        self.statement(f"br label %{tag}_join")
        self.label(f"{tag}_join")
        self.names[node] = self.emit(f"phi {llvm_type(node.dtype)} [{loaded}, %{loaded_in}], [{n[1]}, %{before}]")

    def render_store(self, node: UOp, n: list[str]) -> None:
        dtype, pointer_type = node.src[1].dtype, self.pointer_type(node.src[0])
        gate = self.gates.get(node.src[0])
        if gate is None:
            self.store(dtype, n[1], n[0], pointer_type)
            return
        tag = self.fresh("gs")[1:]
        self.statement(f"br i1 {gate}, label %{tag}_store, label %{tag}_join")
        self.label(f"{tag}_store")
        self.store(dtype, n[1], n[0], pointer_type)
        self.statement(f"br label %{tag}_join")
        self.label(f"{tag}_join")

    # --- arithmetic -----------------------------------------------------------------------------------------
    def alu(self, node: UOp, x: list[str]) -> str:
        operand = node.src[-1].dtype if node.op is Ops.WHERE else node.src[0].dtype
        return self.alu_op(node.op, node.dtype, operand, x)

    def alu_op(self, op: Ops, dtype: DType, operand: DType, x: list[str]) -> str:
        """Op `op` computing `dtype` from operands of dtype `operand` (the values `x`)."""
        t, ot = llvm_type(dtype), llvm_type(operand)
        if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
            if is_fp(operand):
                predicate = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}[op]
                return self.emit(f"fcmp {predicate} {ot} {x[0]}, {x[1]}")
            less = "slt" if is_signed(operand) else "ult"
            predicate = {Ops.CMPLT: less, Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}[op]
            return self.emit(f"icmp {predicate} {ot} {x[0]}, {x[1]}")
        if op in (Ops.AND, Ops.OR, Ops.XOR):
            return self.emit(f"{op.name.lower()} {t} {x[0]}, {x[1]}")
        if op in (Ops.ADD, Ops.SUB, Ops.MUL):
            if is_fp(dtype):
                return self.emit(f"f{op.name.lower()} {t} {x[0]}, {x[1]}")
            return self.emit(f"{op.name.lower()} {t} {x[0]}, {x[1]}")
        if op is Ops.MULACC:
            if t in ("float", "double"):  # fused, one rounding, as the C path's fmaf and the emulator compute it
                suffix = "f32" if t == "float" else "f64"
                return self.intrinsic(f"llvm.fma.{suffix}", t, *(f"{t} {v}" for v in x))
            if is_fp(dtype):
                product = self.emit(f"fmul {t} {x[0]}, {x[1]}")
                return self.emit(f"fadd {t} {product}, {x[2]}")
            return self.emit(f"add {t} {self.emit(f'mul {t} {x[0]}, {x[1]}')}, {x[2]}")
        if op is Ops.NEG:
            if dtype is dtypes.bool:
                return self.emit(f"xor i1 {x[0]}, true")
            return self.emit(f"fneg {t} {x[0]}") if is_fp(dtype) else self.emit(f"sub {t} 0, {x[0]}")
        if op is Ops.FDIV or (op in (Ops.IDIV, Ops.MOD) and is_fp(dtype)):
            return self.emit(f"fdiv {t} {x[0]}, {x[1]}")
        if op is Ops.RECIPROCAL:
            return self.emit(f"fdiv {t} {float_literal(1.0, dtype)}, {x[0]}")
        if op in (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR):
            return self.promoted(op, dtype, x)
        if op is Ops.MAX:
            if is_fp(dtype):  # NaN in either operand gives NaN, as numpy's maximum
                first_nan = self.emit(f"fcmp uno {t} {x[0]}, {x[0]}")
                pick_first = self.emit(f"or i1 {first_nan}, {self.emit(f'fcmp ogt {t} {x[0]}, {x[1]}')}")
                return self.emit(f"select i1 {pick_first}, {t} {x[0]}, {t} {x[1]}")
            greater = self.emit(f"icmp {'sgt' if is_signed(dtype) else 'ugt'} {t} {x[0]}, {x[1]}")
            return self.emit(f"select i1 {greater}, {t} {x[0]}, {t} {x[1]}")
        if op is Ops.WHERE:
            return self.emit(f"select i1 {x[0]}, {t} {x[1]}, {t} {x[2]}")
        if op in MATH_INTRINSICS or op is Ops.POW:
            return self.in_float(dtype, MATH_INTRINSICS.get(op, "pow"), x)
        raise NotImplementedError(f"the LLVM renderer cannot render {op!r}")

    def in_float(self, dtype: DType, function: str, x: list[str]) -> str:
        """The intrinsic llvm.FUNCTION as the C path computes it: sqrt and trunc in float (exact there, 16-bit floats
        widened and rounded back), exp2/log2/sin/pow in double rounded once to the dtype (libm's float versions are
        not always correctly rounded)."""
        t = llvm_type(dtype)
        if t == "double":
            return self.intrinsic(f"llvm.{function}.f64", "double", *(f"double {v}" for v in x))
        if function in ("sqrt", "trunc"):
            widened = x if t == "float" else [self.emit(f"fpext {t} {v} to float") for v in x]
            result = self.intrinsic(f"llvm.{function}.f32", "float", *(f"float {v}" for v in widened))
            return result if t == "float" else self.emit(f"fptrunc float {result} to {t}")
        widened = [self.emit(f"fpext {t} {v} to double") for v in x]
        result = self.intrinsic(f"llvm.{function}.f64", "double", *(f"double {v}" for v in widened))
        return self.bfloat_from_double(result) if t == "bfloat" else self.emit(f"fptrunc double {result} to {t}")

    def promoted(self, op: Ops, dtype: DType, x: list[str]) -> str:
        """IDIV/MOD/SHL/SHR with C's semantics: small ints computed in i32, division that never traps."""
        t = llvm_type(dtype)
        signed = is_signed(dtype)
        work = t
        if dtype.itemsize < 4 and dtype is not dtypes.bool:
            work = "i32"
            extend = "sext" if signed else "zext"
            x = [self.emit(f"{extend} {t} {v} to i32") for v in x]
        if op in (Ops.SHL, Ops.SHR):  # by a negative amount or the width or more: 0 (EDGE_CASES)
            kind = "shl" if op is Ops.SHL else ("ashr" if signed else "lshr")
            in_range = self.emit(f"icmp ult {work} {x[1]}, {dtype.bitsize}")
            amount = self.emit(f"select i1 {in_range}, {work} {x[1]}, {work} 0")
            shifted = self.emit(f"{kind} {work} {x[0]}, {amount}")
            result = self.emit(f"select i1 {in_range}, {work} {shifted}, {work} 0")
        elif dtype is dtypes.index:
            result = self.emit(f"{'sdiv' if op is Ops.IDIV else 'srem'} i64 {x[0]}, {x[1]}")
        else:
            result = self.safe_division(op, work, signed, x[0], x[1])
        return result if work == t else self.emit(f"trunc {work} {result} to {t}")

    def safe_division(self, op: Ops, t: str, signed: bool, a: str, b: str) -> str:
        """a / b or a % b where b == 0 gives 0 and (signed) b == -1 gives -a (wrapping) or 0."""
        by_zero = self.emit(f"icmp eq {t} {b}, 0")
        if not signed:
            divisor = self.emit(f"select i1 {by_zero}, {t} 1, {t} {b}")
            quotient = self.emit(f"{'udiv' if op is Ops.IDIV else 'urem'} {t} {a}, {divisor}")
            return self.emit(f"select i1 {by_zero}, {t} 0, {t} {quotient}")
        by_minus_one = self.emit(f"icmp eq {t} {b}, -1")
        special = self.emit(f"or i1 {by_zero}, {by_minus_one}")
        divisor = self.emit(f"select i1 {special}, {t} 1, {t} {b}")
        quotient = self.emit(f"{'sdiv' if op is Ops.IDIV else 'srem'} {t} {a}, {divisor}")
        minus_one_result = self.emit(f"sub {t} 0, {a}") if op is Ops.IDIV else "0"
        result = self.emit(f"select i1 {by_minus_one}, {t} {minus_one_result}, {t} {quotient}")
        return self.emit(f"select i1 {by_zero}, {t} 0, {t} {result}")

    def cast(self, source: DType, target: DType, x: str) -> str:
        """A cast with the C renderer's semantics (see render.c.render_cast)."""
        st, tt = llvm_type(source), llvm_type(target)
        if source.scalar() is target.scalar() or (st == tt and not is_fp(source) and source is not dtypes.bool):
            return x if st == tt else self.emit(f"bitcast {st} {x} to {tt}")
        if target is dtypes.bool:
            if is_fp(source):
                return self.emit(f"fcmp une {st} {x}, {float_literal(0.0, source)}")
            return self.emit(f"icmp ne {st} {x}, 0")
        if target is dtypes.bfloat16 and source not in (dtypes.float32, dtypes.float16):
            return self.bfloat_from_double(self.cast(source, dtypes.float64, x))  # one rounding, as C does
        if is_fp(source) and is_fp(target):
            return self.float_to_float(source, target, x)
        if is_fp(source):
            return self.float_to_int(source, target, x)
        if is_fp(target):
            if source is dtypes.uint32:  # through long long, as C does
                wide = self.emit(f"zext i32 {x} to i64")
                return self.emit(f"sitofp i64 {wide} to {tt}")
            convert = "sitofp" if is_signed(source) else "uitofp"
            return self.emit(f"{convert} {st} {x} to {tt}")
        source_bits, target_bits = int(st[1:]), int(tt[1:])
        if source_bits > target_bits:
            return self.emit(f"trunc {st} {x} to {tt}")
        extend = "sext" if is_signed(source) else "zext"
        return self.emit(f"{extend} {st} {x} to {tt}")

    def float_to_float(self, source: DType, target: DType, x: str) -> str:
        st, tt = llvm_type(source), llvm_type(target)
        width = {"half": 16, "bfloat": 16, "float": 32, "double": 64}
        if width[st] < width[tt]:
            return self.emit(f"fpext {st} {x} to {tt}")
        if width[st] == width[tt]:  # half <-> bfloat goes through float (exact)
            x, st = self.emit(f"fpext {st} {x} to float"), "float"
        return self.emit(f"fptrunc {st} {x} to {tt}")

    def bfloat_from_double(self, x: str) -> str:
        """double -> bfloat16 in one rounding: to float rounding to odd (truncate toward zero, then set the last bit
        when inexact), then to bfloat16 to nearest even; rounding twice to nearest would round some ties wrongly."""
        nearest = self.emit(f"fptrunc double {x} to float")
        back = self.emit(f"fpext float {nearest} to double")
        inexact = self.emit(f"fcmp one double {back}, {x}")
        bits = self.emit(f"bitcast float {nearest} to i32")
        magnitude_back = self.intrinsic("llvm.fabs.f64", "double", f"double {back}")
        magnitude_x = self.intrinsic("llvm.fabs.f64", "double", f"double {x}")
        rounded_up = self.emit(f"fcmp ogt double {magnitude_back}, {magnitude_x}")
        toward_zero = self.emit(f"sub i32 {bits}, {self.emit(f'zext i1 {rounded_up} to i32')}")
        odd = self.emit(f"or i32 {toward_zero}, 1")
        result = self.emit(f"bitcast i32 {self.emit(f'select i1 {inexact}, i32 {odd}, i32 {bits}')} to float")
        return self.emit(f"fptrunc float {result} to bfloat")

    def float_to_int(self, source: DType, target: DType, x: str) -> str:
        """Through int64 as x86's cvttsd2si does it (out of range gives INT64_MIN), NaN and inf give 0."""
        st, tt = llvm_type(source), llvm_type(target)
        if st in ("half", "bfloat"):
            x, st = self.emit(f"fpext {st} {x} to float"), "float"
        zero = float_literal(0.0, dtypes.float32 if st == "float" else dtypes.float64)
        limit = float_literal(2.0**63, dtypes.float32 if st == "float" else dtypes.float64)
        saturated = self.intrinsic(f"llvm.fptosi.sat.i64.{'f32' if st == 'float' else 'f64'}", "i64", f"{st} {x}")
        too_big = self.emit(f"fcmp oge {st} {x}, {limit}")
        wide = self.emit(f"select i1 {too_big}, i64 -9223372036854775808, i64 {saturated}")
        if target is dtypes.uint64:
            unsigned = self.intrinsic(f"llvm.fptoui.sat.i64.{'f32' if st == 'float' else 'f64'}", "i64", f"{st} {x}")
            wide = self.emit(f"select i1 {too_big}, i64 {unsigned}, i64 {wide}")
        finite = self.emit(f"fcmp oeq {st} {self.emit(f'fsub {st} {x}, {x}')}, {zero}")
        value = self.emit(f"select i1 {finite}, i64 {wide}, i64 0")
        return value if tt == "i64" else self.emit(f"trunc i64 {value} to {tt}")
