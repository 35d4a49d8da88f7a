"""Issue 29 item 7: the suite holds on a busy machine. Hypothesis' per-example wall-clock deadline (200 ms by
default) is off suite-wide (tests/conftest.py), so a loaded machine cannot fail a property test."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

SLOW_EXAMPLES = """
import time
from hypothesis import given, settings, strategies as st

@settings(max_examples=2)
@given(st.integers())
def test_each_example_takes_longer_than_the_default_deadline(n):
    time.sleep(0.3)  # what a descheduled worker on a loaded machine looks like to Hypothesis
"""


# Hypothesis loads its "ci" profile (no deadline) when one of these is set, as .ci/run's CI=true is
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "TF_BUILD", "GITLAB_CI", "BUILDKITE", "CIRCLECI")


def test_a_property_test_whose_examples_are_slow_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in CI_VARIABLES:  # the premise needs Hypothesis' default profile, as on a developer's machine
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_slow=SLOW_EXAMPLES)
    without = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    without.assert_outcomes(failed=1)  # the premise: Hypothesis' default deadline fails it
    pytester.makeconftest(CONFTEST.read_text())
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist").assert_outcomes(passed=1)


def test_a_test_that_leaves_a_ctrl_c_handler_fails_and_the_handler_is_put_back(pytester: pytest.Pytester) -> None:
    """Issue 29 item 7: a SIGINT handler left installed by one test would make Ctrl-C do nothing in every later test
    of its worker, far from the cause. The leaking test fails instead."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        """
        import signal

        def test_leaks():
            signal.signal(signal.SIGINT, lambda signum, frame: None)

        def test_after():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)  # the leaking test passes its body and errors in teardown
    result.stdout.fnmatch_lines(["*test_leaks left the SIGINT handler*"])


def test_ctrl_c_tests_pass_when_the_suite_starts_with_sigint_ignored(pytester: pytest.Pytester) -> None:
    """Issue 29 item 7: `pytest &` from a script (a shell without job control) starts with SIGINT ignored, which the
    xdist workers and every subprocess inherit. That, not the load, failed the Ctrl-C tests beside a busy loop."""
    pytester.makepyfile(
        """
        import signal, subprocess, sys

        def test_ctrl_c_raises_keyboard_interrupt():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

        def test_a_subprocess_dies_of_ctrl_c():
            child = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGINT)"])
            assert child.returncode != 0
        """
    )
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `cmd &` does in a script
    try:
        without = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist")
        pytester.makeconftest(CONFTEST.read_text())
        with_conftest = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-n", "1")
    finally:
        signal.signal(signal.SIGINT, ignored)
    without.assert_outcomes(failed=2)  # the premise: the process and its children ignore Ctrl-C
    with_conftest.assert_outcomes(passed=2)
