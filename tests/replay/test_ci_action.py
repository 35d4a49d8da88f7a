"""The process-replay CI action: valid for GitHub, and its rule (fail on change unless opted in) is as documented."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / ".github" / "actions" / "process-replay" / "action.yml"


def test_action_matches_the_github_actions_schema() -> None:
    checker = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    result = subprocess.run([checker, "--builtin-schema", "vendor.github-actions", str(ACTION)], capture_output=True)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_action_asserts_unless_opted_in_and_can_be_skipped() -> None:
    script = yaml.safe_load(ACTION.read_text())["runs"]["steps"][0]["run"]
    assert '"[skip_process_replay]"' in script and '"[kernels-changed]"' in script
    assert 'assert="--assert"' in script and "tg-replay diff" in script and "git merge-base" in script
    assert "--schedule" in script  # the scheduler is replayed too: fusion and kernel naming changes fail the check


def test_ci_runs_the_action_on_pull_requests() -> None:
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    steps = jobs["process-replay"]["steps"]
    assert any("tg-replay capture" in step.get("run", "") for step in steps)
    assert any(step.get("uses") == "./.github/actions/process-replay" for step in steps)
