"""Issue 12 item 5: CI proves the fresh machine. `.ci/run` and ci.yml run the full suite with gcc (installing no
clang before it), then the codegen and tensor tests with clang, then the tensor tests under SPEC=1."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_ci_run_tests_with_gcc_before_installing_clang() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    full_gcc = lines.index("CC=gcc uv run --frozen pytest")
    clang_install = next(i for i, line in enumerate(lines) if line.startswith("install_missing") and "clang" in line)
    clang_command = "TG_REQUIRE=clang,opencl,wgpu CC=clang-19 uv run --frozen pytest tests/codegen tests/tensor"
    clang_leg = next(i for i, line in enumerate(lines) if line.startswith(clang_command))
    spec_leg = lines.index("CC=gcc SPEC=1 uv run --frozen pytest tests/tensor")
    assert full_gcc < clang_install < clang_leg < spec_leg


def test_ci_yml_has_the_gcc_and_the_clang_legs() -> None:
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    gcc_steps, clang_steps = jobs["test-gcc"]["steps"], jobs["test-clang"]["steps"]
    assert not any("clang" in step.get("run", "") for step in gcc_steps)
    assert any(step.get("env", {}).get("CC") == "gcc" and step["run"].endswith("pytest") for step in gcc_steps)
    assert any(
        step.get("env", {}).get("CC") == "clang" and "tests/codegen tests/tensor" in step["run"] for step in clang_steps
    )
    assert any(step.get("env", {}).get("SPEC") == "1" and "tests/tensor" in step["run"] for step in clang_steps)


def test_ci_run_drives_the_chat_page_in_chromium_after_installing_it() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    install = lines.index("install_missing chromium")
    browser = next(i for i, line in enumerate(lines) if "tests/llm/test_serve_browser.py" in line)
    assert install < browser and lines[browser].startswith("TG_REQUIRE_BROWSER=1 ")
