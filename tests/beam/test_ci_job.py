"""The CI job that runs tg-beam on a small model's kernels (leg `beam` of .ci/run, ci.yml job `beam`; script
.ci/beam): its commands are the ones run here on a one-kernel model, and the script fails when there is nothing to
verify."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CI_MODEL = "examples/tiny_mlp.py"


def beam_job_command() -> str:
    """The command of the `beam` leg of .ci/run, the leg ci.yml's job `beam` runs."""
    job = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["beam"]
    assert [step["run"] for step in job["steps"] if "run" in step][0].endswith("bash .ci/run beam")
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    start = lines.index("leg_beam() {")
    runs = [line for line in lines[start : lines.index("}", start)] if ".ci/beam" in line]
    assert len(runs) == 1
    return runs[0]


def run_ci_beam(model: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`.ci/beam MODEL` as `uv run` runs it: the workspace environment's tg-beam and python first on PATH."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", BEAM_WIDTH="1")
    env["TG_CACHE_DIR"] = str(tmp_path / "cache")
    return subprocess.run([str(ROOT / ".ci" / "beam"), str(model)], env=env, capture_output=True, text=True)


def test_the_workflow_runs_the_script_on_the_small_model() -> None:
    assert beam_job_command() == f"CC=gcc uv run --frozen .ci/beam {CI_MODEL}"
    assert (ROOT / CI_MODEL).is_file()


def test_the_script_dumps_searches_and_verifies_every_kernel(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text("from tg.tensor import Tensor\nprint((Tensor.ones(3, 5) * 2).sum(axis=1).numpy())\n")
    done = run_ci_beam(model, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("verify: ok") == 1
    assert done.stdout.rstrip().endswith("1 kernels searched and verified")


def test_the_script_fails_when_the_model_compiles_no_kernel(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text("print('no tensors here')\n")
    done = run_ci_beam(model, tmp_path)
    assert done.returncode == 1 and "compiled no kernel" in done.stderr
