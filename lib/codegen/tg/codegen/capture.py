"""Process-replay capture: with CAPTURE_PROCESS_REPLAY=1, every kernel the engine compiles is recorded.

A row holds what `tg.codegen.pipeline.kernel_to_program` was called with (kernel AST, renderer, codegen flags), the
source it returned, the device, and where in the program or test the kernel came from. `tg-replay diff` later
calls the same function again, from another version of tg.codegen, and compares the source texts.

Capture must be cheap and safe from several processes at once (pytest -n 2): rows are pickled at once, kept in
memory and written in batches (and at exit) into one sqlite table in WAL mode. The table name carries
CAPTURE_SCHEMA, which changes whenever what a row pickles changes layout, so an old database is never misread.

Rows are stored with tg.codegen.serial (ops and dtypes by name; read back by a restricted unpickler that admits
only tg IR types), and the table `capture_meta` says which codegen version, git commit (and whether the tree was
dirty) the captures came from; each row also names the compiler of its device.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import sys
import threading
from pickle import PicklingError
from types import FrameType
from typing import Any

from tg.codegen.cache_db import open_db
from tg.codegen.flags import BEAM, CAPTURE_PROCESS_REPLAY, TG_REPLAY_DB, cache_dir
from tg.codegen.serial import dumps, provenance

CAPTURE_SCHEMA = 2
TABLE = f"process_replay_v{CAPTURE_SCHEMA}"
SCHEDULE_TABLE = f"process_replay_schedules_v{CAPTURE_SCHEMA}"
META_TABLE = f"capture_meta_v{CAPTURE_SCHEMA}"  # key/value: codegen_version, commit, dirty of the capturing tg
FLUSH_EVERY = 200  # rows kept in memory before a write

COLUMNS = (
    "id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "location TEXT NOT NULL, device TEXT NOT NULL, name TEXT NOT NULL, "
    "searched INTEGER NOT NULL, "  # 1 when BEAM chose the opts: replay then reuses them instead of searching
    "inputs BLOB NOT NULL, "  # tg.codegen.serial dump of (kernel AST, renderer, codegen flags, applied opts)
    "src TEXT NOT NULL, "
    "compiler TEXT NOT NULL"  # the device compiler's identity (binary, version, flags), "" when not known
)

SCHEDULE_COLUMNS = (
    "id INTEGER PRIMARY KEY AUTOINCREMENT, location TEXT NOT NULL, "
    "roots BLOB NOT NULL, "  # tg.codegen.serial dump of the tuple of tensor-graph nodes that were realized
    "kernels TEXT NOT NULL"  # the kernel names the schedule had, in order, one per line
)


def database_path() -> str:
    """Where captures go: TG_REPLAY_DB, else process_replay.db in the cache directory."""
    return TG_REPLAY_DB.value or os.path.join(cache_dir(), "process_replay.db")


def connect(path: str | None = None) -> sqlite3.Connection:
    """A connection to the capture database, with its table created (WAL mode, so processes can share it)."""
    return open_db(
        path or database_path(),
        [
            f"{TABLE} ({COLUMNS})",
            f"{SCHEDULE_TABLE} ({SCHEDULE_COLUMNS})",
            f"{META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ],
        wal=True,
    )


def _record_provenance(conn: sqlite3.Connection) -> None:
    """Say which tg wrote the captures; a second version writing into the same database is marked "mixed"."""
    for key, value in provenance().items():
        old = conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = ?", (key,)).fetchone()
        if old is None:
            conn.execute(f"INSERT INTO {META_TABLE} VALUES (?, ?)", (key, value))
        elif old[0] != value and key != "dirty":
            conn.execute(f"UPDATE {META_TABLE} SET value = ? WHERE key = ?", (f"mixed ({old[0]}, {value})", key))
        elif key == "dirty" and value == "yes":
            conn.execute(f"UPDATE {META_TABLE} SET value = 'yes' WHERE key = 'dirty'")


def calling_location() -> str:
    """`file:line function` of the innermost test function on the stack, else of the outermost frame."""
    frame: FrameType | None = sys._getframe(1)
    outermost: FrameType = sys._getframe(1)
    while frame is not None:
        name = os.path.basename(frame.f_code.co_filename)
        if name.startswith("test_") and frame.f_code.co_name.startswith("test"):
            outermost = frame
            break
        outermost = frame
        frame = frame.f_back
    code = outermost.f_code
    return f"{os.path.relpath(code.co_filename)}:{outermost.f_lineno} {code.co_name}"


class _Recorder:
    """Rows waiting to be written; flushed every FLUSH_EVERY rows and at interpreter exit."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, str, str, int, bytes, str, str]] = []
        self.pending_schedules: list[tuple[str, bytes, str]] = []
        self.lock = threading.Lock()
        self.registered = False

    def add(self, row: tuple[str, str, str, int, bytes, str, str] | None = None,
            schedule: tuple[str, bytes, str] | None = None) -> None:  # fmt: skip
        with self.lock:
            if row is not None:
                self.pending.append(row)
            if schedule is not None:
                self.pending_schedules.append(schedule)
            if not self.registered:
                atexit.register(self.flush)
                self.registered = True
            full = len(self.pending) + len(self.pending_schedules) >= FLUSH_EVERY
        if full:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            rows, self.pending = self.pending, []
            schedules, self.pending_schedules = self.pending_schedules, []
        if not rows and not schedules:
            return
        conn = connect()
        try:
            with conn:
                _record_provenance(conn)
                conn.executemany(
                    f"INSERT INTO {TABLE} (location, device, name, searched, inputs, src, compiler)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                conn.executemany(f"INSERT INTO {SCHEDULE_TABLE} (location, roots, kernels) VALUES (?, ?, ?)", schedules)
        finally:
            conn.close()


_recorder = _Recorder()


def capture_enabled() -> bool:
    return bool(CAPTURE_PROCESS_REPLAY)


def record_compile(device: str, ast: Any, renderer: Any, flags: Any, source: Any, compiler: str = "") -> None:
    """Record one compile (the engine calls this on every in-memory cache miss when capture is on)."""
    # A plain tuple, not a class of this module, so another version of tg.codegen can load it.
    blob = dumps((ast, renderer, flags, tuple(source.applied_opts)))
    _recorder.add((calling_location(), device, source.name, int(BEAM.value > 0), blob, source.src, compiler))


def record_schedule(roots: tuple[Any, ...], kernel_names: list[str]) -> None:
    """Record one schedule: the tensor-graph nodes realized and the kernels they became (for `diff --schedule`)."""
    try:
        blob = dumps(tuple(roots))
    except (PicklingError, TypeError, AttributeError, RecursionError):
        return  # a graph that cannot be pickled is not captured; kernels still are
    _recorder.add(schedule=(calling_location(), blob, "\n".join(kernel_names)))


def flush_captures() -> None:
    """Write every pending row now (tests and tools that read the database in the same process call this)."""
    _recorder.flush()
