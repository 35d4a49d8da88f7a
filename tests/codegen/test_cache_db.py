"""The one helper that opens tg's sqlite files: folder and tables created, WAL on request, and a lock held by
another connection waited for instead of failing at once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tg.codegen import cache_db
from tg.codegen.cache_db import open_db


def test_open_db_creates_the_folder_the_tables_and_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "folder" / "x.db"
    conn = open_db(str(path), ["a (k TEXT PRIMARY KEY, v BLOB)", "b (n INTEGER)"], wal=True)
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert names == {"a", "b"}
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    open_db(str(path), ["a (k TEXT PRIMARY KEY, v BLOB)"]).close()  # opening again keeps what is there
    conn.close()


def test_a_connection_waits_for_a_lock_instead_of_failing_at_once(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Another process (a test worker, a second tg-beam) may hold the write lock: sqlite's default would fail after
    5 s; every tg file waits LOCK_TIMEOUT_S."""
    seen: list[dict] = []
    real_connect = sqlite3.connect

    def recording_connect(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(kwargs)
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(cache_db.sqlite3, "connect", recording_connect)
    open_db(str(tmp_path / "a.db")).close()
    open_db(str(tmp_path / "b.db"), shared_between_threads=True).close()
    assert [(k["timeout"], k["check_same_thread"]) for k in seen] == [(60.0, True), (60.0, False)]
