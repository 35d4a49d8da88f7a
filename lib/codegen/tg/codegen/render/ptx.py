"""PTX, NVIDIA's virtual GPU assembly (`NULL:PTX[:sm_XX]`): render-only here, checked by NVIDIA's own `ptxas`.

One `.entry` per kernel; every buffer is a `.u64` parameter, converted to a global address once. The launch is the
C-style GPU languages' (tg.codegen.render.gpu.thread_layout): outer output ranges become `%ctaid`/`%tid`, LOCAL
ranges `%tid`, GROUP_REDUCE ranges `%tid` in the free dimensions with a shared-memory combine behind `bar.sync`.

Registers are virtual and typed by class; every node of the linear program gets its own register:

    %p   .pred  bool
    %r   .b32   8/16/32-bit integers, kept sign- or zero-extended to 32 bits (as C's integer promotion)
    %rd  .b64   64-bit integers and `index`
    %f   .f32   float32, and float16/bfloat16 values (each op computes in f32 and rounds back to the dtype:
                exact for + - * / sqrt, the same as one rounding)
    %fd  .f64   float64
    %h   .b16   a float16's bits on their way to or from memory

What it computes follows tg.codegen.uop.alu.EDGE_CASES, which PTX leaves open in places: integer division by 0 is 0
and INT_MIN / -1 wraps (selp around div), a shift by the width or more is 0 (PTX clamps the amount, so an arithmetic
right shift would give -1), float max keeps NaN (PTX's max.f32 drops it), float -> int casts truncate through int64
with NaN and inf giving 0 (beyond int64: INT64_MIN, as on the CPU backends, where PTX saturates). Float + - * carry
`.rn`, so ptxas never contracts them into an FMA; a MULACC is `fma.rn` (for float16 and bfloat16 in f64, so that the
rounding to the dtype is the one rounding of the exact value, but for operands of wildly different size). sqrt,
division and reciprocal are the IEEE `.rn` forms. exp2, log2 and sin are the hardware's `.approx.f32` instructions
(within a few ulp; sin is accurate in [-pi, pi] only, so its argument is first reduced by whole turns) and pow is
built from them, so these four are not bit-exact with the PYTHON emulator; float64 has no such instructions: there
they are software (tg.codegen.render.ptx_f64, within 2 ulps).

Accumulators (REG params) are `.local` arrays (ptxas keeps them in registers when their indices are constants);
a gated load or store is a branch around the memory access.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from tg.codegen.dtype import AddrSpace, DType, dtypes, encode
from tg.codegen.render.base import Renderer, buffer_param, global_params, range_name
from tg.codegen.render.ptx_f64 import F64Math
from tg.codegen.render.threads import GPUKernel, ThreadLayout, group_combine, thread_layout
from tg.codegen.target import Target
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import GroupOp, Ops, UOp

# the lowest PTX ISA version that knows each target (CUDA's PTX ISA table)
PTX_VERSIONS = {
    "sm_70": "6.0", "sm_75": "6.3", "sm_80": "7.0", "sm_86": "7.1", "sm_89": "7.8", "sm_90": "7.8",
    "sm_100": "8.6", "sm_120": "8.7",
}  # fmt: skip
REGISTER_CLASSES = {"pred": "%p", "b16": "%h", "b32": "%r", "b64": "%rd", "f32": "%f", "f64": "%fd"}
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
SMALL_INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
COMPARE = {Ops.CMPLT: "lt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}
APPROX = {Ops.EXP2: "ex2", Ops.LOG2: "lg2", Ops.SIN: "sin"}
# 1 / (2 pi) and 2 pi as the f32 nearest it plus the f32 nearest the rest (sin's argument reduction)
TURNS_PER_RADIAN, TWO_PI_HIGH, TWO_PI_LOW = "0f3E22F983", "0f40C90FDB", "0fB43BBD2E"


def is_float(dtype: DType) -> bool:
    """A float held in a float register (fp8 is a float dtype that lives in a byte, as in the C renderer)."""
    return dtype.scalar() in FLOATS


def register_class(dtype: DType) -> str:
    """The register type that holds a value of `dtype` (see the module docstring)."""
    dtype = dtype.scalar()
    if dtype is dtypes.bool:
        return "pred"
    if dtype is dtypes.float64:
        return "f64"
    if is_float(dtype):
        return "f32"
    if dtype.itemsize == 8 or dtype is dtypes.index:
        return "b64"
    return "b32"


def int_type(dtype: DType) -> str:
    """The PTX type an integer op on `dtype` computes in: 32 bits for 8/16-bit ints (their registers' width)."""
    signed = dtype.kind in ("int", "index")
    bits = 64 if dtype.itemsize == 8 or dtype is dtypes.index else 32
    return f"{'s' if signed else 'u'}{bits}"


def value_type(dtype: DType) -> str:
    """The PTX type of a register holding `dtype`, for mov, selp and compares."""
    cls = register_class(dtype)
    return cls if cls in ("f32", "f64", "pred") else int_type(dtype)


def memory_type(dtype: DType) -> str:
    """The PTX type a ld/st of one element of a `dtype` buffer uses (bool is a byte, as C's _Bool)."""
    dtype = dtype.scalar()
    if dtype is dtypes.bool:
        return "u8"
    if dtype is dtypes.float16:
        return "b16"
    if dtype is dtypes.bfloat16:
        return "u16"
    if dtype in (dtypes.float32, dtypes.float64):
        return f"f{dtype.bitsize}"
    if dtype is dtypes.index:
        return "s64"
    return f"{'s' if dtype.kind == 'int' else 'u'}{dtype.bitsize}"


def float_bits(value: float, dtype: DType) -> str:
    """A PTX float immediate: the exact bits, 0f (f32) or 0d (f64)."""
    if dtype is dtypes.float64:
        return f"0d{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"
    try:
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:  # a finite double beyond float32: the nearest is an infinity
        bits = 0x7F800000 | (0x80000000 if value < 0 else 0)
    return f"0f{bits:08X}"


def memory_space(address: UOp) -> str:
    """Where an INDEX points: a global buffer, or an accumulator (a REG param, in .local memory)."""
    return "local" if buffer_param(address).addrspace is AddrSpace.REG else "global"


def element_size(dtype: DType, space: str) -> int:
    """Bytes per element: global buffers hold the dtype, accumulators and shared memory the register's value
    (a bool as a byte)."""
    if space == "global":
        return dtype.itemsize
    return {"pred": 1, "f32": 4, "b32": 4, "b64": 8, "f64": 8}[register_class(dtype)]


def wrapped(number: int, dtype: DType) -> int:
    """An integer constant as its register holds it: wrapped to the dtype, then sign- or zero-extended to the
    register's width, written as the register's unsigned bits."""
    bits = 64 if dtype is dtypes.index else dtype.bitsize
    number &= (1 << bits) - 1
    if dtype.kind in ("int", "index") and number >= 1 << (bits - 1):
        number -= 1 << bits
    return number & ((1 << (64 if register_class(dtype) == "b64" else 32)) - 1)


def rounded(value: float, dtype: DType) -> float:
    """A constant of `dtype` as the f32 register holds it (float16 and bfloat16 constants are already rounded)."""
    if dtype is dtypes.float16:
        return float(struct.unpack("<e", struct.pack("<e", value))[0]) if math.isfinite(value) else value
    return value


@dataclass
class _Kernel:
    """The state of one render: registers per class, the body lines, labels and the launch layout."""

    linear: UOp
    layout: ThreadLayout
    names: dict[UOp, str] = field(default_factory=dict)
    gates: dict[UOp, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REGISTER_CLASSES, 0))
    lines: list[str] = field(default_factory=list)
    declarations: list[str] = field(default_factory=list)  # .shared and .local arrays
    labels: int = 0
    loop_labels: list[str] = field(default_factory=list)  # the head label of each open loop


class PTXRenderer(Renderer):
    """`NULL:PTX[:sm_XX]`: PTX for NVIDIA GPUs of that compute capability."""

    device = "CUDA"
    has_local = True

    def __init__(self, arch: str = "sm_80", target: Target | None = None) -> None:
        super().__init__(target)
        self.arch = arch

    def render(self, linear: UOp, target: Target | None = None) -> GPUKernel:
        return _PTXFunction(linear, self.arch).render()


class _PTXFunction:
    """Renders one linear program; `k` is its state."""

    def __init__(self, linear: UOp, arch: str) -> None:
        self.arch = arch
        self.k = _Kernel(linear, thread_layout(linear))

    # ------------------------------------------------------------------------------------------ emitting
    def reg(self, cls: str) -> str:
        name = f"{REGISTER_CLASSES[cls]}{self.k.counts[cls]}"
        self.k.counts[cls] += 1
        return name

    def new(self, dtype: DType) -> str:
        return self.reg(register_class(dtype))

    def emit(self, text: str) -> None:
        self.k.lines.append(f"\t{text};")

    def label(self, prefix: str) -> str:
        self.k.labels += 1
        return f"$L_{prefix}{self.k.labels}"

    def place(self, label: str) -> None:
        self.k.lines.append(f"{label}:")

    def op(self, instruction: str, dtype: DType, *operands: str) -> str:
        """Emit `instruction result, operands` into a new register for `dtype`; the register."""
        result = self.new(dtype)
        self.emit(f"{instruction} {', '.join([result, *operands])}")
        return result

    # ------------------------------------------------------------------------------------------ the kernel
    def render(self) -> GPUKernel:
        k = self.k
        params = global_params(k.linear)
        for p in params:
            raw, address = self.reg("b64"), self.reg("b64")
            self.emit(f"ld.param.u64 {raw}, [data{p.arg.slot}]")
            self.emit(f"cvta.to.global.u64 {address}, {raw}")
            k.names[p] = address
        for node in k.linear.src:
            self.node(node)
        self.emit("ret")
        name = k.linear.arg.function_name
        arguments = ",\n".join(f"\t.param .u64 data{p.arg.slot}" for p in params)
        lx, ly, lz = k.layout.local_size
        registers = [f"\t.reg .{cls} {prefix}<{k.counts[cls]}>;" for cls, prefix in REGISTER_CLASSES.items()]
        header = [
            f"// {name}: global size {k.layout.global_size}, local size {k.layout.local_size}",
            f".version {PTX_VERSIONS.get(self.arch, '7.0')}",
            f".target {self.arch}",
            ".address_size 64",
            "",
            f".visible .entry {name}(\n{arguments}\n)",
            f".reqntid {lx}, {ly}, {lz}",
            "{",
        ]
        src = "\n".join([*header, *registers, *k.declarations, *k.lines, "}"]) + "\n"
        return GPUKernel(name, src, k.layout.global_size, k.layout.local_size)

    def node(self, node: UOp) -> None:
        k, op = self.k, node.op
        x = [k.names.get(s, "") for s in node.src]
        if op is Ops.PARAM:
            if node.addrspace is AddrSpace.REG:
                k.names[node] = self.array("local", f"acc{node.arg.slot}", node.ptrdtype.base, node.ptrdtype.size)
            elif node.addrspace is not AddrSpace.GLOBAL:
                raise NotImplementedError(f"the PTX renderer cannot render a {node.addrspace} buffer")
        elif op is Ops.CONST:
            k.names[node] = self.constant(node.arg, node.dtype)
        elif op is Ops.AFTER:
            k.names[node] = x[0]
        elif op is Ops.INDEX:
            size = element_size(buffer_param(node).ptrdtype.base, memory_space(node))
            k.names[node] = self.offset(x[0], self.as_64(x[1], node.src[1].dtype), size)
            if len(node.src) > 2:
                k.gates[node] = x[2]
        elif op is Ops.LOAD:
            k.names[node] = self.gated_load(node, x)
        elif op is Ops.STORE:
            self.gated_store(node, x)
        elif op is Ops.RANGE:
            self.open_range(node)
        elif op is Ops.END:
            self.close_range(node.src[0])
        elif op is Ops.CAST:
            k.names[node] = self.cast(node.src[0].dtype.scalar(), node.dtype.scalar(), x[0])
        elif op is Ops.BITCAST:
            k.names[node] = self.bitcast(node.src[0].dtype.scalar(), node.dtype.scalar(), x[0])
        elif op in (Ops.SHL, Ops.SHR):
            dtype = node.dtype.scalar()
            k.names[node] = self.normalize(self.shift(op, dtype, node.src[1].dtype.scalar(), x), dtype)
        elif op in GroupOp.ALU:
            operand = node.src[-1].dtype if op is Ops.WHERE else node.src[0].dtype
            k.names[node] = self.alu(op, node.dtype.scalar(), operand.scalar(), x)
        else:
            raise NotImplementedError(f"the PTX renderer cannot render {op!r}")

    def array(self, space: str, name: str, dtype: DType, size: int) -> str:
        """Declare a .local or .shared array of `size` elements of `dtype`; a register with its address."""
        self.k.declarations.append(f"\t.{space} .align 8 .b8 {name}[{max(1, size * element_size(dtype, space))}];")
        address = self.reg("b64")
        self.emit(f"mov.u64 {address}, {name}")
        return address

    # ------------------------------------------------------------------------------------------ values
    def constant(self, value: object, dtype: DType) -> str:
        reg = self.new(dtype)
        if dtype is dtypes.bool:
            bits = self.reg("b32")
            self.emit(f"mov.b32 {bits}, {1 if value else 0}")
            self.emit(f"setp.ne.u32 {reg}, {bits}, 0")
        elif is_float(dtype):
            number = rounded(float(value), dtype)  # type: ignore[arg-type]
            self.emit(f"mov.{register_class(dtype)} {reg}, {float_bits(number, dtype)}")
        else:
            number = encode(value, dtype) if dtype.float_format is not None else int(value)  # type: ignore[call-overload]
            self.emit(f"mov.{register_class(dtype)} {reg}, {wrapped(number, dtype)}")
        return reg

    def normalize(self, reg: str, dtype: DType) -> str:
        """Re-extend an 8/16-bit integer from the low bits of its 32-bit register (after an op that may carry)."""
        if dtype not in SMALL_INTS:
            return reg
        kind = "s" if dtype.kind == "int" else "u"
        self.emit(f"cvt.{kind}32.{kind}{dtype.bitsize} {reg}, {reg}")
        return reg

    def round_float(self, reg: str, dtype: DType) -> str:
        """Round an f32 register to float16 or bfloat16 in place (other dtypes are exact already)."""
        if dtype is dtypes.float16:
            bits = self.reg("b16")
            self.emit(f"cvt.rn.f16.f32 {bits}, {reg}")
            self.emit(f"cvt.f32.f16 {reg}, {bits}")
        elif dtype is dtypes.bfloat16:
            bits, high, nan = self.reg("b32"), self.reg("b32"), self.reg("pred")
            # to nearest even in the bits; a NaN stays a quiet NaN (the C renderer's tg_float_to_bf16)
            self.emit(f"mov.b32 {bits}, {reg}")
            self.emit(f"testp.notanumber.f32 {nan}, {reg}")
            self.emit(f"bfe.u32 {high}, {bits}, 16, 1")
            self.emit(f"add.u32 {high}, {high}, 32767")
            self.emit(f"add.u32 {high}, {bits}, {high}")
            self.emit(f"@{nan} or.b32 {high}, {bits}, 4194304")
            self.emit(f"and.b32 {high}, {high}, -65536")
            self.emit(f"mov.b32 {reg}, {high}")
        return reg

    def as_64(self, reg: str, dtype: DType) -> str:
        if register_class(dtype) == "b64":
            return reg
        return self.op(f"cvt.{int_type(dtype)[0]}64.{int_type(dtype)}", dtypes.int64, reg)

    def offset(self, base: str, index: str, size: int) -> str:
        """The address base + index * size (64-bit registers)."""
        address = self.reg("b64")
        self.emit(f"mad.lo.s64 {address}, {index}, {size}, {base}")
        return address

    # ------------------------------------------------------------------------------------------ memory
    def gated_load(self, node: UOp, x: list[str]) -> str:
        gate, space = self.k.gates.get(node.src[0]), memory_space(node.src[0])
        if gate is None:
            return self.load_value(node.dtype, space, x[0])
        result, skip = self.new(node.dtype), self.label("skip")
        self.emit(f"mov.{register_class(node.dtype)} {result}, {x[1]}")
        self.emit(f"@!{gate} bra.uni {skip}")
        self.emit(f"mov.{register_class(node.dtype)} {result}, {self.load_value(node.dtype, space, x[0])}")
        self.place(skip)
        return result

    def gated_store(self, node: UOp, x: list[str]) -> None:
        gate = self.k.gates.get(node.src[0])
        skip = self.label("skip") if gate is not None else None
        if skip is not None:
            self.emit(f"@!{gate} bra.uni {skip}")
        self.store_value(node.src[1].dtype, memory_space(node.src[0]), x[0], x[1])
        if skip is not None:
            self.place(skip)

    def load_value(self, dtype: DType, space: str, address: str) -> str:
        """Load one element into a new register: global memory holds the dtype (bool a byte, bfloat16 its 16
        bits), local and shared memory the register's value."""
        result = self.new(dtype)
        if dtype is dtypes.bool:
            byte = self.reg("b32")
            self.emit(f"ld.{space}.u8 {byte}, [{address}]")
            self.emit(f"setp.ne.u32 {result}, {byte}, 0")
        elif space != "global":
            self.emit(f"ld.{space}.{register_class(dtype)} {result}, [{address}]")
        elif dtype is dtypes.float16:
            bits = self.reg("b16")
            self.emit(f"ld.global.b16 {bits}, [{address}]")
            self.emit(f"cvt.f32.f16 {result}, {bits}")
        elif dtype is dtypes.bfloat16:
            bits = self.reg("b32")
            self.emit(f"ld.global.u16 {bits}, [{address}]")
            self.emit(f"shl.b32 {bits}, {bits}, 16")
            self.emit(f"mov.b32 {result}, {bits}")
        else:
            self.emit(f"ld.global.{memory_type(dtype)} {result}, [{address}]")
        return result

    def store_value(self, dtype: DType, space: str, address: str, value: str) -> None:
        if dtype is dtypes.bool:
            byte = self.reg("b32")
            self.emit(f"selp.u32 {byte}, 1, 0, {value}")
            self.emit(f"st.{space}.u8 [{address}], {byte}")
        elif space != "global":
            self.emit(f"st.{space}.{register_class(dtype)} [{address}], {value}")
        elif dtype is dtypes.float16:
            bits = self.reg("b16")
            self.emit(f"cvt.rn.f16.f32 {bits}, {value}")
            self.emit(f"st.global.b16 [{address}], {bits}")
        elif dtype is dtypes.bfloat16:
            bits = self.reg("b32")
            self.emit(f"mov.b32 {bits}, {value}")
            self.emit(f"shr.u32 {bits}, {bits}, 16")
            self.emit(f"st.global.u16 [{address}], {bits}")
        else:
            self.emit(f"st.global.{memory_type(dtype)} [{address}], {value}")

    # ------------------------------------------------------------------------------------------ loops and threads
    def open_range(self, rng: UOp) -> None:
        layout, counter = self.k.layout, self.reg("b64")
        self.k.names[rng] = counter
        dim = layout.grid.get(rng, layout.group.get(rng))
        if dim is not None:  # a workgroup or thread id
            is_block = rng in layout.grid and rng.arg.axis_type is not AxisType.LOCAL
            narrow = self.reg("b32")
            self.emit(f"mov.u32 {narrow}, %{'ctaid' if is_block else 'tid'}.{'xyz'[dim]}")
            self.emit(f"cvt.u64.u32 {counter}, {narrow}")
            return
        head, done = self.label(f"{range_name(rng)}_"), self.reg("pred")
        self.emit(f"mov.u64 {counter}, 0")
        self.place(head)
        self.emit(f"setp.ge.s64 {done}, {counter}, {rng.src[0].arg}")
        self.emit(f"@{done} bra.uni {head}_end")
        self.k.loop_labels.append(head)

    def close_range(self, rng: UOp) -> None:
        layout = self.k.layout
        if rng in layout.group:
            self.combine_group(rng)
        elif rng not in layout.grid:
            head = self.k.loop_labels.pop()
            counter = self.k.names[rng]
            self.emit(f"add.s64 {counter}, {counter}, 1")
            self.emit(f"bra.uni {head}")
            self.place(f"{head}_end")

    def combine_group(self, rng: UOp) -> None:
        """The end of a GROUP_REDUCE share (as the GPU languages' combine_group): each thread writes its partial
        accumulators to shared memory, a barrier, then every thread combines all partials in thread order (the
        same total everywhere, in a fixed order), and a barrier before the memory can be reused."""
        k = self.k
        try:
            plan = group_combine(k.linear, k.layout, rng)
        except NotImplementedError as error:
            raise NotImplementedError(f"the PTX renderer: {error}") from None
        combine, dtype, lanes, threads = plan.op, plan.dtype, plan.lanes, plan.threads
        size = element_size(dtype, "shared")
        # threads of LOCAL ranges in the same workgroup reduce other outputs: each has its own slice
        slice_index, slice_size = self.reg("b64"), plan.size
        self.emit(f"mov.u64 {slice_index}, 0")
        for other, stride in plan.strides:
            self.emit(f"mad.lo.s64 {slice_index}, {k.names[other]}, {stride}, {slice_index}")
        shared = self.array("shared", f"tg_group{len(k.declarations)}", dtype, slice_size)
        shared = self.offset(shared, slice_index, size)
        mine, partials = self.offset(shared, k.names[rng], lanes * size), k.names[plan.accumulator]
        for lane in range(lanes):
            value = self.load_value(dtype, "local", f"{partials}+{lane * size}")
            self.store_value(dtype, "shared", f"{mine}+{lane * size}", value)
        self.emit("bar.sync 0")
        for lane in range(lanes):
            total = self.load_value(dtype, "shared", f"{shared}+{lane * size}")
            thread, head, done = self.reg("b64"), self.label("combine"), self.reg("pred")
            self.emit(f"mov.u64 {thread}, 1")
            self.place(head)
            self.emit(f"setp.ge.s64 {done}, {thread}, {threads}")
            self.emit(f"@{done} bra.uni {head}_end")
            partial = self.load_value(dtype, "shared", f"{self.offset(shared, thread, lanes * size)}+{lane * size}")
            self.emit(f"mov.{register_class(dtype)} {total}, {self.alu(combine, dtype, dtype, [total, partial])}")
            self.emit(f"add.s64 {thread}, {thread}, 1")
            self.emit(f"bra.uni {head}")
            self.place(f"{head}_end")
            self.store_value(dtype, "local", f"{partials}+{lane * size}", total)
        self.emit("bar.sync 0")

    # ------------------------------------------------------------------------------------------ arithmetic
    def alu(self, op: Ops, dtype: DType, operand: DType, x: list[str]) -> str:
        if op in COMPARE:
            return self.compare(op, operand, x)
        if op is Ops.WHERE:
            return self.select(dtype, x[0], x[1], x[2])
        if dtype is dtypes.bool:
            return self.logic(op, x)
        if is_float(dtype):
            if op is Ops.MULACC and dtype in (dtypes.float16, dtypes.bfloat16):  # in f64: the fused sum is then
                wide = [self.op("cvt.f64.f32", dtypes.float64, v) for v in x]  # exact except across huge gaps
                return self.float_to_float(dtypes.float64, dtype, self.op("fma.rn.f64", dtypes.float64, *wide))
            return self.round_float(self.float_op(op, dtype, x), dtype)
        return self.normalize(self.int_op(op, dtype, x), dtype)

    def compare(self, op: Ops, operand: DType, x: list[str]) -> str:
        if operand is dtypes.bool:  # a < b is !a & b; a != b is a ^ b
            if op is Ops.CMPLT:
                return self.op("and.pred", dtypes.bool, self.op("not.pred", dtypes.bool, x[0]), x[1])
            differ = self.op("xor.pred", dtypes.bool, x[0], x[1])
            return differ if op is Ops.CMPNE else self.op("not.pred", dtypes.bool, differ)
        if is_float(operand):  # != is unordered (NaN != NaN), < and == ordered
            predicate = {Ops.CMPLT: "lt", Ops.CMPNE: "neu", Ops.CMPEQ: "eq"}[op]
            return self.op(f"setp.{predicate}.{register_class(operand)}", dtypes.bool, x[0], x[1])
        return self.op(f"setp.{COMPARE[op]}.{int_type(operand)}", dtypes.bool, x[0], x[1])

    def select(self, dtype: DType, gate: str, a: str, b: str) -> str:
        if dtype is not dtypes.bool:
            return self.op(f"selp.{value_type(dtype)}", dtype, a, b, gate)
        taken = self.op("and.pred", dtype, gate, a)
        other = self.op("and.pred", dtype, self.op("not.pred", dtype, gate), b)
        return self.op("or.pred", dtype, taken, other)

    def logic(self, op: Ops, x: list[str]) -> str:
        names = {Ops.AND: "and", Ops.MUL: "and", Ops.OR: "or", Ops.ADD: "or", Ops.MAX: "or", Ops.XOR: "xor"}
        if op is Ops.NEG:
            return self.op("not.pred", dtypes.bool, x[0])
        if op not in names:
            raise NotImplementedError(f"the PTX renderer cannot render {op!r} on bools")
        return self.op(f"{names[op]}.pred", dtypes.bool, x[0], x[1])

    def float_op(self, op: Ops, dtype: DType, x: list[str]) -> str:
        f = register_class(dtype)
        simple = {Ops.ADD: "add.rn", Ops.SUB: "sub.rn", Ops.MUL: "mul.rn", Ops.FDIV: "div.rn", Ops.MULACC: "fma.rn",
                  Ops.NEG: "neg", Ops.RECIPROCAL: "rcp.rn", Ops.SQRT: "sqrt.rn", Ops.TRUNC: "cvt.rzi"}  # fmt: skip
        if op in simple:
            suffix = f".{f}.{f}" if op is Ops.TRUNC else f".{f}"
            return self.op(simple[op] + suffix, dtype, *x)
        if op is Ops.IDIV:  # a float's IDIV truncates the quotient
            return self.op(f"cvt.rzi.{f}.{f}", dtype, self.op(f"div.rn.{f}", dtype, *x))
        if op is Ops.MAX:  # keep the first when it is NaN or greater: NaN in either operand gives NaN
            first_nan = self.op(f"testp.notanumber.{f}", dtypes.bool, x[0])
            keep = self.op("or.pred", dtypes.bool, first_nan, self.op(f"setp.gt.{f}", dtypes.bool, x[0], x[1]))
            return self.op(f"selp.{f}", dtype, x[0], x[1], keep)
        if op in APPROX or op is Ops.POW:
            if f == "f64":  # no f64 instructions for these: computed in software (tg.codegen.render.ptx_f64)
                return self.float64_function(op, x)
            if op is Ops.SIN:
                return self.sine(dtype, x[0])
            return self.op(f"{APPROX[op]}.approx.f32", dtype, x[0]) if op in APPROX else self.power(dtype, *x)
        raise NotImplementedError(f"the PTX renderer cannot render {op!r} on {dtype!r}")

    def float64_function(self, op: Ops, x: list[str]) -> str:
        math64 = F64Math(self)
        if op is Ops.EXP2:
            return math64.exp2(x[0])
        if op is Ops.LOG2:
            return math64.log2(x[0])
        return math64.sin(x[0]) if op is Ops.SIN else math64.pow(x[0], x[1])

    def sine(self, dtype: DType, x: str) -> str:
        """sin x from sin.approx.f32, which is accurate in [-pi, pi] only: x loses its nearest whole number of turns
        first (2 pi in two f32 parts, Cody and Waite; each product subtracted by an fma), and what the last rounding
        of that remainder drops is added back to first order, sin(r + e) = sin r + e cos r. Good to a few f32 ulps
        of a turn while |x| is below about 1e5 (16384 turns); beyond, f32 holds too few bits of pi, the correction is
        left out and the result is only some value in [-1, 1]. NaN and inf give NaN."""
        turns = self.op("cvt.rni.f32.f32", dtype, self.op("mul.rn.f32", dtype, x, TURNS_PER_RADIAN))
        minus_turns = self.op("neg.f32", dtype, turns)
        high = self.op("fma.rn.f32", dtype, minus_turns, TWO_PI_HIGH, x)  # exact: x and k 2pi are close
        remainder = self.op("fma.rn.f32", dtype, minus_turns, TWO_PI_LOW, high)
        dropped = self.op("fma.rn.f32", dtype, minus_turns, TWO_PI_LOW, self.op("sub.rn.f32", dtype, high, remainder))
        beyond = self.op("setp.gt.f32", dtypes.bool, self.op("abs.f32", dtype, turns), "0f46800000")  # 16384 turns
        self.emit(f"@{beyond} mov.f32 {dropped}, 0f00000000")  # there the correction is as meaningless as r itself
        cosine = self.op("cos.approx.f32", dtype, remainder)
        return self.op("fma.rn.f32", dtype, dropped, cosine, self.op("sin.approx.f32", dtype, remainder))

    def power(self, dtype: DType, base: str, exponent: str) -> str:
        """base ** exponent as exp2(exponent * log2(|base|)), with C's pow rules for what that leaves out: a
        negative base gives NaN for a fractional power and flips the sign for an odd one, x ** 0 and 1 ** y are 1."""
        magnitude = self.op("abs.f32", dtype, base)
        result = self.op("ex2.approx.f32", dtype, self.op("mul.rn.f32", dtype, exponent,
                                                          self.op("lg2.approx.f32", dtype, magnitude)))  # fmt: skip
        whole = self.op("setp.eq.f32", dtypes.bool, self.op("cvt.rzi.f32.f32", dtype, exponent), exponent)
        half = self.op("mul.rn.f32", dtype, exponent, "0f3F000000")
        odd = self.op("and.pred", dtypes.bool, whole,
                      self.op("setp.neu.f32", dtypes.bool, self.op("cvt.rzi.f32.f32", dtype, half), half))  # fmt: skip
        negative = self.op("setp.lt.f32", dtypes.bool, base, "0f00000000")
        flip = self.op("and.pred", dtypes.bool, negative, odd)
        result = self.op("selp.f32", dtype, self.op("neg.f32", dtype, result), result, flip)
        fractional = self.op("and.pred", dtypes.bool, negative, self.op("not.pred", dtypes.bool, whole))
        result = self.op("selp.f32", dtype, "0f7FC00000", result, fractional)
        one = self.op("or.pred", dtypes.bool, self.op("setp.eq.f32", dtypes.bool, exponent, "0f00000000"),
                      self.op("setp.eq.f32", dtypes.bool, base, "0f3F800000"))  # fmt: skip
        return self.op("selp.f32", dtype, "0f3F800000", result, one)

    def int_op(self, op: Ops, dtype: DType, x: list[str]) -> str:
        t, bits = int_type(dtype), int_type(dtype)[1:]
        simple = {Ops.ADD: f"add.{t}", Ops.SUB: f"sub.{t}", Ops.MUL: f"mul.lo.{t}", Ops.MAX: f"max.{t}",
                  Ops.AND: f"and.b{bits}", Ops.OR: f"or.b{bits}", Ops.XOR: f"xor.b{bits}", Ops.NEG: f"neg.s{bits}",
                  Ops.MULACC: f"mad.lo.{t}"}  # fmt: skip
        if op in simple:
            return self.op(simple[op], dtype, *x)
        if op in (Ops.IDIV, Ops.MOD) and dtype is dtypes.index:  # index arithmetic never divides by 0
            return self.op(f"{'div' if op is Ops.IDIV else 'rem'}.{t}", dtype, *x)
        if op in (Ops.IDIV, Ops.MOD):
            return self.division(op, dtype, x[0], x[1])
        raise NotImplementedError(f"the PTX renderer cannot render {op!r} on {dtype!r}")

    def division(self, op: Ops, dtype: DType, a: str, b: str) -> str:
        """a / b or a % b where b == 0 gives 0 and (signed) b == -1 gives -a (wrapping) or 0."""
        t = int_type(dtype)
        instruction = f"{'div' if op is Ops.IDIV else 'rem'}.{t}"
        by_zero = self.op(f"setp.eq.{t}", dtypes.bool, b, "0")
        if t[0] == "u":
            quotient = self.op(instruction, dtype, a, self.op(f"selp.{t}", dtype, "1", b, by_zero))
            return self.op(f"selp.{t}", dtype, "0", quotient, by_zero)
        by_minus_one = self.op(f"setp.eq.{t}", dtypes.bool, b, "-1")
        special = self.op("or.pred", dtypes.bool, by_zero, by_minus_one)
        quotient = self.op(instruction, dtype, a, self.op(f"selp.{t}", dtype, "1", b, special))
        minus_one_result = self.op(f"neg.{t}", dtype, a) if op is Ops.IDIV else "0"
        quotient = self.op(f"selp.{t}", dtype, minus_one_result, quotient, by_minus_one)
        return self.op(f"selp.{t}", dtype, "0", quotient, by_zero)

    def shift(self, op: Ops, dtype: DType, amount_dtype: DType, x: list[str]) -> str:
        """A shift; by a negative amount or the width or more it is 0 (PTX would clamp the amount)."""
        t, amount_type = int_type(dtype), int_type(amount_dtype)
        in_range = self.op(f"setp.lt.u{amount_type[1:]}", dtypes.bool, x[1], str(dtype.bitsize))
        amount = x[1] if amount_type[1:] == "32" else self.op("cvt.u32.u64", dtypes.uint32, x[1])
        instruction = f"shl.b{t[1:]}" if op is Ops.SHL else f"shr.{t}"
        shifted = self.op(instruction, dtype, x[0], amount)
        return self.op(f"selp.b{t[1:]}", dtype, shifted, "0", in_range)

    # ------------------------------------------------------------------------------------------ conversions
    def cast(self, source: DType, target: DType, x: str) -> str:
        """A cast with the emulator's semantics (tg.codegen.dtype.truncate): ints wrap, floats round once,
        float -> int truncates through int64 with NaN and inf giving 0."""
        if target is dtypes.bool:
            if is_float(source):
                return self.op(f"setp.neu.{register_class(source)}", target, x, float_bits(0.0, source))
            return self.op(f"setp.ne.{value_type(source)}", target, x, "0")
        if source is dtypes.bool:
            one, zero = ("1", "0") if not is_float(target) else (float_bits(1.0, target), float_bits(0.0, target))
            return self.op(f"selp.{value_type(target)}", target, one, zero, x)
        if is_float(source) and is_float(target):
            return self.float_to_float(source, target, x)
        if is_float(source):
            return self.int_to_int(dtypes.int64, target, self.float_to_int64(source, target, x))
        if is_float(target):
            return self.int_to_float(source, target, x)
        return self.int_to_int(source, target, x)

    def int_to_int(self, source: DType, target: DType, x: str) -> str:
        wide_source, wide_target = register_class(source) == "b64", register_class(target) == "b64"
        if wide_source and not wide_target:
            x = self.op("cvt.u32.u64", dtypes.uint32, x)
        elif wide_target and not wide_source:
            return self.op(f"cvt.{int_type(source)[0]}64.{int_type(source)}", target, x)
        result = self.op(f"mov.{register_class(target)}", target, x)
        return self.normalize(result, target)

    def int_to_float(self, source: DType, target: DType, x: str) -> str:
        t = int_type(source)
        if target is dtypes.float16:  # one rounding, straight to half
            bits = self.reg("b16")
            self.emit(f"cvt.rn.f16.{t} {bits}, {x}")
            return self.op("cvt.f32.f16", target, bits)
        if target is dtypes.bfloat16:  # through double, as the C renderer does
            return self.float_to_float(dtypes.float64, target, self.op(f"cvt.rn.f64.{t}", dtypes.float64, x))
        return self.op(f"cvt.rn.{register_class(target)}.{t}", target, x)

    def float_to_float(self, source: DType, target: DType, x: str) -> str:
        if source is not dtypes.float64:  # an f32 register holding the exact value
            if target is dtypes.float64:
                return self.op("cvt.f64.f32", target, x)
            return self.round_float(self.op("mov.f32", target, x), target)
        if target is dtypes.float16:
            bits = self.reg("b16")
            self.emit(f"cvt.rn.f16.f64 {bits}, {x}")
            return self.op("cvt.f32.f16", target, bits)
        if target is dtypes.bfloat16:  # to float rounding to odd (toward zero, last bit set when inexact), then
            toward_zero = self.op("cvt.rz.f32.f64", dtypes.float32, x)  # to bfloat16: one correct rounding
            inexact = self.op("setp.neu.f64", dtypes.bool, self.op("cvt.f64.f32", dtypes.float64, toward_zero), x)
            bits = self.op("mov.b32", dtypes.uint32, toward_zero)
            self.emit(f"@{inexact} or.b32 {bits}, {bits}, 1")
            return self.round_float(self.op("mov.b32", target, bits), target)
        return self.op(f"cvt.rn.{register_class(target)}.f64", target, x)

    def float_to_int64(self, source: DType, target: DType, x: str) -> str:
        """Toward zero through int64 as the CPU backends convert (x86's cvttsd2si): a value outside int64 gives
        INT64_MIN where PTX would saturate, except that uint64 takes 2**63 and up unsigned."""
        f = register_class(source)
        wide = self.op(f"cvt.rzi.s64.{f}", dtypes.int64, x)
        big = self.op(f"setp.ge.{f}", dtypes.bool, x, float_bits(2.0**63, source))
        self.emit(f"@{big} mov.b64 {wide}, {1 << 63}")
        if target is dtypes.uint64:
            self.emit(f"@{big} cvt.rzi.u64.{f} {wide}, {x}")
        finite = self.op(f"testp.finite.{f}", dtypes.bool, x)
        return self.op("selp.b64", dtypes.int64, wide, "0", finite)

    def bitcast(self, source: DType, target: DType, x: str) -> str:
        """The bits of `x` read as `target`; a bool is its byte (0 or 1), and a byte read as a bool is true when
        not 0 (as the emulator reads it)."""
        if source is dtypes.bool:
            return self.from_bits(target, self.op("selp.u32", dtypes.uint32, "1", "0", x))
        if target is dtypes.bool:
            return self.op(
                "setp.ne.u32", target, self.op("and.b32", dtypes.uint32, self.to_bits(source, x), "255"), "0"
            )
        return self.from_bits(target, self.to_bits(source, x))

    def to_bits(self, dtype: DType, x: str) -> str:
        """The bits of a value in an integer register (the low bits of a .b32 for narrow types)."""
        if dtype is dtypes.float16:
            bits = self.reg("b16")
            self.emit(f"cvt.rn.f16.f32 {bits}, {x}")
            return self.op("cvt.u32.u16", dtypes.uint32, bits)
        if dtype is dtypes.bfloat16:
            return self.op("shr.u32", dtypes.uint32, self.op("mov.b32", dtypes.uint32, x), "16")
        if is_float(dtype):
            return self.op(f"mov.b{dtype.bitsize}", dtypes.uint64 if dtype.bitsize == 64 else dtypes.uint32, x)
        return x

    def from_bits(self, dtype: DType, bits: str) -> str:
        if dtype is dtypes.float16:
            half = self.reg("b16")
            self.emit(f"cvt.u16.u32 {half}, {bits}")
            return self.op("cvt.f32.f16", dtype, half)
        if dtype is dtypes.bfloat16:
            return self.op("mov.b32", dtype, self.op("shl.b32", dtypes.uint32, bits, "16"))
        if is_float(dtype):
            return self.op(f"mov.b{dtype.bitsize}", dtype, bits)
        return self.normalize(self.op(f"mov.{register_class(dtype)}", dtype, bits), dtype)
