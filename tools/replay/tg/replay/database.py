"""Reading the capture database that CAPTURE_PROCESS_REPLAY=1 writes (tg.codegen.capture).

Every failure to read it (no file, not sqlite, no table of this schema) is a ReplayError with a message that says
what to do, never a traceback from sqlite.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from dataclasses import dataclass

from tg.codegen.cache_db import open_db
from tg.codegen.capture import CAPTURE_SCHEMA, META_TABLE, SCHEDULE_TABLE, TABLE, database_path


class ReplayError(Exception):
    """An expected failure: the CLI prints it as one `error:` line and exits 1."""


@dataclass(frozen=True)
class CapturedRow:
    id: int
    location: str
    device: str
    name: str
    searched: bool
    inputs: bytes
    src: str


@dataclass(frozen=True)
class CaptureSummary:
    path: str
    rows: int
    locations: Counter[str]
    devices: Counter[str]
    provenance: dict[str, str]  # codegen_version, commit, dirty of the tg that captured (empty: not recorded)


def provenance_warning(provenance: dict[str, str]) -> str | None:
    """A warning when the captures cannot be traced to one clean commit, else None."""
    commit = provenance.get("commit", "unknown")
    if provenance.get("dirty") == "yes":
        return f"captured from a dirty tree (commit {commit} plus uncommitted changes): its replay may differ"
    if commit == "unknown" or commit.startswith("mixed"):
        return f"captures come from commit {commit}: a replay may not be reproducible"
    return None


def read_provenance(path: str | None) -> dict[str, str]:
    conn = open_captures(path)
    try:
        return dict(conn.execute(f"SELECT key, value FROM {META_TABLE}").fetchall())
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()


def resolve_path(path: str | None) -> str:
    return path or database_path()


def open_captures(path: str | None) -> sqlite3.Connection:
    """A read connection to an existing capture database, checked to hold this schema's table."""
    path = resolve_path(path)
    if not os.path.exists(path):
        raise ReplayError(f"no capture database at {path}: run `tg-replay capture -- CMD` first")
    try:
        conn = open_db(path, read_only=True)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as error:
        raise ReplayError(f"{path} is not a readable capture database ({error})") from None
    if TABLE not in tables:
        others = sorted(t for t in tables if t.startswith("process_replay_v"))
        found = f" (it has {', '.join(others)}: captured by a tg with another schema)" if others else ""
        conn.close()
        raise ReplayError(f"{path} has no table {TABLE} (capture schema {CAPTURE_SCHEMA}){found}")
    return conn


def row_ids(path: str | None) -> list[int]:
    conn = open_captures(path)
    try:
        return [row[0] for row in conn.execute(f"SELECT id FROM {TABLE} ORDER BY id")]
    except sqlite3.DatabaseError as error:
        raise ReplayError(f"{resolve_path(path)}: cannot read captures ({error})") from None
    finally:
        conn.close()


def read_rows(path: str | None, ids: list[int]) -> list[CapturedRow]:
    """The rows with these ids, in id order."""
    conn = open_captures(path)
    try:
        marks = ",".join("?" * len(ids))
        query = (
            f"SELECT id, location, device, name, searched, inputs, src FROM {TABLE} WHERE id IN ({marks}) ORDER BY id"
        )
        return [CapturedRow(r[0], r[1], r[2], r[3], bool(r[4]), bytes(r[5]), r[6]) for r in conn.execute(query, ids)]
    except sqlite3.DatabaseError as error:
        raise ReplayError(f"{resolve_path(path)}: cannot read captures ({error})") from None
    finally:
        conn.close()


def summarize(path: str | None) -> CaptureSummary:
    conn = open_captures(path)
    try:
        rows = conn.execute(f"SELECT location, device FROM {TABLE}").fetchall()
    except sqlite3.DatabaseError as error:
        raise ReplayError(f"{resolve_path(path)}: cannot read captures ({error})") from None
    finally:
        conn.close()
    locations = Counter(location for location, _ in rows)
    devices = Counter(device for _, device in rows)
    return CaptureSummary(resolve_path(path), len(rows), locations, devices, read_provenance(path))


def reset(path: str | None) -> str:
    """Drop every capture table of every schema: kernels, schedules and provenance (the file stays). Returns the
    path."""
    path = resolve_path(path)
    if not os.path.exists(path):
        return path
    try:
        conn = open_db(path)
        with conn:
            tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                if table.startswith(("process_replay_", "capture_meta_")):
                    conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        conn.close()
    except sqlite3.DatabaseError as error:
        raise ReplayError(f"{path} is not a capture database ({error})") from None
    return path


@dataclass(frozen=True)
class CapturedSchedule:
    id: int
    location: str
    kernels: list[str]


def read_schedules(path: str | None) -> list[CapturedSchedule]:
    """Every captured schedule (an older capture without the table has none)."""
    conn = open_captures(path)
    try:
        rows = conn.execute(f"SELECT id, location, kernels FROM {SCHEDULE_TABLE} ORDER BY id").fetchall()
    except sqlite3.OperationalError:
        return []
    except sqlite3.DatabaseError as error:
        raise ReplayError(f"{resolve_path(path)}: cannot read captured schedules ({error})") from None
    finally:
        conn.close()
    return [CapturedSchedule(r[0], r[1], r[2].split("\n") if r[2] else []) for r in rows]
