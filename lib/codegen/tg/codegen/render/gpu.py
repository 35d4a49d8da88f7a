"""C-style GPU languages: OpenCL C, CUDA C, HIP and Metal, as small subclasses of the C renderer's language.

They share every op spelling with tg.codegen.render.c (`CStyleLanguage`): what differs is the ABI (a kernel
qualifier, address-space qualifiers, thread ids instead of loops), the names of types and math functions, and how
bits are reinterpreted. The names are a table per language (`type_names`, `function_names`) applied to the C
spellings, whose vocabulary is fixed (`c_type`, `__builtin_*`). exp2, log2, sin and pow of narrow floats compute in
float, not in double as the CPU's C does (GPUs have slow or no doubles; their math libraries are not bit-exact with
libm anyway).

Threads replace loops. The outer output loops of a kernel that enclose all of its work (at most three, nested, each
the only thing in its parent) become grid dimensions, innermost first (dimension 0): a LOOP or GLOBAL range is a
workgroup (block) id with one thread per group in that dimension, a LOCAL range (the optimizer's LOCAL opt) is a
thread id within the group. The launch is `global_size` groups of `local_size` threads, returned with the source
(`GPUKernel`); OpenCL also records the workgroup size in the kernel (`reqd_work_group_size`), so a runtime can read
it back from the compiled program. Every other range stays a loop inside a thread (GROUP_REDUCE ranges become
thread ids too, in the dimensions the grid leaves free: each thread reduces its share, the partial accumulators meet
in local memory behind a barrier and are combined in thread order).
"""

from __future__ import annotations

import re

from tg.codegen.dtype import AddrSpace, DType, dtypes
from tg.codegen.render.base import KernelText, buffer_param, kernel_variables
from tg.codegen.render.c import HELPERS, CStyleLanguage, c_type, memory_type, needed_helpers
from tg.codegen.render.threads import (  # noqa: F401 (GPUKernel, grid_ranges, combining_op: re-exported)
    GPUKernel,
    ThreadLayout,
    combining_op,
    grid_ranges,
    group_combine,
    thread_layout,
)
from tg.codegen.target import Target
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import Ops, UOp

FLOAT_MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.POW: "pow"}


class GPULanguage(CStyleLanguage):
    """The parts every C-style GPU language shares; subclasses fill in the tables and the kernel signature."""

    has_local = True
    type_names: dict[str, str] = {"_Bool": "bool"}
    function_names: dict[str, str] = {}
    bool_memory = "bool"  # how a bool buffer element is declared

    def __init__(self, arch: str = "", target: Target | None = None) -> None:
        super().__init__(target)
        self.arch = arch

    # ------------------------------------------------------------------------------------------ spellings
    def spell(self, text: str) -> str:
        """The C spelling `text` in this language: its type and function names replaced."""
        for old, new in self.type_names.items():
            text = re.sub(rf"(?<![\w]){re.escape(old)}(?![\w])", new, text)
        for old, new in self.function_names.items():
            text = text.replace(old, new)
        return text

    def type_name(self, dtype: DType) -> str:
        return self.spell(c_type(dtype))

    def memory_type_name(self, dtype: DType) -> str:
        return self.bool_memory if dtype.scalar() is dtypes.bool else self.spell(memory_type(dtype))

    def literal(self, value: object, dtype: DType) -> str:
        return self.spell(super().literal(value, dtype))

    def alu(self, op: Ops, dtype: DType, operands_dtype: DType, operands: list[str]) -> str:
        if op in FLOAT_MATH and dtype is not dtypes.float64:  # in float: GPUs have no (or slow) double
            call = f"__builtin_{FLOAT_MATH[op]}f({', '.join(f'(float){x}' for x in operands)})"
            if dtype is dtypes.bfloat16:
                return self.spell(f"tg_round_bf16({call})")
            return self.spell(call if dtype is dtypes.float32 else f"({c_type(dtype)}){call}")
        return self.spell(super().alu(op, dtype, operands_dtype, operands))

    def cast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        return self.spell(super().cast(dtype, source_dtype, x))

    def bitcast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        if dtypes.bfloat16 in (dtype, source_dtype) or dtypes.bool in (dtype, source_dtype):
            raise NotImplementedError(f"{type(self).__name__}: no bit cast between {source_dtype!r} and {dtype!r}")
        return self.reinterpret(self.type_name(dtype), x)

    def reinterpret(self, type_name: str, x: str) -> str:
        raise NotImplementedError

    def declare(self, k: KernelText, node: UOp, expression: str) -> None:
        name = k.fresh()
        k.line(f"{self.type_name(node.dtype)} {name} = {expression};")
        k.names[node] = name

    def accumulator(self, k: KernelText, node: UOp, name: str) -> None:
        k.line(f"{self.type_name(node.ptrdtype.base)} {name}[{node.ptrdtype.size}];")

    # ------------------------------------------------------------------------------------------ the ABI
    def prologue(self, k: KernelText, params: list[UOp]) -> None:
        if kernel_variables(k.linear):  # the GPU ABIs here have no scalar arguments and no symbolic grid yet
            raise NotImplementedError(f"the {type(self).__name__} cannot render a kernel with variables (symbolic "
                                      "shapes run on CPU, CPU:LLVM and PYTHON)")  # fmt: skip
        layout = thread_layout(k.linear)
        k.abi["grid"], k.abi["group"] = layout.grid, layout.group
        k.abi["global_size"], k.abi["local_size"] = layout.global_size, layout.local_size
        k.abi["locals"] = []  # declarations of local (shared) memory, at kernel scope

    def open_loop(self, k: KernelText, rng: UOp, name: str) -> None:
        dim = k.abi["grid"].get(rng, k.abi["group"].get(rng))
        if dim is None:
            super().open_loop(k, rng, name)
            return
        workgroup = rng in k.abi["grid"] and rng.arg.axis_type is not AxisType.LOCAL
        thread_id = self.group_id(dim) if workgroup else self.local_id(dim)
        k.line(f"{{ const long {name} = {thread_id}; /* {rng.arg.axis_type.name} {rng.src[0].arg} */")

    def close_loop(self, k: KernelText, rng: UOp, name: str, body_start: int) -> None:
        if rng in k.abi["group"]:
            self.combine_group(k, rng, name)
        elif rng in k.abi["grid"]:
            k.line("}")
        else:
            super().close_loop(k, rng, name, body_start)

    def combine_group(self, k: KernelText, rng: UOp, name: str) -> None:
        """End the share of thread `name` of a GROUP_REDUCE: every thread writes its partial accumulators to local
        memory, waits at a barrier, then combines all threads' partials in thread order (so every thread holds the
        same total, in a fixed order), and waits again before the local memory can be reused."""
        layout = ThreadLayout(k.abi["grid"], k.abi["group"], k.abi["global_size"], k.abi["local_size"])
        try:
            combine = group_combine(k.linear, layout, rng)
        except NotImplementedError as error:
            raise NotImplementedError(f"{type(self).__name__}: {error}") from None
        acc, lanes, threads, dtype = k.names[combine.accumulator], combine.lanes, combine.threads, combine.dtype
        offset = [f"{k.names[other]} * {stride}" for other, stride in combine.strides]
        base = f"({' + '.join(offset)}) + " if offset else ""
        shared = f"tg_group{len(k.abi['locals'])}"
        k.abi["locals"].append(self.local_declaration(self.type_name(dtype), shared, combine.size))
        for lane in range(lanes):
            k.line(f"  {shared}[{base}{name} * {lanes} + {lane}] = {acc}[{lane}];")
        k.line("}")
        k.line(self.barrier())
        for lane in range(lanes):
            k.line(f"{acc}[{lane}] = {shared}[{base}{lane}];")
            k.line(self.thread_loop("tg_thread", 1, threads))
            partial = f"{shared}[{base}tg_thread * {lanes} + {lane}]"
            combined = self.alu(combine.op, dtype, dtype, [f"{acc}[{lane}]", partial])
            k.line(f"  {acc}[{lane}] = {combined};")
            k.line("}")
        k.line(self.barrier())

    def local_declaration(self, type_name: str, name: str, size: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no local memory")

    def thread_loop(self, name: str, start: int, end: int) -> str:
        """The header of a loop of `name` over the threads start..end-1 (the combine of a GROUP_REDUCE)."""
        return f"for (int {name} = {start}; {name} < {end}; {name}++) {{"

    def barrier(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no barrier")

    def group_id(self, dim: int) -> str:
        raise NotImplementedError

    def local_id(self, dim: int) -> str:
        raise NotImplementedError

    def finish(self, k: KernelText, params: list[UOp]) -> GPUKernel:
        body = "\n".join([*(f"  {line}" for line in k.abi["locals"]), *k.lines])
        src = f"{self.kernel_signature(k, params)} {{\n{body}\n}}\n"
        src = self.preamble(src) + src
        return GPUKernel(k.name, src, k.abi["global_size"], k.abi["local_size"])

    def kernel_signature(self, k: KernelText, params: list[UOp]) -> str:
        raise NotImplementedError

    def preamble(self, src: str) -> str:
        """Definitions the kernel needs before it (extensions, helpers it calls)."""
        return self.helpers(src)

    def helpers(self, src: str) -> str:
        return "".join(self.spell_helper(HELPERS[name]) + "\n" for name in needed_helpers(src))

    def spell_helper(self, text: str) -> str:
        return self.spell(text)


HALF_ROUNDING = """inline float tg_round_half(float x) {
  ushort bits;
  vstore_half_rte(x, 0, (__private half*)&bits);
  return vload_half(0, (__private half*)&bits);
}
"""


# OpenCL C and Metal spell the C integer and half types the same short way
SHORT_TYPE_NAMES = {
    "_Bool": "bool",
    "signed char": "char",
    "unsigned char": "uchar",
    "unsigned short": "ushort",
    "unsigned int": "uint",
    "unsigned long long": "ulong",
    "long long": "long",
    "_Float16": "half",
}


class OpenCLRenderer(GPULanguage):
    """OpenCL C 1.2+ (`DEV=CL`, `NULL:OPENCL`)."""

    device = "CL"
    type_names = SHORT_TYPE_NAMES
    function_names = {
        '__builtin_nanf("")': "NAN",
        '__builtin_nan("")': "((double)NAN)",
        "__builtin_inff()": "INFINITY",
        "__builtin_inf()": "((double)INFINITY)",
        **{f"__builtin_{f}f(": f"{f}(" for f in ("sqrt", "exp2", "log2", "sin", "trunc", "pow", "fabs", "fma")},
        **{f"__builtin_{f}(": f"{f}(" for f in ("sqrt", "exp2", "log2", "sin", "trunc", "pow", "fabs", "fma")},
        "static inline ": "inline ",
    }
    bool_memory = "uchar"  # OpenCL allows no bool in buffers

    def __init__(self, arch: str = "", native_half: bool = True, target: Target | None = None) -> None:
        super().__init__(arch, target)
        self.native_half = native_half
        if not native_half:
            self.type_names = {**self.type_names, "_Float16": "float"}

    # Without cl_khr_fp16 (PoCL on most CPUs) half exists only in memory: values are floats rounded to half after
    # every op (each op is its own local), and buffers are read and written with vload_half / vstore_half_rte.
    def declare(self, k: KernelText, node: UOp, expression: str) -> None:
        if not self.native_half and node.dtype.scalar() is dtypes.float16:
            expression = f"tg_round_half({expression})"
        super().declare(k, node, expression)

    def load(self, node: UOp, address: str, gate: str | None, alternative: list[str]) -> str:
        if self._half_in_memory(node.src[0], node.dtype):
            address = f"vload_half(0, &{address})"
        return super().load(node, address, gate, alternative)

    def store(self, k: KernelText, node: UOp, address: str, value: str, gate: str | None) -> None:
        if not self._half_in_memory(node.src[0], node.src[1].dtype):
            super().store(k, node, address, value, gate)
            return
        statement = f"vstore_half_rte({value}, 0, &{address});"
        k.line(statement if gate is None else f"if ({gate}) {statement}")

    def _half_in_memory(self, address: UOp, dtype: DType) -> bool:
        return (
            not self.native_half
            and dtype.scalar() is dtypes.float16
            and buffer_param(address).addrspace is not (AddrSpace.REG)
        )

    def reinterpret(self, type_name: str, x: str) -> str:
        return f"as_{type_name}({x})"

    def local_declaration(self, type_name: str, name: str, size: int) -> str:
        return f"__local {type_name} {name}[{size}];"

    def barrier(self) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def group_id(self, dim: int) -> str:
        return f"get_group_id({dim})"

    def local_id(self, dim: int) -> str:
        return f"get_local_id({dim})"

    def memory_type_name(self, dtype: DType) -> str:
        return "half" if dtype.scalar() is dtypes.float16 else super().memory_type_name(dtype)

    def kernel_signature(self, k: KernelText, params: list[UOp]) -> str:
        arguments = [f"__global {self.memory_type_name(p.ptrdtype.base)}* restrict data{p.arg.slot}" for p in params]
        lx, ly, lz = k.abi["local_size"]
        attribute = f"__attribute__((reqd_work_group_size({lx}, {ly}, {lz})))"
        return f"__kernel {attribute} void {k.name}({', '.join(arguments)})"

    def preamble(self, src: str) -> str:
        extensions = ""
        if "tg_round_half(" in src:
            extensions += HALF_ROUNDING
        elif re.search(r"\bhalf\b", src):
            extensions += "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
        if re.search(r"\bdouble\b", src):
            extensions += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
        return extensions + self.helpers(src)

    def spell_helper(self, text: str) -> str:
        text = re.sub(r"__builtin_memcpy\(&(\w+), &(\w+), 4\);", r"\1 = as_type_of_\1(\2);", text)
        text = text.replace("as_type_of_f(", "as_float(").replace("as_type_of_u(", "as_uint(")
        return self.spell(text)


class CUDARenderer(GPULanguage):
    """CUDA C++ (`NULL:CUDA[:sm_XX]`): render-only on this machine."""

    device = "CUDA"
    type_names = {"_Bool": "bool", "_Float16": "half"}
    function_names = {"static inline ": "__device__ static inline "}
    bool_memory = "bool"
    kernel_qualifier = 'extern "C" __global__'
    restrict = "__restrict__"

    def reinterpret(self, type_name: str, x: str) -> str:
        return f"tg_bit_cast<{type_name}>({x})"

    def cast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        if source_dtype is dtypes.float16 and dtype.kind in ("int", "uint"):  # through float (exact): cuda_fp16.h's
            return super().cast(dtype, dtypes.float32, f"((float){x})")  # half has no unambiguous `half != int`
        return super().cast(dtype, source_dtype, x)

    def local_declaration(self, type_name: str, name: str, size: int) -> str:
        return f"__shared__ {type_name} {name}[{size}];"

    def barrier(self) -> str:
        return "__syncthreads();"

    def group_id(self, dim: int) -> str:
        return f"blockIdx.{'xyz'[dim]}"

    def local_id(self, dim: int) -> str:
        return f"threadIdx.{'xyz'[dim]}"

    def kernel_signature(self, k: KernelText, params: list[UOp]) -> str:
        arguments = [f"{self.memory_type_name(p.ptrdtype.base)}* {self.restrict} data{p.arg.slot}" for p in params]
        threads = k.abi["local_size"][0] * k.abi["local_size"][1] * k.abi["local_size"][2]
        return f"{self.kernel_qualifier} void __launch_bounds__({threads}) {k.name}({', '.join(arguments)})"

    def preamble(self, src: str) -> str:
        lines = []
        if re.search(r"\bhalf\b", src):
            lines.append("#include <cuda_fp16.h>")
        if "tg_bit_cast<" in src:
            lines.append(
                "template <class T, class F> __device__ static inline T tg_bit_cast(F x) "
                "{ T t; __builtin_memcpy(&t, &x, sizeof(T)); return t; }"
            )
        return "".join(line + "\n" for line in lines) + self.helpers(src)


class HIPRenderer(CUDARenderer):
    """HIP C++ for AMD GPUs (`NULL:HIP[:gfxXXXX]`): CUDA's spelling with _Float16 halves and no header needed."""

    device = "HIP"
    type_names = {"_Bool": "bool"}
    kernel_qualifier = 'extern "C" __attribute__((global))'
    function_names = {"static inline ": "__attribute__((device)) static inline "}

    def local_declaration(self, type_name: str, name: str, size: int) -> str:
        return f"__attribute__((shared)) {type_name} {name}[{size}];"

    def barrier(self) -> str:
        return (
            '__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
            '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");'
        )

    def group_id(self, dim: int) -> str:
        return f"__builtin_amdgcn_workgroup_id_{'xyz'[dim]}()"

    def local_id(self, dim: int) -> str:
        return f"__builtin_amdgcn_workitem_id_{'xyz'[dim]}()"

    def kernel_signature(self, k: KernelText, params: list[UOp]) -> str:
        arguments = [f"{self.memory_type_name(p.ptrdtype.base)}* {self.restrict} data{p.arg.slot}" for p in params]
        threads = k.abi["local_size"][0] * k.abi["local_size"][1] * k.abi["local_size"][2]
        return f"{self.kernel_qualifier} void __attribute__((amdgpu_flat_work_group_size(1, {threads}))) {k.name}(" + (
            ", ".join(arguments) + ")"
        )

    def preamble(self, src: str) -> str:
        helper = ""
        if "tg_bit_cast<" in src:
            helper = (
                "template <class T, class F> __attribute__((device)) static inline T tg_bit_cast(F x) "
                "{ T t; __builtin_memcpy(&t, &x, sizeof(T)); return t; }\n"
            )
        return helper + self.helpers(src)


class MetalRenderer(GPULanguage):
    """Metal Shading Language (`NULL:METAL`): render-only. Metal has no 64-bit float; doubles are an error."""

    device = "METAL"
    type_names = SHORT_TYPE_NAMES
    function_names = {
        '__builtin_nanf("")': "NAN",
        "__builtin_inff()": "INFINITY",
        **{f"__builtin_{f}f(": f"metal::precise::{f}(" for f in ("sqrt", "exp2", "log2", "sin", "pow")},
        "__builtin_truncf(": "metal::trunc(",
        "__builtin_fmaf(": "metal::fma(",
        "__builtin_fabs(": "metal::abs(",
        "static inline ": "inline ",
    }

    def type_name(self, dtype: DType) -> str:
        if dtype.scalar() is dtypes.float64:
            raise NotImplementedError("Metal has no double")
        return super().type_name(dtype)

    def reinterpret(self, type_name: str, x: str) -> str:
        return f"as_type<{type_name}>({x})"

    def local_declaration(self, type_name: str, name: str, size: int) -> str:
        return f"threadgroup {type_name} {name}[{size}];"

    def barrier(self) -> str:
        return "threadgroup_barrier(mem_flags::mem_threadgroup);"

    def group_id(self, dim: int) -> str:
        return f"gid.{'xyz'[dim]}"

    def local_id(self, dim: int) -> str:
        return f"lid.{'xyz'[dim]}"

    def kernel_signature(self, k: KernelText, params: list[UOp]) -> str:
        arguments = [
            f"device {self.memory_type_name(p.ptrdtype.base)}* data{p.arg.slot} [[buffer({i})]]"
            for i, p in enumerate(params)
        ]
        arguments += ["uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
        return f"kernel void {k.name}({', '.join(arguments)})"

    def preamble(self, src: str) -> str:
        return "#include <metal_stdlib>\nusing namespace metal;\n" + self.helpers(src)

    def spell_helper(self, text: str) -> str:
        text = re.sub(r"__builtin_memcpy\(&(\w+), &(\w+), 4\);", r"\1 = as_type<decltype(\1)>(\2);", text)
        return self.spell(text)
