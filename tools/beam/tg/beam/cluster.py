"""tg-beam search DIR --ray: one Ray task per kernel, results merged into the shared BEAM cache.

    report = search_on_ray(plan_folder(folder, None), settings, address="ray://head:10001")

Only this module imports Ray (the `cluster` extra; an import contract keeps the rest of tg free of it), and the CLI
imports it only behind --ray. Each task runs tg.beam.batch.search_into_export on a worker: the same search as
`tg-beam search DIR` here, in a cache folder of the worker's own, whose export comes back and is imported into the
shared cache as it arrives. A task asks for the resource its kernel's device needs (a CPU, or a GPU for a GPU
device, and optionally a custom resource naming the nodes whose device matches); a worker that dies is retried by
Ray up to `retries` times and costs only its own task.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

# Under `uv run`, Ray would start each worker with `uv run` in an uploaded copy of the working folder: an environment
# without the cluster extra, so without Ray. Workers run this interpreter instead (read when ray is first imported).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray  # noqa: E402

from tg.beam.batch import (  # noqa: E402
    FolderKernel,
    FolderReport,
    Outcome,
    Search,
    SearchSettings,
    add_imports,
    cached_result,
    merge_export,
    search_into_export,
)
from tg.beam.kernels import BeamError  # noqa: E402
from tg.codegen.flags import flags_from_environment  # noqa: E402
from tg.env.ray_address import ClusterUnreachable, check_reachable  # noqa: E402
from tg.hcq.engine.beam import search_opts  # noqa: E402

GPU_FAMILIES = ("AMD", "NV", "CUDA")  # devices whose kernels run on a GPU: their tasks ask Ray for one
# flags that name this machine's paths: a worker keeps its own
LOCAL_FLAGS = ("TG_CACHE_DIR", "TG_DUMP_KERNELS", "TG_REPLAY_DB", "CAPTURE_PROCESS_REPLAY")


def connect(address: str | None) -> None:
    """Join the cluster at `address` (None: RAY_ADDRESS, else a new local one), unless already joined; a
    BeamError in one line when the address does not answer (see tg.env.ray_address)."""
    if ray.is_initialized():
        return
    try:
        check_reachable(address or os.environ.get("RAY_ADDRESS"))
    except ClusterUnreachable as error:
        raise BeamError(str(error)) from None
    options: dict[str, Any] = {
        "runtime_env": {"env_vars": flags_from_environment(exclude=LOCAL_FLAGS)},
        "log_to_driver": False,
    }
    if address is None and not os.environ.get("RAY_ADDRESS"):
        options["include_dashboard"] = False  # a local cluster for this one run: no web dashboard to start
    ray.init(address=address, **options)


def task_options(device: str, retries: int, resource: str | None) -> dict[str, Any]:
    """Where a kernel's task may run: a node with a free CPU (or GPU, for a GPU device) and, when given, one unit
    of the custom `resource` (start the nodes whose device matches with `ray start --resources '{"NAME": N}'`)."""
    options: dict[str, Any] = {"num_cpus": 1, "max_retries": retries}
    if device.split(":")[0].split("+")[-1] in GPU_FAMILIES:
        options["num_gpus"] = 1
    if resource is not None:
        options["resources"] = {resource: 1}
    return options


@ray.remote
def _search_task(kernel: FolderKernel, settings: SearchSettings, search: Search) -> tuple[Any, str]:
    return search_into_export(kernel, settings, search)


def search_on_ray(
    plan: list[FolderKernel],
    settings: SearchSettings,
    search: Search = search_opts,
    address: str | None = None,
    retries: int = 3,
    resource: str | None = None,
    on_done: Callable[[Outcome], None] | None = None,
) -> FolderReport:
    """Search every kernel of `plan` not already in the shared cache, one Ray task each; each finished task's
    export is merged into the shared cache at once. A task that fails (after Ray's retries of a dead worker) is
    reported in FolderReport.failures; the others go on."""
    connect(address)
    report = FolderReport()
    pending: dict[Any, FolderKernel] = {}
    for kernel in plan:
        hit = cached_result(kernel, settings)
        if hit is not None:
            _finish(report, Outcome(kernel, hit), on_done)
        else:
            options = task_options(kernel.device, retries, resource)
            pending[_search_task.options(**options).remote(kernel, settings, search)] = kernel
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        kernel = pending.pop(done[0])
        try:
            result, export = ray.get(done[0])
        except ray.exceptions.RayError as error:
            report.failures.append((kernel, _one_line(error)))
            continue
        report.merged = add_imports(report.merged, merge_export(export, kernel.device))
        _finish(report, Outcome(kernel, result), on_done)
    return report


def _finish(report: FolderReport, outcome: Outcome, on_done: Callable[[Outcome], None] | None) -> None:
    report.outcomes.append(outcome)
    if on_done is not None:
        on_done(outcome)


def _one_line(error: Exception) -> str:
    """A task's failure in one line: the cause's type and message (a worker's traceback is for --debug)."""
    cause = getattr(error, "cause", None)
    if isinstance(error, ray.exceptions.RayTaskError) and cause is not None:
        return f"{type(cause).__name__}: {str(cause).strip().splitlines()[0] if str(cause).strip() else ''}"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"
