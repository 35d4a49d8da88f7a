"""The Opt mechanism: classic opts map onto SPLIT, every illegal opt is refused with a reason, opts are replayed
from KernelInfo.opts_to_apply and recorded in applied_opts, NOOPT=1 applies none, and upcast/unrolled axes
lower to unrolled code that the C compiler turns into SIMD multiply-adds."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from tg.codegen import AxisType, KernelInfo, UOp, dtypes
from tg.codegen.compiler.c import default_flags
from tg.codegen.flags import Context
from tg.codegen.lower import lower
from tg.codegen.opt import KernelOptError, KernelOptimizer, Opt, OptOps, apply_opts, hand_coded_optimizations
from tg.codegen.opt.heuristics import MAX_LANES, MAX_UPCAST_BODY_OPS, WIDE_MAX_LANES, body_ops
from tg.codegen.render.c import CRenderer
from tg.hcq.host import wide_vectors

L, R, U, UN = AxisType.LOOP, AxisType.REDUCE, AxisType.UPCAST, AxisType.UNROLL


def matmul_ast(n: int, k: int, m: int) -> UOp:
    out = UOp.param(0, dtypes.float32, n * m)
    a, b = UOp.param(1, dtypes.float32, n * k), UOp.param(2, dtypes.float32, k * m)
    i, j, r = UOp.range(n, 0), UOp.range(m, 1), UOp.range(k, 2, AxisType.REDUCE)
    total = (a.index(i * k + r).load() * b.index(r * m + j).load()).reduce(r)
    return UOp.sink(out.index(i * m + j).store(total), arg=KernelInfo("matmul"))


def applied(ast: UOp, *opts: Opt) -> KernelOptimizer:
    k = KernelOptimizer(ast)
    for opt in opts:
        k.apply_opt(opt)
    return k


def test_opt_repr_names_its_fields() -> None:
    assert repr(Opt(OptOps.UPCAST, 1, 4)) == "Opt(op=OptOps.UPCAST, axis=1, arg=4)"
    assert Opt(OptOps.SPLIT, 0, (4, AxisType.UPCAST)) == Opt(op=OptOps.SPLIT, axis=0, arg=(4, AxisType.UPCAST))


def test_axes_are_output_then_upcast_then_reduce_then_unroll() -> None:
    k = applied(matmul_ast(64, 64, 128), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UNROLL, 0, 4))
    assert k.full_shape == (64, 8, 16, 16, 4)
    assert k.axis_types == (L, L, U, R, UN)


def test_classic_unroll_counts_reduce_axes_and_equals_split() -> None:
    classic = applied(matmul_ast(64, 64, 64), Opt(OptOps.UNROLL, 0, 4))
    split = applied(matmul_ast(64, 64, 64), Opt(OptOps.SPLIT, 2, (4, AxisType.UNROLL)))
    assert classic.ast is split.ast


def test_upcast_sorts_before_reduce_so_a_later_split_sees_the_reduce_at_index_three() -> None:
    classic = applied(matmul_ast(64, 64, 128), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UNROLL, 0, 4))
    split = applied(
        matmul_ast(64, 64, 128), Opt(OptOps.SPLIT, 1, (16, AxisType.UPCAST)), Opt(OptOps.SPLIT, 3, (4, AxisType.UNROLL))
    )
    assert classic.ast is split.ast


def test_upcasting_a_whole_axis_removes_it() -> None:
    k = applied(matmul_ast(8, 32, 16), Opt(OptOps.UPCAST, 1, 0))
    assert k.full_shape == (8, 16, 32)
    assert k.axis_types == (L, U, R)


def test_grouptop_splits_off_the_outer_part() -> None:
    k = KernelOptimizer(matmul_ast(4, 12, 4))
    rng = k.rngs[2]
    kept, new = k.shift_to(rng, 3, AxisType.UNROLL, top=True)
    assert (kept.src[0].arg, new.src[0].arg) == (4, 3)


ILLEGAL = [
    (Opt(OptOps.UPCAST, 1, 5), "not a divisor"),
    (Opt(OptOps.UPCAST, 2, 4), "splits an output axis"),
    (Opt(OptOps.SPLIT, 0, (4, AxisType.UNROLL)), "splits a reduce axis"),
    (Opt(OptOps.UPCAST, 1, 32), "more than 16"),
    (Opt(OptOps.UPCAST, 7, 4), "does not exist"),
    (Opt(OptOps.UNROLL, 1, 4), "does not exist"),
    (Opt(OptOps.LOCAL, 0, 4), "needs local memory"),
    (Opt(OptOps.GROUP, 0, 4), "needs local memory"),
    (Opt(OptOps.PADTO, 0, 64), "already a multiple"),
    (Opt(OptOps.SWAP, 0, 2), "exchanges two output"),
    (Opt(OptOps.SPLIT, 0, 4), "SPLIT takes"),
    (Opt(OptOps.UPCAST, 0, 1), "split by 1"),
]


@pytest.mark.parametrize(("opt", "reason"), ILLEGAL, ids=[str(i) for i in range(len(ILLEGAL))])
def test_an_illegal_opt_is_refused_with_its_reason_and_changes_nothing(opt: Opt, reason: str) -> None:
    k = KernelOptimizer(matmul_ast(64, 64, 64))
    before = k.ast
    with pytest.raises(KernelOptError, match=reason):
        k.apply_opt(opt)
    assert k.ast is before and k.applied_opts == []


def test_padding_more_than_four_times_the_work_is_refused() -> None:
    with pytest.raises(KernelOptError, match="4x the work"):
        applied(matmul_ast(3, 5, 7), Opt(OptOps.PADTO, 0, 16))


def test_too_many_register_lanes_are_refused() -> None:
    with pytest.raises(KernelOptError, match="registers"):
        applied(matmul_ast(64, 64, 64), Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 1, 2))


def test_opts_to_apply_are_replayed_and_recorded_in_applied_opts() -> None:
    opts = (Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UNROLL, 0, 2))
    ast = matmul_ast(16, 16, 16)
    optimized = apply_opts(ast.replace(arg=dataclasses.replace(ast.arg, opts_to_apply=opts)))
    assert optimized.arg.applied_opts == opts
    assert optimized.arg.opts_to_apply is None
    assert apply_opts(optimized) is optimized  # already optimized: nothing more happens
    assert lower(ast.replace(arg=dataclasses.replace(ast.arg, opts_to_apply=opts))).arg.applied_opts == opts


def test_an_illegal_opt_in_opts_to_apply_raises() -> None:
    ast = matmul_ast(16, 16, 16)
    with pytest.raises(KernelOptError):
        apply_opts(ast.replace(arg=dataclasses.replace(ast.arg, opts_to_apply=(Opt(OptOps.UPCAST, 0, 3),))))


def test_noopt_applies_nothing_and_the_heuristics_otherwise_optimize_a_matmul() -> None:
    ast = matmul_ast(64, 64, 64)
    with Context(NOOPT=1):
        assert apply_opts(ast).arg.applied_opts == ()
        # (the linear program may still have lanes: long sums get partial sums in lowering, whatever the opts)
        assert not any(u.arg.axis_type is AxisType.UPCAST for u in apply_opts(ast).toposort() if u.op.name == "RANGE")
    opts = apply_opts(ast).arg.applied_opts
    assert {o.op for o in opts} >= {OptOps.UPCAST, OptOps.UNROLL}


def test_heuristics_upcast_the_contiguous_axis_widest_and_loop_over_column_strips() -> None:
    opts = hand_coded_optimizations(KernelOptimizer(matmul_ast(256, 256, 256)))
    assert opts[0] == Opt(OptOps.SWAP, 0, 1)  # j outside i: a strip of B stays in cache
    assert Opt(OptOps.UPCAST, 0, 16) in opts  # j (now axis 0): two 8-float vectors per row of accumulators
    k = applied(matmul_ast(256, 256, 256), *opts)
    lanes = [size for size, t in zip(k.full_shape, k.axis_types, strict=True) if t is AxisType.UPCAST]
    assert sorted(lanes) == [8, 16]


def test_heuristics_fill_the_wider_register_budget_of_avx512_with_a_16x16_tile() -> None:
    opts = hand_coded_optimizations(KernelOptimizer(matmul_ast(256, 256, 256)), max_lanes=256)
    k = applied(matmul_ast(256, 256, 256), *opts)
    lanes = [size for size, t in zip(k.full_shape, k.axis_types, strict=True) if t is AxisType.UPCAST]
    assert sorted(lanes) == [16, 16]


def conv_ast(channels: int, size: int, window: int, channels_innermost: bool = False) -> UOp:
    """out[co, y, x] = sum_{ci, ky, kx} image[ci, y + ky, x + kx] * weight[co, ci, ky, kx] (no padding); with
    `channels_innermost` the weights are stored as conv2d stores them, weight[ci, ky, kx, co]."""
    full = size + window - 1
    out = UOp.param(0, dtypes.float32, channels * size * size)
    image = UOp.param(1, dtypes.float32, channels * full * full)
    weight = UOp.param(2, dtypes.float32, channels * channels * window * window)
    co, y, x = UOp.range(channels, 0), UOp.range(size, 1), UOp.range(size, 2)
    ci, ky, kx = (UOp.range(n, axis, AxisType.REDUCE) for n, axis in ((channels, 3), (window, 4), (window, 5)))
    pixel = image.index(ci * full * full + (y + ky) * full + x + kx).load()
    if channels_innermost:
        tap = weight.index(((ci * window + ky) * window + kx) * channels + co).load()
    else:
        tap = weight.index(((co * channels + ci) * window + ky) * window + kx).load()
    total = (pixel * tap).reduce(ci, ky, kx)
    return UOp.sink(out.index((co * size + y) * size + x).store(total), arg=KernelInfo("conv"))


def test_heuristics_give_the_vector_lanes_to_output_channels_stored_contiguously() -> None:
    """conv2d stores the weights output channels innermost: 16 output channels are one AVX-512 vector of weights,
    each input pixel broadcast to them, while the 56-pixel rows (the store's contiguous axis) only divide into 8s.
    The pixels then get as many accumulator registers as fit: 14 (measured 165 against 90 GFLOP/s for 8 x 8 lanes,
    the 8x64x56x56 benchmark conv on one core)."""
    ast = conv_ast(64, 56, 3, channels_innermost=True)
    opts = hand_coded_optimizations(KernelOptimizer(ast), max_lanes=256)
    assert opts[:2] == [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 2, 14)], opts  # co by 16, then x by 14
    assert Opt(OptOps.UNROLL, 2, 0) in opts  # one row of the window: 16 * 14 * 3 copies of the body
    # weights stored torch's way: the row is the vector axis, as before
    assert hand_coded_optimizations(KernelOptimizer(conv_ast(64, 56, 3)), max_lanes=256)[0] == Opt(OptOps.UPCAST, 2, 8)


def test_heuristics_unroll_one_row_of_a_convolution_window() -> None:
    """The unrolled steps are written out inside the loop over lanes; one 3-wide row of the window measured faster
    under gcc than the whole 3x3 window (a body 3x as long)."""
    opts = hand_coded_optimizations(KernelOptimizer(conv_ast(16, 16, 3)))
    assert [o for o in opts if o.op is OptOps.UNROLL] == [Opt(OptOps.UNROLL, 2, 0)]  # kx, the innermost
    assert sum(o.op is OptOps.UPCAST for o in opts) == 2


def big_body_matvec_ast(rows: int, k: int, terms: int) -> UOp:
    """out[i] = sum_r sum_t a[i, r] * b[r] ** (t + 1): a broadcasting reduction whose body has about 2 * terms ops."""
    out, a, b = (
        UOp.param(0, dtypes.float32, rows),
        UOp.param(1, dtypes.float32, rows * k),
        UOp.param(2, dtypes.float32, k),
    )
    i, r = UOp.range(rows, 0), UOp.range(k, 1, AxisType.REDUCE)
    x, power, body = b.index(r).load(), None, None
    for _ in range(terms):
        power = x if power is None else power * x
        term = a.index(i * k + r).load() * power
        body = term if body is None else body + term
    return UOp.sink(out.index(i).store(body.reduce(r)), arg=KernelInfo("big"))


def test_heuristics_do_not_unroll_a_reduction_with_a_large_body() -> None:
    """A quantized matvec's step decodes a whole block (hundreds of ops): copies of it only slow down compiling."""
    small = hand_coded_optimizations(KernelOptimizer(big_body_matvec_ast(64, 64, 4)))
    assert any(o.op is OptOps.UNROLL for o in small)
    large = hand_coded_optimizations(KernelOptimizer(big_body_matvec_ast(64, 64, 300)))
    assert any(o.op is OptOps.UPCAST for o in large)
    assert not any(o.op is OptOps.UNROLL for o in large)


def lane_matvec_ast(groups: int, blocks: int, terms: int) -> UOp:
    """out[g, l] = sum_r sum_t a[g, r, l] * b[r] ** (t + 1): the lane matvecs' shape (16 rows interleaved, row
    groups outside), a body of about 3 * terms ops."""
    out = UOp.param(0, dtypes.float32, groups * 16)
    a, b = UOp.param(1, dtypes.float32, groups * blocks * 16), UOp.param(2, dtypes.float32, blocks)
    g, lane, r = UOp.range(groups, 0), UOp.range(16, 1), UOp.range(blocks, 2, AxisType.REDUCE)
    x, power, body = b.index(r).load(), None, None
    for _ in range(terms):
        power = x if power is None else power * x
        term = a.index((g * blocks + r) * 16 + lane).load() * power
        body = term if body is None else body + term
    return UOp.sink(out.index(g * 16 + lane).store(body.reduce(r)), arg=KernelInfo("lanes"))


@pytest.mark.parametrize("terms", [1, 60])
def test_upcasts_copy_a_large_body_into_few_lanes(terms: int) -> None:
    """Upcast lanes times the body's ops stay within MAX_UPCAST_BODY_OPS: a small body gets the 16x16 tile, a
    quantized block's decode (~200 ops) 16 x 4 (16 x 16 copies of it: gcc spilled, 7x slower)."""
    ast = lane_matvec_ast(192, 18, terms)
    k = applied(ast, *hand_coded_optimizations(KernelOptimizer(ast), max_lanes=WIDE_MAX_LANES))
    lanes = [size for size, t in zip(k.full_shape, k.axis_types, strict=True) if t is AxisType.UPCAST]
    body = body_ops(KernelOptimizer(ast))
    assert np.prod(lanes) * body <= MAX_UPCAST_BODY_OPS
    assert sorted(lanes) == ([16, 16] if terms == 1 else [4, 16])


def test_heuristics_leave_plain_elementwise_kernels_and_full_sums_alone() -> None:
    out, a = UOp.param(0, dtypes.float32, 64), UOp.param(1, dtypes.float32, 64 * 32)
    i, r = UOp.range(64, 0), UOp.range(32, 1, AxisType.REDUCE)
    row_sum = UOp.sink(out.index(i).store(a.index(i * 32 + r).load().reduce(r)), arg=KernelInfo("rows"))
    assert hand_coded_optimizations(KernelOptimizer(row_sum)) == []


def test_upcast_lanes_are_register_arrays_updated_by_one_loop_over_contiguous_lanes() -> None:
    """Issue 12: no pragma. The loop over the contiguous lanes (j) is the one register loop left; the other lanes
    and the unrolled reduce steps are written out inside it, so its body is big enough that gcc and clang vectorize
    it along j instead of unrolling it first."""
    ast = matmul_ast(64, 64, 64)
    opts = (Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4))
    src = CRenderer().render(lower(ast.replace(arg=dataclasses.replace(ast.arg, opts_to_apply=opts)))).src
    assert "float acc0[64];" in src
    assert "#" not in src
    around: list[str] = []  # the loop headers and written-out blocks around the current line
    for line in src.splitlines():
        text = line.strip()
        if text.startswith("for (") or text == "{":
            around.append(text)
        elif text.startswith("const long"):
            around[-1] += " " + text
        elif text == "}":
            around.pop()
        elif "__builtin_fmaf(" in text:  # the first multiply-add of the sum of products
            break
    loops = [int(header.split("< ")[1].split(";")[0]) for header in around if header.startswith("for (")]
    # output loops 64/4 and 64/16, the reduction 64/4, then the 16 contiguous lanes; inside them the first
    # unrolled step and the first lane of i, each a block binding its index to a constant
    assert sorted(loops[:2]) == [4, 16] and loops[2:] == [16, 16]
    assert around[-2:] == ["{ const long r5 = 0;", "{ const long r4 = 0;"]
    assert src.count("__builtin_fmaf(") == 4 * 4  # 4 unrolled steps x 4 lanes of i


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())


VECTOR_WIDTH = {"xmm": 4, "ymm": 8, "zmm": 16}  # float32 lanes per register


def vector_multiply_lanes(assembly: str) -> int:
    """Float32 products computed by packed multiplies (vmulps or fused vfmadd) in `assembly`, whatever the
    register width: AVX-512 machines use zmm under -march=native, AVX2 ones ymm."""
    lanes = 0
    for line in assembly.splitlines():
        words = line.split()
        if words and (words[0] == "vmulps" or words[0].startswith("vfmadd") and words[0].endswith("ps")):
            lanes += max((width for name, width in VECTOR_WIDTH.items() if f"%{name}" in line), default=0)
    return lanes


def test_counting_vector_lanes_counts_every_register_width() -> None:
    """Issue 12 item 7: on AVX-512 the compiler writes zmm; counting only ymm failed there."""
    assembly = "\tvmulps %zmm1, %zmm2, %zmm3\n\tvmulps %ymm1, %ymm2, %ymm3\n\tvmulss %xmm1, %xmm2, %xmm3\n"
    assert vector_multiply_lanes(assembly) == 16 + 8


def installed(compiler: str) -> str | None:
    """The path of `compiler` (for clang: clang or any versioned clang-14 .. clang-19), None when missing."""
    names = [compiler, *(f"clang-{v}" for v in range(19, 13, -1))] if compiler == "clang" else [compiler]
    return next((path for path in map(shutil.which, names) if path), None)


def packed_matmul_ast(n: int, k: int, m: int) -> UOp:
    """matmul_ast with the right operand packed into strips of 16 columns (tg.codegen.schedule.layout.packed_product):
    column j of row r at (j // 16) * 16k + 16r + j % 16."""
    out = UOp.param(0, dtypes.float32, n * m)
    a, b = UOp.param(1, dtypes.float32, n * k), UOp.param(2, dtypes.float32, k * m)
    i, strip, lane = UOp.range(n, 0), UOp.range(m // 16, 1), UOp.range(16, 3)
    r = UOp.range(k, 2, AxisType.REDUCE)
    total = (a.index(i * k + r).load() * b.index(strip * (16 * k) + r * 16 + lane).load()).reduce(r)
    return UOp.sink(out.index(i * m + strip * 16 + lane).store(total), arg=KernelInfo("packed_matmul"))


@pytest.mark.parametrize("layout", ["plain", "packed"])
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_the_c_compiler_maps_upcast_lanes_onto_vector_instructions(compiler: str, layout: str) -> None:
    """Packed: clang 19 turned `base + lane` into a bitwise or (base is a multiple of 16) and then loaded the lanes
    with gathers, at 0.65x gcc's speed, until the renderer wrote such positions as `(data + base)[lane]`."""
    found = installed(compiler)
    if found is None:
        pytest.skip(f"missing {compiler}: not installed (the other compiler's test runs)")
    if "avx2" not in _cpu_flags():
        pytest.skip("needs an x86 CPU with AVX2 (the count is of x86 vector registers)")
    ast = matmul_ast(64, 64, 64) if layout == "plain" else packed_matmul_ast(64, 64, 64)
    lanes = 1 if layout == "plain" else 2  # the axis of 16 contiguous columns
    opts = (Opt(OptOps.UPCAST, lanes, 16), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4))
    src = CRenderer().render(lower(ast.replace(arg=dataclasses.replace(ast.arg, opts_to_apply=opts)))).src
    flags = [f for f in default_flags(wide_vectors(), found) if f not in ("-shared", "-fPIC")]  # as the device compiles
    result = subprocess.run([found, *flags, "-S", "-x", "c", "-", "-o", "-"], input=src, capture_output=True, text=True)
    # 16x4 lanes, unrolled 4 times: 256 products per step of the reduction, all in vector registers, along the
    # contiguous lanes: no scalar multiply-add, no gather (clang 19 once vectorized across i with gathers: 10x slower)
    assert vector_multiply_lanes(result.stdout) >= 256, result.stdout[-2000:]
    instructions = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("\tv")}
    scalar_fma = {name for name in instructions if name.startswith("vfmadd") and name.endswith("ss")}
    assert not scalar_fma and not {name for name in instructions if name.startswith("vgather")}


def run_on_cpu(ast: UOp, opts: tuple[Opt, ...], out_shape: tuple[int, ...], *inputs: np.ndarray) -> np.ndarray:
    """Kernel `ast` with exactly `opts` on the CPU device; the output starts as NaN so a missed element shows."""
    from tg.codegen.dtype import from_numpy
    from tg.hcq import Buffer, Device

    dev = Device["CPU"]
    rendered = dev.renderer.render(
        lower(ast.replace(arg=dataclasses.replace(ast.arg, opts_to_apply=opts)), dev.renderer.target)
    )
    program = dev.runtime(rendered.name, dev.compiler.compile(rendered.src))
    buffers = []
    for array in (np.full(out_shape, np.nan, np.float32), *inputs):
        buf = Buffer("CPU", array.size, from_numpy(array.dtype)).ensure_allocated()
        buf.copyin(np.ascontiguousarray(array).tobytes())
        buffers.append(buf)
    program(*(buf.raw for buf in buffers), global_size=rendered.global_size, wait=True)
    return np.frombuffer(buffers[0].as_buffer(), np.float32).reshape(out_shape).copy()


def test_padto_makes_a_prime_sized_matmul_splittable_and_correct() -> None:
    n, k, m = 7, 11, 13
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, k), np.float32), rng.standard_normal((k, m), np.float32)
    opts = (Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PADTO, 2, 4), Opt(OptOps.UNROLL, 0, 4))
    np.testing.assert_allclose(run_on_cpu(matmul_ast(n, k, m), opts, (n, m), a, b), a @ b, rtol=1e-5, atol=1e-5)


# square sizes, a long reduction into a small output, the GPT-2 projections (128 tokens, dim 768), a long k
NO_BLOCK_MATMULS = [(256, 256, 256), (2048, 2048, 2048), (512, 2048, 512), (128, 768, 2304), (128, 3072, 768),
                    (128, 65536, 256)]  # fmt: skip


@pytest.mark.parametrize(("n", "k", "m"), NO_BLOCK_MATMULS)
@pytest.mark.parametrize("max_lanes", [MAX_LANES, WIDE_MAX_LANES])
def test_heuristics_never_block_a_reduction_although_block_is_legal(n: int, k: int, m: int, max_lanes: int) -> None:
    """The heuristics' "no k-blocking" rule (their docstring; measured with bench/bench_kblock.py): BLOCK on top of
    their tile was slower or a toss-up under gcc and clang, so it is a choice, not a refusal: BLOCK applies here."""
    opts = hand_coded_optimizations(KernelOptimizer(matmul_ast(n, k, m)), max_lanes=max_lanes)
    assert OptOps.UPCAST in {o.op for o in opts}
    assert OptOps.BLOCK not in {o.op for o in opts}
    applied(matmul_ast(n, k, m), Opt(OptOps.BLOCK, 0, k // 2), *opts)


def test_heuristics_never_block_a_convolution() -> None:
    opts = hand_coded_optimizations(KernelOptimizer(conv_ast(64, 56, 3)))
    assert OptOps.BLOCK not in {o.op for o in opts}
    applied(conv_ast(64, 56, 3), Opt(OptOps.BLOCK, 0, 32), *opts)


def test_block_on_the_heuristics_tile_keeps_the_bits() -> None:
    """What bench_kblock compares: the heuristics' opts with BLOCK in front compute each element in the same order,
    so the blocked kernel gives the same bits (and numpy's answer)."""
    n, k, m = 32, 512, 48
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((n, k), np.float32), rng.standard_normal((k, m), np.float32)
    hand = tuple(hand_coded_optimizations(KernelOptimizer(matmul_ast(n, k, m))))
    plain = run_on_cpu(matmul_ast(n, k, m), hand, (n, m), a, b)
    blocked = run_on_cpu(matmul_ast(n, k, m), (Opt(OptOps.BLOCK, 0, 128), *hand), (n, m), a, b)
    np.testing.assert_allclose(plain, a @ b, rtol=1e-4, atol=1e-4)
    assert np.array_equal(blocked, plain)


def test_heuristics_give_the_axis_next_to_a_vector_axis_the_largest_divisor_of_lanes() -> None:
    """9 query rows of a 576-wide projection: all 9 rows in registers next to the 16-lane vector of columns (the
    old choices 16, 8, 4, 3, 2 took 3: measured 0.11 ms against 0.06 ms on two cores)."""
    opts = hand_coded_optimizations(KernelOptimizer(matmul_ast(9, 576, 576)), max_lanes=256)
    assert opts[1:3] == [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 1, 9)], opts


def test_heuristics_without_a_vector_axis_keep_to_the_usual_lane_counts() -> None:
    """77 x 77 outputs (attention scores over 77 tokens): no axis makes vectors, and 11 lanes of scalars measured 2x
    slower than none, so neither axis is upcast."""
    opts = hand_coded_optimizations(KernelOptimizer(matmul_ast(77, 64, 77)), max_lanes=256)
    assert not [o for o in opts if o.op is OptOps.UPCAST], opts
