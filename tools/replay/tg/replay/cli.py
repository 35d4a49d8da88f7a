"""The tg-replay command line: a thin typer layer over tg.replay.database and tg.replay.diff.

Exit codes: 0 success (or differences found without --assert), 1 a failure or, with --assert, a difference or
replay error, 2 a usage error.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from tg.env.version import print_version
from tg.replay.database import ReplayError, provenance_warning, read_provenance, reset, resolve_path, summarize
from tg.replay.diff import (
    ReplayReport,
    RowResult,
    Runner,
    ScheduleResult,
    Terminated,
    Version,
    _run_workers,
    distinct_changes,
    replay,
    replay_schedules,
    schedule_diff,
    time_changed,
    unified_diff,
    version_from_git,
    version_from_path,
)

app = typer.Typer(
    help="Capture the kernels the compiler generates and diff them against another version (process replay).",
    no_args_is_help=True,
    add_completion=False,
)
DB_OPTION = typer.Option(None, "--db", help="Capture database (default: TG_REPLAY_DB, else the cache directory).")


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, no_color=bool(os.environ.get("NO_COLOR")), highlight=False, soft_wrap=True)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _print_version(value: bool) -> None:
    print_version("tg-replay", value)


@app.callback()
def _options(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Capture the kernels the compiler generates and diff them against another version."""


@app.command("reset")
def reset_command(db: str | None = DB_OPTION) -> None:
    """Delete every captured kernel (drops this schema's table)."""
    try:
        path = reset(db)
    except ReplayError as error:
        _fail(str(error))
    typer.echo(f"reset {path}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def capture(ctx: typer.Context, db: str | None = DB_OPTION) -> None:
    """Run CMD with CAPTURE_PROCESS_REPLAY=1, recording every kernel it compiles: tg-replay capture -- CMD..."""
    command = list(ctx.args)
    if not command:
        typer.echo("error: no command given: tg-replay capture -- CMD...", err=True)
        raise typer.Exit(2)
    env = dict(os.environ, CAPTURE_PROCESS_REPLAY="1", TG_REPLAY_DB=os.path.abspath(resolve_path(db)))
    try:
        finished = subprocess.run(command, env=env)
    except FileNotFoundError:
        _fail(f"command not found: {command[0]}")
    raise typer.Exit(finished.returncode)


@app.command("list")
def list_command(db: str | None = DB_OPTION, as_json: bool = typer.Option(False, "--json")) -> None:
    """How many kernels were captured, from which locations and for which devices."""
    try:
        summary = summarize(db)
    except ReplayError as error:
        _fail(str(error))
    if as_json:
        document = {"db": summary.path, "rows": summary.rows, "devices": dict(summary.devices),
                    "locations": dict(summary.locations), "provenance": summary.provenance}  # fmt: skip
        typer.echo(json.dumps(document, indent=2))
        return
    console = _console()
    _warn_provenance(summary.provenance)
    console.print(f"{summary.rows} kernels in {summary.path}", markup=False)
    if summary.provenance:
        p = summary.provenance
        console.print(f"captured by tg {p.get('commit')} (dirty tree: {p.get('dirty')}, codegen "
                      f"{p.get('codegen_version')})", markup=False)  # fmt: skip
    console.print("devices: " + ", ".join(f"{d} {n}" for d, n in summary.devices.most_common()), markup=False)
    for location, count in summary.locations.most_common():
        console.print(f"{count:6d}  {location}", markup=False)


def _warn_provenance(provenance: dict[str, str]) -> None:
    warning = provenance_warning(provenance)
    if warning is not None:
        typer.echo(f"warning: {warning}", err=True)


def _print_error(console: Console, result: RowResult) -> None:
    row = result.row
    console.print(f"[bold]{row.name}[/bold] on {row.device} from {row.location}")
    console.print(f"  replay error: {result.error}", style="red", markup=False)


def _print_changes(console: Console, report: ReplayReport, other_label: str) -> None:
    """Each distinct change once (rows with the same kernel and diff together), then one line per kernel."""
    groups = distinct_changes(report.changed, other_label)
    for first, lines, rows in groups:
        row = first.row
        more = f" and {len(rows) - 1} more rows with the same change" if len(rows) > 1 else ""
        console.print(f"[bold]{row.name}[/bold] on {row.device} from {row.location}{more}")
        for line in lines:
            style = "red" if line.startswith("-") else "green" if line.startswith("+") else None
            console.print(line, style=style, markup=False)
        for result in rows:
            if result.seconds_other and result.seconds_captured:
                ratio = result.seconds_other / result.seconds_captured
                console.print(f"  speed: {other_label} {result.seconds_other * 1e6:.1f} us, captured "
                              f"{result.seconds_captured * 1e6:.1f} us ({ratio:.2f}x)", markup=False)  # fmt: skip
    for first, lines, rows in groups:
        changed_lines = sum(1 for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---"))
        opts = ", opts changed" if first.opts_changed else ""
        console.print(f"changed: {first.row.name} on {first.row.device}: {changed_lines} lines{opts}, "
                      f"{len(rows)} row{'' if len(rows) == 1 else 's'}", markup=False)  # fmt: skip


def _report_json(report: ReplayReport, other_label: str) -> dict[str, Any]:
    def entry(r: RowResult) -> dict[str, Any]:
        return {"id": r.row.id, "name": r.row.name, "device": r.row.device, "location": r.row.location,
                "error": r.error, "seconds_other": r.seconds_other, "seconds_captured": r.seconds_captured,
                "opts_other": r.opts, "opts_captured": r.captured_opts,
                "diff": unified_diff(r, other_label) if r.error is None else []}  # fmt: skip

    return {"kernels": report.kernels, "changed": [entry(r) for r in report.changed],
            "errors": [entry(r) for r in report.errors], "stopped_early": report.stopped_early}  # fmt: skip


@app.command()
def diff(
    db: str | None = DB_OPTION,
    against: str | None = typer.Option(None, "--against", help="Replay with the tg of this git ref (a worktree)."),
    python_path: str | None = typer.Option(None, "--python-path", help="Replay with the tg checkout in this folder."),
    assert_same: bool = typer.Option(
        False, "--assert", help="Exit 1 at the first difference or replay error, or when nothing was captured."
    ),
    max_diff_pct: float = typer.Option(100.0, "--max-diff-pct", help="Stop once this % of kernels changed/failed."),
    jobs: int = typer.Option(2, "-j", "--jobs", min=1, help="Worker processes."),
    speed: bool = typer.Option(False, "--speed", help="Also time each changed kernel on both versions."),
    schedule: bool = typer.Option(False, "--schedule", help="Also compare the kernels each captured schedule makes."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of diffs."),
    on_ray: bool = typer.Option(False, "--ray", help="Replay in shards on Ray (RAY_ADDRESS's cluster, else local)."),
    address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster to use (implies --ray)."),
) -> None:
    """Replay every captured kernel with another version's compiler and show what changed.

    With neither --against nor --python-path the replay uses this checkout (a self-check). With --ray the kernels
    are replayed in shards as Ray tasks (--speed still times here, on one machine); the report is the same."""
    if against and python_path:
        typer.echo("error: give --against or --python-path, not both", err=True)
        raise typer.Exit(2)
    runner = _ray_runner(address) if on_ray or address is not None else _run_workers
    try:
        _warn_provenance(read_provenance(db))
        if against:
            with version_from_git(_repository_root(), against) as other:
                report = _run_diff(db, other, jobs, assert_same, max_diff_pct, speed, as_json, not schedule, runner)
                schedules = replay_schedules(db, other, jobs, runner) if schedule else []
        else:
            other = version_from_path(python_path) if python_path else Version("this version")
            report = _run_diff(db, other, jobs, assert_same, max_diff_pct, speed, as_json, not schedule, runner)
            schedules = replay_schedules(db, other, jobs, runner) if schedule else []
    except ReplayError as error:
        _fail(str(error))
    except Terminated:
        typer.echo("error: terminated (SIGTERM); the temporary worktree was removed", err=True)
        raise typer.Exit(143) from None
    schedules_differ = any(r.changed or r.error for r in schedules)
    if schedule:
        _report_schedules(schedules, other.label, report if as_json else None)
    if assert_same and report.kernels == 0:
        _fail(f"{resolve_path(db)} holds no captured kernels: --assert would check nothing (was capture on?)")
    if assert_same and (report.changed or report.errors or schedules_differ):
        raise typer.Exit(1)


RAY_MISSING = "--ray needs Ray, which is not installed: uv sync --extra cluster (or pip install 'tg-replay[cluster]')"


def _ray_runner(address: str | None) -> Runner:
    """tg.replay.cluster's runner, or one `error:` line saying how to install Ray."""
    try:
        from tg.replay.cluster import ray_runner
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "ray":
            raise
        _fail(RAY_MISSING)
    return ray_runner(address)


def _report_schedules(results: list[ScheduleResult], other_label: str, json_report: ReplayReport | None) -> None:
    """Print the schedule comparison; with a `json_report`, one JSON document holding both comparisons."""
    changed = [r for r in results if r.changed]
    errors = [r for r in results if r.error]
    if json_report is not None:
        document = _report_json(json_report, other_label)
        document["schedules"] = {"count": len(results), "changed": [
            {"location": r.captured.location, "captured": r.ours, "other": r.kernels,
             "diff": schedule_diff(r, other_label)} for r in changed
        ], "errors": [{"location": r.captured.location, "error": r.error} for r in errors]}  # fmt: skip
        typer.echo(json.dumps(document, indent=2))
        return
    console = _console()
    for r in changed:
        console.print(f"schedule from {r.captured.location}: {len(r.kernels or [])} kernels with {other_label}, "
                      f"{len(r.ours or [])} with this version", markup=False)  # fmt: skip
        for line in schedule_diff(r, other_label):
            style = "red" if line.startswith("-") else "green" if line.startswith("+") else None
            console.print(line, style=style, markup=False)
    for r in errors:
        console.print(f"schedule from {r.captured.location}: replay error: {r.error}", style="red", markup=False)
    console.print(f"{len(results)} schedules, {len(changed)} changed, {len(errors)} errors", markup=False)


def _repository_root() -> str:
    found = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if found.returncode != 0:
        raise ReplayError("--against needs to run inside a git checkout of tg")
    return found.stdout.strip()


def _run_diff(
    db: str | None, other: Version, jobs: int, assert_same: bool, max_diff_pct: float, speed: bool, as_json: bool,
    print_json: bool = True, runner: Runner = _run_workers,
) -> ReplayReport:  # fmt: skip
    console = _console()
    show_bar = console.is_terminal and not as_json
    progress = Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), console=console,
                        disable=not show_bar)  # fmt: skip
    with progress:
        task = progress.add_task("replay", total=None)
        report = replay(db, other, jobs=jobs, stop_on_first=assert_same, max_diff_pct=max_diff_pct,
                        on_progress=lambda _: progress.advance(task), runner=runner)  # fmt: skip
    if speed:
        time_changed(db, other, report)
    if as_json:
        if print_json:
            typer.echo(json.dumps(_report_json(report, other.label), indent=2))
        return report
    _print_changes(console, report, other.label)
    for result in report.errors:
        _print_error(console, result)
    if report.stopped_early:
        console.print(report.stopped_early, markup=False)
    console.print(report.summary_line(), markup=False)
    return report


def main() -> None:
    app()


if __name__ == "__main__":
    main()
