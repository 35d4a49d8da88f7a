"""tg-replay diff --ray: the captured kernels replayed in shards, one Ray task per shard.

    report = replay(db, other, jobs=8, runner=ray_runner("ray://head:10001"))

`ray_runner` stands in for tg.replay.diff's worker processes and changes nothing else of the diff: rows, report and
exit code are the same as a local diff's. A task gets everything it needs by value, so any node can run it: its
shard of the database (a small sqlite file of just those rows) and, for --against or --python-path, the other
version's library folders (packed once, shared by every task). It runs the same `python -m tg.replay.worker` a local
diff runs, under that version's PYTHONPATH, and returns the worker's result lines. "This version" on a node is the
tg installed there (run the nodes from the same environment as the driver). A dead worker's task is retried by Ray.

Only this module imports Ray (the `cluster` extra); the CLI imports it only behind --ray.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Under `uv run`, Ray would start each worker with `uv run` in an uploaded copy of the working folder: an environment
# without the cluster extra, so without Ray. Workers run this interpreter instead (read when ray is first imported).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray  # noqa: E402

from tg.codegen.cache_db import open_db
from tg.codegen.capture import TABLE  # noqa: E402
from tg.codegen.flags import flags_from_environment  # noqa: E402
from tg.env.ray_address import ClusterUnreachable, check_reachable  # noqa: E402
from tg.replay.database import ReplayError  # noqa: E402
from tg.replay.diff import ResultSink, Runner, Version, split_shards, worker_command, worker_environment  # noqa: E402

ROWS_PER_TASK = 256  # a task's shard at most: small enough to spread tens of thousands of rows, large enough that
# starting the worker process (importing tg) is a small part of a task
# flags that name this machine's paths, or capture: a worker keeps its own (tg settings go with every task)
LOCAL_FLAGS = ("TG_CACHE_DIR", "TG_DUMP_KERNELS", "TG_REPLAY_DB", "CAPTURE_PROCESS_REPLAY")


def connect(address: str | None) -> None:
    """Join the cluster at `address` (None: RAY_ADDRESS, else a new local one), unless already joined; a
    ReplayError in one line when the address does not answer (see tg.env.ray_address)."""
    if ray.is_initialized():
        return
    try:
        check_reachable(address or os.environ.get("RAY_ADDRESS"))
    except ClusterUnreachable as error:
        raise ReplayError(str(error)) from None
    options: dict[str, Any] = {
        "runtime_env": {"env_vars": flags_from_environment(exclude=LOCAL_FLAGS)},
        "log_to_driver": False,
    }
    if address is None and not os.environ.get("RAY_ADDRESS"):
        options["include_dashboard"] = False
    ray.init(address=address, **options)


def shard_database(db: str, table: str, ids: list[int]) -> bytes:
    """The rows `ids` of `table` in `db`, as the bytes of an sqlite file holding only them (same columns)."""
    with tempfile.TemporaryDirectory(prefix="tg-replay-shard-") as folder:
        path = os.path.join(folder, "shard.db")
        conn = open_db(path)
        try:
            conn.execute("ATTACH DATABASE ? AS source", (db,))
            marks = ", ".join("?" * len(ids))
            with conn:
                conn.execute(f"CREATE TABLE main.{table} AS SELECT * FROM source.{table} WHERE id IN ({marks})", ids)
        finally:
            conn.close()
        return Path(path).read_bytes()


def pack_libraries(version: Version) -> bytes | None:
    """The version's library folders (its PYTHONPATH) as one gzipped tar, folder i under `i/`; None for this
    version (the nodes' own tg)."""
    if not version.python_path:
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for index, folder in enumerate(version.python_path):
            archive.add(folder, arcname=str(index), filter=lambda info: None if "__pycache__" in info.name else info)
    return buffer.getvalue()


def unpack_libraries(packed: bytes, folder: str) -> tuple[str, ...]:
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as archive:
        archive.extractall(folder, filter="data")
        count = len({member.name.split("/")[0] for member in archive.getmembers()})
    return tuple(os.path.join(folder, str(index)) for index in range(count))


@ray.remote
def _replay_shard(shard: bytes, table: str, mode: str, ids: list[int], label: str, libraries: bytes | None) -> list[
        dict]:  # fmt: skip
    """Run `python -m tg.replay.worker` on one shard, as a local diff does; its result lines."""
    with tempfile.TemporaryDirectory(prefix="tg-replay-task-") as folder:
        db = os.path.join(folder, "rows.db")
        Path(db).write_bytes(shard)
        python_path = unpack_libraries(libraries, os.path.join(folder, "lib")) if libraries is not None else ()
        finished = subprocess.run(worker_command(db, table, mode, ids), capture_output=True, text=True,
                                  env=worker_environment(Version(label, python_path)))  # fmt: skip
    if finished.returncode != 0:
        detail = finished.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"a replay worker for {label} failed: {detail[0]}")
    return [json.loads(line) for line in finished.stdout.splitlines() if line.strip()]


def ray_runner(address: str | None = None, retries: int = 3, rows_per_task: int = ROWS_PER_TASK) -> Runner:
    """A runner for tg.replay.diff (in place of its worker processes) that replays shards as Ray tasks."""

    def run(db: str, version: Version, mode: str, ids: list[int], jobs: int, on_line: Callable[[dict], bool],
            table: str = TABLE) -> None:  # fmt: skip
        connect(address)
        libraries = pack_libraries(version)
        shared = ray.put(libraries)  # one copy in the object store, whatever the number of tasks
        shards = split_shards(ids, max(jobs, math.ceil(len(ids) / rows_per_task)))
        pending = [
            _replay_shard.options(max_retries=retries).remote(shard_database(db, table, shard), table, mode, shard,
                                                              version.label, shared)
            for shard in shards
        ]  # fmt: skip
        sink = ResultSink(on_line)
        try:
            while pending and not sink.stop.is_set():
                done, pending = ray.wait(pending, num_returns=1)
                for result in _lines(done[0], version):
                    if not sink.take(result):
                        break
        finally:  # stopped early, or SIGTERM / Ctrl-C: no task goes on working for a diff that is over
            for ref in pending:
                ray.cancel(ref, force=True)
        sink.check_safe(db)

    return run


def _lines(ref: Any, version: Version) -> list[dict]:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        raise ReplayError(str(cause) if cause is not None else f"a replay task for {version.label} failed") from None
    except ray.exceptions.RayError as error:
        lines = str(error).strip().splitlines()
        raise ReplayError(f"a replay task for {version.label} failed: {lines[0] if lines else error}") from None
