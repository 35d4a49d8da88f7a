"""The AMD renderer and compiler (tg.codegen.render.amd, tg.codegen.compiler.amd) without a GPU.

1. `NULL:AMD` renders and compiles (llvmlite's AMDGPU target, gfx1100 wave32) every kernel of a broad set of tensor
   programs: elementwise ops of every dtype, casts and bit casts between them, reductions, matmuls with LOCAL and
   GROUP opts, transcendentals. The compile verifies the IR; a kernel LLVM could not compile fails here.
2. The code object: an AMDGPU ELF with the kernel symbol and NAME.kd, whose descriptor enables no user SGPR but the
   kernarg segment pointer, declares the workgroup's LDS and the kernarg size of the ABI.
3. `DEV=NULL:AMD DEBUG=4` prints the LLVM IR and the assembly; an unknown arch is a clear error.
"""

from __future__ import annotations

import math
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.codegen.compiler.amd import AMDCompiler
from tg.codegen.flags import Context
from tg.codegen.opt import Opt, OptOps
from tg.codegen.pipeline import CodegenFlags, kernel_to_program, lower_kernel, with_opts
from tg.codegen.render.amd import AMDRenderer
from tg.codegen.render.registry import UnknownRendererError, make_renderer
from tg.hcq import Device
from tg.hcq.engine.programs import clear_program_cache
from tg.tensor import Tensor

from .kernels import row_dots, row_sums, scaled_grid

DEVICE = "NULL:AMD"
ALL_DTYPES = [
    dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
    dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
]  # fmt: skip
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


def llvm_major_version(tool: str) -> int:
    """The LLVM major version a tool reports ("LLVM version 19.1.7"), or 0 when it reports none."""
    result = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
    found = re.search(r"LLVM version (\d+)", result.stdout)
    return int(found.group(1)) if found else 0


def gfx1100_objdump() -> str | None:
    """An llvm-objdump that can disassemble gfx1100 (LLVM 16 or later), or None. Debian's unversioned llvm-objdump
    may be LLVM 14, which aborts on gfx1100, so the unversioned one counts only when its version says so."""
    for tool in (*(f"llvm-objdump-{v}" for v in range(22, 15, -1)), "llvm-objdump"):
        if shutil.which(tool) and llvm_major_version(tool) >= 16:
            return tool
    return None


OBJDUMP = gfx1100_objdump()
EM_AMDGPU = 0xE0
KERNARG_SEGMENT_PTR = 1 << 3  # kernel_code_properties: ENABLE_SGPR_KERNARG_SEGMENT_PTR
USER_SGPR_ENABLES = 0x7F  # bits 0-6: private segment buffer, dispatch ptr, queue ptr, kernarg, dispatch id, flat
# scratch init, private segment size


# ------------------------------------------------------------------------------------------------ helpers
def elf_symbols(obj: bytes) -> dict[str, tuple[int, int, int]]:
    """name -> (section index, value, size) of an ELF64 little-endian object's symbols (a small reader for tests)."""
    shoff, shentsize, shnum = struct.unpack_from("<Q", obj, 0x28)[0], *struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    symbols = {}
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name, _, _, shndx, value, length = struct.unpack_from("<IBBHQQ", obj, at)
            text = obj[strings + name : obj.index(b"\0", strings + name)].decode()
            symbols[text] = (shndx, value, length)
    return symbols


def section_bytes(obj: bytes, index: int) -> bytes:
    shoff, shentsize = struct.unpack_from("<Q", obj, 0x28)[0], struct.unpack_from("<H", obj, 0x3A)[0]
    _, _, _, _, offset, size, *_ = struct.unpack_from("<IIQQQQIIQQ", obj, shoff + index * shentsize)
    return obj[offset : offset + size]


def kernel_descriptor(obj: bytes, name: str) -> bytes:
    """The 64 bytes of symbol NAME.kd."""
    section, value, size = elf_symbols(obj)[f"{name}.kd"]
    assert size == 64
    return section_bytes(obj, section)[value : value + 64]


def compiled(ast, opts=()) -> tuple[str, str, bytes]:  # noqa: ANN001
    """(name, IR, code object) of a hand-built kernel on the AMD renderer with exactly `opts`."""
    source = kernel_to_program(with_opts(ast, opts), AMDRenderer(), CodegenFlags())
    return source.name, source.src, AMDCompiler().compile_uncached(source.src)


def realize_all(programs: list) -> list[str]:  # noqa: ANN001
    """Realize each tensor on NULL:AMD (every kernel rendered and compiled); the IR of each kernel compiled."""
    sources: list[str] = []
    clear_program_cache()
    import tg.hcq.engine.programs as programs_module

    real = programs_module.kernel_to_program

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        source = real(*args, **kwargs)
        sources.append(source.src)
        return source

    programs_module.kernel_to_program = recording
    try:
        for program in programs:
            program().realize()
    finally:
        programs_module.kernel_to_program = real
    return sources


# ------------------------------------------------------------------------------------------------ 1. breadth
def dtype_programs(dtype) -> list:  # noqa: ANN001
    rng = np.random.default_rng(0)
    a = Tensor(rng.integers(0, 5, (4, 8)), device=DEVICE).cast(dtype)
    b = Tensor(rng.integers(1, 5, (4, 8)), device=DEVICE).cast(dtype)
    programs = [lambda: a + b, lambda: a * b, lambda: a.maximum(b), lambda: (a < b).where(a, b), lambda: a.sum(axis=1),
                lambda: a.max(axis=0), lambda: a != b]  # fmt: skip
    if dtype is not dtypes.bool:
        programs += [lambda: a - b, lambda: a / b]
    if dtype.kind in ("int", "uint"):
        programs += [lambda: a // b, lambda: a % b, lambda: a << 1, lambda: a >> 1, lambda: a ^ b, lambda: a & b]
    programs += [lambda target=target: a.cast(target) for target in ALL_DTYPES if target is not dtype]
    if dtype is not dtypes.bool:
        same_size = {1: dtypes.uint8, 2: dtypes.int16, 4: dtypes.uint32, 8: dtypes.int64}[dtype.itemsize]
        programs.append(lambda: a.bitcast(same_size if same_size is not dtype else dtypes.int8))
    return programs


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_elementwise_reductions_and_casts_of_every_dtype_compile(dtype) -> None:  # noqa: ANN001
    sources = realize_all(dtype_programs(dtype))
    assert len(sources) >= 10
    assert all("define amdgpu_kernel void @" in src for src in sources)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float32], ids=str)
def test_transcendentals_compile(dtype) -> None:  # noqa: ANN001
    a = Tensor(np.linspace(0.5, 3, 32, dtype=np.float32).reshape(4, 8), device=DEVICE).cast(dtype)
    names = ("exp", "log", "sin", "sqrt", "exp2", "log2", "reciprocal", "sigmoid", "tanh", "trunc", "relu")
    programs = [lambda name=name: getattr(a, name)() for name in names]
    sources = realize_all([*programs, lambda: a**a, lambda: a.softmax(axis=1)])
    text = "\n".join(sources)
    assert "@llvm.sin.f32" in text and "@llvm.sqrt.f32" in text
    # float32 exp2/log2 are software (float ops): no llvm.exp2 outside pow
    assert all("@llvm.exp2" not in src or "@llvm.log2" in src for src in sources)


def test_float64_transcendentals_compile() -> None:
    a = Tensor(np.linspace(0.5, 3, 8), device=DEVICE).cast(dtypes.float64)
    sources = realize_all([lambda: a.exp2(), lambda: a.log2(), lambda: a.sin(), lambda: a**a, lambda: a.softmax()])
    text = "\n".join(sources)
    assert "@llvm.frexp.f64.i32" in text and "@llvm.ldexp.f64.i32" in text
    assert not re.search(r"@llvm\.(exp2|log2|sin|pow)\.f64", text)  # those would be library calls LLVM cannot make


def host_f64(name: str, arguments: int):  # noqa: ANN201
    """tg.codegen.render.llvm_f64's function `name` compiled for this CPU (the same IR text the GPU gets)."""
    import ctypes

    from tg.codegen.compiler.llvm import LLVMCompiler, load_object
    from tg.codegen.render.llvm_f64 import F64Math

    lines: list[str] = []
    declarations: set[str] = set()

    def emit(text: str) -> str:
        lines.append(f"  %t{len(lines)} = {text}")
        return f"%t{len(lines) - 1}"

    def intrinsic(function: str, result: str, *args: str) -> str:
        declarations.add(f"declare {result} @{function}({', '.join(a.split(' ')[0] for a in args)})")
        return emit(f"call {result} @{function}({', '.join(args)})")

    names = [f"%x{i}" for i in range(arguments)]
    value = getattr(F64Math(emit, intrinsic), name)(*names)
    signature = ", ".join(f"double {n}" for n in names)
    src = "\n".join([f"define double @{name}({signature}) {{", "entry:", *lines, f"  ret double {value}", "}"])
    src += "\n" + "\n".join(sorted(declarations)) + "\n"
    address = load_object(LLVMCompiler().compile_uncached(src), name)
    return ctypes.CFUNCTYPE(ctypes.c_double, *([ctypes.c_double] * arguments))(address)


def ulp_error(got: float, want: float) -> float:
    if math.isnan(want) or math.isinf(want) or want == 0:
        return 0.0 if got == want or (math.isnan(got) and math.isnan(want)) else math.inf
    return abs(got - want) / float(np.spacing(abs(np.float64(want))))


@pytest.mark.parametrize(
    "name, reference, inputs, ulps",
    [
        ("exp2", np.exp2, lambda r: np.r_[r.uniform(-1100, 1100, 3000), r.uniform(-2, 2, 3000)], 1.5),
        ("log2", np.log2, lambda r: np.r_[np.exp(r.uniform(-700, 700, 3000)), r.uniform(0.5, 2, 3000), 5e-324], 4),
        ("sin", np.sin, lambda r: np.r_[r.uniform(-10, 10, 3000), r.uniform(-1e6, 1e6, 3000)], 3),
    ],
)
def test_float64_functions_are_within_a_few_ulps(name, reference, inputs, ulps) -> None:  # noqa: ANN001
    function = host_f64(name, 1)
    values = inputs(np.random.default_rng(3))
    with np.errstate(all="ignore"):
        worst = max(ulp_error(function(float(x)), float(reference(x))) for x in values)
    assert worst <= ulps
    specials = {"exp2": [(math.inf, math.inf), (-math.inf, 0.0), (math.nan, math.nan), (0.0, 1.0), (-1075.0, 0.0)],
                "log2": [(0.0, -math.inf), (-1.0, math.nan), (math.inf, math.inf), (math.nan, math.nan), (1.0, 0.0)],
                "sin": [(math.inf, math.nan), (math.nan, math.nan), (0.0, 0.0)]}[name]  # fmt: skip
    for x, want in specials:
        assert ulp_error(function(x), want) == 0, (x, function(x), want)


def test_float64_pow_follows_c_and_grows_its_error_with_the_exponent() -> None:
    from tg.codegen.uop.alu import _pow

    function = host_f64("pow", 2)
    rng = np.random.default_rng(4)
    bases, exponents = rng.uniform(0, 10, 4000), rng.uniform(-50, 50, 4000)
    worst = max(ulp_error(function(float(b), float(e)), _pow(b, e)) for b, e in zip(bases, exponents, strict=True))
    assert worst <= 64  # |y log2 x| up to ~170: log2's few ulps times y
    for base, exponent in [(-0.0, 3.0), (-0.0, -3.0), (-math.inf, 3.0), (-math.inf, -3.0), (-2.0, 0.5),
                           (-math.inf, 0.5), (0.0, -1.0), (math.nan, 0.0), (1.0, math.nan), (-8.0, 3.0),
                           (-2.0, 1024.0), (2.0, -1100.0), (0.5, 0.0)]:  # fmt: skip
        got, want = function(base, exponent), _pow(base, exponent)
        assert ulp_error(got, want) <= 1 and math.copysign(1, got) == math.copysign(1, want), (base, exponent, got)


def test_matmul_conv_and_movement_compile_with_the_heuristics() -> None:
    rng = np.random.default_rng(1)
    x = Tensor(rng.standard_normal((64, 32)).astype(np.float32), device=DEVICE)
    y = Tensor(rng.standard_normal((32, 48)).astype(np.float32), device=DEVICE)
    image = Tensor(rng.standard_normal((1, 2, 8, 8)).astype(np.float32), device=DEVICE)
    weight = Tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), device=DEVICE)
    sources = realize_all([lambda: x @ y, lambda: image.conv2d(weight), lambda: x.pad(((1, 1), (2, 0))),
                           lambda: x.argmax(axis=1), lambda: x.cumsum(axis=1), lambda: x.T.contiguous()])  # fmt: skip
    assert len(sources) >= 6
    # the heuristics give every kernel with an output axis a wave of threads (Target.local_threads)
    assert all("llvm.amdgcn.workitem.id.x" in src for src in sources)
    assert all('"amdgpu-flat-work-group-size"="1,1"' not in src for src in sources)


def test_heuristics_spread_outputs_over_a_wave_of_threads() -> None:
    """LOCAL on the innermost output axis by its largest power-of-two divisor up to 32 (a wave32)."""
    wide = kernel_to_program(scaled_grid(4, 64), AMDRenderer(), CodegenFlags())
    assert wide.local_size == (32, 1, 1) and wide.global_size == (1, 2, 4)  # the local id is dimension 0
    narrow = kernel_to_program(scaled_grid(4, 24), AMDRenderer(), CodegenFlags())
    assert narrow.local_size == (8, 1, 1) and narrow.global_size == (1, 3, 4)
    cpu = kernel_to_program(scaled_grid(4, 24), make_renderer("PTX", "sm_80"), CodegenFlags())
    assert not any(o.op is OptOps.LOCAL for o in cpu.applied_opts)  # other GPU renderers ask for none


def matmul(m: int, n: int, k: int):  # noqa: ANN201
    """out[i, j] = sum_r a[i, r] * b[r, j]."""
    from tg.codegen import KernelInfo, Ops, UOp
    from tg.codegen.uop.args import AxisType

    out, a, b = (
        UOp.param(0, dtypes.float32, m * n),
        UOp.param(1, dtypes.float32, m * k),
        UOp.param(2, dtypes.float32, k * n),
    )
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    total = (a.index(i * k + r).load() * b.index(r * n + j).load()).reduce(r, arg=Ops.ADD)
    return UOp.sink(out.index(i * n + j).store(total), arg=KernelInfo(f"matmul_{m}_{n}_{k}"))


@pytest.mark.parametrize(
    "kernel, opts",
    [
        (row_sums(8, 64), (Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 16))),
        (row_dots(16, 64), (Opt(OptOps.GROUP, 0, 8), Opt(OptOps.UPCAST, 0, 4))),
        (scaled_grid(12, 16), (Opt(OptOps.LOCAL, 0, 3), Opt(OptOps.LOCAL, 1, 4))),
        (matmul(32, 16, 64), (Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UPCAST, 1, 2))),
        (matmul(16, 8, 128), (Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.GROUP, 0, 4))),
    ],
    ids=["local+group", "group+upcast", "two-locals", "matmul-locals", "matmul-local+group"],
)
def test_local_and_group_opts_become_ids_lds_and_barriers(kernel, opts) -> None:  # noqa: ANN001
    name, src, obj = compiled(kernel, opts)
    descriptor = kernel_descriptor(obj, name)
    group_segment = struct.unpack_from("<I", descriptor, 0)[0]
    if any(o.op is OptOps.GROUP for o in opts):
        assert "addrspace(3) global" in src and src.count("call void @llvm.amdgcn.s.barrier()") == 2
        assert 'fence syncscope("workgroup") release' in src and 'fence syncscope("workgroup") acquire' in src
        assert group_segment > 0  # the partials' LDS
    else:
        assert group_segment == 0 and "s.barrier" not in src
    threads = int(re.search(r'"amdgpu-flat-work-group-size"="(\d+),(\d+)"', src).group(1))
    local_size = kernel_to_program(with_opts(kernel, opts), AMDRenderer(), CodegenFlags()).local_size
    assert threads == np.prod(local_size) > 1 and "llvm.amdgcn.workitem.id." in src


def test_symbolic_kernel_takes_its_variable_as_an_i32_after_the_buffers() -> None:
    from tg.codegen import KernelInfo, UOp

    n = UOp.variable("n", 1, 64)
    out, a = UOp.param(0, dtypes.float32, 64), UOp.param(1, dtypes.float32, 64)
    i = UOp.range(n, 0)
    ast = UOp.sink(out.index(i).store(a.index(i).load() * 2.0), arg=KernelInfo("scale_n"))
    linear = lower_kernel(ast, CodegenFlags(has_local=True))
    kernel = AMDRenderer().render(linear)
    assert "(ptr addrspace(1) noalias %data0, ptr addrspace(1) noalias %data1, i32 %var_n)" in kernel.src
    assert not isinstance(kernel.global_size[0], int)  # resolved at launch from n
    obj = AMDCompiler().compile_uncached(kernel.src)
    assert struct.unpack_from("<I", kernel_descriptor(obj, kernel.name), 8)[0] == 8 + 8 + 4  # kernarg_size


# ------------------------------------------------------------------------------------------------ 2. code object
def test_code_object_has_the_kernel_and_its_descriptor() -> None:
    name, _, obj = compiled(row_sums(8, 64), (Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 16)))
    assert obj[:4] == b"\x7fELF" and struct.unpack_from("<H", obj, 0x12)[0] == EM_AMDGPU
    symbols = elf_symbols(obj)
    assert name in symbols and f"{name}.kd" in symbols
    descriptor = kernel_descriptor(obj, name)
    assert struct.unpack_from("<I", descriptor, 8)[0] == 16  # kernarg_size: two 8-byte buffer pointers
    properties = struct.unpack_from("<H", descriptor, 56)[0]
    assert properties & USER_SGPR_ENABLES == KERNARG_SEGMENT_PTR  # the kernarg pointer is the only user SGPR
    assert properties & (1 << 10)  # ENABLE_WAVEFRONT_SIZE32
    rsrc2 = struct.unpack_from("<I", descriptor, 52)[0]
    user_sgprs = (rsrc2 >> 1) & 0x1F
    workgroup_ids = sum((rsrc2 >> bit) & 1 for bit in (7, 8, 9))
    # gfx11 wave32 (LLVM's UserSGPRInit16Bug workaround): the count is padded so user + system SGPRs make 16
    assert user_sgprs >= 2 and user_sgprs + workgroup_ids == 16


def test_a_kernel_without_ids_needs_no_padding_beyond_the_one_workgroup_id() -> None:
    """A kernel of one workgroup (no grid range) still gets workgroup id x from the hardware: 15 user SGPRs."""
    _, src, obj = compiled(row_sums(1, 64), ())
    name = re.search(r"@(\w+)\(", src).group(1)
    rsrc2 = struct.unpack_from("<I", kernel_descriptor(obj, name), 52)[0]
    assert ((rsrc2 >> 7) & 7) == 1  # only workgroup id x (the y and z ids are marked unused)


needs_objdump = pytest.mark.skipif(OBJDUMP is None, reason="missing llvm-objdump: LLVM's disassembler checks it")


@needs_objdump
def test_llvm_objdump_disassembles_the_kernel(tmp_path: Path) -> None:
    # 64 threads are two waves: a real s_barrier (LLVM drops the barrier of a workgroup of one wave)
    name, _, obj = compiled(row_sums(8, 64), (Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 16)))
    path = tmp_path / "kernel.o"
    path.write_bytes(obj)
    result = subprocess.run([OBJDUMP, "-d", "--mcpu=gfx1100", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"<{name}>:" in result.stdout and "s_endpgm" in result.stdout and "s_barrier" in result.stdout


# ------------------------------------------------------------------------------------------------ 3. device strings
def test_debug_4_prints_the_ir_and_the_assembly(capsys) -> None:  # noqa: ANN001
    clear_program_cache()
    capsys.readouterr()
    a = Tensor(np.arange(16, dtype=np.float32), device=DEVICE)
    with Context(DEBUG=4):
        (a * 3 + 1).realize()
    out = capsys.readouterr().out
    assert "define amdgpu_kernel void @" in out
    assert ".amdhsa_kernel " in out and "s_endpgm" in out and "global_store_b32" in out


def test_null_amd_uses_the_amd_renderer_and_compiler() -> None:
    for spec in ("NULL:AMD", "NULL:AMD:gfx1100"):
        device = Device[spec]
        assert isinstance(device.renderer, AMDRenderer) and device.renderer.arch == "gfx1100"
        assert isinstance(device.compiler, AMDCompiler)
    target = Device["NULL:AMD"].renderer.target
    assert target.has_local and target.shared_max == 65536 and target.software_transcendentals


def test_the_registry_lists_the_archs_the_renderer_and_compiler_accept() -> None:
    from tg.codegen.render import amd
    from tg.codegen.render.registry import RENDERERS

    assert RENDERERS["AMD"].archs == amd.AMD_ARCHS and RENDERERS["AMD"].archs[0] == "gfx1100"


def test_an_unknown_arch_is_a_clear_error() -> None:
    with pytest.raises(UnknownRendererError, match="unknown arch 'gfx90a' for AMD; known archs: gfx1100"):
        make_renderer("AMD", "gfx90a")
    with pytest.raises(ValueError, match="known archs: gfx1100"):
        AMDRenderer("gfx900")
    with pytest.raises(ValueError, match="known archs: gfx1100"):
        AMDCompiler("gfx900")


def test_identity_names_the_arch_and_llvmlite() -> None:
    import llvmlite

    identity = AMDCompiler("gfx1100").identity()
    assert "gfx1100" in identity and f"llvmlite {llvmlite.__version__}" in identity and "amdgcn-amd-amdhsa" in identity


def test_invalid_ir_is_a_compile_error_not_a_crash() -> None:
    from tg.codegen.compiler.base import CompileError

    with pytest.raises(CompileError, match="llvmlite"):
        AMDCompiler().compile_uncached("define amdgpu_kernel void @k() {\n  ret i32 0\n}\n")
