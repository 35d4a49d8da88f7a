"""The CPU device's core threads: calls of a launch go to whichever thread is free."""

from __future__ import annotations

import threading

from tg.hcq.devices.cpu_workers import CorePool


def test_a_core_thread_that_is_held_up_does_not_hold_back_the_other_calls() -> None:
    """A thread another process keeps off its core should not delay calls a free thread could make: the call that
    is held up waits until every other call has run, which only a free thread taking them all can do (with one
    fixed chunk of calls per thread, half of them would wait behind it)."""
    pool = CorePool(2, "test-pool")
    total = 8
    others: set[int] = set()
    lock = threading.Lock()
    all_others_ran = threading.Event()

    def run(start: int, end: int) -> None:
        for i in range(start, end):
            if i == 0:
                assert all_others_ran.wait(timeout=10), f"only calls {sorted(others)} ran while call 0 was held up"
                continue
            with lock:
                others.add(i)
                if len(others) == total - 1:
                    all_others_ran.set()

    pool.run(run, total)
    assert others == set(range(1, total))


def test_every_call_runs_once_and_errors_reach_the_caller() -> None:
    pool = CorePool(3, "test-pool-errors")
    calls: list[int] = []
    lock = threading.Lock()

    def run(start: int, end: int) -> None:
        with lock:
            calls.extend(range(start, end))

    pool.run(run, 50)
    assert sorted(calls) == list(range(50))

    def fail(start: int, end: int) -> None:
        if start == 7:
            raise ValueError("call 7 failed")

    try:
        pool.run(fail, 20)
    except ValueError as error:
        assert "call 7" in str(error)
    else:
        raise AssertionError("the error of call 7 was lost")
