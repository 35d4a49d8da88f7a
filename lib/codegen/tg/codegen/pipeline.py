"""The code-generation pipeline in one place: every stage from tensor graph to kernel source, in order, as data.

    kernel_to_program(ast, renderer, flags) -> ProgramSource

is the one pure function from a scheduled kernel AST to source text: it opens no device and runs nothing, and its
result depends only on its three arguments (the flags are passed in, not read from the environment). The engine
in tg.hcq compiles what it returns, BEAM search calls it once per candidate opt list (`with_opts`), and process
replay captures its inputs and output. `python -m tg.codegen.pipeline` prints every stage with one line each.

Two lists make up the pipeline:
    SCHEDULE_STAGES  tensor graph -> kernel ASTs (run by `tg.codegen.schedule.create_schedule`)
    KERNEL_STAGES    kernel AST -> linear program (run here), followed by the device's renderer
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tg.codegen.dtype import PtrDType, dtypes
from tg.codegen.flags import NOOPT, TRANSCENDENTAL
from tg.codegen.lower.linearize import LINEARIZE_STEPS, linearize
from tg.codegen.lower.multicore import split_across_cores, split_trip_count
from tg.codegen.lower.prefetch import prefetch_next_blocks
from tg.codegen.lower.transcendental import decompose_transcendentals
from tg.codegen.lower.upcast import upcast_strided_reductions
from tg.codegen.opt import apply_opts
from tg.codegen.opt.heuristics import MAX_LANES
from tg.codegen.render.base import Renderer, kernel_variables
from tg.codegen.stage_trace import traced
from tg.codegen.target import Target
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite
from tg.codegen.uop.spec import KERNEL_SPEC, LINEAR_SPEC, verify_stage


@dataclass(frozen=True)
class CodegenFlags:
    """Every setting that changes the source a kernel AST becomes. Part of the program cache key."""

    noopt: bool = False  # apply no optimizations (NOOPT=1); opts the AST asks for (opts_to_apply) still apply
    has_local: bool = False  # work-groups (LOCAL and GROUP opts are legal); set from the renderer's Target
    max_lanes: int = MAX_LANES  # accumulators the heuristics may keep in vector registers; set from the Target
    local_threads: int = 0  # threads per workgroup the heuristics give a GPU kernel (0: none); set from the Target
    core_groups: bool = False  # a GROUP may be split across core calls (CPU); set from the Target
    transcendental: int = 1  # TRANSCENDENTAL: 0 never, 1 where the Target asks, 2 always software exp2/log2
    software_transcendentals: bool = False  # float32 exp2/log2 become float ops (tg.codegen.lower.transcendental);
    # set from the Target and `transcendental`
    replayed: bool = False  # compiled inside a capture (tg.hcq's capture_launches, TinyJit): its replays run every
    # launch of the capture in one C call per core thread, where a split costs little, so smaller kernels are split
    # across the cores (tg.codegen.lower.multicore.split_min_iterations); never set by the environment
    cores: int = 1  # calls of one kernel that run at once (Target.cores): big kernels are cut across them
    l2_bytes: int = 0  # a core's L2 cache on a CPU Target, for the heuristics' strip groups (0: not a CPU; none)
    prefetch: bool = False  # the renderer takes PREFETCH hints (Target.prefetch): streamed blocks are fetched ahead

    @staticmethod
    def from_environment(replayed: bool = False) -> CodegenFlags:
        """The flags as the environment (and any active `Context`) sets them now (read at every kernel launch, so
        the answer is one of a few prebuilt values); `replayed` comes from the caller."""
        return _FLAGS_BY_SETTING[(bool(NOOPT), min(2, max(0, int(TRANSCENDENTAL))), replayed)]


_FLAGS_BY_SETTING = {
    (noopt, level, replayed): CodegenFlags(noopt=noopt, transcendental=level, replayed=replayed)
    for noopt in (False, True)
    for level in (0, 1, 2)
    for replayed in (False, True)
}


@dataclass(frozen=True)
class Stage:
    """One named step: `run(node, flags)` returns the rewritten node. `summary` is its one-line description."""

    name: str
    summary: str
    run: Callable[[UOp, CodegenFlags], UOp]

    def __repr__(self) -> str:
        return f"Stage({self.name!r})"


@dataclass(frozen=True)
class ProgramSource:
    """What a device needs to compile and launch one kernel, plus what DEBUG lines and counters report."""

    name: str  # the function name in `src`
    src: str
    global_size: tuple[Any, Any, Any]  # launch grid (on CPU: number of calls, one core_id each); ints, or UOps of
    # the variables for a grid that depends on them (resolved at each launch)
    applied_opts: tuple[Any, ...]  # the Opts the kernel was optimized with
    loop_sizes: tuple[int | str, ...]  # sizes of the loops, outermost first (DEBUG shows this as the shape);
    # a symbolic size is its expression, e.g. "(n*4)"
    ops: int  # estimated ALU operations on values per launch
    mem: int  # bytes of the global buffers the kernel reads and writes (each counted once)
    variables: tuple[UOp, ...] = ()  # the DEFINE_VARs it takes as int arguments after the buffers, in this order
    local_size: tuple[int, int, int] = (1, 1, 1)  # threads per workgroup (a GPU renderer's GPUKernel; 1 elsewhere)


# ---------------------------------------------------------------------------------------------------- kernel stages


def _simplify_indices(ast: UOp, flags: CodegenFlags) -> UOp:
    return graph_rewrite(ast, simplify_indices, name="simplify indices")


def _apply_opts(ast: UOp, flags: CodegenFlags) -> UOp:
    return apply_opts(
        ast,
        has_local=flags.has_local,
        noopt=flags.noopt,
        max_lanes=flags.max_lanes,
        core_groups=flags.core_groups,
        local_threads=flags.local_threads,
        l2_bytes=flags.l2_bytes,
        cores=flags.cores,
    )


def _upcast_strided_reductions(ast: UOp, flags: CodegenFlags) -> UOp:
    """Only for kernels the opts left alone (NOOPT=1 means no optimization at all)."""
    if flags.noopt or (isinstance(ast.arg, KernelInfo) and ast.arg.applied_opts):
        return ast
    return upcast_strided_reductions(ast)


def _software_transcendentals(ast: UOp, flags: CodegenFlags) -> UOp:
    return decompose_transcendentals(ast) if flags.software_transcendentals else ast


def _linearize(ast: UOp, flags: CodegenFlags) -> UOp:
    return linearize(ast)


def _prefetch_next_blocks(linear: UOp, flags: CodegenFlags) -> UOp:
    return prefetch_next_blocks(linear, flags.l2_bytes) if flags.prefetch and flags.l2_bytes else linear


def _split_across_cores(linear: UOp, flags: CodegenFlags) -> UOp:
    return split_across_cores(linear, flags.cores, flags.replayed)


KERNEL_STAGES: tuple[Stage, ...] = (
    Stage("simplify indices", "movement-op index arithmetic folds back into strides", _simplify_indices),
    Stage("apply opts", "Opts from KernelInfo.opts_to_apply, else the heuristics: split/pad/swap ranges", _apply_opts),
    Stage("upcast strided reductions", "lanes of accumulators for reductions over a strided axis (sum(axis=0))",
          _upcast_strided_reductions),
    Stage("software transcendentals", "float32 exp2/log2 become float ops that vectorize and agree across backends",
          _software_transcendentals),
    Stage("linearize", "ranges become loops, REDUCE becomes accumulators, each value is placed in its loop; steps: "
          + ", ".join(name for name, _ in LINEARIZE_STEPS), _linearize),
    Stage("prefetch next blocks", "a reduction streaming blocks of a buffer bigger than L2 (a matmul's weight "
          "strips) asks for the next block's lines while it works on this one", _prefetch_next_blocks),
    Stage("split across cores", "a big kernel's first output loop is cut into chunks, one per call (core_id)",
          _split_across_cores),
)  # fmt: skip
RENDER_SUMMARY = "the device's renderer turns the linear program into source text (C, Python, ...)"


def lower_kernel(ast: UOp, flags: CodegenFlags) -> UOp:
    """The LINEAR program of kernel `ast`: every KERNEL_STAGE in order."""
    for stage in KERNEL_STAGES:
        with traced("kernel", stage.name):
            ast = stage.run(ast, flags)
        verify_stage(stage.name, ast, LINEAR_SPEC if ast.op is Ops.LINEAR else KERNEL_SPEC)
    return ast


def kernel_to_program(ast: UOp, renderer: Renderer, flags: CodegenFlags) -> ProgramSource:
    """The source of kernel `ast` for `renderer` (and the Target it holds), with the launch size and estimates (a pure
    function)."""
    target = renderer.target
    flags = for_target(flags, target)
    linear = lower_kernel(ast, flags)
    with traced("kernel", f"render ({type(renderer).__name__})"):
        rendered = renderer.render(linear, target)
    loop_sizes = tuple(
        _size_text(split_trip_count(u)) for u in dict.fromkeys(u for u in linear.src if u.op is Ops.RANGE)
    )
    return ProgramSource(
        name=rendered.name,
        src=rendered.src,
        global_size=rendered.global_size,
        applied_opts=tuple(getattr(linear.arg, "applied_opts", ())),
        loop_sizes=loop_sizes,
        ops=estimate_ops(ast),
        mem=estimate_mem(linear),
        variables=tuple(kernel_variables(linear)),
        local_size=getattr(rendered, "local_size", (1, 1, 1)),
    )


def _size_text(end: UOp) -> int | str:
    return int(end.arg) if end.op is Ops.CONST else end.render()


def for_target(flags: CodegenFlags, target: Target) -> CodegenFlags:
    """`flags` with what the Target allows filled in (which opts are legal, the register budget, whether float32
    exp2/log2 are computed in software)."""
    wants_software = target.software_transcendentals
    return replace(
        flags,
        has_local=target.has_local,
        max_lanes=target.max_lanes,
        local_threads=target.local_threads if target.has_local else 0,
        core_groups=target.core_groups,
        cores=target.cores,
        l2_bytes=target.l2_bytes if target.family == "CPU" else 0,
        prefetch=target.prefetch,
        software_transcendentals=flags.transcendental >= 2 or (flags.transcendental == 1 and wants_software),
    )


def for_renderer(flags: CodegenFlags, renderer: Renderer) -> CodegenFlags:
    """`flags` as `kernel_to_program` completes them for `renderer` (what BEAM search passes to the heuristics)."""
    return for_target(flags, renderer.target)


def with_opts(ast: UOp, opts: tuple[Any, ...]) -> UOp:
    """Kernel `ast` set to be optimized with exactly `opts` (what BEAM tries and process replay records)."""
    info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
    return ast.replace(arg=replace(info, opts_to_apply=tuple(opts), applied_opts=()))


def estimate_ops(ast: UOp) -> int:
    """The analytic ALU count of kernel `ast`: each value op once per point of the ranges it depends on.

    Why on the kernel AST and not on the lowered program: opts put loop-invariant work (a layernorm's scale, a
    gelu) inside upcast and unroll loops, and fusion recomputes a producer per consumer iteration. Counting that
    recompute made DEBUG=2 report a 128x2304x768 projection behind a fused layernorm at 4.5x its real GFLOP/s.
    This count is the same with and without opts. Conventions: a REDUCE counts one op per input element
    (a matmul is 2*M*N*K), a transcendental counts as the ops it is built from (exp is a MUL and an EXP2), and
    index arithmetic and gates on indices (a padding's bounds checks) count nothing.
    """
    ranges: dict[UOp, frozenset[UOp]] = {}
    ops = 0
    for node in ast.toposort():
        depends = frozenset().union(*(ranges[s] for s in node.src))
        if node.op is Ops.RANGE:
            depends |= {node}
        if node.op is Ops.REDUCE:
            ops += _points(depends)
            depends -= set(node.src[1:])
        elif node.op in GroupOp.ALU and _is_value_op(node):
            ops += _points(depends) * (2 if node.op is Ops.MULACC else 1)  # a fused multiply-add is two
        ranges[node] = depends
    return ops


def _points(ranges: frozenset[UOp]) -> int:
    """Iterations of a loop nest over `ranges` (a symbolic bound counts at its maximum)."""
    return math.prod(int(r.src[0].arg) if r.src[0].op is Ops.CONST else int(r.src[0].vmax) for r in ranges)


def _is_value_op(node: UOp) -> bool:
    """An ALU op on data, not on indices: index-typed results and comparisons/logic of indices and gates are not."""
    if node.dtype.scalar() is dtypes.index:
        return False
    if node.dtype.scalar() is dtypes.bool:
        return any(s.dtype.scalar() not in (dtypes.index, dtypes.bool) for s in node.src)
    return True


def estimate_mem(linear: UOp) -> int:
    """Bytes of the global buffers a program takes (the PARAMs' sizes; a buffer of unknown size counts 0)."""
    total = 0
    for node in linear.src:
        if node.op is Ops.PARAM and isinstance(node.dtype, PtrDType) and node.addrspace.name == "GLOBAL":
            total += max(node.dtype.size, 0) * node.dtype.base.itemsize
    return total


# ---------------------------------------------------------------------------------------------------- listing


def schedule_stages() -> tuple[tuple[str, str], ...]:
    """(name, summary) of the scheduler's stages, in the order `create_schedule` runs them."""
    from tg.codegen.schedule.schedule import SCHEDULE_STAGES

    return SCHEDULE_STAGES


def describe_pipeline() -> str:
    """Every stage from tensor graph to source, one line each, in order."""
    lines = ["schedule: tensor graph -> kernel ASTs (tg.codegen.schedule.create_schedule)"]
    lines += [f"  {name:<28} {summary}" for name, summary in schedule_stages()]
    lines.append("kernel: kernel AST -> source (tg.codegen.pipeline.kernel_to_program)")
    lines += [f"  {stage.name:<28} {stage.summary}" for stage in KERNEL_STAGES]
    lines.append(f"  {'render':<28} {RENDER_SUMMARY}")
    return "\n".join(lines)


__all__ = [
    "KERNEL_STAGES", "CodegenFlags", "ProgramSource", "Stage", "describe_pipeline", "estimate_mem", "estimate_ops",
    "kernel_to_program", "lower_kernel", "with_opts",
]  # fmt: skip

if __name__ == "__main__":
    print(describe_pipeline())
