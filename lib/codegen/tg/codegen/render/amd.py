"""The AMD renderer: a linear program -> LLVM IR for `amdgcn-amd-amdhsa` (RDNA3, gfx1100, wave32), compiled in
process by tg.codegen.compiler.amd into an HSA code object.

    define amdgpu_kernel void @NAME(ptr addrspace(1) noalias %data0, ..., i32 %var_n) #0

Everything a kernel computes is spelled as the CPU's LLVM renderer spells it (tg.codegen.render.llvmir: this is a
subclass of its function writer), so the edge cases of tg.codegen.uop.alu.EDGE_CASES hold on the GPU too. What
differs is the GPU side:

* the launch: the outer ranges become workgroup and thread ids exactly as for every GPU renderer
  (tg.codegen.render.threads.thread_layout), read with `llvm.amdgcn.workgroup.id.*` / `llvm.amdgcn.workitem.id.*`;
  `global_size` workgroups of `local_size` threads, a grid range of symbolic size resolved at launch;
* address spaces: buffers are global memory, addrspace(1); accumulators private, addrspace(5) (LLVM promotes them
  to registers); the partials of a GROUP_REDUCE meet in local memory (LDS), addrspace(3), between two
  `llvm.amdgcn.s.barrier`s fenced at workgroup scope (release before, acquire after);
* the kernel ABI (what the AMD device fills in and the emulator obeys): the kernarg segment holds the buffers as
  8-byte global pointers in parameter order, then the int variables as 4-byte i32, naturally aligned, no hidden
  arguments. The attributes `amdgpu-no-*` switch off every other user SGPR (dispatch and queue pointers, dispatch
  id, implicit arguments, ...), so the only one enabled is the kernarg segment pointer, s[0:1]. gfx11 wave32 has a
  hardware bug LLVM works around by padding the user SGPR count so that user plus system SGPRs are 16
  (`UserSGPRInit16Bug`): the descriptor's USER_SGPR_COUNT is then more than 2 and the workgroup ids follow it;
  the descriptor is the truth. `amdgpu-flat-work-group-size` is exactly the local size, and the ids a kernel does
  not read are marked unused.

Transcendentals: the renderer declares `software_transcendentals`, so float32 (and 16-bit float) exp2 and log2 reach
it as plain float and int ops (tg.codegen.lower.transcendental) that give the PYTHON device's bits, and the emulator
needs no v_exp_f32/v_log_f32 for them. sqrt, division and reciprocal are LLVM's correctly rounded expansions
(v_sqrt_f32, v_rcp_f32, v_div_scale/fmas/fixup with refinement), so they are exact too. sin is the hardware's
v_sin_f32/v_cos_f32 (llvm.sin/cos.f32) on the argument reduced by whole half turns first (`sine`: the hardware's own
reduction, x / 2pi in float32, loses the low bits of large arguments) and pow is built from llvm.exp2/llvm.log2
(v_exp_f32/v_log_f32) with C's rules for signs: those two are approximate (a few ulp), not bit-exact. float64
exp2/log2/sin/pow have no AMDGPU instruction and LLVM would need a device library (it aborts the process for them):
they are written out in double operations (tg.codegen.render.llvm_f64, within a few ulps; pow's error grows with the
size of its result's exponent).
"""

from __future__ import annotations

import struct

from tg.codegen.dtype import AddrSpace, DType, dtypes
from tg.codegen.render.base import Renderer, buffer_param
from tg.codegen.render.llvm_f64 import F64Math
from tg.codegen.render.llvmir import _LLVMFunction, float_literal, llvm_type, memory_type
from tg.codegen.render.threads import GPUKernel, GroupCombine, group_combine, thread_layout
from tg.codegen.target import Target
from tg.codegen.uop.ops import Ops, UOp

AMD_TRIPLE = "amdgcn-amd-amdhsa"
AMD_ARCHS = ("gfx1100",)  # RDNA3 (Navi31), wave32: what the emulator implements
WAVE_FEATURES = "+wavefrontsize32"
ADDRESS_SPACES = {AddrSpace.GLOBAL: 1, AddrSpace.LOCAL: 3, AddrSpace.REG: 5}
# the user SGPRs a kernel asks for only through these (it never reads a dispatch packet, a queue or implicit args)
NO_USER_SGPRS = (
    "amdgpu-no-dispatch-ptr", "amdgpu-no-queue-ptr", "amdgpu-no-dispatch-id", "amdgpu-no-implicitarg-ptr",
    "amdgpu-no-hostcall-ptr", "amdgpu-no-heap-ptr", "amdgpu-no-multigrid-sync-arg", "amdgpu-no-default-queue",
    "amdgpu-no-completion-action", "amdgpu-no-lds-kernel-id",
)  # fmt: skip
LDS_BYTES = 65536  # local memory per workgroup on RDNA3
# 1 / pi, and pi as the float32 nearest it plus the float32 nearest the rest (sin's argument reduction)
SINE_REDUCTION = tuple(struct.unpack("<f", struct.pack("<I", bits))[0] for bits in (0x3EA2F983, 0x40490FDB, 0xB3BBBD2E))


class AMDRenderer(Renderer):
    """`DEV=NULL:AMD[:gfx1100]` (and the AMD device): LLVM IR for RDNA3, compiled by tg.codegen.compiler.amd."""

    device = "AMD"
    has_local = True
    shared_max = LDS_BYTES
    local_threads = 32  # one full wave32 per workgroup where the kernel's shape allows it
    software_transcendentals = True

    def __init__(self, arch: str = "gfx1100", target: Target | None = None) -> None:
        if arch not in AMD_ARCHS:
            raise ValueError(f"the AMD renderer does not know arch {arch!r}; known archs: {', '.join(AMD_ARCHS)}")
        super().__init__(target)
        self.arch = arch

    def render(self, linear: UOp, target: Target | None = None) -> GPUKernel:
        return _AMDFunction(linear).render()


class _AMDFunction(_LLVMFunction):
    """Renders one linear program as an amdgpu_kernel (see the module docstring)."""

    def __init__(self, linear: UOp) -> None:
        super().__init__(linear)
        self.layout = thread_layout(linear)
        self.globals: list[str] = []  # local (LDS) arrays, at module scope

    # --- the kernel -----------------------------------------------------------------------------------------
    def render(self) -> GPUKernel:
        signature = self.arguments("ptr addrspace(1)")
        body = self.body()
        header = f"define amdgpu_kernel void @{self.name}({', '.join(signature)}) #0 {{"
        parts = [
            f'target triple = "{AMD_TRIPLE}"',
            *self.globals,
            header,
            body,
            "}",
            *sorted(self.declarations),
            f"attributes #0 = {{ {' '.join(self.attributes())} }}",
            *self.metadata,
        ]
        return GPUKernel(self.name, "\n".join(parts) + "\n", self.layout.global_size, self.layout.local_size)

    def attributes(self) -> list[str]:
        """The kernel's function attributes: its exact work-group size, and no user or system SGPR/VGPR it does not
        read (see the module docstring)."""
        threads = self.layout.local_size[0] * self.layout.local_size[1] * self.layout.local_size[2]
        used = set()
        for rng, dim in [*self.layout.grid.items(), *self.layout.group.items()]:
            used.add(("workgroup" if self.layout.is_workgroup(rng) else "workitem", dim))
        unused = [f'"amdgpu-no-{kind}-id-{"xyz"[dim]}"' for kind in ("workgroup", "workitem") for dim in (1, 2)
                  if (kind, dim) not in used]  # fmt: skip
        size = f'"amdgpu-flat-work-group-size"="{threads},{threads}"'
        return ["nounwind", size, '"uniform-work-group-size"="true"', *(f'"{a}"' for a in NO_USER_SGPRS), *unused]

    # --- address spaces -------------------------------------------------------------------------------------
    def pointer_type(self, address: UOp) -> str:
        return f"ptr addrspace({ADDRESS_SPACES[buffer_param(address).addrspace]})"

    def allocation(self, size: int, element: str) -> str:
        return f"alloca [{size} x {element}], addrspace(5)"

    def render_node(self, node: UOp) -> None:
        if node.op is Ops.PARAM and node.addrspace is AddrSpace.LOCAL:
            raise NotImplementedError("the AMD renderer: local buffers come only from a GROUP_REDUCE")
        super().render_node(node)

    # --- ids instead of loops -------------------------------------------------------------------------------
    def open_loop(self, rng: UOp) -> None:
        dim = self.layout.grid.get(rng, self.layout.group.get(rng))
        if dim is None:
            super().open_loop(rng)
            return
        kind = "workgroup" if self.layout.is_workgroup(rng) else "workitem"
        narrow = self.intrinsic(f"llvm.amdgcn.{kind}.id.{'xyz'[dim]}", "i32")
        self.names[rng] = self.emit(f"zext i32 {narrow} to i64")
        self.loops.append((rng, self.names[rng], "", ""))  # no loop: END only ends the id's scope

    def close_loop(self) -> None:
        rng, _, tag, _ = self.loops[-1]
        if tag:
            super().close_loop()
            return
        self.loops.pop()
        if rng in self.layout.group:
            self.combine_group(rng)

    def barrier(self) -> None:
        """Every thread of the workgroup reaches this point, and its local-memory writes are visible to all."""
        self.statement('fence syncscope("workgroup") release')
        self.statement("call void @llvm.amdgcn.s.barrier()")
        self.declarations.add("declare void @llvm.amdgcn.s.barrier()")
        self.statement('fence syncscope("workgroup") acquire')

    def combine_group(self, rng: UOp) -> None:
        """The end of thread `rng`'s share of a GROUP_REDUCE (as the GPU languages' combine_group): each thread
        writes its partial accumulators to local memory, a barrier, then every thread combines all partials in
        thread order (the same total everywhere, in a fixed order), and a barrier before the memory is reused."""
        plan = group_combine(self.linear, self.layout, rng)
        element, lanes = memory_type(plan.dtype), plan.lanes
        shared = f"@tg_group{len(self.globals)}"
        self.globals.append(f"{shared} = internal addrspace(3) global [{plan.size} x {element}] poison, align 16")
        lds, private = "ptr addrspace(3)", "ptr addrspace(5)"
        base = "0"
        for other, stride in plan.strides:
            base = self.emit(f"add i64 {base}, {self.emit(f'mul i64 {self.names[other]}, {stride}')}")
        accumulator = self.names[plan.accumulator]
        mine = self.emit(f"add i64 {base}, {self.emit(f'mul i64 {self.names[rng]}, {lanes}')}")
        for lane in range(lanes):
            value = self.load(plan.dtype, self.element(accumulator, element, str(lane), private), private)
            self.store(plan.dtype, value, self.element(shared, element, self.emit(f"add i64 {mine}, {lane}"), lds), lds)
        self.barrier()
        for lane in range(lanes):
            first = self.element(shared, element, self.emit(f"add i64 {base}, {lane}"), lds)
            total = self.thread_fold(plan, shared, base, lane, self.load(plan.dtype, first, lds))
            self.store(plan.dtype, total, self.element(accumulator, element, str(lane), private), private)
        self.barrier()

    def thread_fold(self, plan: GroupCombine, shared: str, base: str, lane: int, first: str) -> str:
        """`first` combined with lane `lane` of the partials of threads 1.. in thread order: a loop whose two phis
        (the thread and the running total) take their back-edge values once the body is written."""
        element, t, lds = memory_type(plan.dtype), llvm_type(plan.dtype), "ptr addrspace(3)"
        tag, before = self.fresh("fold")[1:], self.block
        self.statement(f"br label %{tag}_head")
        self.label(f"{tag}_head")
        thread, total = f"%{tag}_thread", f"%{tag}_total"
        phis = len(self.lines)
        self.lines += ["", ""]  # the phis, written below
        more = self.emit(f"icmp slt i64 {thread}, {plan.threads}")
        self.statement(f"br i1 {more}, label %{tag}_body, label %{tag}_exit")
        self.label(f"{tag}_body")
        position = self.emit(f"add i64 {self.emit(f'mul i64 {thread}, {plan.lanes}')}, {lane}")
        partial = self.load(
            plan.dtype, self.element(shared, element, self.emit(f"add i64 {base}, {position}"), lds), lds
        )
        combined = self.alu_op(plan.op, plan.dtype, plan.dtype, [total, partial])
        following = self.emit(f"add i64 {thread}, 1")
        latch = self.block
        self.statement(f"br label %{tag}_head")
        self.lines[phis] = f"  {thread} = phi i64 [1, %{before}], [{following}, %{latch}]"
        self.lines[phis + 1] = f"  {total} = phi {t} [{first}, %{before}], [{combined}, %{latch}]"
        self.label(f"{tag}_exit")
        return total

    def element(self, base: str, element: str, index: str, pointer_type: str) -> str:
        return self.emit(f"getelementptr {element}, {pointer_type} {base}, i64 {index}")

    # --- math -----------------------------------------------------------------------------------------------
    def in_float(self, dtype: DType, function: str, x: list[str]) -> str:
        """sqrt and trunc as the CPU renderer computes them (correctly rounded in float, native on AMDGPU); exp2,
        log2 and sin of float32 and narrower in float32 by the hardware (see the module docstring), pow built from
        them; the float64 ones in double operations."""
        t = llvm_type(dtype)
        if function in ("sqrt", "trunc"):
            return super().in_float(dtype, function, x)
        if t == "double":  # no AMDGPU instructions: double operations (tg.codegen.render.llvm_f64)
            return getattr(F64Math(self.emit, self.intrinsic), function)(*x)
        widened = x if t == "float" else [self.emit(f"fpext {t} {v} to float") for v in x]
        if function == "pow":
            result = self.power(widened[0], widened[1])
        elif function == "sin":
            result = self.sine(widened[0])
        else:
            result = self.intrinsic(f"llvm.{function}.f32", "float", f"float {widened[0]}")
        return result if t == "float" else self.emit(f"fptrunc float {result} to {t}")

    def sine(self, x: str) -> str:
        """sin x from the hardware's, which LLVM feeds x / 2pi rounded to float32 (so for large x it loses the low
        bits of the turn, and near a multiple of pi the rounding is large beside the result): x first loses its
        nearest whole number k of half turns (pi in two float32 parts, Cody and Waite; each product subtracted by an
        fma), sin x = (-1)^k sin r with r in [-pi/2, pi/2], and what the last rounding of r drops is added back to
        first order, sin(r + e) = sin r + e cos r; a zero is returned as it is (its sign). Within 2 ulps while |x| is
        below about 1e5 (32768 half turns); beyond, float32 holds too few bits of pi and the correction is left out.
        NaN and inf give NaN."""
        halves_per_radian, pi_high, pi_low = (float_literal(v, dtypes.float32) for v in SINE_REDUCTION)
        halves = self.intrinsic("llvm.rint.f32", "float", f"float {self.emit(f'fmul float {x}, {halves_per_radian}')}")
        minus_halves = self.emit(f"fneg float {halves}")
        high = self.fma(minus_halves, pi_high, x)  # exact: x and k pi are close
        remainder = self.fma(minus_halves, pi_low, high)
        dropped = self.fma(minus_halves, pi_low, self.emit(f"fsub float {high}, {remainder}"))
        size = self.intrinsic("llvm.fabs.f32", "float", f"float {halves}")
        beyond = self.emit(f"fcmp ogt float {size}, {float_literal(32768.0, dtypes.float32)}")
        dropped = self.emit(f"select i1 {beyond}, float {float_literal(0.0, dtypes.float32)}, float {dropped}")
        cosine = self.intrinsic("llvm.cos.f32", "float", f"float {remainder}")
        sine = self.fma(dropped, cosine, self.intrinsic("llvm.sin.f32", "float", f"float {remainder}"))
        half = self.emit(f"fmul float {halves}, {float_literal(0.5, dtypes.float32)}")
        odd = self.emit(f"fcmp une float {self.intrinsic('llvm.trunc.f32', 'float', f'float {half}')}, {half}")
        result = self.emit(f"select i1 {odd}, float {self.emit(f'fneg float {sine}')}, float {sine}")
        zero = self.emit(f"fcmp oeq float {x}, {float_literal(0.0, dtypes.float32)}")
        return self.emit(f"select i1 {zero}, float {x}, float {result}")

    def fma(self, a: str, b: str, c: str) -> str:
        """a * b + c in float32, rounded once."""
        return self.intrinsic("llvm.fma.f32", "float", f"float {a}", f"float {b}", f"float {c}")

    def power(self, base: str, exponent: str) -> str:
        """base ** exponent as exp2(exponent * log2(|base|)), with C's pow rules for what that leaves out: a negative
        base gives NaN for a fractional power and flips the sign for an odd one, x ** 0 and 1 ** y are 1."""
        one, zero, half = (float_literal(v, dtypes.float32) for v in (1.0, 0.0, 0.5))
        magnitude = self.intrinsic("llvm.fabs.f32", "float", f"float {base}")
        logarithm = self.intrinsic("llvm.log2.f32", "float", f"float {magnitude}")
        result = self.intrinsic("llvm.exp2.f32", "float", f"float {self.emit(f'fmul float {exponent}, {logarithm}')}")
        whole_part = self.intrinsic("llvm.trunc.f32", "float", f"float {exponent}")
        whole = self.emit(f"fcmp oeq float {whole_part}, {exponent}")
        halved = self.emit(f"fmul float {exponent}, {half}")
        halved_whole = self.intrinsic("llvm.trunc.f32", "float", f"float {halved}")
        odd = self.emit(f"and i1 {whole}, {self.emit(f'fcmp une float {halved_whole}, {halved}')}")
        negative = self.emit(f"fcmp olt float {base}, {zero}")
        flip = self.emit(f"and i1 {negative}, {odd}")
        result = self.emit(f"select i1 {flip}, float {self.emit(f'fneg float {result}')}, float {result}")
        fractional = self.emit(f"and i1 {negative}, {self.emit(f'xor i1 {whole}, true')}")
        result = self.emit(f"select i1 {fractional}, float 0x7FF8000000000000, float {result}")
        trivial = self.emit(
            f"or i1 {self.emit(f'fcmp oeq float {exponent}, {zero}')}, {self.emit(f'fcmp oeq float {base}, {one}')}"
        )
        return self.emit(f"select i1 {trivial}, float {one}, float {result}")
