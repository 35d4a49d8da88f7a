"""BEAM search over opt lists: the algorithm only, with the cost of a candidate passed in.

    best_opts = beam_search(ast, width=4, cost=time_on_device)      # cost(asts) -> seconds per candidate

Each round expands every kernel in the beam by every legal single action (`kernel_actions`), asks `cost` for all
new candidates at once (so a caller can compile them in parallel and time them), keeps the `width` fastest, and
stops when a round improves the best time by less than `min_progress` seconds. A candidate whose cost is inf
(it failed to compile, timed out, or was no faster than 3x the best and not timed further) is dropped.

With a `time_budget` (seconds on `clock`), candidates go to `cost` in chunks of `chunk`, and no chunk starts that
the seconds per candidate seen so far say would end past the budget: the search then ends with the best so far
and its last SearchRound says `out_of_time`.

Nothing here compiles or runs: tg.hcq.engine.beam supplies the cost function that times kernels on a device, and
unit tests supply a deterministic one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tg.codegen.opt.optimizer import MAX_UNROLLED_BODY, KernelOptimizer
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.ops import UOp

UPCAST_AMOUNTS = (0, 2, 3, 4, 5, 7, 8, 16)
UNROLL_AMOUNTS = (0, 2, 4, 7, 8, 16)
PADTO_AMOUNTS = (8, 16, 32)
BLOCK_SIZES = (32, 64, 128, 256, 512)  # elements of a reduction block (k-blocking: 256 x 1024 floats fit an L2)
GROUP_AMOUNTS = (2, 4, 8, 16, 32)  # shares of a GROUP (on a CPU: core calls, contiguous with GROUPTOP)
# groups of an output loop's iterations looped innermost of the output loops (SPLIT into a LOOP): a matmul's row tiles
# sharing each strip of the right operand, the heuristics' `share_strips` (groups of 16 from k = 4096 where no group of
# strips fits half of L2; 8 and 32 were within 10% of 16 at 4096^3), which the search could not otherwise express
LOOP_GROUPS = (4, 8, 16, 32)
MAX_AXIS = 8  # actions name axes 0..MAX_AXIS-1; a kernel with fewer axes makes the rest illegal
# a candidate's upcast and unroll lanes multiplied together stay below this: the optimizer's own limit, since the
# hand-coded matmul tile (8x16 accumulators, unrolled 4: 512) must be a place the search can start from
BEAM_UPCAST_MAX = MAX_UNROLLED_BODY


def _action_list() -> tuple[Opt, ...]:
    actions = [Opt(OptOps.UPCAST, axis, amount) for axis in range(MAX_AXIS) for amount in UPCAST_AMOUNTS]
    actions += [Opt(OptOps.UNROLL, axis, amount) for axis in range(5) for amount in UNROLL_AMOUNTS]
    actions += [Opt(OptOps.PADTO, axis, amount) for axis in range(MAX_AXIS) for amount in PADTO_AMOUNTS]
    actions += [Opt(OptOps.SWAP, axis, other) for axis in range(5) for other in range(axis + 1, 5)]
    actions += [Opt(OptOps.BLOCK, axis, size) for axis in range(3) for size in BLOCK_SIZES]
    actions += [Opt(OptOps.GROUPTOP, axis, amount) for axis in range(3) for amount in GROUP_AMOUNTS]
    actions += [Opt(OptOps.SPLIT, axis, (group, AxisType.LOOP)) for axis in range(3) for group in LOOP_GROUPS]
    return tuple(actions)


ACTIONS: tuple[Opt, ...] = _action_list()


@dataclass(frozen=True)
class Candidate:
    """A kernel with some opts applied: `ast` is the optimized kernel, `opts` what was applied, in order."""

    ast: UOp
    opts: tuple[Opt, ...]


def _upcast_lanes(k: KernelOptimizer) -> int:
    return math.prod(size for size, t in zip(k.full_shape, k.axis_types, strict=True)
                     if t in (AxisType.UPCAST, AxisType.UNROLL))  # fmt: skip


def _base_kernel(ast: UOp, has_local: bool = False, core_groups: bool = False) -> tuple[UOp, tuple[Opt, ...]]:
    """The kernel with no opts (or with the opts it asks for already applied) and those opts."""
    info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
    if info.opts_to_apply:
        k = KernelOptimizer(ast.replace(arg=KernelInfo(info.name, info.axis_types)), has_local, core_groups)
        for opt in info.opts_to_apply:
            k.apply_opt(opt)
        return k.get_optimized_ast(), tuple(k.applied_opts)
    return ast.replace(arg=KernelInfo(info.name, info.axis_types, info.applied_opts)), tuple(info.applied_opts)


def kernel_actions(
    candidate: Candidate, max_upcast: int = BEAM_UPCAST_MAX, has_local: bool = False, core_groups: bool = False
) -> list[Candidate]:
    """Every legal single action on `candidate` (legal for a renderer with `has_local` / `core_groups`, see
    KernelOptimizer): one new candidate each, duplicates (same kernel) dropped."""
    found: dict[UOp, Candidate] = {}
    for action in ACTIONS:
        k = KernelOptimizer(candidate.ast, has_local, core_groups)
        k.applied_opts = list(candidate.opts)
        if action.axis is not None and action.axis >= k.shape_len and action.op is not OptOps.UNROLL:
            continue
        try:
            k.apply_opt(action)
        except KernelOptError:
            continue
        if _upcast_lanes(k) > max_upcast:
            continue
        optimized = k.get_optimized_ast()
        if optimized is not candidate.ast and optimized not in found:
            found[optimized] = Candidate(optimized, (*candidate.opts, action))
    return list(found.values())


CostFunction = Callable[[list[Candidate]], list[float]]


@dataclass
class SearchRound:
    """What one round did, for progress displays."""

    number: int
    candidates: int
    timed: int
    best_seconds: float
    best_opts: tuple[Opt, ...]
    out_of_time: bool = False  # the time budget ended this round early (candidates left untimed) or before it
    seconds: float = 0.0  # since the search started


class _Budget:
    """When the search must stop: it spends `cost` in chunks and starts no chunk it expects to end past the budget
    (expected: the mean seconds per candidate so far times the chunk's length)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float]) -> None:
        self.seconds, self.clock = seconds, clock
        self.start = clock()
        self.spent_on, self.exhausted = 0, False

    def elapsed(self) -> float:
        return self.clock() - self.start

    def allows(self, count: int) -> bool:
        if self.seconds is None:
            return True
        elapsed = self.elapsed()
        per_candidate = elapsed / self.spent_on if self.spent_on else 0.0
        self.exhausted = self.exhausted or elapsed + per_candidate * count > self.seconds
        return not self.exhausted

    def run(self, cost: CostFunction, candidates: list[Candidate], chunk: int) -> list[float]:
        """Costs of `candidates` (inf for those the budget left untimed)."""
        if self.seconds is None:
            return cost(candidates)
        costs: list[float] = []
        for first in range(0, len(candidates), chunk):
            part = candidates[first : first + chunk]
            if not self.allows(len(part)):
                return costs + [math.inf] * (len(candidates) - len(costs))
            costs += cost(part)
            self.spent_on += len(part)
        return costs


def beam_search(
    ast: UOp,
    width: int,
    cost: CostFunction,
    min_progress: float = 1e-8,
    max_rounds: int = 32,
    on_round: Callable[[SearchRound], None] | None = None,
    has_local: bool = False,
    core_groups: bool = False,
    seeds: Sequence[Sequence[Opt]] = (),
    time_budget: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    chunk: int = 4,
) -> tuple[tuple[Opt, ...], float]:
    """The best opt list for kernel `ast` found with a beam of `width`, and its cost. `has_local` and
    `core_groups` say what the renderer can do (which opts are legal).

    The first beam is the kernel as it is plus each legal `seed` (opt lists to start from, e.g. the hand-coded
    heuristics): the result is never slower than any of them. Each round replaces the beam with the `width`
    fastest new candidates, even when they are slower than an earlier round's (a step that costs time may
    lead somewhere), and the search stops when a round's fastest is less than `min_progress` faster than the
    previous round's. A kernel tried in an earlier round is not tried again. Only starts with a finite cost are
    expanded (the unoptimized kernel's children are as slow as it is), unless none has one. `time_budget`: see the
    module docstring; the first beam is always timed in full."""
    if width < 1:
        raise ValueError("the beam width must be at least 1")
    base_ast, base_opts = _base_kernel(ast, has_local, core_groups)
    start = Candidate(base_ast, base_opts)
    starts = [c for c in (_seeded(start, seed, has_local, core_groups) for seed in seeds) if c is not None]
    starts = list({c.ast: c for c in (*starts, start)}.values())  # seeds are timed first: they set the pace
    budget = _Budget(time_budget, clock)
    costs = cost(starts)
    budget.spent_on = len(starts)
    best_cost, best_opts = min(zip(costs, (c.opts for c in starts), strict=True), key=lambda pair: pair[0])
    if math.isinf(best_cost):
        best_opts = base_opts
    everything = list(zip(costs, starts, strict=True))
    beam = [pair for pair in everything if math.isfinite(pair[0])] or everything
    tried = {c.ast for c in starts}
    previous_round = math.inf
    for number in range(1, max_rounds + 1):
        fresh: dict[UOp, Candidate] = {}
        for _, candidate in beam:
            for child in kernel_actions(candidate, has_local=has_local, core_groups=core_groups):
                if child.ast not in tried:
                    fresh.setdefault(child.ast, child)
        candidates = list(fresh.values())
        tried.update(fresh)
        if not candidates:
            break
        costs = budget.run(cost, candidates, chunk)
        timed = sorted((c, i) for i, c in enumerate(costs) if math.isfinite(c))
        if timed:
            beam = [(c, candidates[i]) for c, i in timed[:width]]
            if beam[0][0] < best_cost:
                best_cost, best_opts = beam[0][0], beam[0][1].opts
        if on_round is not None:
            on_round(SearchRound(number, len(candidates), len(timed), best_cost, best_opts, budget.exhausted,
                                 budget.elapsed()))  # fmt: skip
        if not timed or budget.exhausted:
            break
        round_best = beam[0][0]
        if previous_round - round_best < min_progress:
            break
        previous_round = round_best
    return best_opts, best_cost


def _seeded(start: Candidate, seed: Sequence[Opt], has_local: bool, core_groups: bool) -> Candidate | None:
    """`start` with the opts of `seed` applied after its own (None when one is illegal here)."""
    k = KernelOptimizer(start.ast, has_local, core_groups)
    k.applied_opts = list(start.opts)
    try:
        for opt in seed:
            k.apply_opt(opt)
    except KernelOptError:
        return None
    return Candidate(k.get_optimized_ast(), tuple(k.applied_opts))
