"""What keeps a BEAM search short: the time budget (BEAM_TIME_BUDGET), no expansion of starts that could not be
timed, and no compile of a source already rendered."""

from __future__ import annotations

import json
import math
import pickle
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tg.beam.cli import app, progress_text
from tg.codegen.flags import FLAGS, Context
from tg.codegen.opt.opts import Opt, OptOps
from tg.codegen.opt.search import Candidate, SearchRound, beam_search
from tg.codegen.pipeline import CodegenFlags, with_opts
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.ops import UOp
from tg.hcq.engine import beam as engine_beam
from tg.tensor import Tensor


def matmul_kernel(n: int = 64, m: int = 48, k: int = 32) -> UOp:
    t = Tensor.empty(n, k) @ Tensor.empty(k, m)
    return [item.ast for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall)][-1]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lanes_cost(clock: FakeClock, seconds_per_candidate: float, log: list[int]):
    """Each candidate costs `seconds_per_candidate` on `clock`; more upcast lanes are faster (deterministic)."""

    def cost(candidates: list[Candidate]) -> list[float]:
        clock.now += seconds_per_candidate * len(candidates)
        log.append(len(candidates))
        return [1.0 / math.prod(o.arg or 1 for o in c.opts if o.op is OptOps.UPCAST) for c in candidates]

    return cost


def test_the_budget_ends_the_search_with_the_best_so_far_and_says_so() -> None:
    clock, calls, rounds = FakeClock(), [], []
    opts, best = beam_search(matmul_kernel(), 2, lanes_cost(clock, 1.0, calls), on_round=rounds.append,
                             time_budget=20, clock=clock, chunk=4)  # fmt: skip
    assert calls == [1, 4, 4, 4, 4]  # the first beam (1 s), then chunks of 4: a fifth would end at 21 s
    assert clock.now == 17
    assert rounds[-1].out_of_time and not any(r.out_of_time for r in rounds[:-1])
    assert rounds[-1].timed < rounds[-1].candidates  # the last round was cut short
    assert best < 1.0 and best == rounds[-1].best_seconds and opts == rounds[-1].best_opts  # found, kept

    unlimited_clock, unlimited_calls = FakeClock(), []
    _, unlimited_best = beam_search(matmul_kernel(), 2, lanes_cost(unlimited_clock, 1.0, unlimited_calls))
    assert sum(unlimited_calls) > 20 and unlimited_best < best  # without a budget it goes further


def test_a_budget_already_spent_by_the_first_beam_times_nothing_more() -> None:
    clock, calls, rounds = FakeClock(), [], []
    opts, best = beam_search(matmul_kernel(), 2, lanes_cost(clock, 30.0, calls), on_round=rounds.append,
                             time_budget=20, clock=clock)  # fmt: skip
    assert calls == [1] and opts == () and best == 1.0
    assert [(r.number, r.timed, r.out_of_time) for r in rounds] == [(1, 0, True)]


def test_a_start_that_could_not_be_timed_is_not_expanded() -> None:
    """The kernel as it is (no opts) costs inf (too slow, killed): its children would be as slow, so round 1
    expands only the seed."""
    seed = (Opt(OptOps.UPCAST, 0, 4),)
    tried: list[tuple[Opt, ...]] = []

    def cost(candidates: list[Candidate]) -> list[float]:
        tried.extend(c.opts for c in candidates)
        return [math.inf if c.opts == () else 1.0 for c in candidates]

    beam_search(matmul_kernel(), 2, cost, seeds=[seed], max_rounds=1)
    assert tried[:2] == [seed, ()] and len(tried) > 2
    assert all(opts[:1] == seed for opts in tried[2:])


def test_a_source_rendered_twice_is_compiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """UPCAST 0 by the whole axis and UPCAST 0 by 0 (whole axis) are different opt lists of one program."""
    compiled: list[str] = []
    real = engine_beam._compile_source

    def counting(device_name: str, src: str) -> bytes:
        compiled.append(src)
        return real(device_name, src)

    monkeypatch.setattr(engine_beam, "_compile_source", counting)
    ast = matmul_kernel(16, 16, 16)
    timer = RecordingTimer()
    cost = engine_beam.device_cost(ast, "CPU", CodegenFlags(), timer)  # type: ignore[arg-type]
    lists = [(Opt(OptOps.UPCAST, 0, 16),), (Opt(OptOps.UPCAST, 0, 0),), (Opt(OptOps.UPCAST, 1, 4),)]
    candidates = [Candidate(with_opts(ast, opts), opts) for opts in lists]
    assert (
        engine_beam._render("CPU", candidates[0].ast, CodegenFlags()).src
        == engine_beam._render(  # type: ignore[union-attr]
            "CPU", candidates[1].ast, CodegenFlags()
        ).src
    )  # the premise
    results = cost(candidates)
    assert len(compiled) == len(set(compiled)) == 2 and timer.count == 2
    assert math.isfinite(results[0]) and results[1] == math.inf and math.isfinite(results[2])
    assert cost(candidates[:1]) == [math.inf] and len(compiled) == 2  # nor compiled again in a later round


class RecordingTimer:
    def __init__(self) -> None:
        self.count = 0

    def prepare(self) -> None:
        pass

    def time(self, source: object, binary: bytes, best: float) -> float:
        self.count += 1
        return 0.001 * self.count


def slow_device_cost(seconds_per_candidate: float):
    """The engine's cost function, slowed down so that a one-second budget runs out in round 1."""
    real = engine_beam.device_cost

    def make(*args: object, **kwargs: object):
        cost = real(*args, **kwargs)  # type: ignore[arg-type]

        def slow(candidates: list[Candidate]) -> list[float]:
            time.sleep(seconds_per_candidate * len(candidates))
            return cost(candidates)

        return slow

    return make


def test_search_opts_reports_a_spent_budget_at_debug_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine_beam, "device_cost", slow_device_cost(0.1))
    rounds: list[SearchRound] = []
    with Context(BEAM_TIME_BUDGET=1, DEBUG=1):  # unlimited, this kernel's rounds take minutes at 0.1 s per candidate
        result = engine_beam.search_opts(matmul_kernel(), "CPU", 2, ignore_cache=True, on_round=rounds.append)
    assert result.out_of_time and rounds[-1].out_of_time
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("BEAM 2 ")][-1]
    assert "time budget of 1 s spent (BEAM_TIME_BUDGET): the best so far" in line
    with Context(DEBUG=0):
        assert engine_beam.cached_opts(matmul_kernel(), "CPU", 2) is not None  # kept like any result


def test_tg_beam_says_when_the_budget_ended_the_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_beam, "device_cost", slow_device_cost(0.1))
    kernel = tmp_path / "k.pkl"
    kernel.write_bytes(pickle.dumps(matmul_kernel()))
    runner = CliRunner()
    with Context(BEAM_TIME_BUDGET=1):
        text = runner.invoke(app, ["--kernel", str(kernel), "--beam", "2", "--ignore-cache"])
        document = runner.invoke(app, ["--kernel", str(kernel), "--beam", "2", "--ignore-cache", "--json"])
    assert text.exit_code == 0, text.output
    assert "BEAM_TIME_BUDGET=1 s spent: the best so far" in text.stdout
    assert json.loads(document.stdout)["out_of_time"] is True


def test_tg_beam_progress_says_when_the_budget_ended_the_search() -> None:
    cut = SearchRound(3, 80, 19, 0.02315, (), out_of_time=True, seconds=54.2)
    assert progress_text("r_8", cut) == (
        "r_8: round 3 (54 s): 80 candidates, 19 timed, best 23150.0 us: time budget spent, ending with the best so far"
    )
    assert "budget" not in progress_text("r_8", SearchRound(2, 99, 51, 0.025, (), seconds=33.0))


def test_the_budget_is_60_seconds_unless_set_and_0_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert FLAGS["BEAM_TIME_BUDGET"].default == 60
    budgets: list[float | None] = []
    real = engine_beam.beam_search

    def recording(*args: object, **kwargs: object):
        budgets.append(kwargs["time_budget"])  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_beam, "beam_search", recording)
    with Context(BEAM_TIME_BUDGET=0):
        engine_beam.search_opts(matmul_kernel(8, 8, 8), "CPU", 1, ignore_cache=True)
    with Context(BEAM_TIME_BUDGET=60):
        engine_beam.search_opts(matmul_kernel(8, 8, 8), "CPU", 1, ignore_cache=True)
    assert budgets[0] is None and budgets[1] is not None and 50 < budgets[1] <= 54  # 90% of 60 s, less the start
