"""LLVM IR kernels for the emulator tests (wave32 gfx1100), each with its numpy reference in test_emulator.py.

Kernels take (ptr addrspace(1) ..., i32 ...) as the tg kernel ABI does; global ids are workgroup id * local size +
workitem id."""

PRELUDE = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
declare float @llvm.maxnum.f32(float, float)
declare float @llvm.minnum.f32(float, float)
declare float @llvm.fabs.f32(float)
declare float @llvm.floor.f32(float)
declare float @llvm.exp2.f32(float)
declare float @llvm.log2.f32(float)
declare float @llvm.sqrt.f32(float)
declare float @llvm.sin.f32(float)
declare float @llvm.fma.f32(float, float, float)
declare double @llvm.sqrt.f64(double)
"""

GID = """
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %wgbase = mul i32 %wg, {local}
  %i = add i32 %wgbase, %lid
"""


def kernel(name: str, params: str, body: str, local: int = 64) -> str:
    return f"{PRELUDE}\ndefine amdgpu_kernel void @{name}({params}) #0 {{\n{GID.format(local=local)}{body}\n}}\n"


FLOAT_ELEMENTWISE = kernel(
    "float_elementwise",
    "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b, i32 %n",
    """
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %end
body:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %m = fmul float %x, %y
  %s = fsub float %m, 0.75
  %mx = call float @llvm.maxnum.f32(float %s, float %y)
  %ab = call float @llvm.fabs.f32(float %x)
  %mn = call float @llvm.minnum.f32(float %mx, float %ab)
  %neg = fneg float %mn
  %fl = call float @llvm.floor.f32(float %x)
  %r = fadd float %neg, %fl
  %f = call float @llvm.fma.f32(float %r, float %x, float 3.5)
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %f, ptr addrspace(1) %po
  br label %end
end:
  ret void""",
)

INT_ELEMENTWISE = kernel(
    "int_elementwise",
    "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b",
    """
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr i32, ptr addrspace(1) %b, i32 %i
  %x = load i32, ptr addrspace(1) %pa
  %y = load i32, ptr addrspace(1) %pb
  %m = mul i32 %x, 7
  %s = add i32 %m, %y
  %sh = ashr i32 %x, 3
  %lsh = lshr i32 %y, 5
  %x1 = xor i32 %s, %sh
  %o1 = or i32 %x1, %lsh
  %d = sdiv i32 %x, %y
  %r = srem i32 %x, 13
  %ud = udiv i32 %y, 10
  %t1 = add i32 %o1, %d
  %t2 = mul i32 %t1, %r
  %t3 = sub i32 %t2, %ud
  %mx = call i32 @llvm.smax.i32(i32 %t3, i32 %x)
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %mx, ptr addrspace(1) %po
  ret void
}
declare i32 @llvm.smax.i32(i32, i32)
define void @unused_int() {
  ret void""",
)

DIVERGENT_LOOP = kernel(
    "divergent_loop",
    "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a",
    """
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %trips = urem i32 %i, 7
  %odd = and i32 %i, 1
  %isodd = icmp ne i32 %odd, 0
  br label %loop
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %latch ]
  %acc = phi float [ 0.0, %entry ], [ %acc2, %latch ]
  %done = icmp uge i32 %k, %trips
  br i1 %done, label %exit, label %body
body:
  br i1 %isodd, label %oddpath, label %evenpath
oddpath:
  %ao = fadd float %acc, %x
  br label %latch
evenpath:
  %kf = uitofp i32 %k to float
  %ae = fsub float %acc, %kf
  br label %latch
latch:
  %acc2 = phi float [ %ao, %oddpath ], [ %ae, %evenpath ]
  %k1 = add i32 %k, 1
  br label %loop
exit:
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %acc, ptr addrspace(1) %po
  ret void""",
).replace("#0 {\n", "#0 {\nentry:\n", 1)

LDS_REDUCE = "@shared = internal addrspace(3) global [128 x float] undef, align 4\n" + kernel(
    "lds_reduce",
    "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a",
    """
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %slot = getelementptr [128 x float], ptr addrspace(3) @shared, i32 0, i32 %lid
  store float %x, ptr addrspace(3) %slot
  br label %step
step:
  %stride = phi i32 [ 64, %entry ], [ %half, %next ]
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %active = icmp ult i32 %lid, %stride
  br i1 %active, label %add, label %next
add:
  %other = add i32 %lid, %stride
  %po = getelementptr [128 x float], ptr addrspace(3) @shared, i32 0, i32 %other
  %v0 = load float, ptr addrspace(3) %slot
  %v1 = load float, ptr addrspace(3) %po
  %sum = fadd float %v0, %v1
  store float %sum, ptr addrspace(3) %slot
  br label %next
next:
  %half = lshr i32 %stride, 1
  %more = icmp ne i32 %half, 0
  br i1 %more, label %step, label %write
write:
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %first = icmp eq i32 %lid, 0
  br i1 %first, label %store, label %end
store:
  %total = load float, ptr addrspace(3) @shared
  %pout = getelementptr float, ptr addrspace(1) %out, i32 %wg
  store float %total, ptr addrspace(1) %pout
  br label %end
end:
  ret void""",
    local=128,
).replace("#0 {\n", "#0 {\nentry:\n", 1)

INT64_MATH = kernel(
    "int64_math",
    "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b, i32 %stride",
    """
  %i64 = zext i32 %i to i64
  %s64 = sext i32 %stride to i64
  %idx = mul i64 %i64, %s64
  %pa = getelementptr i64, ptr addrspace(1) %a, i64 %idx
  %pb = getelementptr i64, ptr addrspace(1) %b, i64 %i64
  %x = load i64, ptr addrspace(1) %pa
  %y = load i64, ptr addrspace(1) %pb
  %m = mul i64 %x, %y
  %sh = ashr i64 %x, 7
  %sl = shl i64 %y, 13
  %t = add i64 %m, %sh
  %u = xor i64 %t, %sl
  %c = icmp slt i64 %x, %y
  %v = select i1 %c, i64 %u, i64 %m
  %w = sub i64 %v, 1234567890123
  %po = getelementptr i64, ptr addrspace(1) %out, i64 %i64
  store i64 %w, ptr addrspace(1) %po
  ret void""",
)

SELECT_CONVERT = kernel(
    "select_convert",
    "ptr addrspace(1) noalias %outf, ptr addrspace(1) noalias %outi, ptr addrspace(1) noalias %a, "
    "ptr addrspace(1) noalias %b",
    """
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr i32, ptr addrspace(1) %b, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load i32, ptr addrspace(1) %pb
  %xi = fptosi float %x to i32
  %yf = sitofp i32 %y to float
  %yu = uitofp i32 %y to float
  %gt = fcmp ogt float %x, %yf
  %sel = select i1 %gt, float %x, float %yu
  %h = fptrunc float %sel to half
  %hf = fpext half %h to float
  %d = fpext float %x to double
  %d2 = fmul double %d, 1.000000001
  %d3 = fadd double %d2, 0.25
  %back = fptrunc double %d3 to float
  %sum = fadd float %hf, %back
  %ilt = icmp slt i32 %xi, %y
  %isel = select i1 %ilt, i32 %xi, i32 %y
  %byte = and i32 %y, 255
  %bf = uitofp i32 %byte to float
  %final = fadd float %sum, %bf
  %pof = getelementptr float, ptr addrspace(1) %outf, i32 %i
  %poi = getelementptr i32, ptr addrspace(1) %outi, i32 %i
  store float %final, ptr addrspace(1) %pof
  store i32 %isel, ptr addrspace(1) %poi
  ret void""",
)

TRANSCENDENTAL = kernel(
    "transcendental",
    "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a",
    """
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %e = call float @llvm.exp2.f32(float %x)
  %l = call float @llvm.log2.f32(float %e)
  %s = call float @llvm.sqrt.f32(float %e)
  %sn = call afn float @llvm.sin.f32(float %x)
  %q = fdiv float %s, %e
  %r = fadd float %l, %sn
  %t = fadd float %r, %q
  %d = fpext float %x to double
  %ds = call double @llvm.sqrt.f64(double %d)
  %dd = fdiv double 1.0, %ds
  %df = fptrunc double %dd to float
  %u = fadd float %t, %df
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %u, ptr addrspace(1) %po
  ret void""",
)

PRIVATE_ARRAY = kernel(
    "private_array",
    "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a",
    """
  %arr = alloca [16 x i32], align 4, addrspace(5)
  br label %fill
fill:
  %k = phi i32 [ 0, %entry ], [ %k1, %fill ]
  %p = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %k
  %v = mul i32 %k, %i
  store volatile i32 %v, ptr addrspace(5) %p
  %k1 = add i32 %k, 1
  %more = icmp ult i32 %k1, 16
  br i1 %more, label %fill, label %read
read:
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %idx = load i32, ptr addrspace(1) %pa
  %pi = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %idx
  %r = load volatile i32, ptr addrspace(5) %pi
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %po
  ret void""",
).replace("#0 {\n", "#0 {\nentry:\n", 1)

HALVES = kernel(
    "halves",
    "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b",
    """
  %pa = getelementptr half, ptr addrspace(1) %a, i32 %i
  %x = load half, ptr addrspace(1) %pa
  %i2 = add i32 %i, 1
  %pa2 = getelementptr half, ptr addrspace(1) %a, i32 %i2
  %x2 = load half, ptr addrspace(1) %pa2
  %pb = getelementptr i8, ptr addrspace(1) %b, i32 %i
  %c = load i8, ptr addrspace(1) %pb
  %cf = sitofp i8 %c to half
  %m = fmul half %x, %x2
  %s = fadd half %m, %cf
  %h = fmul half %s, 0xH3800
  %po = getelementptr half, ptr addrspace(1) %out, i32 %i
  store half %h, ptr addrspace(1) %po
  ret void""",
)

ALL = {
    "float_elementwise": FLOAT_ELEMENTWISE,
    "int_elementwise": INT_ELEMENTWISE,
    "divergent_loop": DIVERGENT_LOOP,
    "lds_reduce": LDS_REDUCE,
    "int64_math": INT64_MATH,
    "select_convert": SELECT_CONVERT,
    "transcendental": TRANSCENDENTAL,
    "private_array": PRIVATE_ARRAY,
    "halves": HALVES,
}
