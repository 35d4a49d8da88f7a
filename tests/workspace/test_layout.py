"""The monorepo foundation: packages, console scripts, import contracts and CI files."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ["lib/codegen", "lib/drivers", "lib/hcq", "lib/tensor"] + [
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
    assert result.stdout.startswith(f"tg-{tool} ")


def test_importing_tensor_pulls_in_no_cli_or_optional_libraries() -> None:
    optional = ("typer", "rich", "clang", "llvmlite", "fastapi", "usb")
    libraries = "tg.tensor, tg.codegen, tg.hcq, tg.drivers"
    code = f"import sys, {libraries}; print([m for m in {optional!r} if m in sys.modules])"
    result = run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    """Run import-linter on a copy of the workspace, with the copy first on the import path."""
    package_roots = [str(tree / folder) for folder in PACKAGE_FOLDERS]
    env = {"PYTHONPATH": ":".join(package_roots), "PATH": str(Path(sys.executable).parent)}
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint
    return run(lint, "--no-cache", "--config", str(tree / "pyproject.toml"), cwd=tree, env=env)


@pytest.fixture
def workspace_copy(tmp_path: Path) -> Path:
    for folder in PACKAGE_FOLDERS:
        shutil.copytree(ROOT / folder / "tg", tmp_path / folder / "tg", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_import_contracts_hold_on_the_real_tree(workspace_copy: Path) -> None:
    result = lint_imports(workspace_copy)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "importer, imported, contract",
    [
        ("lib/codegen/tg/codegen", "tg.tensor", "codegen is the base"),
        ("lib/drivers/tg/drivers", "tg.hcq", "drivers imports no other tg package"),
        ("lib/hcq/tg/hcq", "tg.tensor", "hcq imports only codegen and drivers"),
        ("lib/tensor/tg/tensor", "tg.drivers", "tensor imports only codegen and hcq"),
        ("tools/beam/tg/beam", "tg.replay", "no tool imports another tool"),
    ],
)
def test_import_contracts_bite(workspace_copy: Path, importer: str, imported: str, contract: str) -> None:
    (workspace_copy / importer / "violation.py").write_text(f"import {imported}  # deliberate violation\n")
    result = lint_imports(workspace_copy)
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout


def test_workflows_match_the_github_schema() -> None:
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert workflows
    checker = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert checker
    result = run(checker, "--builtin-schema", "vendor.github-workflows", *workflows)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    timeout-minutes: soon\n    steps: []\n")
    checker = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    result = run(checker, "--builtin-schema", "vendor.github-workflows", str(bad))
    assert result.returncode != 0


def test_hw_tests_are_skipped_unless_asked_for(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    hw: hardware\n")
    pytester.makepyfile("import pytest\n@pytest.mark.hw\ndef test_board():\n    assert False\n")
    monkeypatch.delenv("TG_HW", raising=False)
    pytester.runpytest("-p", "no:xdist").assert_outcomes(skipped=1)
    monkeypatch.setenv("TG_HW", "1")
    pytester.runpytest("-p", "no:xdist").assert_outcomes(failed=1)
