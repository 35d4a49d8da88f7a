"""Opening tg's sqlite files (the compile cache, the BEAM cache, process-replay captures): one place that knows how.

A connection waits up to LOCK_TIMEOUT_S for a lock another process holds rather than failing at once; opening creates
the folder and the tables, and may ask for WAL mode, in which readers in other processes do not block the writer."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable

LOCK_TIMEOUT_S = 60.0


def open_db(
    path: str,
    tables: Iterable[str] = (),
    *,
    wal: bool = False,
    shared_between_threads: bool = False,
    read_only: bool = False,
) -> sqlite3.Connection:
    """A connection to the sqlite file at `path` (its folder created), with each `CREATE TABLE IF NOT EXISTS` of
    `tables` run. `shared_between_threads`: the caller serializes its use with a lock of its own. `read_only`: an
    existing file opened for reading only (nothing created; writing raises sqlite3.OperationalError)."""
    check_same_thread = not shared_between_threads
    if read_only:
        return sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, timeout=LOCK_TIMEOUT_S, check_same_thread=check_same_thread
        )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    conn = sqlite3.connect(path, timeout=LOCK_TIMEOUT_S, check_same_thread=check_same_thread)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    for table in tables:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table}")
    conn.commit()
    return conn
