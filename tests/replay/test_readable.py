"""tg-replay's diffs: renumbered values are not changes, opts come first, one line per distinct kernel, the diff in
--json, and --assert fails on an empty database."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from tg.codegen.capture import TABLE, connect
from tg.replay.cli import app
from tg.replay.readable import readable_diff

runner = CliRunner()

BEFORE = """void k(float* data0, float* data1) {
  float v0 = data1[0];
  float v1 = (v0 * 2.0f);
  float v2 = (v1 + 1.0f);
  float v3 = (v2 * v2);
  data0[0] = v3;
}"""
# one value added near the top: every later value is renumbered, and one line really changes (+ becomes -)
AFTER = """void k(float* data0, float* data1) {
  float v0 = data1[0];
  float v1 = data1[1];
  float v2 = (v0 * 2.0f);
  float v3 = (v2 - 1.0f);
  float v4 = (v3 * v3);
  data0[0] = v4;
}"""


def test_renumbering_is_not_shown_and_real_changes_are() -> None:
    lines = readable_diff(BEFORE, AFTER, "other", "captured")
    changes = [line for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    # a plain diff shows 8 changed lines; a value used in a changed line changes too, so v4's line is shown
    assert changes == ["+  float v1 = data1[1];",
                       "-  float v2 = (v1 + 1.0f);", "-  float v3 = (v2 * v2);", "-  data0[0] = v3;",
                       "+  float v3 = (v2 - 1.0f);", "+  float v4 = (v3 * v3);", "+  data0[0] = v4;"]  # fmt: skip
    renumbered_only = re.sub(r"v(\d)", lambda m: f"v{int(m.group(1)) + 10}", BEFORE)
    assert renumbered_only != BEFORE and readable_diff(BEFORE, renumbered_only, "a", "b") == []


def changed_heuristics(tmp_path: Path, repo: Path) -> Path:
    """A copy of tg.codegen whose hand-coded heuristics apply no opts: opts and sources change."""
    copy = tmp_path / "noopts"
    shutil.copytree(repo / "lib" / "codegen" / "tg", copy / "tg", ignore=shutil.ignore_patterns("__pycache__"))
    flags = copy / "tg" / "codegen" / "pipeline.py"
    text = flags.read_text()
    marker = "    noopt: bool = False"
    assert marker in text, "CodegenFlags no longer has the field this test flips"
    flags.write_text(text.replace(
        "def kernel_to_program(ast: UOp, renderer: Renderer, flags: CodegenFlags) -> ProgramSource:\n",
        "def kernel_to_program(ast: UOp, renderer: Renderer, flags: CodegenFlags) -> ProgramSource:\n"
        "    flags = dataclasses.replace(flags, noopt=True)\n", 1) + "\nimport dataclasses  # noqa\n")  # fmt: skip
    return copy


def test_opts_first_one_line_per_kernel_and_the_diff_in_json(
    tmp_path: Path, small_capture: Callable[[], Path], repo: Path
) -> None:
    db = small_capture()
    small_capture()  # the same kernels again, from another line: rows with the same change are shown once
    other = changed_heuristics(tmp_path, repo)
    result = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    first_matmul = lines.index(next(line for line in lines if line.startswith("r_7_3_5 on CPU")))
    assert lines[first_matmul].endswith(" and 1 more rows with the same change")
    assert sum(line.startswith("r_7_3_5 on CPU") for line in lines) == 1
    assert lines[first_matmul + 1].startswith(f"opts -{other}: ")  # the opts come before the source diff
    assert lines[first_matmul + 2].startswith("opts +captured: Opt(")
    summaries = [line for line in lines if line.startswith("changed: ")]
    # the sum kernel has no opts either way: only the matmul changed, and it gets one summary line
    assert len(summaries) == 1 and summaries[0].startswith("changed: r_7_3_5 on CPU: ")
    assert summaries[0].endswith(" lines, opts changed, 2 rows")
    document = json.loads(runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other), "--json"]).stdout)
    matmul = next(entry for entry in document["changed"] if entry["name"] == "r_7_3_5")
    assert matmul["opts_other"] == [] and matmul["opts_captured"]
    assert any(line.startswith("+") for line in matmul["diff"]) and matmul["diff"][0].startswith("opts -")


def test_assert_fails_on_an_empty_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    connect(str(db)).close()
    with sqlite3.connect(db) as conn:
        assert conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone() == (0,)
    result = runner.invoke(app, ["diff", "--db", str(db), "--assert"])
    assert result.exit_code == 1
    assert "holds no captured kernels: --assert would check nothing" in result.output
    assert runner.invoke(app, ["diff", "--db", str(db)]).exit_code == 0  # without --assert an empty replay is fine


def test_rows_are_reported_in_the_same_order_whatever_order_they_were_written(
    tmp_path: Path, small_capture: Callable[[], Path]
) -> None:
    """pytest -n 2 workers append rows in whatever order they finish; the report must not depend on it."""
    from tg.replay.diff import Version, replay

    db = small_capture()
    reversed_db = tmp_path / "reversed.db"
    connect(str(reversed_db)).close()
    with sqlite3.connect(reversed_db) as conn:
        conn.execute("ATTACH DATABASE ? AS original", (str(db),))
        columns = "location, device, name, searched, inputs, src, compiler"
        conn.execute(f"INSERT INTO {TABLE} ({columns}) SELECT {columns} FROM original.{TABLE} ORDER BY id DESC")
    order = [(r.row.name, r.row.location) for r in replay(str(db), Version("this version"), jobs=1).results]
    again = [(r.row.name, r.row.location) for r in replay(str(reversed_db), Version("this version"), jobs=1).results]
    assert len(order) == 2 and order == again


def test_schedule_compares_each_kernels_source_not_only_the_names(
    tmp_path: Path, small_capture: Callable[[], Path], repo: Path
) -> None:
    """The other version makes the same kernels with the same names, but one with another source: a change."""
    db = small_capture()
    other = changed_heuristics(tmp_path, repo)
    result = runner.invoke(app, ["diff", "--db", str(db), "--python-path", str(other), "--schedule", "--json"])
    schedules = json.loads(result.stdout)["schedules"]
    assert schedules["count"] == 1 and len(schedules["changed"]) == 1
    changed = schedules["changed"][0]
    assert changed["captured"] == changed["other"] == ["r_7_3_5", "r_3_7"]
    assert "-  for (long r0 = 0; r0 < 7; r0++) {" in changed["diff"]
