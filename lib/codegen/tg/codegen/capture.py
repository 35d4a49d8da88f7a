"""Process-replay capture: with CAPTURE_PROCESS_REPLAY=1, every kernel the engine compiles is recorded.

A row holds what `tg.codegen.pipeline.kernel_to_program` was called with (kernel AST, renderer, codegen flags), the
source it returned, the device, and where in the program or test the kernel came from. `tg-replay diff` later
calls the same function again, from another version of tg.codegen, and compares the source texts.

Capture must be cheap and safe from several processes at once (pytest -n 2): rows are pickled at once, kept in
memory and written in batches (and at exit) into one sqlite table in WAL mode. The table name carries
CAPTURE_SCHEMA, which changes whenever what a row pickles changes layout, so an old database is never misread.
"""

from __future__ import annotations

import atexit
import os
import pickle
import sqlite3
import sys
import threading
from types import FrameType
from typing import Any

from tg.codegen.cache_db import open_db
from tg.codegen.flags import BEAM, CAPTURE_PROCESS_REPLAY, TG_REPLAY_DB, cache_dir

CAPTURE_SCHEMA = 1
TABLE = f"process_replay_v{CAPTURE_SCHEMA}"
SCHEDULE_TABLE = f"process_replay_schedules_v{CAPTURE_SCHEMA}"
FLUSH_EVERY = 200  # rows kept in memory before a write

COLUMNS = (
    "id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "location TEXT NOT NULL, device TEXT NOT NULL, name TEXT NOT NULL, "
    "searched INTEGER NOT NULL, "  # 1 when BEAM chose the opts: replay then reuses them instead of searching
    "inputs BLOB NOT NULL, "  # pickle of the tuple (kernel AST, renderer, codegen flags, applied opts)
    "src TEXT NOT NULL"
)

SCHEDULE_COLUMNS = (
    "id INTEGER PRIMARY KEY AUTOINCREMENT, location TEXT NOT NULL, "
    "roots BLOB NOT NULL, "  # pickle of the tuple of tensor-graph nodes that were realized
    "kernels TEXT NOT NULL"  # the kernel names the schedule had, in order, one per line
)


def database_path() -> str:
    """Where captures go: TG_REPLAY_DB, else process_replay.db in the cache directory."""
    return TG_REPLAY_DB.value or os.path.join(cache_dir(), "process_replay.db")


def connect(path: str | None = None) -> sqlite3.Connection:
    """A connection to the capture database, with its table created (WAL mode, so processes can share it)."""
    return open_db(
        path or database_path(), [f"{TABLE} ({COLUMNS})", f"{SCHEDULE_TABLE} ({SCHEDULE_COLUMNS})"], wal=True
    )


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
        self.pending: list[tuple[str, str, str, int, bytes, str]] = []
        self.pending_schedules: list[tuple[str, bytes, str]] = []
        self.lock = threading.Lock()
        self.registered = False

    def add(self, row: tuple[str, str, str, int, bytes, str] | None = None,
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
                conn.executemany(
                    f"INSERT INTO {TABLE} (location, device, name, searched, inputs, src) VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )
                conn.executemany(f"INSERT INTO {SCHEDULE_TABLE} (location, roots, kernels) VALUES (?, ?, ?)", schedules)
        finally:
            conn.close()


_recorder = _Recorder()


def capture_enabled() -> bool:
    return bool(CAPTURE_PROCESS_REPLAY)


def record_compile(device: str, ast: Any, renderer: Any, flags: Any, source: Any) -> None:
    """Record one compile (the engine calls this on every in-memory cache miss when capture is on)."""
    # A plain tuple, not a class of this module, so another version of tg.codegen can unpickle it.
    inputs = (ast, renderer, flags, tuple(source.applied_opts))
    blob = pickle.dumps(inputs, protocol=pickle.HIGHEST_PROTOCOL)
    _recorder.add((calling_location(), device, source.name, int(BEAM.value > 0), blob, source.src))


def record_schedule(roots: tuple[Any, ...], kernel_names: list[str]) -> None:
    """Record one schedule: the tensor-graph nodes realized and the kernels they became (for `diff --schedule`)."""
    try:
        blob = pickle.dumps(tuple(roots), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return  # a graph that cannot be pickled is not captured; kernels still are
    _recorder.add(schedule=(calling_location(), blob, "\n".join(kernel_names)))


def flush_captures() -> None:
    """Write every pending row now (tests and tools that read the database in the same process call this)."""
    _recorder.flush()
