"""The on-disk cache of compiled binaries: one sqlite file in `cache_dir()`, keyed by a content hash.

The table name carries a schema version, so a future layout change starts a fresh table instead of
misreading old rows. `CACHELEVEL=0` turns the cache off (every lookup misses, nothing is stored).
Writes that fail (read-only disk, a locked database) are ignored: the cache is an optimisation only.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading

from tg.codegen.cache_db import open_db
from tg.codegen.flags import CACHELEVEL, cache_dir

TABLE = "compiled_v1"
_lock = threading.Lock()
_connections: dict[str, sqlite3.Connection] = {}


def cache_key(source: str, compiler_identity: str) -> str:
    """sha256 over the compiler identity (path, version, flags) and the source."""
    digest = hashlib.sha256()
    digest.update(compiler_identity.encode())
    digest.update(b"\0")
    digest.update(source.encode())
    return digest.hexdigest()


def _database_path() -> str:
    return os.path.join(cache_dir(), "cache.db")


def _connection() -> sqlite3.Connection:
    path = _database_path()
    conn = _connections.get(path)
    if conn is None:
        conn = open_db(path, [f"{TABLE} (key TEXT PRIMARY KEY, binary BLOB NOT NULL)"], shared_between_threads=True)
        _connections[path] = conn
    return conn


def load_compiled(key: str) -> bytes | None:
    if CACHELEVEL.value == 0:
        return None
    try:
        with _lock:
            row = _connection().execute(f"SELECT binary FROM {TABLE} WHERE key = ?", (key,)).fetchone()
    except sqlite3.Error:
        return None
    return None if row is None else bytes(row[0])


def store_compiled(key: str, binary: bytes) -> None:
    if CACHELEVEL.value == 0:
        return
    try:
        with _lock:
            conn = _connection()
            conn.execute(f"INSERT OR REPLACE INTO {TABLE} (key, binary) VALUES (?, ?)", (key, binary))
            conn.commit()
    except sqlite3.Error:
        pass
