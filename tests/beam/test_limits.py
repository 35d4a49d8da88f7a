"""What BEAM drops and when it stops: early stop at 3x the best, run and compile deadlines, duplicate programs,
and the minimum gain per round."""

from __future__ import annotations

import math
import time

import pytest

from tg.codegen.flags import Context
from tg.codegen.opt.opts import Opt, OptOps
from tg.codegen.opt.search import Candidate, SearchRound, beam_search
from tg.codegen.pipeline import CodegenFlags, with_opts
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.ops import UOp
from tg.hcq import Device
from tg.hcq.engine import beam as engine_beam
from tg.hcq.engine.programs import compile_program
from tg.hcq.engine.timing import launch_within, scratch_buffers
from tg.tensor import Tensor


def matmul_kernel(n: int) -> UOp:
    t = Tensor.empty(n, n) @ Tensor.empty(n, n)
    return next(item.ast for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall))


class ScriptedTimes:
    """Stands in for the device: the first launch of the i-th program takes times[i]; precise timing says the same."""

    def __init__(self, times: list[float]) -> None:
        self.times = times
        self.deadlines: list[float] = []
        self.precise_timings = 0
        self.current = 0.0

    def launch_within(self, program: object, buffers: object, seconds: float) -> float | None:
        self.current = self.times[len(self.deadlines)]
        self.deadlines.append(seconds)
        return None if self.current > seconds else self.current

    def time_program(self, program: object, buffers: object, repeats: int = 3) -> float:
        self.precise_timings += repeats
        return self.current


def test_a_candidate_slower_than_3x_the_best_is_dropped_and_not_timed_further(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = ScriptedTimes([0.010, 0.020, 0.070, 0.040, 0.008])
    monkeypatch.setattr(engine_beam, "launch_within", script.launch_within)
    monkeypatch.setattr(engine_beam, "time_program", script.time_program)
    ast = matmul_kernel(16)
    cost = engine_beam.device_cost(ast, "CPU", CodegenFlags())
    opts = [(), *((Opt(OptOps.UPCAST, axis, amount),) for axis in (0, 1) for amount in (2, 4))]
    results = cost([Candidate(with_opts(ast, o), o) for o in opts])
    # 0.070 ran past its deadline; 0.040 finished within it but was timed at more than 3x the best (0.010)
    assert results == [0.010, 0.020, math.inf, math.inf, 0.008]
    # the first launch waits BEAM_RUN_TIMEOUT_SEC before anything was timed, then 3x the best so far (>= 50 ms)
    assert script.deadlines == [10.0, 0.05, 0.05, 0.05, 0.05]
    assert script.precise_timings == 3 + 3 + 0 + 1 + 3  # a dropped candidate is not timed further


def test_a_candidate_that_renders_an_already_timed_program_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    script = ScriptedTimes([0.010, 0.010])
    monkeypatch.setattr(engine_beam, "launch_within", script.launch_within)
    monkeypatch.setattr(engine_beam, "time_program", script.time_program)
    ast = matmul_kernel(16)
    cost = engine_beam.device_cost(ast, "CPU", CodegenFlags())
    same = (Opt(OptOps.UPCAST, 0, 4),)
    assert cost([Candidate(ast, same), Candidate(ast, same)]) == [0.010, math.inf]
    assert len(script.deadlines) == 1  # the duplicate never ran


def test_a_long_launch_is_not_waited_for_past_its_deadline() -> None:
    with Context(NOOPT=1):
        ast = matmul_kernel(512)
        program = compile_program("CPU", ast, CodegenFlags(noopt=True))
    buffers = scratch_buffers(ast, "CPU")
    whole = launch_within(program, buffers, 60.0)
    assert whole is not None and whole > 0.1, "the kernel must be slow for this test to mean anything"
    start = time.perf_counter()
    assert launch_within(program, buffers, 0.01) is None
    assert time.perf_counter() - start < whole / 2
    Device["CPU"].synchronize()  # the launch still finishes; the device stays usable
    assert launch_within(program, buffers, 60.0) is not None


def test_a_compile_over_the_timeout_is_dropped_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    real = engine_beam._compile_candidate

    def slow_for_upcasts(device_name: str, ast: UOp, flags: CodegenFlags) -> object:
        if ast.arg.opts_to_apply:
            time.sleep(3)
        return real(device_name, ast, flags)

    monkeypatch.setattr(engine_beam, "_compile_candidate", slow_for_upcasts)
    ast = matmul_kernel(16)
    asts = [with_opts(ast, ()), with_opts(ast, (Opt(OptOps.UPCAST, 0, 4),))]
    start = time.perf_counter()
    with Context(BEAM_TIMEOUT_SEC=1, BEAM_WORKERS=2):
        compiled = engine_beam._compile_all("CPU", asts, CodegenFlags())
    assert time.perf_counter() - start < 2.5
    assert compiled[0] is not None and compiled[1] is None


def test_the_search_stops_when_a_round_gains_less_than_the_minimum() -> None:
    """Each opt saves less than the one before: 1, 0.5, 0.25, ... so a 0.3 minimum stops after round 2."""

    def cost(candidates: list[Candidate]) -> list[float]:
        return [10.0 - sum(0.5**i for i in range(len(c.opts))) for c in candidates]

    rounds: list[SearchRound] = []
    _, best = beam_search(matmul_kernel(16), width=2, cost=cost, min_progress=0.3, on_round=rounds.append)
    assert [r.number for r in rounds] == [1, 2, 3]  # round 3 gained 0.25 < 0.3: the last one
    assert best == pytest.approx(10.0 - 1.75)
