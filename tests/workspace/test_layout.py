"""The monorepo foundation: packages, console scripts, import contracts and CI files."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ["lib/env", "lib/codegen", "lib/drivers", "lib/hcq", "lib/tensor"] + [
    f"tools/{tool}" for tool in ("flash", "autogen", "beam", "replay", "llm")
]
TOOLS = ["flash", "autogen", "beam", "replay", "llm"]


def run(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env)


def test_tg_is_an_implicit_namespace_package() -> None:
    for folder in PACKAGE_FOLDERS:
        assert (ROOT / folder / "pyproject.toml").is_file()
        assert not (ROOT / folder / "tg" / "__init__.py").exists(), f"{folder}/tg/__init__.py breaks the namespace"
    import tg

    assert getattr(tg, "__file__", None) is None


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_help_says_what_it_is_for(tool: str) -> None:
    result = run(sys.executable, "-m", f"tg.{tool}.cli", "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout and len(result.stdout.split()) > 8


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_version(tool: str) -> None:
    exe = shutil.which(f"tg-{tool}", path=str(Path(sys.executable).parent))
    assert exe, f"console script tg-{tool} is not installed"
    result = run(exe, "--version")
    assert result.returncode == 0
    from importlib.metadata import version

    assert result.stdout == f"tg-{tool} {version(f'tg-{tool}')}\n"  # tg.env.version, one helper for every tool


def test_every_tool_prints_its_version_through_the_one_helper() -> None:
    for tool in TOOLS:
        source = (ROOT / "tools" / tool / "tg" / tool / "cli.py").read_text()
        assert f'print_version("tg-{tool}", value)' in source and "importlib.metadata" not in source


@pytest.mark.parametrize("level", ["", "1", "2"])
def test_debug_at_any_level_shows_the_traceback_of_an_expected_failure(level: str) -> None:
    """DEBUG is read through the flags registry (tg.env.flags) in every tool, so DEBUG=2 means debug too (tg-flash
    compared the text with "1", tg-autogen with "0"); unset, an expected failure is one line."""
    import os

    exe = shutil.which("tg-autogen", path=str(Path(sys.executable).parent))
    assert exe
    result = run(exe, "regen", "--check", "no-such-target", env={**os.environ, "DEBUG": level})
    assert result.returncode == 1 and "unknown target(s): no-such-target" in result.stderr
    assert ("Traceback" in result.stderr) == (level != "")
    for name in ("flash", "autogen"):
        source = (ROOT / "tools" / name / "tg" / name / "cli.py").read_text()
        assert 'environ.get("DEBUG' not in source and "debug or DEBUG >= 1" in source
