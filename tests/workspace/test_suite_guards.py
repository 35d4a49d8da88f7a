"""The suite's own guards (tests/conftest.py), run on small test files through pytester."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()


def test_a_test_that_leaves_a_ctrl_c_handler_fails_and_the_handler_is_put_back(pytester: pytest.Pytester) -> None:
    """Issue 29 item 7: a SIGINT handler left installed by one test made Ctrl-C do nothing in every later test of its
    worker (four Ctrl-C tests failed on a loaded machine, far from the cause). The leaking test fails instead."""
    pytester.makeconftest(CONFTEST)
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
