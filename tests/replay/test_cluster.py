"""tg-replay diff --ray (tests marked `cluster`, on a local Ray cluster): the same report and exit code as a local
diff, for a self-check, another version (--python-path) and --schedule; without Ray, --ray is one error line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tg.codegen.capture import flush_captures
from tg.codegen.flags import Context
from tg.hcq.engine import clear_program_cache
from tg.replay.cli import RAY_MISSING, app
from tg.replay.diff import replay, version_from_path
from tg.tensor import Tensor

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def capture(db: Path) -> Path:
    """A few small programs on CPU and PYTHON, captured into `db`: about ten kernels and their schedules."""
    clear_program_cache()  # kernels compiled earlier in this process would be cache hits, never captured
    with Context(CAPTURE_PROCESS_REPLAY=1, TG_REPLAY_DB=str(db)):
        rng = np.random.default_rng(1)
        for device in ("CPU", "PYTHON"):
            a = Tensor(rng.standard_normal((6, 4)).astype(np.float32), device=device)
            b = Tensor(rng.standard_normal((4, 5)).astype(np.float32), device=device)
            ((a @ b).relu().sum(axis=0) + 1).numpy()
            a.T.contiguous().softmax(axis=-1).numpy()
            (a.exp() * 2).max(axis=1).numpy()
        flush_captures()
    return db


def without_opts(tmp_path: Path) -> Path:
    """A copy of tg.codegen whose opts stage never optimizes: another version that changes most kernels."""
    copy = tmp_path / "other"
    shutil.copytree(REPO / "lib" / "codegen" / "tg", copy / "tg", ignore=shutil.ignore_patterns("__pycache__"))
    pipeline = copy / "tg" / "codegen" / "pipeline.py"
    text = pipeline.read_text()
    assert "noopt=flags.noopt," in text, "the pipeline no longer has the line this test changes"
    pipeline.write_text(text.replace("noopt=flags.noopt,", "noopt=True,"))
    return copy


def diff(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["diff", *args])
    return result.exit_code, result.stdout


@pytest.fixture
def cluster(ray_cluster: ModuleType) -> ModuleType:
    import tg.replay.cluster

    return tg.replay.cluster


@pytest.mark.cluster
def test_a_ray_diff_against_another_version_reports_what_a_local_one_does(tmp_path: Path, cluster: ModuleType) -> None:
    db = str(capture(tmp_path / "captures.db"))
    other = str(without_opts(tmp_path))
    local = diff("--db", db, "--python-path", other, "--json")
    on_ray = diff("--db", db, "--python-path", other, "--json", "--ray")
    assert local[0] == on_ray[0] == 0
    document = json.loads(local[1])
    assert document["changed"] and document["errors"] == [] and document["kernels"] >= 8
    assert json.loads(on_ray[1]) == document
    text_local, text_ray = diff("--db", db, "--python-path", other), diff("--db", db, "--python-path", other, "--ray")
    assert text_local == text_ray
    assert diff("--db", db, "--python-path", other, "--assert", "--ray")[0] == 1


@pytest.mark.cluster
def test_a_ray_self_check_finds_nothing_and_exits_0_with_assert(tmp_path: Path, cluster: ModuleType) -> None:
    db = str(capture(tmp_path / "captures.db"))
    local, on_ray = diff("--db", db, "--assert"), diff("--db", db, "--assert", "--ray")
    assert local == on_ray and local[0] == 0 and " 0 changed, 0 errors" in local[1]


@pytest.mark.cluster
def test_one_row_per_task_still_gives_the_same_report(tmp_path: Path, cluster: ModuleType) -> None:
    db = str(capture(tmp_path / "captures.db"))
    other = version_from_path(str(without_opts(tmp_path)))
    local = replay(db, other, jobs=2)
    on_ray = replay(db, other, jobs=2, runner=cluster.ray_runner(rows_per_task=1))
    assert on_ray.kernels == local.kernels
    assert [(r.row.id, r.src, r.error, r.opts) for r in on_ray.results] == [
        (r.row.id, r.src, r.error, r.opts) for r in local.results
    ]


@pytest.mark.cluster
def test_a_ray_schedule_diff_is_the_local_one(tmp_path: Path, cluster: ModuleType) -> None:
    db = str(capture(tmp_path / "captures.db"))
    other = str(without_opts(tmp_path))
    local = diff("--db", db, "--python-path", other, "--schedule", "--json")
    on_ray = diff("--db", db, "--python-path", other, "--schedule", "--json", "--ray")
    assert local[0] == on_ray[0] == 0
    assert json.loads(on_ray[1]) == json.loads(local[1]) and json.loads(local[1])["schedules"]["count"] >= 4


def test_ray_without_the_extra_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as it does without the extra
    monkeypatch.delitem(sys.modules, "tg.replay.cluster", raising=False)
    result = runner.invoke(app, ["diff", "--db", str(tmp_path / "none.db"), "--ray"])
    assert result.exit_code == 1 and result.stderr.strip().splitlines() == [f"error: {RAY_MISSING}"]


def tg_replay(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """tg-replay in a process of its own (this one may have joined the test cluster already), with a hang guard."""
    command = [str(Path(sys.executable).parent / "tg-replay"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


@pytest.mark.cluster
@pytest.mark.slow
def test_ray_address_joins_a_cluster_started_with_ray_start(tmp_path: Path, ray_head: Any) -> None:
    """tg-replay diff --ray-address against the cluster `ray start --head` started: the local diff's report."""
    db = str(capture(tmp_path / "captures.db"))
    other = str(without_opts(tmp_path))
    local = diff("--db", db, "--python-path", other, "--json")
    result = tg_replay("diff", "--db", db, "--python-path", other, "--json", "--ray-address", ray_head.address,
                       env=ray_head.environment)  # fmt: skip
    assert result.returncode == local[0] == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(local[1])
    assert "Connecting to existing Ray cluster" in result.stderr  # Ray's own line: not a new local cluster


@pytest.mark.cluster
def test_an_unreachable_ray_address_is_one_error_line(tmp_path: Path, ray_installed: ModuleType) -> None:
    """Nothing listens at the address: one `error:` line and exit 1, not Ray waiting for the cluster for ever."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"  # closed again before the tool runs
    db = str(capture(tmp_path / "captures.db"))
    result = tg_replay("diff", "--db", db, "--ray-address", address)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]  # (a dirty tree's)
    assert errors == [f"error: cannot reach the Ray cluster at {address}: Connection refused"]
