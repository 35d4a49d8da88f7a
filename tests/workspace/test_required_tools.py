"""Issue 29 item 7: a CI leg that installed clang, PoCL or lavapipe fails, not skips, when the install is broken.
Tests name the missing tool in their skip reason (`missing NAME: ...`); TG_REQUIRE=NAME turns that skip into a
failure (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

TESTS = """
import pytest

def test_needs_opencl():
    pytest.skip("missing opencl: no OpenCL device")

@pytest.mark.skipif(True, reason="missing clang: not installed")
def test_needs_clang():
    pass

def test_needs_real_hardware():
    pytest.skip("needs a board")
"""


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, required: str) -> pytest.RunResult:
    monkeypatch.setenv("TG_REQUIRE", required)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_tools=TESTS)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-rfs")


def test_without_tg_require_a_missing_tool_skips(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, monkeypatch, "").assert_outcomes(skipped=3)


def test_tg_require_turns_the_named_tools_skips_into_failures(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, monkeypatch, "clang,opencl,wgpu")
    # the skip in a test fails it, the skipif of its setup is an error; the skip that names no tool stays a skip
    result.assert_outcomes(failed=1, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["*TG_REQUIRE names opencl, which this machine should have*"])


def test_ci_legs_that_install_tools_require_them() -> None:
    ci_run = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    clang_leg = next(line.strip() for line in ci_run.splitlines() if "CC=clang-19" in line and "pytest" in line)
    assert clang_leg.startswith("TG_REQUIRE=clang,opencl,wgpu ")
