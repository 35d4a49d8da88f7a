"""The BEAM algorithm with a deterministic cost, and BEAM on the CPU device against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen.flags import Context
from tg.codegen.opt.optimizer import KernelOptimizer
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps
from tg.codegen.opt.search import ACTIONS, Candidate, _base_kernel, beam_search, kernel_actions
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.ops import UOp
from tg.hcq.engine import beam as engine_beam
from tg.hcq.engine.beam import search_opts
from tg.tensor import Tensor


def kernel_of(t: Tensor) -> UOp:
    calls = [item for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall)]
    return calls[-1].ast


def matmul_kernel(n: int = 64, m: int = 48, k: int = 32) -> UOp:
    return kernel_of(Tensor.empty(n, k) @ Tensor.empty(k, m))


def test_first_round_is_exactly_the_legal_single_actions() -> None:
    ast, opts = _base_kernel(matmul_kernel())
    legal = set()
    for action in ACTIONS:
        k = KernelOptimizer(ast)
        try:
            k.apply_opt(action)
        except KernelOptError:
            continue
        legal.add(k.get_optimized_ast())
    found = {c.ast for c in kernel_actions(Candidate(ast, opts), max_upcast=10**9)}
    assert found == legal and len(found) > 10


def test_upcast_cap_is_honoured() -> None:
    ast, opts = _base_kernel(matmul_kernel())
    for candidate in kernel_actions(Candidate(ast, opts), max_upcast=4):
        k = KernelOptimizer(candidate.ast)
        lanes = np.prod([s for s, t in zip(k.full_shape, k.axis_types, strict=True) if t.name in ("UPCAST", "UNROLL")])
        assert lanes <= 4


def test_search_with_a_deterministic_cost_finds_its_minimum() -> None:
    """Cost: 1 / (upcast lanes) with a penalty for anything but UPCAST, so the best is the largest legal upcast."""

    def cost(candidates: list[Candidate]) -> list[float]:
        out = []
        for c in candidates:
            lanes = np.prod([o.arg or 1 for o in c.opts if o.op is OptOps.UPCAST] or [1])
            others = sum(1 for o in c.opts if o.op is not OptOps.UPCAST)
            out.append(1.0 / lanes + others)
        return out

    opts, best = beam_search(matmul_kernel(), width=3, cost=cost)
    assert all(o.op is OptOps.UPCAST for o in opts)
    assert best == pytest.approx(1 / 256)  # the optimizer's MAX_REGISTER_LANES


def test_cache_hit_does_no_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    ast = matmul_kernel(16, 16, 16)
    first = search_opts(ast, "CPU", width=1)
    assert not first.cached

    def no_timing(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cache hit must not time anything")

    monkeypatch.setattr(engine_beam, "device_cost", no_timing)
    second = search_opts(ast, "CPU", width=1)
    assert second.cached and second.opts == first.opts
    with pytest.raises(AssertionError, match="cache hit"):
        search_opts(ast, "CPU", width=1, ignore_cache=True)
    with Context(IGNORE_BEAM_CACHE=1), pytest.raises(AssertionError, match="cache hit"):
        search_opts(ast, "CPU", width=1)


@pytest.mark.slow
@pytest.mark.parametrize("op", ["matmul", "max", "sum"])
def test_beam_gives_the_same_numbers_on_prime_sizes(op: str) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((367, 367)).astype(np.float32)
    b = rng.standard_normal((367, 367)).astype(np.float32)
    build = {"matmul": lambda x, y: x @ y, "max": lambda x, y: (x + y).max(axis=1), "sum": lambda x, y: (x * y).sum()}
    expected = {"matmul": a @ b, "max": (a + b).max(axis=1), "sum": (a * b).sum()}[op]
    with Context(BEAM=2):
        got = build[op](Tensor(a), Tensor(b)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_beam_never_mutates_a_buffer_it_assigns_to() -> None:
    start = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = Tensor(start).realize()
    with Context(BEAM=2):
        a.assign(a + 1).realize()
    np.testing.assert_array_equal(a.numpy(), start + 1)


def test_cached_opts_keep_split_axis_types() -> None:
    from tg.codegen.opt.opts import Opt
    from tg.codegen.uop.args import AxisType

    opts = (Opt(OptOps.SPLIT, 0, (4, AxisType.UPCAST)), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.SWAP, 0, 1))
    assert engine_beam._decode_opts(engine_beam._encode_opts(opts)) == opts


def test_the_result_is_never_slower_than_a_seed() -> None:
    """Every opt list except the seed's costs more than the seed: the search returns the seed, having tried the
    rounds anyway, and the kernel as it is (cost 5) loses too."""
    seed_opts = (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4))
    tried: list[tuple] = []

    def cost(candidates: list[Candidate]) -> list[float]:
        tried.extend(c.opts for c in candidates)
        return [1.0 if c.opts == seed_opts else 5.0 + len(c.opts) for c in candidates]

    opts, best = beam_search(matmul_kernel(), width=2, cost=cost, seeds=[seed_opts])
    assert opts == seed_opts and best == 1.0
    assert tried[0] == seed_opts and tried[1] == ()  # the seed is timed first, then the kernel as it is
    assert any(len(o) == 3 and o[:2] == seed_opts for o in tried)  # and the search went on from the seed


def test_the_heuristic_opts_of_a_long_matmul_are_a_path_of_search_actions() -> None:
    """From k = 4096 the heuristics cut the row tiles into groups sharing each strip (SPLIT into a LOOP): every opt
    they choose for such a kernel is one of the search's single actions, so a search from the bare kernel can reach
    the heuristic kernel (and, from the seed, its neighbours)."""
    from tg.codegen.opt import hand_coded_optimizations
    from tg.codegen.uop.args import AxisType

    ast, opts = _base_kernel(matmul_kernel(n=512, m=256, k=4096), core_groups=True)
    chosen = hand_coded_optimizations(KernelOptimizer(ast, core_groups=True), max_lanes=256)
    assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.LOOP for o in chosen)
    candidate = Candidate(ast, opts)
    for opt in chosen:
        children = {c.opts[-1]: c for c in kernel_actions(candidate, core_groups=True)}
        assert opt in children, f"{opt} is not a search action from {candidate.opts}"
        candidate = children[opt]
