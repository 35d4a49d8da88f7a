"""One replay worker process: `python -m tg.replay.worker DB TABLE MODE ID...`, one JSON line out per row.

It runs under whichever tg.codegen comes first on PYTHONPATH, which is the point: `tg-replay diff --against REF`
puts the other version's lib folders there, so the captured kernel ASTs go through *that* version's
`kernel_to_program`. This module therefore imports nothing of tg at module level and only the pipeline function
(and, for timing, the engine) of whatever version it finds.

MODE is `source` (print {"id", "src"} or {"id", "error"}), `time` (also compile and time each kernel on its
device: {"id", "seconds"}) or `schedule` (TABLE holds captured schedules: {"id", "kernels"}, the kernel names this
version's scheduler makes of the captured tensor graph). Rows captured under BEAM replay the opts they ended
with instead of searching again.

Rows are loaded with *this* version's tg.codegen.serial (the file named by TG_REPLAY_SERIAL, loaded by path): its
restricted unpickler refuses anything but tg IR types and resolves op, dtype and opt names against the other
version's classes. A refused row is reported with "unsafe": true, and the diff stops on it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import sys
import traceback
from types import ModuleType
from typing import Any

SERIAL_MODULE = "tg_replay_serial"


def serial() -> ModuleType:
    """The IR loader: TG_REPLAY_SERIAL's file when set (the replaying tg's), else the running tg.codegen's."""
    path = os.environ.get("TG_REPLAY_SERIAL")
    if not path:
        import tg.codegen.serial

        return tg.codegen.serial
    if SERIAL_MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(SERIAL_MODULE, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[SERIAL_MODULE] = module
        spec.loader.exec_module(module)
    return sys.modules[SERIAL_MODULE]


def _replay_input(blob: bytes, searched: bool) -> tuple[Any, Any, Any, tuple[Any, ...]]:
    from tg.codegen.pipeline import with_opts

    ast, renderer, flags, applied_opts = serial().loads(blob)
    if searched:
        ast = with_opts(ast, applied_opts)
    return ast, renderer, flags, tuple(applied_opts)


def replay_source(blob: bytes, searched: bool) -> dict[str, Any]:
    """{"src": the source this version makes, "opts": the opts it applied, "captured_opts": the row's}."""
    from tg.codegen.pipeline import kernel_to_program

    ast, renderer, flags, captured_opts = _replay_input(blob, searched)
    program = kernel_to_program(ast, renderer, flags)
    return {"src": program.src, "opts": [repr(o) for o in program.applied_opts],
            "captured_opts": [repr(o) for o in captured_opts]}  # fmt: skip


def time_row(blob: bytes, searched: bool, device: str) -> float:
    from tg.hcq.engine import time_kernel

    ast, _, flags, _ = _replay_input(blob, searched)
    return time_kernel(ast, device, flags=flags, repeats=5).seconds


def schedule_kernels(blob: bytes) -> dict[str, list[str]]:
    """What this version's scheduler makes of the captured tensor-graph roots: {"kernels": names in order,
    "sources": each kernel's C source (rendered for the CPU, so every kernel is compared the same way)}."""
    from tg.codegen.pipeline import CodegenFlags, kernel_to_program
    from tg.codegen.render.c import CRenderer
    from tg.codegen.schedule.schedule import KernelCall, create_schedule
    from tg.hcq.engine.realize import device_target

    schedule = create_schedule(serial().loads(blob), device_target)  # laid out for this machine's devices
    names, sources = [], []
    for item in schedule.items:
        if isinstance(item, KernelCall):
            names.append(getattr(item.ast.arg, "name", "kernel"))
            sources.append(kernel_to_program(item.ast, CRenderer(), CodegenFlags()).src)
        else:
            names.append("copy")
            sources.append("")
    return {"kernels": names, "sources": sources}


def _failure(error: Exception) -> dict[str, Any]:
    """A row's failure as JSON fields; a load error is one line (its message says what differs or was refused)."""
    loader = serial()
    if isinstance(error, loader.IRLoadError):
        return {"error": str(error), "unsafe": isinstance(error, loader.UnsafeIRError)}
    return {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=6)}


def replay_schedules(conn: sqlite3.Connection, table: str, ids: list[str]) -> None:
    for row_id in ids:
        row = conn.execute(f"SELECT roots FROM {table} WHERE id = ?", (int(row_id),)).fetchone()
        result: dict[str, Any] = {"id": int(row_id)}
        try:
            if row is None:
                raise LookupError(f"row {row_id} is not in {table}")
            result.update(schedule_kernels(bytes(row[0])))
        except Exception as error:  # reported, like a kernel replay error
            result.update(_failure(error))
        print(json.dumps(result), flush=True)


def main(argv: list[str]) -> int:
    db, table, mode, *ids = argv
    os.environ["CAPTURE_PROCESS_REPLAY"] = "0"  # replaying must never capture into the database it reads
    # plain sqlite3, not tg.codegen.cache_db: this worker runs on the tg of another version, whose helper may differ
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
                result.update(replay_source(bytes(blob), bool(searched)))
        except Exception as error:  # a replay failure is a result to report, not a crash of the worker
            result.update(_failure(error))
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
