"""Replay rows are tg IR stored by name and read by a restricted unpickler: a crafted row runs nothing, a row
from another op table loads (or names the op it lacks), and the database says which tg captured it."""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from tg.codegen.capture import META_TABLE, SCHEDULE_TABLE, TABLE
from tg.codegen.serial import codegen_version, git_state
from tg.replay.cli import app

runner = CliRunner()


class RunsAShellCommand:
    """Unpickled with plain pickle, this would run `touch MARKER`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_kernel_row_is_refused_and_runs_nothing(tmp_path: Path, small_capture: Callable[[], Path]) -> None:
    db = small_capture()
    marker = tmp_path / "pwned"
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE {TABLE} SET inputs = ? WHERE id = (SELECT MIN(id) FROM {TABLE})",
                     (pickle.dumps(RunsAShellCommand(marker)),))  # fmt: skip
    result = runner.invoke(app, ["diff", "--db", str(db)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "row 1: refused posix.system: not a tg IR type" in errors[0]
    assert "Traceback" not in result.output
    assert not marker.exists()


def test_a_crafted_schedule_row_is_refused_and_runs_nothing(tmp_path: Path, small_capture: Callable[[], Path]) -> None:
    db = small_capture()
    marker = tmp_path / "pwned"
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE {SCHEDULE_TABLE} SET roots = ?", (pickle.dumps(RunsAShellCommand(marker)),))
    result = runner.invoke(app, ["diff", "--db", str(db), "--schedule"])
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and "refused posix.system" in result.output
    assert not marker.exists()


def renumbered_ops(tmp_path: Path, repo: Path) -> Path:
    """A copy of tg.codegen with one op added at the front of the op table: every op after it has a new number."""
    copy = tmp_path / "renumbered"
    shutil.copytree(repo / "lib" / "codegen" / "tg", copy / "tg", ignore=shutil.ignore_patterns("__pycache__"))
    ops = copy / "tg" / "codegen" / "uop" / "ops.py"
    text = ops.read_text()
    assert "    PARAM = auto()\n" in text
    ops.write_text(text.replace("    PARAM = auto()\n", "    ADDED_BY_A_NEWER_TG = auto()\n    PARAM = auto()\n", 1))
    return copy


def test_rows_replay_unchanged_after_an_op_is_added_in_front(
    tmp_path: Path, small_capture: Callable[[], Path], repo: Path
) -> None:
    db = small_capture()
    other = renumbered_ops(tmp_path, repo)
    result = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other), "--assert", "--schedule"])
    assert result.exit_code == 0, result.output
    assert "2 kernels, 0 changed, 0 errors" in result.output
    assert "0 changed, 0 errors" in result.output.splitlines()[-1]


def test_a_row_with_an_op_this_tg_lacks_is_one_line_naming_it(small_capture: Callable[[], Path]) -> None:
    db = small_capture()
    with sqlite3.connect(db) as conn:
        first = conn.execute(f"SELECT id, inputs FROM {TABLE} ORDER BY id LIMIT 1").fetchone()
        assert b"\x05STORE" in first[1]
        conn.execute(f"UPDATE {TABLE} SET inputs = ? WHERE id = ?", (first[1].replace(b"\x05STORE", b"\x05STORX"),
                                                                      first[0]))  # fmt: skip
    result = runner.invoke(app, ["diff", "--db", str(db), "--assert"])
    assert result.exit_code == 1
    assert "replay error: Ops.STORX is not in this tg's Ops table (written by a tg with another Ops table)" in (
        result.output
    )


def test_the_database_records_the_capturing_tg(small_capture: Callable[[], Path]) -> None:
    import json

    db = small_capture()
    commit, dirty = git_state()
    listed = runner.invoke(app, ["list", "--db", str(db), "--json"])
    provenance = json.loads(listed.stdout)["provenance"]
    assert provenance == {"codegen_version": codegen_version(), "commit": commit, "dirty": "yes" if dirty else "no"}
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE {META_TABLE} SET value = 'yes' WHERE key = 'dirty'")
        compilers = {row[0] for row in conn.execute(f"SELECT compiler FROM {TABLE}")}
    assert compilers and all(compilers)  # every row names its compiler
    warned = runner.invoke(app, ["list", "--db", str(db)])
    assert "warning: captured from a dirty tree" in warned.output
    diffed = runner.invoke(app, ["diff", "--db", str(db)])
    assert diffed.exit_code == 0 and "warning: captured from a dirty tree" in diffed.output


def test_sigterm_during_against_removes_its_worktree(small_capture: Callable[[], Path], repo: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    db = small_capture()
    command = [sys.executable, "-m", "tg.replay.cli", "diff", "--db", str(db), "--against", "HEAD", "-j", "1"]
    diff = subprocess.Popen(command, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def replay_worktrees() -> list[str]:
        listing = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True,
                                 text=True, check=True).stdout  # fmt: skip
        return [line.split(" ", 1)[1] for line in listing.splitlines()
                if line.startswith("worktree ") and "tg-replay-" in line]  # fmt: skip

    before = set(replay_worktrees())
    deadline = time.monotonic() + 300
    made: list[str] = []
    while not made and time.monotonic() < deadline and diff.poll() is None:
        made = [tree for tree in replay_worktrees() if tree not in before]
        time.sleep(0.05)
    assert made, "the diff never made its worktree"
    diff.send_signal(signal.SIGTERM)
    _, stderr = diff.communicate(timeout=300)
    assert diff.returncode == 143, stderr
    assert "terminated (SIGTERM); the temporary worktree was removed" in stderr
    assert made[0] not in replay_worktrees() and not Path(made[0]).exists()
