"""Renderers on hand-built kernels: the C renderer (compiled, run on the CPU device) and the Python emulator
must both agree with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import AxisType, KernelInfo, Ops, UOp, dtypes
from tg.codegen.compiler.c import CCompiler
from tg.codegen.dtype import from_numpy
from tg.codegen.flags import Context
from tg.codegen.lower import lower
from tg.codegen.lower.multicore import CALLS_PER_CORE, balanced_calls, finish_time, loop_iterations
from tg.codegen.render.base import KernelText, RenderedKernel
from tg.codegen.render.c import CRenderer, CStyleLanguage, literal, with_helpers
from tg.codegen.render.python import PythonRenderer
from tg.hcq import Buffer, Device

rng = np.random.default_rng(3)


def rendered_for(renderer, ast: UOp) -> RenderedKernel:  # noqa: ANN001
    """`ast` through the kernel stages for the renderer's Target (its cores cut big kernels), then rendered."""
    return renderer.render(lower(ast, renderer.target))


def run(ast: UOp, device: str, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
    """Lower and render `ast` with the device's renderer, compile it, run it on copies of the arrays."""
    dev = Device[device]
    rendered = rendered_for(dev.renderer, ast)
    program = dev.runtime(rendered.name, dev.compiler.compile(rendered.src))
    buffers = []
    for array in (out, *inputs):
        buf = Buffer(device, array.size, from_numpy(array.dtype)).ensure_allocated()
        buf.copyin(np.ascontiguousarray(array).tobytes())
        buffers.append(buf)
    program(*(b.raw for b in buffers), global_size=rendered.global_size, wait=True)
    return np.frombuffer(buffers[0].as_buffer(), out.dtype).reshape(out.shape)


def gated_sum_kernel(n: int, m: int) -> UOp:
    """out[i] = sum_j (j >= 1 ? a[i*m + j - 1] : 0) * b[j], a padded sum over rows."""
    out, a, b = UOp.param(0, dtypes.float32, n), UOp.param(1, dtypes.float32, n * m), UOp.param(2, dtypes.float32, m)
    i, j = UOp.range(n, 0), UOp.range(m, 1, AxisType.REDUCE)
    inside = UOp.const(0, dtypes.index) < j
    shifted = a.index(i * m + j - 1, inside).load(UOp.const(0.0, dtypes.float32))
    total = (shifted * b.index(j).load()).reduce(j, arg=Ops.ADD)
    return UOp.sink(out.index(i).store(total), arg=KernelInfo("gated_sum"))


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_gated_reduce_kernel_matches_numpy(device: str) -> None:
    n, m = 5, 7
    a, b = rng.random((n, m), np.float32), rng.random(m, np.float32)
    shifted = np.concatenate([np.zeros((n, 1), np.float32), a[:, :-1]], axis=1)
    got = run(gated_sum_kernel(n, m), device, np.zeros(n, np.float32), a, b)
    np.testing.assert_allclose(got, (shifted * b).sum(1), rtol=1e-6)


def int_kernel(n: int) -> UOp:
    """out[i] = max(a[i] // b[i], a[i] % b[i]) ^ (a[i] << 3): division by zero and overflow included."""
    out, a, b = (UOp.param(k, dtypes.int32, n) for k in range(3))
    i = UOp.range(n, 0)
    x, y = a.index(i).load(), b.index(i).load()
    return UOp.sink(out.index(i).store((x // y).maximum(x % y) ^ (x << 3)), arg=KernelInfo("ints"))


def test_c_and_python_agree_on_integer_edge_cases() -> None:
    a = np.array([7, -7, 7, -7, -(2**31), 2**31 - 1, 5, 0], np.int32)
    b = np.array([2, 2, -2, -2, -1, 0, 0, 3], np.int32)
    c_result = run(int_kernel(8), "CPU", np.zeros(8, np.int32), a, b)
    python_result = run(int_kernel(8), "PYTHON", np.zeros(8, np.int32), a, b)
    np.testing.assert_array_equal(c_result, python_result)
    assert c_result[0] == max(3, 1) ^ (7 << 3)


def test_big_kernels_are_split_across_cores_and_small_ones_are_not() -> None:
    def elementwise(n: int) -> UOp:
        out, a = UOp.param(0, dtypes.float32, n), UOp.param(1, dtypes.float32, n)
        i = UOp.range(n, 0)
        return UOp.sink(out.index(i).store(a.index(i).load() * 2.0), arg=KernelInfo(f"E_{n}"))

    assert rendered_for(CRenderer.for_machine(cores=4), elementwise(1 << 20)).global_size == (4 * CALLS_PER_CORE, 1, 1)
    assert rendered_for(CRenderer.for_machine(cores=4), elementwise(16)).global_size == (1, 1, 1)
    assert rendered_for(CRenderer.for_machine(cores=4), elementwise(1 << 16)).global_size == (
        4,
        1,
        1,
    )  # calls not too small
    a = rng.random(1 << 17, np.float32)
    np.testing.assert_array_equal(run(elementwise(1 << 17), "CPU", np.zeros_like(a), a), a * 2)


def three_short_sums_kernel(rows: int, width: int) -> UOp:
    """out[i] = sum_j a[i, j] + sum_k b[i, k] + sum_l c[i, l]: three reduce loops one after another in the rows'."""
    out = UOp.param(0, dtypes.float32, rows)
    sources = [UOp.param(n, dtypes.float32, rows * width) for n in (1, 2, 3)]
    i = UOp.range(rows, 0)
    sums = []
    for axis, source in enumerate(sources, start=1):
        j = UOp.range(width, axis, AxisType.REDUCE)
        sums.append(source.index(i * width + j).load().reduce(j, arg=Ops.ADD))
    return UOp.sink(out.index(i).store(sums[0] + sums[1] + sums[2]), arg=KernelInfo("r_three_sums"))


def test_loops_one_after_another_add_their_iterations_and_only_nested_loops_multiply() -> None:
    """Regression: the size estimate multiplied every loop of the program, so three 16-long sums in a row of 64 rows
    counted 64 * 16^3 = 262144 iterations and the kernel was cut into a call per core; it runs 3 * 64 * 16."""
    linear = lower(three_short_sums_kernel(64, 16))
    assert loop_iterations(linear) == 3 * 64 * 16
    assert CRenderer.for_machine(cores=4).render(linear).global_size == (1, 1, 1)
    a, b, c = (rng.random(64 * 16, np.float32) for _ in range(3))
    expected = (a.reshape(64, 16).sum(1) + b.reshape(64, 16).sum(1)) + c.reshape(64, 16).sum(1)
    np.testing.assert_allclose(
        run(three_short_sums_kernel(64, 16), "CPU", np.zeros(64, np.float32), a, b, c), expected, rtol=1e-6
    )


def scaled_rows_kernel(rows: int, columns: int) -> UOp:
    """out[i] = a[i] * sum_j b[j]: the sum is computed before the rows' loop (see Linearizer.hoist_reductions)."""
    out, a = UOp.param(0, dtypes.float32, rows), UOp.param(1, dtypes.float32, rows)
    b = UOp.param(2, dtypes.float32, columns)
    i, j = UOp.range(rows, 0), UOp.range(columns, 1, AxisType.REDUCE)
    total = b.index(j).load().reduce(j, arg=Ops.ADD)
    return UOp.sink(out.index(i).store(a.index(i).load() * total), arg=KernelInfo("r_rows"))


@pytest.mark.parametrize("device", ["CPU", "CPU:LLVM"])
def test_the_cores_split_the_output_loop_not_a_reduction_computed_before_it(device: str) -> None:
    """Regression: with the reduction's loop first in the program, the C and LLVM renderers cut that loop across
    the calls instead of the rows', so each call scaled every row by a part of the sum. Every call must compute
    the whole sum, then only its own rows."""
    from tg.codegen.render.llvmir import LLVMRenderer

    rows, columns = 1 << 17, 64  # big enough to be split across cores
    renderer = CRenderer.for_machine(cores=4) if device == "CPU" else LLVMRenderer.for_machine(cores=4)
    rendered = rendered_for(renderer, scaled_rows_kernel(rows, columns))
    assert rendered.global_size[0] > 1
    dev = Device[device]
    program = dev.runtime(rendered.name, dev.compiler.compile(rendered.src))
    a, b = rng.random(rows, np.float32), rng.random(columns, np.float32)
    buffers = []
    for array in (np.zeros(rows, np.float32), a, b):
        buffer = Buffer("CPU", array.size, dtypes.float32).ensure_allocated()
        buffer.copyin(array.tobytes())
        buffers.append(buffer)
    program(*(buffer.raw for buffer in buffers), global_size=rendered.global_size, wait=True)
    got = np.frombuffer(buffers[0].as_buffer(), np.float32)
    np.testing.assert_allclose(got, a * b.astype(np.float64).sum(), rtol=1e-5)


def test_generated_c_has_no_pragma() -> None:
    """Issue 12: gcc ignores `#pragma clang ...`, and vectorization must not hang on a pragma at all. The C has no
    preprocessor line; the compilers vectorize the one loop left over register lanes by themselves."""
    for kernel in (gated_sum_kernel(4, 4), gated_sum_kernel(16, 64), gated_sum_kernel(3, 1 << 12)):
        for noopt in (0, 1):
            with Context(NOOPT=noopt):
                src = CRenderer().render(lower(kernel)).src
            assert not [line for line in src.splitlines() if line.strip().startswith("#")], src


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(0.1, dtypes.float32), (-0.0, dtypes.float64), (float("inf"), dtypes.float32), (65504.0, dtypes.float16)],
)
def test_float_literals_are_exact(value: float, dtype) -> None:
    text = literal(value, dtype)
    assert "0x" in text or "inf" in text


def test_python_renderer_writes_a_readable_function() -> None:
    src = PythonRenderer().render(lower(gated_sum_kernel(2, 3))).src
    assert src.startswith("def gated_sum(raw0, raw1, raw2, core_id):")
    assert "for r0 in range(0, 2):" in src
    # the sum of products, fused, with the shared op semantics (tg.codegen.uop.alu.multiply_add, then to float32)
    assert "to_float(multiply_add(" in src


def test_python_emulator_raises_on_out_of_bounds_access() -> None:
    out, a = UOp.param(0, dtypes.float32, 4), UOp.param(1, dtypes.float32, 4)
    i = UOp.range(4, 0)
    ast = UOp.sink(out.index(i).store(a.index(i + 1).load()), arg=KernelInfo("oob"))
    with pytest.raises(IndexError, match="element 4"):
        run(ast, "PYTHON", np.zeros(4, np.float32), np.zeros(4, np.float32))


def row_sum_kernel(rows: int, length: int) -> UOp:
    out, a = UOp.param(0, dtypes.float32, rows), UOp.param(1, dtypes.float32, rows * length)
    i, j = UOp.range(rows, 0), UOp.range(length, 1, AxisType.REDUCE)
    return UOp.sink(out.index(i).store(a.index(i * length + j).load().reduce(j)), arg=KernelInfo("row_sum"))


def run_rendered(
    renderer: CRenderer, ast: UOp, out: np.ndarray, *inputs: np.ndarray, compiler: CCompiler | None = None
) -> np.ndarray:
    """`ast` rendered by `renderer`, compiled by `compiler` (the CPU device's by default), run on the CPU device on
    copies of the arrays."""
    dev = Device["CPU"]
    rendered = rendered_for(renderer, ast)
    program = dev.runtime(rendered.name, (compiler or dev.compiler).compile(rendered.src))
    buffers = []
    for array in (out, *inputs):
        buf = Buffer("CPU", array.size, from_numpy(array.dtype)).ensure_allocated()
        buf.copyin(np.ascontiguousarray(array).tobytes())
        buffers.append(buf)
    program(*(b.raw for b in buffers), global_size=rendered.global_size, wait=True)
    return np.frombuffer(buffers[0].as_buffer(), out.dtype).reshape(out.shape)


def test_long_sums_add_partial_sums_in_a_fixed_order_on_any_core_count() -> None:
    """Issue 12: lane k sums elements k, k+16, ... in order; the 16 lanes are then added in lane order. numpy's
    cumsum (sequential, float32) computes that order independently of our code."""
    rows, length = 64, 8192  # big enough to be split into up to CALLS_PER_CORE calls per core
    # calls whose last core finishes first (balanced_calls): 16 calls of 4 rows on 4 cores; on 3, 9 calls of 7 or 8
    # rows (3 per core, done after 22 rows; 12 calls of 5 or 6 rows would take 24)
    expected_calls = {1: 1, 3: 9, 4: 4 * CALLS_PER_CORE}
    a = (rng.random((rows, length), np.float32) * 1000).astype(np.float32)
    lanes = np.stack([np.cumsum(a[:, k::16], axis=1, dtype=np.float32)[:, -1] for k in range(16)], axis=1)
    expected = np.cumsum(lanes, axis=1, dtype=np.float32)[:, -1]
    results = {}
    for cores in (1, 3, 4):
        renderer = CRenderer.for_machine(cores=cores)
        assert rendered_for(renderer, row_sum_kernel(rows, length)).global_size[0] == expected_calls[cores]
        results[cores] = run_rendered(renderer, row_sum_kernel(rows, length), np.zeros(rows, np.float32), a)
    results["python"] = run(row_sum_kernel(rows, length), "PYTHON", np.zeros(rows, np.float32), a)
    for got in results.values():
        assert got.tobytes() == expected.tobytes()
    assert "float acc0[16];" in CRenderer().render(lower(row_sum_kernel(rows, length))).src


def test_a_sum_over_tiles_of_16_adds_partial_sums_per_lane() -> None:
    """A reduction over (tiles, 16) (a softmax over the key tiles of a KV cache) is short per tile but repeated:
    lane k adds element k of every tile in tile order, then the lanes add in lane order (numpy's sequential cumsum
    computes that order independently); one scalar chain over every element was 20x slower. Fewer than MIN_STEPS
    tiles keep one accumulator."""
    rows, tiles = 4, 5
    a = (rng.random((rows, tiles, 16), np.float32) * 1000).astype(np.float32)
    out, data = UOp.param(0, dtypes.float32, rows), UOp.param(1, dtypes.float32, rows * tiles * 16)
    i, t, lane = UOp.range(rows, 0), UOp.range(tiles, 1, AxisType.REDUCE), UOp.range(16, 2, AxisType.REDUCE)
    value = data.index(i * (tiles * 16) + t * 16 + lane).load()
    ast = UOp.sink(out.index(i).store(value.reduce(t, lane)), arg=KernelInfo("tile_sum"))
    lanes = np.cumsum(a, axis=1, dtype=np.float32)[:, -1]
    expected = np.cumsum(lanes, axis=1, dtype=np.float32)[:, -1]
    assert "float acc0[16];" in CRenderer().render(lower(ast)).src
    got = run_rendered(CRenderer(), ast, np.zeros(rows, np.float32), a)
    assert got.tobytes() == expected.tobytes()
    few = UOp.range(2, 1, AxisType.REDUCE)
    short = UOp.sink(out.index(i).store(data.index(i * 32 + few * 16 + lane).load().reduce(few, lane)))
    assert "acc0[1];" in CRenderer().render(lower(short)).src


def test_short_or_unsplittable_sums_keep_one_accumulator() -> None:
    for length in (48, 1000 + 1):
        src = CRenderer().render(lower(row_sum_kernel(2, length))).src
        assert "acc0[1];" in src and "acc1" not in src


class ThreadPerOutputC(CStyleLanguage):
    """A C-style GPU language in a few lines (issue 13 item 6): the outermost output loop becomes one thread per
    iteration (OpenCL's get_global_id); every spelling is CStyleLanguage's."""

    device = "GPU"
    buffer_qualifier = "__global "

    def open_loop(self, k: KernelText, rng: UOp, name: str) -> None:
        if "threads" not in k.abi and rng.arg.axis_type is AxisType.LOOP:
            k.abi["threads"] = rng
            k.line(f"long {name} = get_global_id(0); {{")  # the block keeps the walker's braces balanced
        else:
            super().open_loop(k, rng, name)

    def finish(self, k: KernelText, params: list[UOp]) -> RenderedKernel:
        body = "\n".join(k.lines)
        src = with_helpers(f"__kernel void {k.name}({', '.join(self.buffer_arguments(params))}) {{\n{body}\n}}\n")
        threads = k.abi.get("threads")
        return RenderedKernel(k.name, src, (threads.src[0].arg if threads is not None else 1, 1, 1))


def test_a_c_style_gpu_language_is_a_small_subclass() -> None:
    rendered = rendered_for(ThreadPerOutputC(), row_sum_kernel(8, 256))
    assert rendered.global_size == (8, 1, 1)
    assert rendered.src.startswith("__kernel void row_sum(__global float* restrict data0, __global float* restrict")
    assert "long r0 = get_global_id(0);" in rendered.src and "for (long r0" not in rendered.src
    assert "for (long r1 = 0; r1 < 16; r1++)" in rendered.src  # the reduction (in steps of 16 partial sums) stays
    assert rendered.src.count("{") == rendered.src.count("}")


def symbolic_sum_kernel(rows: UOp, cols: int) -> UOp:
    """out[i] = sum_j a[i*cols + j] over i < rows, a variable: the loop's trip count is an argument."""
    out, a = UOp.param(0, dtypes.float32, int(rows.vmax)), UOp.param(1, dtypes.float32, int(rows.vmax) * cols)
    i, j = UOp.range(rows, 0), UOp.range(cols, 1, AxisType.REDUCE)
    total = a.index(i * cols + j).load().reduce(j, arg=Ops.ADD)
    return UOp.sink(out.index(i).store(total), arg=KernelInfo("sym_sum"))


@pytest.mark.parametrize("renderer", [CRenderer.for_machine(cores=4), PythonRenderer()], ids=["C", "PYTHON"])
def test_a_variable_is_an_int_argument_after_the_buffers(renderer) -> None:  # noqa: ANN001
    src = rendered_for(renderer, symbolic_sum_kernel(UOp.variable("rows", 1, 64), 8)).src
    signature = next(line for line in src.splitlines() if line.startswith(("def ", "void ")))
    buffer_1 = "raw1" if renderer.device == "PYTHON" else "data1"
    assert signature.index(buffer_1) < signature.index("var_rows") < signature.index("core_id")


def test_calls_are_cut_so_that_the_cores_finish_together() -> None:
    """Issue 23: twelve attention heads in 8 calls (of 1 and 2 heads) on 2 cores that take calls as they come free
    finish after 7 heads' time, 6 calls of 2 heads after 6. The renderer cuts such a loop into 6 calls."""
    assert finish_time(12, 8, cores=2) == 7
    assert finish_time(12, 6, cores=2) == 6
    assert balanced_calls(12, cores=2, most=8) == 6
    assert balanced_calls(64, cores=4, most=16) == 16  # even cuts keep the most calls
    assert balanced_calls(3, cores=2, most=8) == 3  # never more calls than iterations
    rows, length = 12, 1 << 15  # work enough for 8 calls, which the old cut made
    rendered = rendered_for(CRenderer.for_machine(cores=2), row_sum_kernel(rows, length))
    assert rendered.global_size[0] == 6
    a = rng.random((rows, length), np.float32)
    got = run_rendered(CRenderer.for_machine(cores=2), row_sum_kernel(rows, length), np.zeros(rows, np.float32), a)
    np.testing.assert_allclose(got, a.sum(axis=1, dtype=np.float64), rtol=1e-5)


def test_a_big_symbolic_loop_launches_calls_for_the_work_of_each_launch() -> None:
    """One call per MULTICORE_MIN_ITERATIONS / 2 iterations of this launch (a short one: one call, not a call per
    few rows), up to CALLS_PER_CORE per core."""
    from tg.codegen import sym_infer
    from tg.codegen.lower.multicore import CALLS_PER_CORE, MULTICORE_MIN_ITERATIONS

    rows = UOp.variable("rows", 1, 1 << 20)
    size = rendered_for(CRenderer.for_machine(cores=4), symbolic_sum_kernel(rows, 1)).global_size[0]
    assert isinstance(size, UOp)
    half = MULTICORE_MIN_ITERATIONS // 2
    counts = (1, 3, half - 1, half, 3 * half, 1 << 20)
    assert [sym_infer(size, {"rows": k}) for k in counts] == [1, 1, 1, 1, 3, 4 * CALLS_PER_CORE]


def test_a_symbolic_kernel_split_across_calls_writes_every_row() -> None:
    """The C program's own count of calls must equal the launch size the runtime resolves: a call more or fewer
    would leave rows unwritten."""
    from tg.codegen import sym_infer

    rows = UOp.variable("rows", 1, 1 << 17)
    dev = Device["CPU"]
    rendered = rendered_for(CRenderer.for_machine(cores=4), symbolic_sum_kernel(rows, 1))
    program = dev.runtime(rendered.name, dev.compiler.compile(rendered.src))
    a = rng.random(1 << 17, np.float32)
    out = Buffer("CPU", 1 << 17, dtypes.float32).ensure_allocated()
    inp = Buffer("CPU", 1 << 17, dtypes.float32).ensure_allocated()
    inp.copyin(a.tobytes())
    for k, calls in ((100, 1), (70000, 2), (1 << 17, 4)):  # at most 4 calls: the kernel's size at its largest
        assert sym_infer(rendered.global_size[0], {"rows": k}) == calls
        out.copyin(np.zeros(1 << 17, np.float32).tobytes())
        program(out.raw, inp.raw, global_size=(calls, 1, 1), vals=(k,), wait=True)
        got = np.frombuffer(out.as_buffer(), np.float32)
        np.testing.assert_array_equal(got[:k], a[:k])
        assert (got[k:] == 0).all()


def test_c_and_llvm_render_one_multicore_split() -> None:
    """Issue 29 item 3: the split across cores is IR (tg.codegen.lower.multicore), so C and LLVM launch the same calls
    for fixed and symbolic trip counts, and their sources read the call's index from `core_id`."""
    from tg.codegen import sym_infer
    from tg.codegen.render.llvmir import LLVMRenderer

    rows = UOp.variable("rows", 1, 1 << 20)
    c_size = rendered_for(CRenderer.for_machine(cores=4), symbolic_sum_kernel(rows, 1)).global_size[0]
    llvm_size = rendered_for(LLVMRenderer.for_machine(cores=4), symbolic_sum_kernel(rows, 1)).global_size[0]
    assert isinstance(llvm_size, UOp)  # not a fixed 4, whose extra calls would run empty chunks
    counts = (1, 3, 4, 1000, 1 << 15, 1 << 20)
    assert [sym_infer(llvm_size, {"rows": k}) for k in counts] == [sym_infer(c_size, {"rows": k}) for k in counts]
    for cores, calls in ((2, 6), (4, 4 * CALLS_PER_CORE)):
        for renderer in (CRenderer.for_machine(cores=cores), LLVMRenderer.for_machine(cores=cores)):
            rendered = rendered_for(renderer, row_sum_kernel(12 if cores == 2 else 64, 1 << 15))
            assert rendered.global_size[0] == calls
            assert "core_id" in rendered.src


def test_the_split_is_a_stage_of_the_linear_program() -> None:
    """The stage cuts the first output loop: a SPECIAL core_id over the calls, the loop over its chunk, and the old
    loop variable read as chunk + start; one core leaves the program as it was."""
    from tg.codegen.lower.multicore import launch_calls, split_across_cores

    linear = lower(row_sum_kernel(64, 8192))
    assert split_across_cores(linear, 1) is linear
    split = split_across_cores(linear, 4)
    specials = [u for u in split.src if u.op is Ops.SPECIAL]
    assert [u.arg for u in specials] == ["core_id"] and launch_calls(split) == 4 * CALLS_PER_CORE
    loop = next(u for u in split.src if u.op is Ops.RANGE)
    assert specials[0] in loop.src[0].toposort()  # the chunk's length depends on the call


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_symbolic_kernel_matches_numpy_for_every_value(device: str) -> None:
    rows = UOp.variable("rows", 1, 6)
    ast = symbolic_sum_kernel(rows, 8)
    dev = Device[device]
    rendered = rendered_for(dev.renderer, ast)
    program = dev.runtime(rendered.name, dev.compiler.compile(rendered.src))
    a = rng.random((6, 8), np.float32)
    out = Buffer(device, 6, dtypes.float32).ensure_allocated()
    inp = Buffer(device, 48, dtypes.float32).ensure_allocated()
    inp.copyin(a.tobytes())
    for k in (1, 4, 6):
        out.copyin(np.zeros(6, np.float32).tobytes())
        program(out.raw, inp.raw, global_size=rendered.global_size, vals=(k,), wait=True)
        got = np.frombuffer(out.as_buffer(), np.float32)
        np.testing.assert_allclose(got[:k], a[:k].sum(1), rtol=1e-6)
        assert (got[k:] == 0).all()  # rows past the variable's value are not written


def test_gpu_languages_refuse_kernels_with_variables() -> None:
    from tg.codegen.render.gpu import CUDARenderer, OpenCLRenderer

    ast = symbolic_sum_kernel(UOp.variable("rows", 1, 64), 8)
    for renderer in (OpenCLRenderer(), CUDARenderer()):
        with pytest.raises(NotImplementedError, match="cannot render a kernel with variables"):
            rendered_for(renderer, ast)
