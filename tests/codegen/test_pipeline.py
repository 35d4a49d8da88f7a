"""The pipeline module: every stage listed in order, and `kernel_to_program` as a pure function of its arguments."""

from __future__ import annotations

import math
import subprocess
import sys

from tg.codegen import AxisType, KernelInfo, Ops, UOp, dtypes
from tg.codegen.flags import Context
from tg.codegen.opt import Opt, OptOps
from tg.codegen.pipeline import KERNEL_STAGES, CodegenFlags, kernel_to_program, lower_kernel, with_opts
from tg.codegen.render.c import CRenderer
from tg.codegen.render.python import PythonRenderer


def add_kernel(n: int) -> UOp:
    """out[i] = a[i] + b[i]"""
    out, a, b = (UOp.param(slot, dtypes.float32, n) for slot in range(3))
    i = UOp.range(n, 0)
    return UOp.sink(out.index(i).store(a.index(i).load() + b.index(i).load()), arg=KernelInfo(f"add_{n}"))


def matmul_kernel(n: int) -> UOp:
    out, a, b = (UOp.param(slot, dtypes.float32, n * n) for slot in range(3))
    i, j, r = UOp.range(n, 0), UOp.range(n, 1), UOp.range(n, 2, AxisType.REDUCE)
    total = (a.index(i * n + r).load() * b.index(r * n + j).load()).reduce(r, arg=Ops.ADD)
    return UOp.sink(out.index(i * n + j).store(total), arg=KernelInfo("matmul"))


def test_the_printed_pipeline_lists_every_stage_in_order() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "tg.codegen.pipeline"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    names = [line.split()[0] for line in printed if line.startswith("  ")]
    kernel_part = names[names.index("simplify") :]
    assert kernel_part == ["simplify", "apply", "upcast", "software", "linearize", "prefetch", "split", "render"]
    assert names[: names.index("simplify")] == [
        "inline", "layout", "split_big_reductions", "contiguous_buffers", "contiguous_copies", "find", "build",
        "assign", "order",
    ]  # fmt: skip
    assert [stage.name for stage in KERNEL_STAGES] == [
        "simplify indices", "apply opts", "upcast strided reductions", "software transcendentals", "linearize",
        "prefetch next blocks", "split across cores",
    ]  # fmt: skip


def test_kernel_to_program_depends_on_its_flags_argument_not_on_the_environment() -> None:
    ast = matmul_kernel(64)
    optimized = kernel_to_program(ast, CRenderer(), CodegenFlags(noopt=False))
    with Context(NOOPT=1):
        assert kernel_to_program(ast, CRenderer(), CodegenFlags(noopt=False)) == optimized
    plain = kernel_to_program(ast, CRenderer(), CodegenFlags(noopt=True))
    assert optimized.applied_opts and not plain.applied_opts
    assert plain.src != optimized.src


def test_the_renderers_register_budget_reaches_the_heuristics() -> None:
    ast = matmul_kernel(64)
    narrow = kernel_to_program(ast, CRenderer.for_machine(max_lanes=128), CodegenFlags())
    wide = kernel_to_program(ast, CRenderer.for_machine(max_lanes=256), CodegenFlags())
    upcasts = [sorted(o.arg for o in p.applied_opts if o.op.name == "UPCAST") for p in (narrow, wide)]
    assert upcasts == [[8, 16], [16, 16]]


def test_with_opts_applies_exactly_the_given_opts() -> None:
    opts = (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 4))
    program = kernel_to_program(with_opts(matmul_kernel(16), opts), CRenderer(), CodegenFlags(noopt=True))
    assert program.applied_opts == opts
    assert math.prod(program.loop_sizes) == 16**3  # the splits keep every iteration
    assert 4 in program.loop_sizes and 16 in program.loop_sizes


def test_estimates_count_value_alu_per_iteration_and_each_buffer_once() -> None:
    program = kernel_to_program(add_kernel(32), PythonRenderer(), CodegenFlags(noopt=True))
    assert program.ops == 32  # one float add per element
    assert program.mem == 3 * 32 * 4
    matmul = kernel_to_program(matmul_kernel(8), CRenderer(), CodegenFlags(noopt=True))
    assert matmul.ops == 2 * 8**3  # a multiply and an add per (i, j, r)
    assert matmul.loop_sizes == (8, 8, 8)


def test_lower_kernel_ends_in_a_linear_program() -> None:
    assert lower_kernel(add_kernel(4), CodegenFlags()).op is Ops.LINEAR


def test_the_pipeline_needs_no_device_or_runtime() -> None:
    code = (
        "import sys\n"
        "from tg.codegen import KernelInfo, UOp, dtypes\n"
        "from tg.codegen.pipeline import CodegenFlags, kernel_to_program\n"
        "from tg.codegen.render.c import CRenderer\n"
        "out, a = UOp.param(0, dtypes.float32, 8), UOp.param(1, dtypes.float32, 8)\n"
        "i = UOp.range(8, 0)\n"
        "ast = UOp.sink(out.index(i).store(a.index(i).load() * 2.0), arg=KernelInfo('double'))\n"
        "print(kernel_to_program(ast, CRenderer(), CodegenFlags()).name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('tg.') and not m.startswith(('tg.codegen', 'tg.env'))))\n"
    )  # tg.env: the flags registry, which every package reads
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["double", "[]"]


def test_the_schedule_listing_starts_with_the_graph_stages_the_scheduler_runs_layout_first() -> None:
    from tg.codegen.schedule.schedule import GRAPH_STAGES, SCHEDULE_STAGES

    assert [name for name, _ in SCHEDULE_STAGES[: len(GRAPH_STAGES)]] == [stage.name for stage in GRAPH_STAGES]
    # value calls are inlined before anything else, so that the layout policy sees the products in their bodies
    assert [stage.name for stage in GRAPH_STAGES[:2]] == ["inline calls", "layout policy"]


def test_a_replayed_kernel_is_split_across_cores_from_fewer_iterations_with_the_same_results() -> None:
    """CodegenFlags.replayed (a kernel compiled inside a capture, whose replays split launches at little cost): a
    kernel of REPLAYED_MIN_ITERATIONS iterations, which a plain launch runs in one call, is cut into calls across
    the cores; both compute the same values (only output loops are cut)."""
    import numpy as np

    from tg.codegen.lower.multicore import MULTICORE_MIN_ITERATIONS, REPLAYED_MIN_ITERATIONS
    from tg.hcq import Buffer, Device

    n = REPLAYED_MIN_ITERATIONS
    assert n < MULTICORE_MIN_ITERATIONS
    out, a = UOp.param(0, dtypes.float32, n), UOp.param(1, dtypes.float32, n)
    i = UOp.range(n, 0)
    ast = UOp.sink(out.index(i).store(a.index(i).load() * 3.0), arg=KernelInfo("E_replayed"))
    renderer = CRenderer.for_machine(cores=2)
    plain = kernel_to_program(ast, renderer, CodegenFlags())
    replayed = kernel_to_program(ast, renderer, CodegenFlags(replayed=True))
    assert plain.global_size == (1, 1, 1) and replayed.global_size[0] > 1
    smaller = UOp.sink(out.index(i).store(a.index(i).load() * 3.0), arg=KernelInfo("E_replayed_small"))
    smaller = smaller.substitute({i: UOp.range(n // 2, 0)})
    assert kernel_to_program(smaller, renderer, CodegenFlags(replayed=True)).global_size == (1, 1, 1)
    data = np.random.default_rng(3).random(n, np.float32)
    device = Device["CPU"]
    for source in (plain, replayed):
        buffers = [Buffer("CPU", n, dtypes.float32).ensure_allocated() for _ in range(2)]
        buffers[1].copyin(data.tobytes())
        program = device.runtime(source.name, device.compiler.compile(source.src))
        program(*(b.raw for b in buffers), global_size=source.global_size, wait=True)
        np.testing.assert_array_equal(np.frombuffer(buffers[0].as_buffer(), np.float32), data * np.float32(3.0))


def test_a_renderer_pickled_before_targets_existed_replays_with_its_cores_as_its_target() -> None:
    """Process-replay rows hold pickled renderers; one from before the Target kept `cores` and `max_lanes` itself."""
    import pickle

    old = CRenderer.__new__(CRenderer)
    old.__dict__.update({"cores": 2, "max_lanes": 256})  # the state such a renderer pickled
    revived = pickle.loads(pickle.dumps(old))
    assert (revived.target.cores, revived.target.max_lanes, revived.target.core_groups) == (2, 256, True)
    assert not hasattr(revived, "cores")
    ast = add_kernel(1 << 20)
    assert kernel_to_program(ast, revived, CodegenFlags()) == kernel_to_program(
        ast, CRenderer.for_machine(cores=2, max_lanes=256), CodegenFlags()
    )
