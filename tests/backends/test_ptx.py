"""The PTX renderer without a GPU: every kernel it renders is assembled by NVIDIA's `ptxas` (a real assembler, which
checks types, operands and register classes), and CUDA C is compiled by `nvcc -ptx` where the CUDA toolkit is.

1. `NULL:PTX` assembles every kernel of the tensor programs of tests/backends/test_gpu_render.py with ptxas.
2. A sweep of hand-built kernels covers every ALU op on every dtype, every cast between two dtypes, every bit cast
   and the edge-case table (tg.codegen.uop.alu.EDGE_CASES), with LOCAL and GROUP opts (shared memory, barriers).
3. What PTX leaves open is spelled out: the instructions that implement the edge-case rules are checked in the text.
The semantics of the linear program itself are checked on the PYTHON emulator in test_gpu_render.py.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tg.codegen import KernelInfo, Ops, UOp, dtypes
from tg.codegen.compiler import CompileError
from tg.codegen.compiler.ptx import PTXCompiler
from tg.codegen.dtype import DType, to_numpy
from tg.codegen.opt import Opt, OptOps
from tg.codegen.pipeline import CodegenFlags, kernel_to_program, lower_kernel, with_opts
from tg.codegen.render.emulate import load_function
from tg.codegen.render.gpu import CUDARenderer
from tg.codegen.render.ptx import PTXRenderer
from tg.codegen.render.python import PythonRenderer
from tg.codegen.uop.args import AxisType
from tg.hcq import Device

from .kernels import row_dots, row_sums, scaled_grid
from .ptx_interpreter import launch
from .test_edge_cases_backends import ROWS, edge_case_kernel, same

PTXAS = shutil.which("ptxas")
NVCC = shutil.which("nvcc")
needs_ptxas = pytest.mark.skipif(
    PTXAS is None, reason="ptxas is not on PATH: install the CUDA toolkit (nvidia-cuda-toolkit) for the PTX checks"
)
needs_nvcc = pytest.mark.skipif(
    NVCC is None, reason="nvcc is not on PATH: install the CUDA toolkit (nvidia-cuda-toolkit) for the CUDA C check"
)
ARCH = "sm_80"
INTS = (
    dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64,
)  # fmt: skip
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
ALL = (dtypes.bool, *INTS, *FLOATS)
FLOAT_UNARY = (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.TRUNC, Ops.EXP2, Ops.LOG2, Ops.SIN)
TRANSCENDENTAL = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW)


def assemble(source: str, arch: str = ARCH) -> bytes:
    return PTXCompiler(arch).compile_uncached(source)


def render(ast: UOp, opts: tuple[Opt, ...] | None = None, arch: str = ARCH) -> str:
    ast = ast if opts is None else with_opts(ast, opts)
    return kernel_to_program(ast, PTXRenderer(arch), CodegenFlags(noopt=opts is None)).src


class KernelBuilder:
    """One kernel of many single-element computations: each reads fresh input buffers (nothing constant-folds)
    and writes its own output."""

    def __init__(self) -> None:
        self.stores: list[UOp] = []
        self.slot = 0

    def input(self, dtype: DType) -> UOp:
        self.slot += 1
        return UOp.param(self.slot - 1, dtype, 1).index(UOp.const(0, dtypes.index)).load()

    def output(self, value: UOp) -> None:
        self.stores.append(UOp.param(self.slot, value.dtype, 1).index(UOp.const(0, dtypes.index)).store(value))
        self.slot += 1

    def kernel(self, name: str) -> UOp:
        return UOp.sink(*self.stores, arg=KernelInfo(name))


def ops_kernel(*kinds: DType, float64_transcendentals: bool = True) -> UOp:
    """Every ALU op the spec allows on each dtype of `kinds`, in one kernel (float64 exp2/log2/sin/pow may be
    left out)."""
    k = KernelBuilder()
    for dtype in kinds:
        add_ops(k, dtype, float64_transcendentals)
    return k.kernel("ops_" + "_".join(d.name for d in kinds))


def add_ops(k: KernelBuilder, dtype: DType, float64_transcendentals: bool = True) -> None:
    binary = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]
    unary = [Ops.NEG]
    if dtype in INTS:
        binary += [Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR]
    elif dtype in FLOATS:
        binary += [Ops.FDIV, Ops.POW]
        unary = list(FLOAT_UNARY)
    else:  # bool
        binary = [Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]
    for op in binary + unary:
        if dtype is dtypes.float64 and op in TRANSCENDENTAL and not float64_transcendentals:
            continue
        operands = [k.input(dtype) for _ in range(2 if op in binary else 1)]
        k.output(UOp(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype, tuple(operands)))
    k.output(UOp(Ops.WHERE, dtype, (k.input(dtypes.bool), k.input(dtype), k.input(dtype))))
    if dtype in FLOATS or dtype in INTS:
        k.output(UOp(Ops.MULACC, dtype, (k.input(dtype), k.input(dtype), k.input(dtype))))
    if dtype in INTS:
        for op in (Ops.SHL, Ops.SHR):
            for amount in (dtypes.int32, dtypes.int64, dtypes.uint8):
                k.output(UOp(op, dtype, (k.input(dtype), k.input(amount))))


def casts_kernel() -> UOp:
    k = KernelBuilder()
    for source in ALL:
        for target in ALL:
            if source is not target:
                k.output(k.input(source).cast(target))
    return k.kernel("casts")


def bitcasts_kernel(without: tuple[DType, ...] = ()) -> UOp:
    """Every bit cast between two dtypes of one size (a bool is a byte), but those of `without`."""
    k = KernelBuilder()
    kinds = [d for d in ALL if d not in without]
    for source in kinds:
        for target in kinds:
            if source is not target and source.itemsize == target.itemsize:
                k.output(k.input(source).bitcast(target))
    return k.kernel("bitcasts")


def sweep_sources() -> dict[str, str]:
    """Every kernel of the sweep, by name."""
    sources = {f"ops_{d.name}": render(ops_kernel(d)) for d in ALL}
    sources["casts"], sources["bitcasts"] = render(casts_kernel()), render(bitcasts_kernel())
    sources["edge_cases"] = render(edge_case_kernel()[0])
    for i, opts in enumerate(REDUCE_OPTS):
        sources[f"row_sums_{i}"] = render(row_sums(8, 64), opts)
    for i, opts in enumerate(GRID_OPTS):
        sources[f"scaled_grid_{i}"] = render(scaled_grid(12, 16), opts)
    return sources


REDUCE_OPTS: tuple[tuple[Opt, ...], ...] = (
    (),
    (Opt(OptOps.LOCAL, 0, 4),),
    (Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 16)),
    (Opt(OptOps.GROUPTOP, 0, 16), Opt(OptOps.UPCAST, 0, 4)),
    (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4)),
)
GRID_OPTS: tuple[tuple[Opt, ...], ...] = (
    (),
    (Opt(OptOps.LOCAL, 1, 4),),
    (Opt(OptOps.LOCAL, 0, 3), Opt(OptOps.UPCAST, 1, 4)),
)


@needs_ptxas
def test_ptxas_assembles_every_kernel_of_the_sweep() -> None:
    sources = sweep_sources()
    assert len(sources) == len(ALL) + 3 + len(REDUCE_OPTS) + len(GRID_OPTS)
    for name, source in sources.items():
        assert len(assemble(source)) > 0, name
    assert any("bar.sync 0" in s and ".shared" in s for s in sources.values())  # GROUP: shared memory, barriers


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_75", "sm_90", "sm_120"])
def test_ptxas_assembles_for_other_archs(arch: str) -> None:
    for ast in (ops_kernel(dtypes.float16), ops_kernel(dtypes.bfloat16), casts_kernel()):
        source = render(ast, arch=arch)
        assert f".target {arch}" in source
        assemble(source, arch)


@needs_ptxas
def test_null_ptx_assembles_every_kernel_of_the_tensor_programs(capsys) -> None:  # noqa: ANN001
    from .test_gpu_render import programs, rendered_sources

    device = Device["NULL:PTX"]
    assert isinstance(device.compiler, PTXCompiler) and device.compiler.arch == ARCH
    sources = rendered_sources("PTX", capsys)
    assert len(sources) >= 8
    assert all(s.startswith("// ") and ".entry" in s for s in sources)
    assert Device["NULL:PTX:sm_90"].compiler.arch == "sm_90"
    for program in programs("NULL:PTX:sm_90"):
        program.realize()


@needs_ptxas
def test_the_ptxas_check_is_not_vacuous() -> None:
    """A renderer bug (an f32 register where the instruction wants a 64-bit integer) is an assembler error."""
    source = render(scaled_grid(4, 4))
    broken = source.replace("ld.global.f32", "ld.global.u64", 1)
    with pytest.raises(CompileError, match="ptxas"):
        assemble(broken)


def test_ptx_spells_the_edge_case_rules() -> None:
    """The instructions behind EDGE_CASES where PTX differs from the table (see tg.codegen.render.ptx)."""
    f32, i32, u8 = (render(ops_kernel(d)) for d in (dtypes.float32, dtypes.int32, dtypes.uint8))
    assert "fma.rn.f32" in f32 and "add.rn.f32" in f32 and "mul.rn.f32" in f32  # no contraction, MULACC fused
    assert "testp.notanumber.f32" in f32  # max keeps NaN
    assert "setp.neu.f32" in f32 and "setp.lt.f32" in f32  # NaN != x is true, NaN < x false
    assert "div.s32" in i32 and "selp.s32" in i32 and "setp.eq.s32" in i32  # x / 0 and INT_MIN / -1 are selected
    assert "shr.s32" in i32 and "selp.b32" in i32  # shifts past the width are 0, not PTX's clamped shift
    assert "cvt.u32.u8" in u8  # 8-bit results wrap
    casts = render(casts_kernel())
    assert "testp.finite.f32" in casts and "cvt.rzi.s64.f32" in casts  # float -> int: NaN and inf give 0


def test_float64_transcendentals_are_computed_in_float64() -> None:
    """Regression: float64 exp2/log2/sin/pow were refused (PTX's approximate instructions are f32 only); they are
    now software f64 (tg.codegen.render.ptx_f64), with no f32 instruction in between."""
    k = KernelBuilder()
    for op in TRANSCENDENTAL:
        operands = [k.input(dtypes.float64) for _ in range(2 if op is Ops.POW else 1)]
        k.output(UOp(op, dtypes.float64, tuple(operands)))
    source = render(k.kernel("transcendental_f64"))
    instructions = [line for line in source.splitlines() if line.startswith("\t") and not line.startswith("\t.reg")]
    assert not any(".f32" in line for line in instructions)
    assert "fma.rn.f64" in source


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of want's last place; equal specials (NaN and NaN, inf and inf, signed zeros) are 0."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
    finite = np.isfinite(got) & np.isfinite(want)
    error = np.full(got.shape, np.inf)
    error[finite] = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]))
    error[same] = 0.0
    return error


# float64 exp2, log2, sin and pow are software on PTX, within this many ulps of the correctly rounded result
F64_ULP_BOUND = 2


def assert_within_ulps(got: np.ndarray, want: np.ndarray, x: np.ndarray, bound: float = F64_ULP_BOUND) -> None:
    error = ulp_error(got, want)
    if error.size == 0:
        return
    worst = int(np.argmax(error))
    assert error.max() <= bound, f"{error.max()} ulps at {x[worst]!r}: got {got[worst]!r}, want {want[worst]!r}"


def test_ptx_launch_matches_the_gpu_languages() -> None:
    linear = lower_kernel(with_opts(scaled_grid(12, 16), (Opt(OptOps.LOCAL, 1, 4),)), CodegenFlags(has_local=True))
    kernel = PTXRenderer(ARCH).render(linear)
    # 12 rows x 4 groups of 4 columns: one thread per output element, the LOCAL threads in dimension 0
    assert (kernel.global_size, kernel.local_size) == ((1, 4, 12), (4, 1, 1))
    assert "%ctaid.z" in kernel.src and "%ctaid.y" in kernel.src and "%tid.x" in kernel.src
    assert ".reqntid 4, 1, 1" in kernel.src


@needs_nvcc
@pytest.mark.slow
def test_cuda_c_compiles_with_nvcc(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    """The CUDA renderer's source through NVIDIA's own compiler (device code only, to PTX)."""
    from .test_gpu_render import group_reduction_sources, rendered_sources

    sources = [*rendered_sources("CUDA", capsys), group_reduction_sources()["CUDA"]]
    paths = [tmp_path / f"kernel{i}.cu" for i in range(len(sources))]
    for path, source in zip(paths, sources, strict=True):
        path.write_text(source)
    command = [NVCC, f"-arch={ARCH}", "-ptx", "--output-directory", str(tmp_path), *map(str, paths)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)  # one nvcc for all: faster
    assert result.returncode == 0, result.stderr
    assert len(sources) >= 9 and all(path.with_suffix(".ptx").exists() for path in paths)


# ---------------------------------------------------------------------------------------------- semantics
# The rendered PTX runs on tests/backends/ptx_interpreter.py (the PTX ISA's semantics, no GPU) and must compute what
# the PYTHON emulator computes on the same linear program, or numpy, or the edge-case table.


def run_ptx(linear: UOp, arrays: list[np.ndarray]) -> list[np.ndarray]:
    kernel = PTXRenderer(ARCH).render(linear)
    buffers = [bytearray(np.ascontiguousarray(a).tobytes()) for a in arrays]
    launch(kernel.src, buffers, kernel.global_size, kernel.local_size)
    return [np.frombuffer(b, a.dtype) for a, b in zip(arrays, buffers, strict=True)]


def run_emulator(linear: UOp, arrays: list[np.ndarray]) -> list[np.ndarray]:
    emulated = PythonRenderer().render(linear)
    buffers = [bytearray(np.ascontiguousarray(a).tobytes()) for a in arrays]
    load_function(emulated.src, emulated.name)(*(memoryview(b) for b in buffers), 0)
    return [np.frombuffer(b, a.dtype) for a, b in zip(arrays, buffers, strict=True)]


def lowered(ast: UOp, opts: tuple[Opt, ...] | None = None) -> UOp:
    ast = ast if opts is None else with_opts(ast, opts)
    return lower_kernel(ast, CodegenFlags(noopt=opts is None, has_local=True))


def edge_case_mismatches(results: list) -> list[tuple]:
    """The rows of the edge-case table whose result (the first output of each row's slots) is not the expected one."""
    position, wrong = 0, []
    for name, _, dtype, operands, expected in ROWS:
        got = results[position][0].item()
        if not same(got, expected):
            wrong.append((name, dtype, operands, got, expected))
        position += 1 + len(operands)
    return wrong


def test_ptx_computes_the_edge_case_table() -> None:
    ast, arrays = edge_case_kernel()
    results = run_ptx(lowered(ast), arrays)
    wrong = edge_case_mismatches(results)
    assert not wrong, wrong


SPECIAL_FLOATS = (0.0, -0.0, 1.0, -1.5, 2.5, math.inf, -math.inf, math.nan, 1e-3, 65504.0, 3.0e38)


def sample(
    dtype: DType, count: int, rng: np.random.Generator, specials: tuple[float, ...] = SPECIAL_FLOATS
) -> np.ndarray:
    """Inputs for `dtype`: ints over the whole range (0 and -1 included), floats mixed with the special values."""
    if dtype is dtypes.bool:
        return rng.random(count) < 0.5
    numpy_dtype = to_numpy(dtype)
    if dtype in INTS:
        info = np.iinfo(numpy_dtype)
        values = rng.integers(info.min, info.max, count, endpoint=True, dtype=numpy_dtype)
        values[: min(count, 3)] = np.array([0, 1, info.max], numpy_dtype)[: min(count, 3)]
        return values
    values = rng.standard_normal(count) * 10
    special = rng.random(count) < 0.4
    values[special] = rng.choice(specials, int(special.sum()))
    with np.errstate(over="ignore"):  # 3e38 is inf in float16, as intended
        return values.astype(numpy_dtype)


def inputs_for(ast: UOp, rng: np.random.Generator, specials: tuple[float, ...] = SPECIAL_FLOATS) -> list[np.ndarray]:
    params = sorted({u.arg.slot: u for u in ast.toposort() if u.op is Ops.PARAM}.items())
    return [sample(p.ptrdtype.base, 1, rng, specials) for _, p in params]


def outputs(ast: UOp) -> dict[int, Ops]:
    """Output slot -> the op stored there."""
    return {s.src[0].src[0].arg.slot: s.src[1].op for s in ast.src}


def assert_same(got: np.ndarray, expected: np.ndarray, message: str) -> None:
    """Equal values, NaN equal to NaN (whatever its payload), -0.0 unequal to 0.0."""
    if got.dtype.kind == "V" or str(got.dtype) == "bfloat16":
        got, expected = got.astype(np.float32), expected.astype(np.float32)
    np.testing.assert_array_equal(got, expected, err_msg=message, strict=True)
    if got.dtype.kind == "f":
        assert (np.signbit(got) == np.signbit(expected))[~np.isnan(got)].all(), message


# ex2/lg2 compute in f32 and pow in several f32 steps: equal to the emulator's double-then-round result for float32
# here (the interpreter computes the .approx instructions exactly), not for the narrower floats or pow; sin first
# reduces its argument in f32, accurate to a few ulps of a turn up to about 1e5 (beyond it, only in [-1, 1])
INEXACT = {Ops.POW: 1e-5, Ops.EXP2: 1e-2, Ops.LOG2: 1e-2, Ops.SIN: 1e-2}
SIN_REDUCED_UP_TO = 1e5


def check_sin(got: np.ndarray, expected: np.ndarray, x: np.ndarray, message: str) -> None:
    got, expected, x = (a.astype(np.float64) for a in (got, expected, x))
    near = np.abs(x) <= SIN_REDUCED_UP_TO
    np.testing.assert_allclose(got[near], expected[near], atol=4e-3 if x.dtype != np.float32 else 2e-5, err_msg=message)
    assert np.all((np.abs(got[~near]) <= 1) | np.isnan(got[~near])), message


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_ptx_computes_every_op_as_the_emulator_does(dtype: DType) -> None:
    ast = ops_kernel(dtype)
    linear = lowered(ast)
    for seed in range(3):
        arrays = inputs_for(ast, np.random.default_rng(seed))
        for slot in outputs(ast):
            arrays[slot] = np.zeros_like(arrays[slot])
        got, expected = run_ptx(linear, arrays), run_emulator(linear, arrays)
        for slot, op in outputs(ast).items():
            a, b = got[slot].astype(np.float64), expected[slot].astype(np.float64)
            if dtype is dtypes.float64 and op in TRANSCENDENTAL:
                operands = np.stack(arrays[slot - (2 if op is Ops.POW else 1) : slot], 1)  # the slots before
                assert_within_ulps(got[slot], expected[slot], operands)
            elif op is Ops.SIN:  # unary: its operand is the slot before
                check_sin(got[slot], expected[slot], arrays[slot - 1], f"sin {dtype} {arrays[slot - 1]}")
            elif op in INEXACT and (op is Ops.POW or dtype is not dtypes.float32):
                np.testing.assert_allclose(a, b, rtol=INEXACT[op], atol=1e-6, err_msg=f"{op} {dtype} {arrays}")
            else:
                assert_same(got[slot], expected[slot], f"{op} {dtype} seed {seed}")


# A float beyond int64 (3e38) converts to INT64_MIN on the CPU backends and on PTX, while the emulator wraps the
# exact integer: the backends agree with the emulator only inside int64's range, so the casts stay inside it.
CAST_FLOATS = tuple(v for v in SPECIAL_FLOATS if not abs(v) > 2.0**63 or math.isinf(v))


@pytest.mark.parametrize("kernel", [casts_kernel, bitcasts_kernel])
def test_ptx_casts_as_the_emulator_does(kernel) -> None:  # noqa: ANN001
    ast = kernel()
    linear = lowered(ast)
    for seed in range(4):
        arrays = inputs_for(ast, np.random.default_rng(seed), CAST_FLOATS)
        for slot in outputs(ast):
            arrays[slot] = np.zeros_like(arrays[slot])
        for slot, (got, expected) in enumerate(zip(run_ptx(linear, arrays), run_emulator(linear, arrays), strict=True)):
            assert_same(got, expected, f"slot {slot} seed {seed}: {arrays[slot - 1]}")


@pytest.mark.parametrize("opts", REDUCE_OPTS)
def test_ptx_reductions_with_locals_and_groups_match_numpy(opts) -> None:  # noqa: ANN001
    a = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    out, _ = run_ptx(lowered(row_sums(8, 64), opts), [np.zeros(8, np.float32), a.reshape(-1)])
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opts", GRID_OPTS)
def test_ptx_grid_kernels_match_numpy(opts) -> None:  # noqa: ANN001
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((12, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    out, _, _ = run_ptx(lowered(scaled_grid(12, 16), opts), [np.zeros(192, np.float32), a.reshape(-1), b])
    np.testing.assert_array_equal(out.reshape(12, 16), (a * np.float32(3) + b))


def test_the_interpreter_catches_a_wrong_instruction() -> None:
    """Not vacuous: an ordered != (NaN != NaN false) instead of the unordered one changes the result."""
    k = KernelBuilder()
    k.output(UOp(Ops.CMPNE, dtypes.bool, (k.input(dtypes.float32), k.input(dtypes.float32))))
    kernel = PTXRenderer(ARCH).render(lowered(k.kernel("nan_compare")))
    arrays = [np.array([np.nan], np.float32), np.array([np.nan], np.float32), np.zeros(1, np.bool_)]
    for source, expected in ((kernel.src, True), (kernel.src.replace("setp.neu.f32", "setp.ne.f32"), False)):
        buffers = [bytearray(a.tobytes()) for a in arrays]
        launch(source, buffers, kernel.global_size, kernel.local_size)
        assert bool(buffers[2][0]) is expected


def test_half_multiply_add_rounds_once() -> None:
    """Regression: a float16 MULACC computed as an f32 fma and then rounded to half rounds twice; here the product
    1.6953125 * 1.625 = 2.7548828125 is a tie between two halves, and the tiny addend decides it upward."""
    k = KernelBuilder()
    k.output(UOp(Ops.MULACC, dtypes.float16, tuple(k.input(dtypes.float16) for _ in range(3))))
    arrays = [np.array([v], np.float16) for v in (1.6953125, 1.625, 2.0**-23)] + [np.zeros(1, np.float16)]
    got = run_ptx(lowered(k.kernel("half_fma")), arrays)[3][0]
    assert got == np.float16(2.755859375) == run_emulator(lowered(k.kernel("half_fma")), arrays)[3][0]


def test_without_ptxas_null_ptx_renders_source_only(monkeypatch) -> None:  # noqa: ANN001
    """A machine without the CUDA toolkit still renders every PTX kernel on NULL; asking for ptxas names it."""
    from tg.codegen.compiler import ptx as ptx_compiler
    from tg.hcq.devices.null import SourceOnlyCompiler, null_compiler

    monkeypatch.setattr(ptx_compiler, "find_ptxas", lambda: None)
    assert isinstance(null_compiler("PTX", "sm_80"), SourceOnlyCompiler)
    with pytest.raises(FileNotFoundError, match="install the CUDA toolkit"):
        PTXCompiler("sm_80")


# ---------------------------------------------------------------------------------------------- CUDA C, run
# nvcc compiles the CUDA renderer's source to PTX, which the same interpreter runs: the CUDA C's semantics checked
# against the emulator and the edge-case table, not only its syntax. `-fmad=false`: by default nvcc contracts
# a * b + c into an FMA (one rounding), which the emulator, the C path and the PTX renderer do only for MULACC.


def run_cuda(linear: UOp, arrays: list[np.ndarray], folder: Path) -> list[np.ndarray]:
    kernel = CUDARenderer(ARCH).render(linear)
    source, ptx = folder / f"{kernel.name}.cu", folder / f"{kernel.name}.ptx"
    source.write_text(kernel.src)
    command = [NVCC, f"-arch={ARCH}", "-fmad=false", "-ptx", "-o", str(ptx), str(source)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    buffers = [bytearray(np.ascontiguousarray(a).tobytes()) for a in arrays]
    launch(ptx.read_text(), buffers, kernel.global_size, kernel.local_size)
    return [np.frombuffer(b, a.dtype) for a, b in zip(arrays, buffers, strict=True)]


@needs_nvcc
def test_cuda_c_computes_the_edge_case_table(tmp_path: Path) -> None:
    ast, arrays = edge_case_kernel()
    results = run_cuda(lowered(ast), arrays, tmp_path)
    wrong = edge_case_mismatches(results)
    assert not wrong, wrong


@needs_nvcc
@pytest.mark.parametrize("kinds", [(dtypes.bool, *INTS), FLOATS], ids=["bool_and_ints", "floats"])
def test_cuda_c_computes_ops_as_the_emulator_does(kinds: tuple[DType, ...], tmp_path: Path) -> None:
    # nvcc builds float64 exp2/log2/sin/pow from libdevice, whose PTX uses vector moves the interpreter lacks
    ast = ops_kernel(*kinds, float64_transcendentals=False)
    linear = lowered(ast)
    arrays = inputs_for(ast, np.random.default_rng(7))
    for slot in outputs(ast):
        arrays[slot] = np.zeros_like(arrays[slot])
    got, expected = run_cuda(linear, arrays, tmp_path), run_emulator(linear, arrays)
    for slot, op in outputs(ast).items():
        if op in INEXACT:
            a, b = got[slot].astype(np.float64), expected[slot].astype(np.float64)
            np.testing.assert_allclose(a, b, rtol=INEXACT[op], atol=1e-6, err_msg=f"{op} slot {slot}")
        else:
            assert_same(got[slot], expected[slot], f"{op} slot {slot}")


@needs_nvcc
@pytest.mark.slow
def test_cuda_c_reductions_and_grids_match_numpy(tmp_path: Path) -> None:
    a = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    for opts in REDUCE_OPTS[1:4]:  # LOCAL; LOCAL and GROUP (shared memory, barriers); GROUPTOP and UPCAST
        out, _ = run_cuda(lowered(row_sums(8, 64), opts), [np.zeros(8, np.float32), a.reshape(-1)], tmp_path)
        np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    b, c = np.random.default_rng(5).standard_normal((2, 12, 16)).astype(np.float32)
    c = c[0]
    out, _, _ = run_cuda(lowered(scaled_grid(12, 16), GRID_OPTS[2]), [np.zeros(192, np.float32), b.reshape(-1), c],
                         tmp_path)  # fmt: skip
    np.testing.assert_array_equal(out.reshape(12, 16), b * np.float32(3) + c)


@needs_nvcc
@pytest.mark.parametrize(
    "ast", [casts_kernel(), bitcasts_kernel(without=(dtypes.bool, dtypes.bfloat16))], ids=["casts", "bitcasts"]
)
def test_cuda_c_casts_as_the_emulator_does(ast: UOp, tmp_path: Path) -> None:
    """(The C-style GPU languages have no bit cast of bool or bfloat16.)"""
    linear = lowered(ast)
    arrays = inputs_for(ast, np.random.default_rng(8), CAST_FLOATS)
    for slot in outputs(ast):
        arrays[slot] = np.zeros_like(arrays[slot])
    for slot, (got, expected) in enumerate(zip(run_cuda(linear, arrays, tmp_path), run_emulator(linear, arrays),
                                               strict=True)):  # fmt: skip
        assert_same(got, expected, f"slot {slot}: {arrays[slot - 1]}")


@pytest.mark.parametrize("local_size", [(4,), (4, 2)])
def test_gated_store_with_alu_writes_only_the_gated_in_threads(local_size: tuple[int, ...]) -> None:
    """The spec's TestRendererFailures.test_gated_store_with_alu[_2d]: store 1 into a[lidx0 (+ lidx1 * 4)] gated
    by lidx0 != 0 (and lidx1 != 0) on LOCAL threads: only the gated-in lanes are written."""
    size = int(np.prod(local_size))
    out = UOp.param(0, dtypes.int32, size)
    ids = [UOp.range(n, axis, AxisType.LOCAL) for axis, n in enumerate(local_size)]
    position = ids[0] if len(ids) == 1 else ids[0] + ids[1] * 4
    gate = ids[0].ne(0) if len(ids) == 1 else ids[0].ne(0).alu(Ops.AND, ids[1].ne(0))
    ast = UOp.sink(out.index(position, gate).store(UOp.const(1, dtypes.int32)), arg=KernelInfo("gated_store"))
    linear = lowered(ast)
    kernel = PTXRenderer(ARCH).render(linear)
    assert np.prod(kernel.local_size) == size and kernel.global_size == (1, 1, 1)
    (got,) = run_ptx(linear, [np.zeros(size, np.int32)])
    expected = np.array([0, 1, 1, 1]) if len(ids) == 1 else np.array([0, 0, 0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(run_emulator(linear, [np.zeros(size, np.int32)])[0], expected)


# ---------------------------------------------------------------------------------------------- end to end
launches: list[str] = []  # the kernels the interpreter ran in the current test


@pytest.fixture
def null_ptx_runs_on_the_interpreter(monkeypatch) -> str:  # noqa: ANN001
    """`NULL:PTX:sm_89` with real host memory whose programs run on the PTX interpreter: Tensor programs then go
    through the whole pipeline (schedule, opts with LOCAL/GROUP, PTX) and compute values numpy can check."""
    from tg.hcq.devices import null
    from tg.hcq.memory import HCQBuffer

    launches.clear()

    def alloc(self, size: int, options: object) -> HCQBuffer:  # noqa: ANN001
        return HCQBuffer(0, size, view=memoryview(bytearray(size)), owner=self.device)

    def copyin(self, dest: HCQBuffer, src: memoryview) -> None:  # noqa: ANN001
        dest.view[: len(src)] = src.cast("B")

    def copyout(self, dest: memoryview, src: HCQBuffer) -> None:  # noqa: ANN001
        dest.cast("B")[:] = src.view[: dest.nbytes]

    def transfer(self, dest: HCQBuffer, src: HCQBuffer, size: int, src_dev: object, dest_dev: object) -> None:  # noqa: ANN001
        dest.view[:size] = src.view[:size]

    def run(self, bufs: tuple, call: object) -> float:  # noqa: ANN001
        source = self.lib.decode()
        local_size = tuple(int(n) for n in re.search(r"\.reqntid (\d+), (\d+), (\d+)", source).groups())
        launch(source, [b.view for b in bufs], tuple(call.global_size), local_size)
        launches.append(self.name)
        return null.NULL_PROGRAM_SECONDS

    for name, method in (("_alloc", alloc), ("_copyin", copyin), ("_copyout", copyout), ("_transfer", transfer)):
        monkeypatch.setattr(null.NullAllocator, name, method)
    monkeypatch.setattr(null.NullProgram, "run", run)
    monkeypatch.setattr(null, "null_compiler", lambda renderer, arch: null.SourceOnlyCompiler())  # PTX text
    return "NULL:PTX:sm_89"


def test_tensor_programs_compute_on_ptx(null_ptx_runs_on_the_interpreter: str) -> None:  # noqa: ANN001
    """The tensor programs of test_gpu_render.py (elementwise, reductions, matmul, casts, padding, where) through
    NULL:PTX, every kernel run on the interpreter, match the same programs on the CPU."""
    from .test_gpu_render import programs

    results = [p.numpy() for p in programs(null_ptx_runs_on_the_interpreter)]
    expected = [p.numpy() for p in programs("CPU")]
    assert type(Device[null_ptx_runs_on_the_interpreter].renderer) is PTXRenderer
    assert len(results) == 9 and len(launches) >= 8
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-6)


def test_sin_reduces_its_argument_to_where_the_hardware_is_accurate() -> None:
    """sin.approx.f32 is accurate in [-pi, pi] only: the argument first loses its whole turns, and what the rounding
    of the remainder dropped is added back. With sin.approx and cos.approx computed exactly (as the interpreter
    does), the result is within 2 ulps of sin(x): the reduction costs no more than that."""
    k = KernelBuilder()
    k.output(UOp(Ops.SIN, dtypes.float32, (k.input(dtypes.float32),)))
    linear = lowered(k.kernel("sin"))
    source = PTXRenderer(ARCH).render(linear).src
    assert source.index("cvt.rni.f32.f32") < source.index("sin.approx.f32")
    for x in (0.5, -3.0, 3.5, 100.25, 1000.5, -31415.9, 65504.0):
        (_, got) = run_ptx(linear, [np.array([x], np.float32), np.zeros(1, np.float32)])
        exact = math.sin(float(np.float32(x)))
        assert abs(float(got[0]) - exact) <= 2 * np.spacing(np.float32(abs(exact))), x  # 2 ulps of the result
    (_, got) = run_ptx(linear, [np.array([np.inf], np.float32), np.zeros(1, np.float32)])
    assert np.isnan(got[0])


def test_a_group_reduce_of_multiply_adds_combines_partials_by_adding() -> None:
    """Regression: a GROUP_REDUCE whose accumulator is updated by MULACC (a dot product) combined the threads'
    partials with MULACC's spelling and two operands: every GPU language failed to render it."""
    from tg.codegen.render.gpu import HIPRenderer, MetalRenderer, OpenCLRenderer
    from tg.codegen.render.wgsl import WGSLRenderer

    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    linear = lowered(row_dots(8, 64), (Opt(OptOps.GROUP, 0, 16),))
    assert any(u.op is Ops.MULACC for u in linear.src)
    for renderer in (OpenCLRenderer(), CUDARenderer(ARCH), HIPRenderer("gfx1100"), MetalRenderer(), WGSLRenderer()):
        assert "tg_group0" in renderer.render(linear).src
    out, _, _ = run_ptx(linear, [np.zeros(8, np.float32), a.reshape(-1), b])
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
