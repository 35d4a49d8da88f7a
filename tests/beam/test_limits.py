"""What BEAM drops and when it stops: early stop at 3x the best, run and compile deadlines, duplicate programs,
and the minimum gain per round."""

from __future__ import annotations

import io
import math
import threading

import pytest

from tg.codegen.flags import Context
from tg.codegen.opt.opts import Opt, OptOps
from tg.codegen.opt.search import Candidate, SearchRound, beam_search
from tg.codegen.pipeline import CodegenFlags, kernel_to_program, with_opts
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.ops import UOp
from tg.hcq import Device
from tg.hcq.engine import beam as engine_beam
from tg.hcq.engine import beam_timer
from tg.hcq.engine.beam_timer import CandidateTimer
from tg.tensor import Tensor


def matmul_kernel(n: int) -> UOp:
    """The product kernel of an n x n matmul (the last one: a big right operand may be packed by a copy first)."""
    t = Tensor.empty(n, n) @ Tensor.empty(n, n)
    return [item.ast for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall)][-1]


class FakeTimer:
    """Stands in for the timing process: answers times[i] for the i-th candidate, remembers the best it was given."""

    def __init__(self, times: list[float]) -> None:
        self.times = times
        self.bests: list[float] = []

    def prepare(self) -> None:
        pass

    def time(self, source: object, binary: bytes, best: float) -> float:
        self.bests.append(best)
        return self.times[len(self.bests) - 1]


def test_the_cost_passes_the_best_so_far_and_drops_programs_already_timed() -> None:
    timer = FakeTimer([0.010, 0.020, math.inf, 0.008])
    ast = matmul_kernel(16)
    cost = engine_beam.device_cost(ast, "CPU", CodegenFlags(), timer)  # type: ignore[arg-type]
    opts = [(), (Opt(OptOps.UPCAST, 0, 2),), (Opt(OptOps.UPCAST, 0, 2),), (Opt(OptOps.UPCAST, 0, 4),),
            (Opt(OptOps.UPCAST, 1, 4),)]  # fmt: skip
    results = cost([Candidate(with_opts(ast, o), o) for o in opts])
    assert results == [0.010, 0.020, math.inf, math.inf, 0.008]  # the repeated opt list was never run
    assert timer.bests == [math.inf, 0.010, 0.010, 0.010]


def serve(requests: list[tuple[float, float]], monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], list[int]]:
    """Run the timing child's loop in this process on scripted launch times: requests are (launch time, best)."""
    launches: list[int] = []
    current = iter([t for t, _ in requests])
    now = 0.0

    def fake_time_program(program: object, buffers: object, repeats: int = 3, var_vals: object = None) -> float:
        nonlocal now
        if not launches or launches[-1] == -1:
            now = next(current)
        launches.append(repeats)
        return now

    monkeypatch.setattr("tg.hcq.engine.timing.time_program", fake_time_program)
    device = Device["CPU"]
    ast = matmul_kernel(8)
    program = kernel_to_program(ast, device.renderer, CodegenFlags())
    source = (program, device.compiler.compile(program.src))
    inbox = io.BytesIO()
    beam_timer._send(inbox, (ast, "CPU", {}))
    for _, best in requests:
        beam_timer._send(inbox, (source[0].name, source[1], source[0].global_size, (), best))
    inbox.seek(0)
    outbox = io.BytesIO()
    original_runtime = device.runtime

    def runtime(name: str, binary: bytes) -> object:
        launches.append(-1)  # a new candidate
        return original_runtime(name, binary)

    monkeypatch.setattr(device, "runtime", runtime)
    beam_timer._serve(inbox, outbox)
    outbox.seek(0)
    assert beam_timer._receive(outbox) == "ready"
    return [beam_timer._receive(outbox) for _ in requests], launches


def test_the_child_stops_timing_a_candidate_slower_than_3x_the_best(monkeypatch: pytest.MonkeyPatch) -> None:
    answers, launches = serve([(0.010, math.inf), (0.040, 0.010), (0.012, 0.010)], monkeypatch)
    assert answers == [0.010, math.inf, 0.012]
    assert launches == [-1, 1, 2, -1, 1, -1, 1, 2]  # the slow one: one timed launch, not three


def test_a_clearly_slower_candidate_is_launched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between RETIME_FACTOR (1.5) and EARLY_STOP_FACTOR (3) times the best: kept with its one launch's time, not
    timed twice more; within 1.5x it is timed three times."""
    assert beam_timer.RETIME_FACTOR == 1.5 and beam_timer.EARLY_STOP_FACTOR == 3.0
    answers, launches = serve([(0.025, 0.010), (0.016, 0.010), (0.014, 0.010)], monkeypatch)
    assert answers == [0.025, 0.016, 0.014]
    assert launches == [-1, 1, -1, 1, -1, 1, 2]


def test_a_candidate_running_past_its_deadline_is_killed_not_waited_for() -> None:
    ast = matmul_kernel(1536)  # unoptimized: about a second, well past the 0.25 s minimum deadline on a quiet machine
    slow = kernel_to_program(ast, Device["CPU"].renderer, CodegenFlags(noopt=True))
    fast = kernel_to_program(ast, Device["CPU"].renderer, CodegenFlags())  # the hand-coded opts
    slow_binary, fast_binary = (Device["CPU"].compiler.compile(p.src) for p in (slow, fast))
    timer = CandidateTimer(ast, "CPU")
    try:
        with Context(BEAM_RUN_TIMEOUT_SEC=600):  # the first one is timed in full, however loaded the machine is
            whole = timer.time(slow, slow_binary, math.inf)
        assert 2 * beam_timer.MIN_DEADLINE_SEC < whole < math.inf, "the kernel must be slow for this test to mean much"
        timer.prepare()
        assert timer.spare is not None
        spare = timer.spare.pid
        assert timer.time(slow, slow_binary, 1e-4) == math.inf  # waited MIN_DEADLINE_SEC, then killed
        assert timer.killed == 1 and timer.process is None
        assert timer.time(fast, fast_binary, math.inf) < math.inf  # a fresh child times the next candidate:
        assert timer.process is not None and timer.process.pid == spare and timer.spare is None  # the spare
    finally:
        timer.close()


def test_a_compile_over_the_timeout_is_dropped_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The upcast kernel's compile hangs until the test lets it go, which it does only after _compile_all returned:
    had _compile_all waited for it, that compile would have finished first (after its 120 s wait)."""
    upcast_source = kernel_to_program(with_opts(matmul_kernel(16), (Opt(OptOps.UPCAST, 0, 4),)),
                                      Device["CPU"].renderer, CodegenFlags()).src  # fmt: skip
    released, hung_compile_finished = threading.Event(), threading.Event()

    def hang_for_upcasts(device_name: str, src: str) -> bytes:
        if src == upcast_source:
            released.wait(120)
            hung_compile_finished.set()
        return b"a binary"  # (no real compiler: the fast compile is instant however loaded the machine is)

    monkeypatch.setattr(engine_beam, "_compile_source", hang_for_upcasts)
    ast = matmul_kernel(16)
    asts = [with_opts(ast, ()), with_opts(ast, (Opt(OptOps.UPCAST, 0, 4),))]
    try:
        with Context(BEAM_TIMEOUT_SEC=1, BEAM_WORKERS=2):
            compiled = engine_beam._compile_all("CPU", asts, CodegenFlags())
        assert not hung_compile_finished.is_set()
    finally:
        released.set()
    assert compiled[0] is not None and compiled[0][1] == b"a binary" and compiled[1] is None


def test_the_search_stops_when_a_round_gains_less_than_the_minimum() -> None:
    """Each opt saves less than the one before: 1, 0.5, 0.25, ... so a 0.3 minimum stops after round 2."""

    def cost(candidates: list[Candidate]) -> list[float]:
        return [10.0 - sum(0.5**i for i in range(len(c.opts))) for c in candidates]

    rounds: list[SearchRound] = []
    _, best = beam_search(matmul_kernel(16), width=2, cost=cost, min_progress=0.3, on_round=rounds.append)
    assert [r.number for r in rounds] == [1, 2, 3]  # round 3 gained 0.25 < 0.3: the last one
    assert best == pytest.approx(10.0 - 1.75)


def test_a_lucky_winner_is_timed_again_against_the_hand_coded_opts() -> None:
    """The search's winner was fast once (1 ms), then slow (9, 8 ms); the hand-coded opts take 5 ms every time."""
    ast = matmul_kernel(16)
    winner, hand_coded = (Opt(OptOps.UPCAST, 0, 2),), (Opt(OptOps.UPCAST, 1, 4),)
    timer = FakeTimer([0.001, 0.005, 0.009, 0.005, 0.008, 0.005])
    confirmed = engine_beam.confirm(ast, "CPU", CodegenFlags(), timer, winner, [hand_coded], 0.001)  # type: ignore[arg-type]
    assert confirmed.opts == hand_coded and confirmed.seconds == 0.005
    assert len(timer.bests) == 2 * engine_beam.CONFIRM_ROUNDS
    alone = engine_beam.confirm(ast, "CPU", CodegenFlags(), timer, winner, [winner], 0.001)  # type: ignore[arg-type]
    assert (alone.opts, alone.seconds) == (winner, 0.001)


@pytest.mark.parametrize(
    ("winner_times", "kept"),
    [([0.0040, 0.0049, 0.0043], "hand_coded"),  # median 4.3 ms vs 5 ms: 0.7 ms faster, but the repeats spread 0.9
     ([0.0030, 0.0031, 0.0032], "winner")],  # 2 ms faster than the hand-coded opts, spread 0.2 ms: replaced
)  # fmt: skip
def test_a_winner_replaces_the_hand_coded_opts_only_beyond_the_spread(winner_times: list[float], kept: str) -> None:
    ast = matmul_kernel(16)
    winner, hand_coded = (Opt(OptOps.UPCAST, 0, 2),), (Opt(OptOps.UPCAST, 1, 4),)
    hand_times = [0.0050, 0.0052, 0.0051] if kept == "winner" else [0.0050, 0.0050, 0.0050]
    timer = FakeTimer([t for pair in zip(winner_times, hand_times, strict=True) for t in pair])  # interleaved turns
    confirmed = engine_beam.confirm(ast, "CPU", CodegenFlags(), timer, winner, [hand_coded], 0.001)  # type: ignore[arg-type]
    assert confirmed.opts == (winner if kept == "winner" else hand_coded)
    expected_spread = max(max(winner_times) - min(winner_times), max(hand_times) - min(hand_times))
    assert confirmed.spread == pytest.approx(expected_spread)
    assert confirmed.hand_coded_seconds == pytest.approx(sorted(hand_times)[1])
