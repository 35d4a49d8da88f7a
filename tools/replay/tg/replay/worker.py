"""One replay worker process: `python -m tg.replay.worker DB TABLE MODE ID...`, one JSON line out per row.

It runs under whichever tg.codegen comes first on PYTHONPATH, which is the point: `tg-replay diff --against REF`
puts the other version's lib folders there, so the captured kernel ASTs go through *that* version's
`kernel_to_program`. This module therefore imports nothing of tg at module level and only the pipeline function
(and, for timing, the engine) of whatever version it finds.

MODE is `source` (print {"id", "src"} or {"id", "error"}), `time` (also compile and time each kernel on its
device: {"id", "seconds"}) or `schedule` (TABLE holds captured schedules: {"id", "kernels"}, the kernel names this
version's scheduler makes of the captured tensor graph). Rows captured under BEAM replay the opts they ended
with instead of searching again.
"""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import sys
import traceback
from typing import Any


def _replay_input(blob: bytes, searched: bool) -> tuple[Any, Any, Any]:
    from tg.codegen.pipeline import with_opts

    ast, renderer, flags, applied_opts = pickle.loads(blob)
    if searched:
        ast = with_opts(ast, applied_opts)
    return ast, renderer, flags


def replay_source(blob: bytes, searched: bool) -> str:
    from tg.codegen.pipeline import kernel_to_program

    ast, renderer, flags = _replay_input(blob, searched)
    return kernel_to_program(ast, renderer, flags).src


def time_row(blob: bytes, searched: bool, device: str) -> float:
    from tg.hcq.engine import time_kernel

    ast, _, flags = _replay_input(blob, searched)
    return time_kernel(ast, device, flags=flags, repeats=5).seconds


def schedule_kernels(blob: bytes) -> list[str]:
    """The kernel names this version's scheduler makes of the captured tensor-graph roots."""
    from tg.codegen.schedule.schedule import KernelCall, create_schedule
    from tg.hcq.engine.realize import device_target

    schedule = create_schedule(pickle.loads(blob), device_target)  # laid out for this machine's devices
    return [getattr(i.ast.arg, "name", "kernel") if isinstance(i, KernelCall) else "copy" for i in schedule.items]


def replay_schedules(conn: sqlite3.Connection, table: str, ids: list[str]) -> None:
    for row_id in ids:
        row = conn.execute(f"SELECT roots FROM {table} WHERE id = ?", (int(row_id),)).fetchone()
        result: dict[str, Any] = {"id": int(row_id)}
        try:
            if row is None:
                raise LookupError(f"row {row_id} is not in {table}")
            result["kernels"] = schedule_kernels(bytes(row[0]))
        except Exception as error:  # reported, like a kernel replay error
            result["error"] = f"{type(error).__name__}: {error}"
        print(json.dumps(result), flush=True)


def main(argv: list[str]) -> int:
    db, table, mode, *ids = argv
    os.environ["CAPTURE_PROCESS_REPLAY"] = "0"  # replaying must never capture into the database it reads
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    if mode == "schedule":
        replay_schedules(conn, table, ids)
        return 0
    query = f"SELECT id, device, searched, inputs FROM {table} WHERE id = ?"
    for row_id in ids:
        row = conn.execute(query, (int(row_id),)).fetchone()
        result: dict[str, Any] = {"id": int(row_id)}
        try:
            if row is None:
                raise LookupError(f"row {row_id} is not in {table}")
            _, device, searched, blob = row
            if mode == "time":
                result["seconds"] = time_row(bytes(blob), bool(searched), device)
            else:
                result["src"] = replay_source(bytes(blob), bool(searched))
        except Exception as error:  # a replay failure is a result to report, not a crash of the worker
            result["error"] = f"{type(error).__name__}: {error}"
            result["traceback"] = traceback.format_exc(limit=6)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
