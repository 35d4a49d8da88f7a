"""Replay captured kernels with another version of tg.codegen and compare the source each gives.

    other = version_from_git(repo, "origin/main")     # a temporary git worktree of that ref
    report = replay(db, other, jobs=2)                # every row, through the other version's pipeline
    report.changed, report.errors                     # rows whose source differs, rows whose replay raised

The other version runs in worker processes (`python -m tg.replay.worker`) whose PYTHONPATH starts with that
version's lib folders, so the namespace package `tg` finds its tg.codegen first. Rows are split across `jobs`
workers; each prints one JSON line per row, so progress is reported as rows finish.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tg.codegen import serial
from tg.codegen.capture import SCHEDULE_TABLE, TABLE
from tg.replay.database import (
    CapturedRow,
    CapturedSchedule,
    ReplayError,
    read_rows,
    read_schedules,
    resolve_path,
    row_ids,
)
from tg.replay.readable import readable_diff

LIBRARY_FOLDERS = ("lib/codegen", "lib/hcq", "lib/drivers")  # what a replay (and timing) imports of tg


@dataclass(frozen=True)
class Version:
    """Where a version of tg's libraries lives: folders to put first on PYTHONPATH (empty: this process's tg)."""

    label: str
    python_path: tuple[str, ...] = ()


@dataclass
class RowResult:
    row: CapturedRow
    src: str | None = None
    error: str | None = None
    seconds_other: float | None = None  # with --speed: the kernel's time on the other version
    seconds_captured: float | None = None  # and on this one
    opts: list[str] | None = None  # the opts the other version applied (reprs)
    captured_opts: list[str] | None = None  # and those the captured kernel had

    @property
    def changed(self) -> bool:
        return self.error is None and self.src != self.row.src

    @property
    def opts_changed(self) -> bool:
        return self.opts is not None and self.captured_opts is not None and self.opts != self.captured_opts


@dataclass
class ReplayReport:
    kernels: int = 0
    results: list[RowResult] = field(default_factory=list)
    stopped_early: str = ""  # why the replay stopped before the last row, if it did

    @property
    def changed(self) -> list[RowResult]:
        return [r for r in self.results if r.changed]

    @property
    def errors(self) -> list[RowResult]:
        return [r for r in self.results if r.error is not None]

    def summary_line(self) -> str:
        return f"{self.kernels} kernels, {len(self.changed)} changed, {len(self.errors)} errors"


def version_from_path(folder: str) -> Version:
    """A checkout of tg (its lib/ folders are used) or a folder that itself holds `tg/codegen`."""
    root = Path(folder).resolve()
    if (root / "lib" / "codegen" / "tg" / "codegen").is_dir():
        return Version(str(root), tuple(str(root / sub) for sub in LIBRARY_FOLDERS if (root / sub).is_dir()))
    if (root / "tg" / "codegen").is_dir():
        return Version(str(root), (str(root),))
    raise ReplayError(f"{folder} holds neither lib/codegen/tg/codegen (a tg checkout) nor tg/codegen")


class Terminated(Exception):
    """SIGTERM arrived while a temporary worktree existed (raised so that the worktree is removed first)."""


@dataclass
class _SigtermState:
    ignore: bool = False  # set while cleaning up: later SIGTERMs are ignored until the cleanup is done


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[_SigtermState]:
    """While inside, SIGTERM raises Terminated in the main thread (so `finally` blocks run), instead of ending the
    process at once; outside the main thread nothing changes (signal handlers can only be set there)."""
    state = _SigtermState()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum: int, frame: object) -> None:
        if not state.ignore:
            state.ignore = True
            raise Terminated("terminated (SIGTERM)")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def version_from_git(repo: str, ref: str) -> Iterator[Version]:
    """A temporary `git worktree` of `ref`, removed afterwards, also when the process gets SIGTERM meanwhile."""
    check = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", f"{ref}^{{commit}}"], capture_output=True)
    if check.returncode != 0:
        raise ReplayError(f"git ref {ref!r} is not a commit in {repo}")
    scratch_dir = tempfile.TemporaryDirectory(prefix="tg-replay-", ignore_cleanup_errors=True)
    with _terminate_as_exception() as terminated, scratch_dir as scratch:
        tree = os.path.join(scratch, "tree")
        try:  # from before `worktree add`: a SIGTERM during it leaves a half-made worktree to remove
            made = _add_worktree(repo, tree, ref)
            if made.returncode != 0:
                raise ReplayError(f"cannot check out {ref}: {made.stderr.decode().strip()}")
            version = version_from_path(tree)
            yield Version(ref, version.python_path)
        finally:
            terminated.ignore = True  # a second SIGTERM must not interrupt the cleanup
            # a killed `worktree add` leaves its worktree locked ("initializing"), half made: unlock, remove, prune
            subprocess.run(["git", "-C", repo, "worktree", "unlock", tree], capture_output=True)
            subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", tree], capture_output=True)
            shutil.rmtree(tree, ignore_errors=True)
            subprocess.run(["git", "-C", repo, "worktree", "prune"], capture_output=True)


def _add_worktree(repo: str, tree: str, ref: str) -> subprocess.CompletedProcess[bytes]:
    """`git worktree add` in a process group of its own: when an exception (SIGTERM) interrupts it, the whole group
    is killed and waited for. Killing git alone left its checkout child writing files into the tree being removed."""
    command = ["git", "-C", repo, "worktree", "add", "--detach", tree, ref]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate()
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def worker_environment(version: Version) -> dict[str, str]:
    env = dict(os.environ)
    env["CAPTURE_PROCESS_REPLAY"] = "0"
    env["TG_REPLAY_SERIAL"] = serial.__file__  # rows are loaded by this version's restricted unpickler
    if version.python_path:
        env["PYTHONPATH"] = os.pathsep.join([*version.python_path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


Runner = Callable[..., None]  # _run_workers's signature: (db, version, mode, ids, jobs, on_line, table=TABLE)


def split_shards(ids: list[int], count: int) -> list[list[int]]:
    """`ids` dealt round-robin into at most `count` non-empty shards."""
    shards = [ids[i::count] for i in range(max(1, count))]
    return [shard for shard in shards if shard]


def worker_command(db: str, table: str, mode: str, ids: list[int]) -> list[str]:
    return [sys.executable, "-m", "tg.replay.worker", db, table, mode, *map(str, ids)]


class ResultSink:
    """Where the result lines of every worker go (from any thread): `on_line` gets each and returns False to stop
    all; a row the database's loader refused as unsafe stops all too, and `check_safe` then raises."""

    def __init__(self, on_line: Callable[[dict], bool]) -> None:
        self.on_line = on_line
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.unsafe: list[str] = []

    def take(self, result: dict) -> bool:
        """Hand on one result; False once everything should stop."""
        with self.lock:
            if self.stop.is_set():
                return False
            if result.get("unsafe"):
                self.unsafe.append(f"row {result['id']}: {result['error']}")
                self.stop.set()
            elif not self.on_line(result):
                self.stop.set()
            return not self.stop.is_set()

    def check_safe(self, db: str) -> None:
        if self.unsafe:
            raise ReplayError(f"{db} {self.unsafe[0]} (the database was not written by tg; nothing in it was run)")


def _run_workers(
    db: str, version: Version, mode: str, ids: list[int], jobs: int, on_line: Callable[[dict], bool],
    table: str = TABLE,
) -> None:  # fmt: skip
    """Split `ids` across `jobs` worker processes; `on_line` gets each result and returns False to stop all."""
    processes = [
        subprocess.Popen(worker_command(db, table, mode, shard), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=worker_environment(version))
        for shard in split_shards(ids, jobs)
    ]  # fmt: skip
    sink = ResultSink(on_line)
    stderr: list[str] = []

    def pump(process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if sink.stop.is_set() or not sink.take(json.loads(line)):
                break
        if sink.stop.is_set():
            process.kill()
        assert process.stderr is not None
        stderr.append(process.stderr.read())
        process.wait()

    threads = [threading.Thread(target=pump, args=(p,), daemon=True) for p in processes]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # SIGTERM (Terminated) or Ctrl-C: no worker may outlive the diff (or its worktree)
        sink.stop.set()
        for process in processes:
            process.kill()
            process.wait()
        raise
    sink.check_safe(db)
    failed = [p for p in processes if p.returncode not in (0, -9) and not sink.stop.is_set()]
    if failed:
        detail = "".join(stderr).strip().splitlines()[-1:] or ["no output"]
        raise ReplayError(f"a replay worker for {version.label} failed: {detail[0]}")


def replay(
    db: str | None,
    other: Version,
    jobs: int = 2,
    stop_on_first: bool = False,
    max_diff_pct: float = 100.0,
    on_progress: Callable[[RowResult], None] | None = None,
    runner: Runner = _run_workers,
) -> ReplayReport:
    """Replay every captured row through `other`'s pipeline. `stop_on_first`: stop at the first change or error;
    `max_diff_pct`: stop once more than this percentage of all rows changed or failed. `runner` runs the workers:
    processes here, or Ray tasks (tg.replay.cluster)."""
    db = resolve_path(db)
    ids = row_ids(db)
    rows = {row.id: row for row in read_rows(db, ids)} if ids else {}
    report = ReplayReport(kernels=len(ids))
    limit = len(ids) * max_diff_pct / 100.0

    def take(line: dict) -> bool:
        result = RowResult(rows[line["id"]], src=line.get("src"), error=line.get("error"), opts=line.get("opts"),
                           captured_opts=line.get("captured_opts"))  # fmt: skip
        report.results.append(result)
        if on_progress is not None:
            on_progress(result)
        bad = len(report.changed) + len(report.errors)
        if stop_on_first and (result.changed or result.error):
            report.stopped_early = "stopped at the first difference (--assert)"
            return False
        if bad > limit:
            report.stopped_early = f"stopped: more than {max_diff_pct:g}% of kernels changed or failed"
            return False
        return True

    if ids:
        runner(db, other, "source", ids, jobs, take)
    # rows from pytest -n N arrive in whatever order the workers wrote them: report in an order that does not
    report.results.sort(key=lambda r: (r.row.location, r.row.device, r.row.name, r.row.src, r.row.id))
    return report


def time_changed(db: str | None, other: Version, report: ReplayReport, jobs: int = 1) -> None:
    """With --speed: time each changed kernel on both versions (one job by default: timings need a quiet CPU)."""
    changed = {r.row.id: r for r in report.changed}
    if not changed:
        return
    db = resolve_path(db)

    def other_time(line: dict) -> bool:
        changed[line["id"]].seconds_other = line.get("seconds")
        return True

    def captured_time(line: dict) -> bool:
        changed[line["id"]].seconds_captured = line.get("seconds")
        return True

    _run_workers(db, other, "time", list(changed), jobs, other_time)
    _run_workers(db, Version("this version"), "time", list(changed), jobs, captured_time)


def unified_diff(result: RowResult, other_label: str) -> list[str]:
    """`-` lines: the other version's source; `+` lines: the captured source. The opts, when they differ, come
    first; value renumbering alone is not shown as a change (tg.replay.readable)."""
    lines = []
    if result.opts_changed:
        lines += [f"opts -{other_label}: {', '.join(result.opts or []) or 'none'}",
                  f"opts +captured: {', '.join(result.captured_opts or []) or 'none'}"]  # fmt: skip
    body = readable_diff(result.src or "", result.row.src, other_label, "captured")
    if not body and result.changed:
        body = ["(the sources differ only in how values are numbered)"]
    return lines + body


def distinct_changes(results: list[RowResult], other_label: str) -> list[tuple[RowResult, list[str], list[RowResult]]]:
    """Changed rows grouped by kernel name, device and diff: (first row, its diff, every row with that diff)."""
    groups: dict[tuple[str, str, str], tuple[RowResult, list[str], list[RowResult]]] = {}
    for result in results:
        lines = unified_diff(result, other_label)
        key = (result.row.name, result.row.device, "\n".join(lines))
        groups.setdefault(key, (result, lines, []))[2].append(result)
    return list(groups.values())


@dataclass
class ScheduleResult:
    """One captured schedule made again by both versions: kernel names and sources (`None`: that side failed)."""

    captured: CapturedSchedule
    kernels: list[str] | None = None  # what the other version's scheduler made
    sources: list[str] | None = None  # and each kernel's source
    ours: list[str] | None = None  # what this version's scheduler makes of the same graph
    our_sources: list[str] | None = None
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.error is None and (self.kernels != self.ours or self.sources != self.our_sources)


def replay_schedules(db: str | None, other: Version, jobs: int = 2, runner: Runner = _run_workers) -> list[
        ScheduleResult]:  # fmt: skip
    """Schedule every captured tensor graph again with `other`'s scheduler and with this one; a schedule changed
    when the two make different kernels (count, names, or any kernel's source)."""
    db = resolve_path(db)
    captured = {s.id: s for s in read_schedules(db)}
    results = {i: ScheduleResult(s) for i, s in captured.items()}

    def theirs(line: dict) -> bool:
        result = results[line["id"]]
        result.kernels, result.sources = line.get("kernels"), line.get("sources")
        result.error = result.error or (f"{other.label}: {line['error']}" if "error" in line else None)
        return True

    def ours(line: dict) -> bool:
        result = results[line["id"]]
        result.ours, result.our_sources = line.get("kernels"), line.get("sources")
        result.error = result.error or (f"this version: {line['error']}" if "error" in line else None)
        return True

    if captured:
        runner(db, other, "schedule", list(captured), jobs, theirs, table=SCHEDULE_TABLE)
        runner(db, Version("this version"), "schedule", list(captured), jobs, ours, table=SCHEDULE_TABLE)
    return [results[i] for i in sorted(results)]


def schedule_diff(result: ScheduleResult, other_label: str) -> list[str]:
    """The kernel list, then each kernel's source, of the other version (`-`) and this one (`+`), diffed."""

    def listing(names: list[str] | None, sources: list[str] | None) -> list[str]:
        lines = [f"kernels: {' '.join(names or [])}"]
        for name, source in zip(names or [], sources or [], strict=False):
            lines += [f"== {name}", *source.splitlines()]
        return lines

    theirs = listing(result.kernels, result.sources)
    ours = listing(result.ours, result.our_sources)
    return list(difflib.unified_diff(theirs, ours, other_label, "this version", lineterm=""))
