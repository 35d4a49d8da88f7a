"""The scheduler: tensor-graph roots in, an ordered list of kernel calls and copies out.

    schedule = create_schedule((node_a, node_b))
    schedule.items    # KernelCall(ast, buffers) and CopyCall(dest, src), in the order they must run
    schedule.results  # for each root, an equivalent node that reads realized memory
    schedule.var_vals # the value of each variable in a symbolic shape, by name (kernels take them as arguments)

Stages, in order: split big reductions; make the sources of copies contiguous; find the realize points (the
nodes that get buffers); build one kernel per realize point; order the kernels so every buffer is written before
it is read and no buffer is overwritten (ASSIGN) before every kernel that reads its old contents has run.

Schedules are cached by the graph with its input buffers abstracted and its bound variables unbound, so the same
computation on new buffers, or with other values of its variables, reuses the kernels (and the compiled programs,
which are keyed by kernel AST). A value whose shape is symbolic gets a buffer of its largest size.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tg.codegen.schedule.calls import inline_calls
from tg.codegen.schedule.graph import (
    KEPT_COPY,
    BufferArg,
    bind_graph,
    device_of,
    is_symbolic_shape,
    max_numel,
    new_buffer,
    shape_of,
    symbolic_numel,
    unbind_graph,
)
from tg.codegen.schedule.kernel import AssignError, Kernel, build_kernel
from tg.codegen.schedule.layout import TargetOf, default_target, lay_out_for_targets
from tg.codegen.schedule.realize import (
    contiguous_buffers,
    contiguous_copies,
    find_realize_points,
    split_big_reductions,
    whole_buffer,
)
from tg.codegen.stage_trace import traced
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.ops import _cache_key as uop_cache_key
from tg.codegen.uop.pattern import PatternMatcher, graph_rewrite
from tg.codegen.uop.spec import KERNEL_SPEC, TENSOR_SPEC, verify_stage

SCHEDULE_CACHE_SIZE = 512


@dataclass(frozen=True)
class GraphStage:
    """One named tensor-graph stage, run before the realize points are found: `run(roots, target_of)` gives the
    rewritten roots (`target_of`: the Target of each device, for the stages that depend on the machine). A stage can
    be printed, run and tested alone."""

    name: str
    summary: str
    run: Callable[[tuple[UOp, ...], TargetOf], tuple[UOp, ...]]

    def __repr__(self) -> str:
        return f"GraphStage({self.name!r})"


def rewrite_with(matcher: PatternMatcher) -> Callable[[tuple[UOp, ...], TargetOf], tuple[UOp, ...]]:
    """A stage that is one `graph_rewrite` with `matcher` (the same on every machine)."""

    def run(roots: tuple[UOp, ...], target_of: TargetOf) -> tuple[UOp, ...]:
        return graph_rewrite(UOp.sink(*roots), matcher, name=matcher.name).src

    return run


GRAPH_STAGES: tuple[GraphStage, ...] = (
    GraphStage("inline calls", "each value CALL (Tensor.call, @function) becomes its body with the arguments in place "
               "of its PARAMs", inline_calls),
    GraphStage("layout policy", "tagged products and conv weight gradients laid out for their device's Target "
               "(packing, L2 chunks)", lay_out_for_targets),
    GraphStage("split_big_reductions", "a full reduction of many elements becomes chunk partials and a small combine",
               rewrite_with(split_big_reductions)),
    GraphStage("contiguous_buffers", "a CONTIGUOUS of a whole buffer in its own layout is that buffer (no copy)",
               rewrite_with(contiguous_buffers)),
    GraphStage("contiguous_copies", "the source of a COPY to another device is made a whole, contiguous buffer",
               rewrite_with(contiguous_copies)),
)  # fmt: skip


@dataclass(frozen=True)
class KernelCall:
    """Run kernel `ast` with PARAM slot i bound to BUFFER node `buffers[i]` (slot 0 is the output).

    `kept`: the kernel copies its one input, `buffers[1]`, into a new layout (a CONTIGUOUS marked KEPT_COPY) that
    no result of the schedule exposes, so the engine may keep the output and reuse it while the input is unchanged."""

    ast: UOp
    buffers: tuple[UOp, ...]
    kept: bool = False

    @property
    def device(self) -> str:
        return self.buffers[0].src[0].arg


@dataclass(frozen=True)
class CopyCall:
    """Copy the whole of BUFFER `src` into BUFFER `dest` (same size and dtype, maybe another device)."""

    dest: UOp
    src: UOp


ScheduleItem = KernelCall | CopyCall


@dataclass(frozen=True)
class Schedule:
    items: tuple[ScheduleItem, ...]
    results: tuple[UOp, ...]
    var_vals: dict[str, int] = field(default_factory=dict)


@dataclass
class ScheduleStats:
    """How often the schedule cache answered (tests and benchmarks read these)."""

    hits: int = 0
    misses: int = 0


@dataclass(frozen=True)
class _Template:
    """A cached schedule over placeholder buffers (`placeholders[i]` stands for the graph's i-th input buffer in
    toposort order), and the BUFFER nodes its results read (found once, not at every instantiation)."""

    schedule: Schedule
    placeholders: tuple[UOp, ...]
    result_buffers: tuple[UOp, ...]


schedule_stats = ScheduleStats()
_schedule_cache: OrderedDict[tuple, _Template] = OrderedDict()


# ---------------------------------------------------------------------------------------------------- caching


_device_targets: list[TargetOf] = [default_target]


def use_device_targets(target_of: TargetOf) -> None:
    """Make `target_of` what `create_schedule` uses when its caller passes no Targets: tg.hcq installs the opened
    devices' Targets here when its engine is imported (codegen cannot import tg.hcq)."""
    _device_targets[0] = target_of


def create_schedule(roots: tuple[UOp, ...], target_of: TargetOf | None = None) -> Schedule:
    """The schedule that realizes `roots` on the machines `target_of` describes (the Target of each device, by
    name: the layout stage reads it; the devices' own when None), from the cache when the same graph was scheduled
    for the same Targets of its devices before."""
    target_of = _device_targets[0] if target_of is None else target_of
    order = UOp.sink(*roots).toposort()
    roots, var_vals = unbind_graph(roots, order)
    if var_vals:
        order = UOp.sink(*roots).toposort()
    inputs = [node for node in order if node.op is Ops.BUFFER]
    devices = sorted({node.arg for node in order if node.op is Ops.DEVICE})
    key = (tuple(target_of(device) for device in devices), graph_key(order))  # the layout stage reads the Targets
    template = _schedule_cache.get(key)
    if template is None:
        schedule_stats.misses += 1
        template = _schedule_cache[key] = _make_template(order, inputs, target_of)
        if len(_schedule_cache) > SCHEDULE_CACHE_SIZE:
            _schedule_cache.popitem(last=False)
    else:
        schedule_stats.hits += 1
        _schedule_cache.move_to_end(key)
    return _instantiate(template, dict(zip(template.placeholders, inputs, strict=True)), var_vals)


def graph_key(order: list[UOp]) -> tuple:
    """A key equal for two graphs (given as toposorts) exactly when they are the same graph up to which buffers
    they read: each node as the fields UOp interning compares, sources by position, input buffers by their order
    and size. Built from plain tuples, so a cache hit creates no UOps (interning each costs a lock and a weakref)."""
    position: dict[UOp, int] = {}
    entries: list[tuple] = []
    inputs = 0
    buffer = Ops.BUFFER
    for index, node in enumerate(order):
        op, src = node.op, node.src
        if op is buffer:
            arg: Any = ("input", inputs, node.arg.size)
            inputs += 1
        else:
            arg = node.arg
        # (sources: the common arities spelled out, this loop runs for every node at every realize)
        if len(src) == 1:
            sources: tuple[int, ...] = (position[src[0]],)
        elif len(src) == 2:
            sources = (position[src[0]], position[src[1]])
        else:
            sources = tuple([position[s] for s in src])
        position[node] = index
        entries.append(uop_cache_key(op, node.dtype, sources, arg, node.tag))
    return tuple(entries)


def _make_template(order: list[UOp], inputs: list[UOp], target_of: TargetOf) -> _Template:
    """Schedule the graph with its inputs replaced by placeholder buffers (no cache)."""
    placeholders = {
        buf: UOp(Ops.BUFFER, buf.dtype, buf.src, BufferArg(-1 - i, buf.arg.size)) for i, buf in enumerate(inputs)
    }
    schedule = schedule_graph(order[-1].substitute(placeholders).src, target_of)  # order[-1]: the roots' SINK
    buffers = {node: None for result in schedule.results for node in result.toposort() if node.op is Ops.BUFFER}
    return _Template(schedule, tuple(placeholders.values()), tuple(buffers))


def _instantiate(template: _Template, inputs: dict[UOp, UOp], var_vals: dict[str, int]) -> Schedule:
    """The template with placeholders bound to the real inputs and every buffer it creates made fresh."""
    mapping = dict(inputs)

    def bind(buf: UOp) -> UOp:
        found = mapping.get(buf)
        if found is None:
            found = mapping[buf] = new_buffer(buf.src[0].arg, buf.arg.size, buf.dtype)
        return found

    items: list[ScheduleItem] = []
    for item in template.schedule.items:
        if isinstance(item, KernelCall):
            items.append(KernelCall(item.ast, tuple(bind(b) for b in item.buffers), item.kept))
        else:
            items.append(CopyCall(bind(item.dest), bind(item.src)))
    for buf in template.result_buffers:
        bind(buf)
    results = bind_graph(tuple(result.substitute(mapping) for result in template.schedule.results), var_vals)
    return Schedule(tuple(items), results, var_vals)


# ---------------------------------------------------------------------------------------------------- scheduling


@dataclass
class KernelPlan:
    """What the kernel stages hand each other: the rewritten roots in, then the realize points, their buffers, one
    kernel per point, and either an order or an ASSIGN hazard (a value to compute into its own buffer first, after
    which the stages run again with that value `forced` to be a realize point)."""

    roots: tuple[UOp, ...]
    forced: tuple[UOp, ...] = ()
    points: list[UOp] = field(default_factory=list)
    storage: dict[UOp, UOp] = field(default_factory=dict)
    kernels: dict[UOp, Kernel] = field(default_factory=dict)
    hazard: UOp | None = None
    order: list[UOp] | None = None


@dataclass(frozen=True)
class PlanStage:
    """One named kernel stage: `run(plan)` fills in its part of the plan. A stage can be printed, run and tested
    alone (each reads only what the stages before it filled in)."""

    name: str
    summary: str
    run: Callable[[KernelPlan], None]

    def __repr__(self) -> str:
        return f"PlanStage({self.name!r})"


def _find_points(plan: KernelPlan) -> None:
    plan.points = find_realize_points(plan.roots, plan.forced)
    plan.storage = _allocate_storage(plan.points)


def _build_kernels(plan: KernelPlan) -> None:
    plan.kernels = {p: build_kernel(p, plan.storage[p], plan.storage) for p in plan.points if p.op is not Ops.COPY}
    for kernel in plan.kernels.values():
        verify_stage("build kernels", kernel.ast, KERNEL_SPEC)


def _find_assign_hazard(plan: KernelPlan) -> None:
    kernels = plan.kernels
    plan.hazard = next((p for p in plan.points if p.op is Ops.ASSIGN and _reads_what_it_overwrites(kernels[p])), None)


def _order_kernels(plan: KernelPlan) -> None:
    if plan.hazard is not None:
        return
    order = _order(plan.points, plan.kernels, plan.storage)
    if isinstance(order, list):
        plan.order = order
    else:
        plan.hazard = order  # ASSIGNs that read each other's old contents: this one computes its value first


PLAN_STAGES: tuple[PlanStage, ...] = (
    PlanStage("find realize points", "what gets a buffer: roots, CONTIGUOUS/COPY/ASSIGN, reductions read by many, "
              "costly producers", _find_points),
    PlanStage("build kernels", "one kernel AST per realize point: movement ops become index arithmetic, PAD gated "
              "loads", _build_kernels),
    PlanStage("assign hazards", "an ASSIGN that reads what it overwrites computes into its own buffer first",
              _find_assign_hazard),
    PlanStage("order", "kernels and copies ordered so every buffer is written before it is read (Kahn's algorithm)",
              _order_kernels),
)  # fmt: skip
SCHEDULE_STAGES: tuple[tuple[str, str], ...] = (  # (name, one line), in the order schedule_graph runs them
    *((stage.name, stage.summary) for stage in GRAPH_STAGES),
    *((stage.name, stage.summary) for stage in PLAN_STAGES),
)


def plan_kernels(roots: tuple[UOp, ...]) -> KernelPlan:
    """Run PLAN_STAGES until they give an order: each ASSIGN hazard found forces its value into its own buffer and
    the stages run again."""
    forced: tuple[UOp, ...] = ()
    while True:
        plan = KernelPlan(roots, forced)
        for stage in PLAN_STAGES:
            with traced("schedule", stage.name):
                stage.run(plan)
        if plan.order is not None:
            return plan
        assert plan.hazard is not None
        forced = (*forced, plan.hazard.src[1])  # compute the value into its own buffer, then copy it over the target


def schedule_graph(roots: tuple[UOp, ...], target_of: TargetOf = default_target) -> Schedule:
    """Schedule `roots` for the machines `target_of` describes (no cache)."""
    for stage in GRAPH_STAGES:
        with traced("schedule", stage.name):
            roots = stage.run(roots, target_of)
        verify_stage(stage.name, UOp.sink(*roots), TENSOR_SPEC)
    plan = plan_kernels(roots)
    points, storage, kernels, order = plan.points, plan.storage, plan.kernels, plan.order
    assert order is not None
    views = _views(points, storage)
    results = tuple(root.substitute(views) for root in roots)
    exposed = {node for result in results for node in result.toposort() if node.op is Ops.BUFFER}
    items: list[ScheduleItem] = []
    for point in order:
        if point.op is Ops.COPY:
            items.append(CopyCall(storage[point], _copy_source(point.src[0], storage)))
        elif not any(size == 0 for size in shape_of(point)):  # (a symbolic size may be 0: its loop runs 0 times)
            kernel = kernels[point]
            items.append(KernelCall(kernel.ast, kernel.buffers, _may_keep(point, kernel, exposed)))
    return Schedule(tuple(items), results)


def _may_keep(point: UOp, kernel: Kernel, exposed: set[UOp]) -> bool:
    """Whether the engine may keep this kernel's output for later schedules: a CONTIGUOUS marked KEPT_COPY, computed
    from one buffer alone (no variable whose value a later call could change), that no result exposes (nothing
    outside the engine can then write it)."""
    if point.op is not Ops.CONTIGUOUS or point.arg != KEPT_COPY or len(kernel.buffers) != 2:
        return False
    return kernel.buffers[0] not in exposed and not any(u.op is Ops.DEFINE_VAR for u in kernel.ast.toposort())


def _allocate_storage(points: list[UOp]) -> dict[UOp, UOp]:
    storage: dict[UOp, UOp] = {}
    for point in points:
        if point.op is Ops.ASSIGN:
            storage[point] = _target_buffer(point.src[0], storage)
        else:
            storage[point] = new_buffer(device_of(point), max_numel(shape_of(point)), point.dtype)
    return storage


def _target_buffer(target: UOp, storage: dict[UOp, UOp]) -> UOp:
    while target.op in GroupOp.Movement:
        target = target.src[0]
    if target.op is Ops.BUFFER:
        return target
    if target in storage and target.op is Ops.ASSIGN:
        return storage[target]
    raise AssignError(f"ASSIGN needs a target that is a view of a buffer, got {target.op!r}")


def _reads_what_it_overwrites(kernel: Kernel) -> bool:
    """Whether an ASSIGN kernel reads its target buffer at a position other than the one it writes: then an
    element could be overwritten before another one reads it."""
    store = kernel.ast.src[0]
    address = store.src[0]
    return any(
        node.op is Ops.INDEX and node.src[0] is address.src[0] and node is not address
        for node in store.src[1].toposort()
    )


def _copy_source(source: UOp, storage: dict[UOp, UOp]) -> UOp:
    if source in storage:
        return storage[source]
    found = whole_buffer(source)
    if found is None:
        raise AssertionError("the source of a COPY should have been realized")
    return found


def _views(points: list[UOp], storage: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """For each realize point, the node that reads its result: its buffer in its shape."""
    views: dict[UOp, UOp] = {}
    for point in points:
        if point.op is Ops.ASSIGN:
            views[point] = point.src[0].substitute(views)
            continue
        buf = storage[point]
        shape = shape_of(point)
        if is_symbolic_shape(shape):  # the buffer has room for the largest size: the first numel elements hold it
            used = UOp(Ops.SHRINK, buf.dtype, (buf,), ((0, symbolic_numel(shape)),))
            views[point] = UOp(Ops.RESHAPE, buf.dtype, (used,), shape)
        else:
            views[point] = buf if shape == (buf.arg.size,) else UOp(Ops.RESHAPE, buf.dtype, (buf,), shape)
    return views


def _order(points: list[UOp], kernels: dict[UOp, Kernel], storage: dict[UOp, UOp]) -> list[UOp] | UOp:
    """Realize points in an order where each runs after the points it reads and every ASSIGN runs after the
    kernels that read the old contents of its buffer (unless they read it through the ASSIGN).

    When no such order exists (two ASSIGN kernels each read the other's target: `a.assign(f(a, b))` with
    `b.assign(g(a, b))` fused into the writes), returns an ASSIGN on the cycle whose value is computed in its own
    kernel: the caller makes that value a realize point, which breaks the cycle (the value kernel reads the old
    contents before either write; the ASSIGN becomes a copy that can wait)."""
    point_set = set(points)
    ancestors = {p: {n for n in p.toposort() if n in point_set and n is not p} for p in points}
    before: dict[UOp, set[UOp]] = {p: set(ancestors[p]) for p in points}
    for writer in points:
        if writer.op is not Ops.ASSIGN:
            continue
        written = storage[writer]
        for reader in points:
            if reader is writer or writer in ancestors[reader] or reader not in kernels:
                continue
            if written in kernels[reader].buffers[1:]:
                before[writer].add(reader)
    ordered = first_ready_order(points, before, raise_on_cycle=False)
    if len(ordered) == len(points):
        return ordered
    done = set(ordered)
    return _cycle_breaker([p for p in points if p not in done], before, done, point_set)


def first_ready_order(points: list[UOp], before: dict[UOp, set[UOp]], raise_on_cycle: bool = True) -> list[UOp]:
    """`points` ordered so that each comes after every point in `before[point]`, taking at each step the earliest
    point in `points` whose predecessors have all run (so independent kernels keep the order they were found in).
    Kahn's algorithm with a heap of positions: O((points + edges) log points). On a cycle: an error, or with
    `raise_on_cycle=False` the points that could be ordered (those on or after the cycle are left out)."""
    position = {point: i for i, point in enumerate(points)}
    waiting = {point: len(before[point]) for point in points}
    followers: dict[UOp, list[UOp]] = {point: [] for point in points}
    for point in points:
        for predecessor in before[point]:
            followers[predecessor].append(point)
    ready = [position[point] for point in points if waiting[point] == 0]
    heapq.heapify(ready)
    ordered: list[UOp] = []
    while ready:
        point = points[heapq.heappop(ready)]
        ordered.append(point)
        for follower in followers[point]:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                heapq.heappush(ready, position[follower])
    if len(ordered) != len(points) and raise_on_cycle:
        raise RuntimeError("the schedule has a cycle: an ASSIGN's value depends on a kernel it must precede")
    return ordered


def _cycle_breaker(remaining: list[UOp], before: dict[UOp, set[UOp]], done: set[UOp], point_set: set[UOp]) -> UOp:
    """An ASSIGN that waits on a reader which itself cannot run yet and whose value is still fused into it."""
    blocked = set(remaining)
    for point in remaining:
        waits_on_reader = any(p in blocked for p in before[point] - done)
        if point.op is Ops.ASSIGN and point.src[1] not in point_set and waits_on_reader:
            return point
    raise RuntimeError("the schedule has a cycle: an ASSIGN's value depends on a kernel it must precede")
