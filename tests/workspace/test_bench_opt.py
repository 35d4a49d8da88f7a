"""bench/bench_opt.py (issue 38): how a sample is timed. After the pause that lets the other library's threads go
idle, untimed calls of the same run lead in, so a call slowed by the pause itself is never in a sample. The clock is
a fake one the runs advance, so nothing here depends on how busy the machine is."""

from __future__ import annotations

import math

import pytest

COLD_CALL_SECONDS, WARM_CALL_SECONDS = 1.0, 0.001


class FakeClock:
    """Stands in for the `time` module: a pause makes the next call cold (COLD_CALL_SECONDS), the others take
    WARM_CALL_SECONDS."""

    def __init__(self) -> None:
        self.now = 0.0
        self.cold = True
        self.calls = 0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.cold = True

    def call(self) -> None:
        self.calls += 1
        self.now += COLD_CALL_SECONDS if self.cold else WARM_CALL_SECONDS
        self.cold = False


@pytest.fixture(scope="module")
def bench(import_bench):
    return import_bench("bench_opt")


@pytest.fixture
def clock(bench, monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(bench, "time", fake)
    return fake


def test_each_sample_times_only_calls_made_after_its_lead_in(bench, clock, monkeypatch) -> None:
    monkeypatch.setattr(bench, "LEAD_IN_SECONDS", 0)
    medians = bench.alternating_medians([clock.call, None], repeats=3, calls=2)
    assert clock.calls == 1 + 3 * (1 + 2)  # the warm-up, then per sample one lead-in call and the two timed ones
    assert medians[0] == pytest.approx(WARM_CALL_SECONDS)  # no cold call was timed
    assert math.isnan(medians[1])  # (a run that is not installed)


def test_the_lead_in_calls_for_its_seconds_and_at_least_once(bench, clock, monkeypatch) -> None:
    monkeypatch.setattr(bench, "LEAD_IN_SECONDS", 0)
    bench.lead_in(clock.call)
    assert clock.calls == 1
    monkeypatch.setattr(bench, "LEAD_IN_SECONDS", 4.5 * WARM_CALL_SECONDS)
    bench.lead_in(clock.call)
    assert clock.calls == 1 + 5  # warm calls until 4.5 of them have passed
