"""Splitting a kernel across the CPU's cores, in the IR: the one implementation the C and LLVM renderers both render.

A CPU kernel is launched as `calls` calls of one function, each with its own `core_id` (the ABI's last argument,
see tg.hcq.devices.cpu). A big kernel's first output loop is cut into `calls` chunks; call c runs the iterations
[end * c // calls, end * (c + 1) // calls). In the linear program that is

    core  = SPECIAL "core_id" over `calls`          (the call's index, a hardware index as on a GPU)
    start = end * core // calls
    stop  = end * (core + 1) // calls
    RANGE r' over stop - start, and r = r' + start wherever the old loop variable was read

placed just before the loop opens, so a renderer writes loops and index arithmetic as it always does and takes the
launch size from the SPECIAL (`launch_calls`). Only output loops are cut, never a reduction, so a sum's order (and
bits) do not depend on the core count.

How many calls (`planned_calls`): one per core when the kernel is big enough to be worth waking the cores for, up
to CALLS_PER_CORE per core while each call still has half that minimum of iterations (a call costs a few
microseconds), and of those a count whose calls the cores finish together (`balanced_calls`). The minimum is lower
for a kernel compiled inside a capture (`split_min_iterations`): a replay runs the captured launches in one C call
per core thread, where a split launch costs a few atomic operations instead of a hand-off to the core threads. A
loop whose trip count is symbolic gets a count computed at each launch from that launch's work (`symbolic_calls`),
the same expression in the kernel and in the launch size.
"""

from __future__ import annotations

import heapq

from tg.codegen.dtype import dtypes
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import Ops, UOp

MULTICORE_MIN_ITERATIONS = 1 << 16
# the minimum for replayed kernels (tg.hcq.devices.cpu_calls's tg_run_together): SmolLM2-135M's decode step, whose
# matvecs of 576 rows were one call below 1 << 16, paired in one process on 2 cores at load 2.0 (median of 60 steps,
# tok/s): every kernel one call 71.5, a minimum of 1 << 11 95.8, 1 << 12 97.7, 1 << 13 98.7, 1 << 14 94.6
REPLAYED_MIN_ITERATIONS = 1 << 13
# calls per core of a big kernel: the threads take calls as they come free (tg.hcq.devices.cpu_workers), so when
# another process holds a core for a while the other cores make its calls
CALLS_PER_CORE = 4
CORE_ID = "core_id"  # the SPECIAL's name, and the ABI argument it is read from


def first_output_loop(linear: UOp) -> UOp | None:
    """The loop a multi-core split cuts: the first output loop, inside the BLOCK_REDUCE loops around the kernel (each
    core then runs every block of its own outputs, which no other core touches) and after any reduction computed
    before it (see Linearizer.hoist_reductions; each call computes those)."""
    output_types = (AxisType.LOOP, AxisType.GLOBAL, AxisType.LOCAL)
    return next((u for u in linear.src if u.op is Ops.RANGE and u.arg.axis_type in output_types), None)


def max_trip_count(rng: UOp) -> int:
    """A range's trip count, or its upper bound when it depends on variables."""
    return int(rng.src[0].arg) if rng.src[0].op is Ops.CONST else int(rng.src[0].vmax)


def loop_iterations(linear: UOp) -> int:
    """The iterations of the innermost work if every loop ran to its end (an estimate of kernel size; a symbolic
    trip count counts at its maximum): each innermost loop counts its trip count times those of the loops around
    it. Loops that follow one another add up; only nested loops multiply (three 16-lane loops in a row inside a
    loop of 64 are 64 * 48 iterations, not 64 * 16^3)."""
    total = 0
    # the loops open at this point of the program: each range, its trip count times the enclosing ones', and
    # whether a loop has opened inside it (only innermost loops count their iterations)
    ranges: list[UOp] = []
    trips: list[int] = []
    has_inner: list[bool] = []
    for u in linear.src:
        if u.op is Ops.RANGE:
            if has_inner:
                has_inner[-1] = True
            ranges.append(u)
            trips.append((trips[-1] if trips else 1) * max_trip_count(u))
            has_inner.append(False)
        elif u.op is Ops.END and any(rng is u.src[0] for rng in ranges):
            position = next(i for i, rng in enumerate(ranges) if rng is u.src[0])
            total += sum(
                count for count, inner in zip(trips[position:], has_inner[position:], strict=True) if not inner
            )
            del ranges[position:], trips[position:], has_inner[position:]
    return total + sum(count for count, inner in zip(trips, has_inner, strict=True) if not inner)


def finish_time(trips: int, calls: int, cores: int) -> int:
    """When the last of `cores` threads finishes, in loop iterations, when `trips` iterations are cut into `calls`
    chunks (call i runs [trips * i // calls, trips * (i + 1) // calls)) that the threads take in order as they come
    free (tg.hcq.devices.cpu_workers)."""
    free_at = [0] * cores
    for i in range(calls):
        heapq.heapreplace(free_at, free_at[0] + trips * (i + 1) // calls - trips * i // calls)
    return max(free_at)


def balanced_calls(trips: int, cores: int, most: int) -> int:
    """How many calls to cut a loop of `trips` iterations into: of 1..`most` (at most `trips`), the most calls among
    those whose last thread finishes first. Twelve attention heads in 8 calls on 2 cores finish after 7 heads' time
    (calls of 1 and 2 heads), in 6 calls after 6; more calls, when they finish as early, let the other threads take
    over the calls of a core that another process holds."""
    candidates = range(1, min(most, trips) + 1)
    return min(candidates, key=lambda calls: (finish_time(trips, calls, cores), -calls))


def split_min_iterations(replayed: bool) -> int:
    """The fewest innermost iterations (`loop_iterations`) of a kernel split across cores: fewer for one compiled
    inside a capture, whose replays split launches at little cost."""
    return REPLAYED_MIN_ITERATIONS if replayed else MULTICORE_MIN_ITERATIONS


def symbolic_calls(end: UOp, work: int, most: int, min_iterations: int = MULTICORE_MIN_ITERATIONS) -> UOp:
    """The calls of a launch whose split loop runs `end` (symbolic) times, `work` / 2 innermost iterations each: as
    for a fixed size, one per `min_iterations` / 2 of this launch's work, at least one, at most `end` and `most`. A
    decode step's attention at position 64 otherwise woke 8 calls of 8 rows each, whose waits on a loaded machine cost
    more than the rows."""
    return (end * work // min_iterations).maximum(1).minimum(end).minimum(most)


def planned_calls(linear: UOp, cores: int, replayed: bool = False) -> int | UOp:
    """How many calls `linear` is cut into on `cores` cores (1: not cut); a UOp of the variables when the loop's trip
    count is symbolic. `replayed`: compiled inside a capture (see split_min_iterations)."""
    first = first_output_loop(linear)
    if first is None or first.arg.axis_type is not AxisType.LOOP or cores == 1 or _group_range(linear) is not None:
        return 1
    iterations, min_iterations = loop_iterations(linear), split_min_iterations(replayed)
    if iterations < min_iterations:
        return 1
    most = max(cores, min(cores * CALLS_PER_CORE, 2 * iterations // min_iterations))
    if first.src[0].op is not Ops.CONST:
        work = 2 * max(1, iterations // max_trip_count(first))  # innermost iterations per loop iteration, doubled
        return symbolic_calls(first.src[0], work, min(most, max_trip_count(first)), min_iterations)
    return balanced_calls(first.src[0].arg, cores, most)


def _group_range(linear: UOp) -> UOp | None:
    """A GROUP_REDUCE range: its calls are its shares (the C renderer combines them), so nothing else is cut."""
    return next((u for u in linear.src if u.op is Ops.RANGE and u.arg.axis_type is AxisType.GROUP_REDUCE), None)


def split_across_cores(linear: UOp, cores: int, replayed: bool = False) -> UOp:
    """`linear` with its first output loop cut into `planned_calls` chunks, one per call (see the module doc)."""
    calls = planned_calls(linear, cores, replayed)
    if isinstance(calls, int) and calls == 1:
        return linear
    loop = first_output_loop(linear)
    assert loop is not None
    end = loop.src[0]
    count = calls if isinstance(calls, UOp) else UOp.const(calls, dtypes.index)
    core = UOp(Ops.SPECIAL, dtypes.index, (count,), CORE_ID)
    next_core = _index_op(Ops.ADD, core, UOp.const(1, dtypes.index))
    start = _index_op(Ops.IDIV, _index_op(Ops.MUL, end, core), count)
    stop = _index_op(Ops.IDIV, _index_op(Ops.MUL, end, next_core), count)
    chunk = UOp(Ops.RANGE, dtypes.index, (_index_op(Ops.SUB, stop, start),), loop.arg)
    position = _index_op(Ops.ADD, chunk, start)
    program = list(linear.src)
    at = program.index(loop)
    placed = set(program[:at])
    before = [u for u in chunk.src[0].toposort() if u not in placed and u.op is not Ops.DEFINE_VAR]
    program[at : at + 1] = [*before, chunk, position]
    return linear.replace(src=_substituted(program, loop, chunk, position))


def _index_op(op: Ops, a: UOp, b: UOp) -> UOp:
    """`a op b` on indices, built as written (no folding: split_trip_count reads the end back out of it)."""
    return UOp(op, dtypes.index, (a, b))


def _substituted(program: list[UOp], loop: UOp, chunk: UOp, position: UOp) -> tuple[UOp, ...]:
    """The program with every value that read the old loop variable reading `position` instead, and every node that
    names the loop itself (the END that closes it, an AFTER ordered inside it) naming `chunk` (rebuilt in order, so
    each source is rebuilt before its readers)."""
    new: dict[UOp, UOp] = {}
    out = []
    for node in program:
        if node is chunk or node is position:
            out.append(node)
            continue
        stack = [node]
        while stack:  # sources first, without recursion (index graphs can be deep)
            top = stack[-1]
            missing = [s for s in top.src if s not in new and s is not loop]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            sources = tuple(_replacement(top, i, s, loop, chunk, position, new) for i, s in enumerate(top.src))
            same = all(a is b for a, b in zip(sources, top.src, strict=True))
            new[top] = top if same else top.replace(src=sources)
        out.append(new[node])
    return tuple(out)


def _replacement(reader: UOp, i: int, source: UOp, loop: UOp, chunk: UOp, position: UOp, new: dict[UOp, UOp]) -> UOp:
    if source is not loop:
        return new[source]
    names_the_loop = (reader.op is Ops.END and i == 0) or (reader.op is Ops.AFTER and i > 0)
    return chunk if names_the_loop else position


def launch_calls(linear: UOp) -> int | UOp:
    """The calls a CPU program is launched with: the extent of its core SPECIAL, or a GROUP_REDUCE range's shares,
    or 1."""
    core = next((u for u in linear.src if u.op is Ops.SPECIAL and u.arg == CORE_ID), None)
    if core is not None:
        extent = core.src[0]
        return int(extent.arg) if extent.op is Ops.CONST else extent
    group = _group_range(linear)
    return int(group.src[0].arg) if group is not None else 1


def split_trip_count(rng: UOp) -> UOp:
    """The whole trip count of a loop: for a loop cut across cores (`stop - start` of a core SPECIAL), the end it was
    cut from, as DEBUG shows a kernel's shape."""
    end = rng.src[0]
    if end.op is Ops.SUB and any(u.op is Ops.SPECIAL and u.arg == CORE_ID for u in end.src[1].toposort()):
        return end.src[1].src[0].src[0]  # stop - start, start = end * core // count (split_across_cores)
    return end


__all__ = [
    "CALLS_PER_CORE", "CORE_ID", "MULTICORE_MIN_ITERATIONS", "balanced_calls", "finish_time", "first_output_loop",
    "launch_calls", "loop_iterations", "max_trip_count", "planned_calls", "split_across_cores", "split_trip_count",
    "symbolic_calls",
]  # fmt: skip
