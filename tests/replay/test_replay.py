"""Process replay end to end: capture kernels from real Tensor programs, replay them, and see changes when the
compiler changes."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tg.codegen.capture import TABLE, flush_captures
from tg.codegen.flags import Context
from tg.hcq.engine import clear_program_cache
from tg.replay.cli import app
from tg.replay.database import summarize
from tg.replay.diff import Version, replay, version_from_path
from tg.tensor import Tensor

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def capture_programs(db: Path, **flags: int) -> None:
    """Run a few small Tensor programs on CPU and PYTHON with capture on, writing into `db`."""
    clear_program_cache()  # kernels compiled earlier in this process would be cache hits, never captured
    with Context(CAPTURE_PROCESS_REPLAY=1, TG_REPLAY_DB=str(db), **flags):
        rng = np.random.default_rng(0)
        for device in ("CPU", "PYTHON"):
            a = Tensor(rng.standard_normal((7, 5)).astype(np.float32), device=device)
            b = Tensor(rng.standard_normal((5, 3)).astype(np.float32), device=device)
            ((a @ b).relu().sum(axis=0) + 1).numpy()
            a.T.contiguous().softmax(axis=-1).numpy()
        flush_captures()


def test_capture_records_every_compiled_kernel_with_its_location(tmp_path: Path) -> None:
    db = tmp_path / "captures.db"
    capture_programs(db)
    summary = summarize(str(db))
    assert summary.rows >= 6
    assert set(summary.devices) == {"CPU", "PYTHON"}
    assert all("test_replay.py" in location for location in summary.locations)


@pytest.mark.parametrize("flags", [{}, {"NOOPT": 1}, {"BEAM": 2}], ids=["heuristics", "noopt", "beam"])
def test_self_replay_gives_no_differences(tmp_path: Path, flags: dict[str, int]) -> None:
    db = tmp_path / "captures.db"
    capture_programs(db, **flags)
    report = replay(str(db), Version("this version"), jobs=2)
    assert report.kernels >= 6
    assert report.changed == [] and report.errors == []
    result = runner.invoke(app, ["diff", "--db", str(db), "--assert"])
    assert result.exit_code == 0, result.output
    assert f"{report.kernels} kernels, 0 changed, 0 errors" in result.output


def changed_compiler(tmp_path: Path) -> Path:
    """A copy of tg.codegen whose 'apply opts' stage never optimizes (a deliberate change of one stage)."""
    copy = tmp_path / "other"
    shutil.copytree(REPO / "lib" / "codegen" / "tg", copy / "tg", ignore=shutil.ignore_patterns("__pycache__"))
    pipeline = copy / "tg" / "codegen" / "pipeline.py"
    text = pipeline.read_text()
    changed = text.replace("noopt=flags.noopt,", "noopt=True,")
    assert changed != text, "the pipeline no longer has the line this test changes"
    pipeline.write_text(changed)
    return copy


def test_a_changed_rewrite_shows_differences_and_assert_exits_1(tmp_path: Path) -> None:
    db = tmp_path / "captures.db"
    capture_programs(db)
    other = changed_compiler(tmp_path)
    report = replay(str(db), version_from_path(str(other)), jobs=2)
    assert report.changed, "turning off the opts stage changed no kernel source"
    result = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other)])
    assert result.exit_code == 0  # differences are reported, not a failure, without --assert
    assert "test_replay.py" in result.output and "@@" in result.output
    assert f"{report.kernels} kernels, {len(report.changed)} changed, 0 errors" in result.output
    asserted = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other), "--assert"])
    assert asserted.exit_code == 1
    assert "stopped at the first difference" in asserted.output


def test_json_output_lists_changed_kernels(tmp_path: Path) -> None:
    import json

    db = tmp_path / "captures.db"
    capture_programs(db)
    other = changed_compiler(tmp_path)
    result = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other), "--json"])
    document = json.loads(result.stdout)
    assert document["kernels"] >= 6 and document["changed"] and document["errors"] == []


def test_replay_against_a_git_ref_uses_that_checkout(tmp_path: Path) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout, so there is no ref to replay against")
    db = tmp_path / "captures.db"
    capture_programs(db)
    result = runner.invoke(app, ["diff", "--db", str(db), "--against", "HEAD", "--json"])
    assert result.exit_code == 0, result.output
    assert "kernels" in result.output


def test_missing_database_is_one_error_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diff", "--db", str(tmp_path / "absent.db")])
    assert result.exit_code == 1
    assert result.output.startswith("error: no capture database")


def test_corrupt_database_is_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "corrupt.db"
    db.write_bytes(b"this is not sqlite" * 100)
    for command in (["diff"], ["list"]):
        result = runner.invoke(app, [*command, "--db", str(db)])
        assert result.exit_code == 1
        assert result.output.startswith("error:") and "Traceback" not in result.output


def test_database_without_the_table_names_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE process_replay_v0 (id INTEGER)")
    result = runner.invoke(app, ["list", "--db", str(db)])
    assert result.exit_code == 1
    assert TABLE in result.output and "process_replay_v0" in result.output


def test_reset_empties_the_captures(tmp_path: Path) -> None:
    db = tmp_path / "captures.db"
    capture_programs(db)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE process_replay_v1 (id INTEGER)")  # an older schema's captures
    assert runner.invoke(app, ["reset", "--db", str(db)]).exit_code == 0
    assert runner.invoke(app, ["list", "--db", str(db)]).exit_code == 1  # the table is gone
    with sqlite3.connect(db) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert [t for (t,) in tables if not t.startswith("sqlite_")] == []  # all of them, schedules and provenance too


def test_capture_command_runs_the_program_with_capture_on(tmp_path: Path) -> None:
    db = tmp_path / "captures.db"
    script = tmp_path / "prog.py"
    script.write_text("from tg.tensor import Tensor\nprint((Tensor([1.0, 2.0, 3.0]) * 3 + 1).sum().item())\n")
    import sys

    result = runner.invoke(app, ["capture", "--db", str(db), "--", sys.executable, str(script)])
    assert result.exit_code == 0
    summary = summarize(str(db))
    assert summary.rows >= 1 and any("prog.py" in location for location in summary.locations)


def test_capture_without_a_command_is_a_usage_error() -> None:
    result = runner.invoke(app, ["capture"])
    assert result.exit_code == 2


def test_speed_times_each_changed_kernel_on_both_versions(tmp_path: Path) -> None:
    import json

    db = tmp_path / "captures.db"
    capture_programs(db)
    other = changed_compiler(tmp_path)
    result = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other), "--speed", "--json"])
    changed = json.loads(result.stdout)["changed"]
    assert changed
    for entry in changed:
        assert entry["seconds_other"] > 0 and entry["seconds_captured"] > 0


def changed_scheduler(tmp_path: Path) -> Path:
    """A copy of tg.codegen whose scheduler gives every kernel a different name (a deliberate change)."""
    copy = tmp_path / "other_schedule"
    shutil.copytree(REPO / "lib" / "codegen" / "tg", copy / "tg", ignore=shutil.ignore_patterns("__pycache__"))
    schedule = copy / "tg" / "codegen" / "schedule" / "schedule.py"
    text = schedule.read_text()
    signature = "(roots: tuple[UOp, ...], target_of: TargetOf | None = None) -> Schedule:\n"
    marker = "def create_schedule" + signature
    assert marker in text, "the scheduler no longer has the function this test wraps"
    schedule.write_text(text.replace(marker, "def _create_schedule_original" + signature)
                        + "\n\ndef create_schedule(roots, target_of=None):\n"
                        "    s = _create_schedule_original(roots, target_of)\n"
                        "    return Schedule(s.items + s.items[:1], s.results)\n")  # fmt: skip
    return copy


def test_schedule_compares_the_kernels_of_each_captured_schedule(tmp_path: Path) -> None:
    import json

    db = tmp_path / "captures.db"
    capture_programs(db)
    same = runner.invoke(app, ["diff", "--db", str(db), "--schedule", "--assert"])
    assert same.exit_code == 0, same.output
    assert "0 changed, 0 errors" in same.output.splitlines()[-1] and " schedules, " in same.output
    other = changed_scheduler(tmp_path)
    result = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other), "--schedule", "--json"])
    schedules = json.loads(result.stdout)["schedules"]
    assert schedules["count"] >= 4 and len(schedules["changed"]) == schedules["count"]
    first = schedules["changed"][0]
    assert len(first["other"]) == len(first["captured"]) + 1
    asserted = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other), "--schedule", "--assert"])
    assert asserted.exit_code == 1
