"""Many kernels at once: every k.pkl in a folder (what `tg-beam dump` writes), searched here one after another or on
a Ray cluster (tg.beam.cluster), through the same per-kernel step either way.

    plan = plan_folder(Path("kernels"), device=None)     # every kernel, with the device its dump recorded
    report = search_here(plan, SearchSettings(width=4, flags=CodegenFlags.from_environment()))

Here, each search stores its winner in the shared BEAM cache itself (tg.hcq.engine.beam). On a cluster, a worker
searches in a cache folder of its own and sends back that cache's export (the `tg-beam cache export` format), which
the driver imports (`merge_export`): a worker that dies mid-search leaves nothing half-written in the shared cache.

`search` is tg.hcq.engine.beam.search_opts unless a caller passes another function with its signature (tests pass
one whose cost is a function of the candidate, so that a search here and one on a cluster must find the same opts).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tg.beam.kernels import BeamError, KernelJob, check_device, load_kernel_file
from tg.codegen.flags import Context
from tg.codegen.pipeline import CodegenFlags, with_opts
from tg.codegen.uop.ops import UOp
from tg.hcq.engine.beam import BeamResult, ImportResult, cached_opts, export_cache, import_cache, search_opts

Search = Callable[..., BeamResult]  # search_opts(ast, device, width, ignore_cache=, flags=) -> BeamResult


@dataclass(frozen=True)
class FolderKernel:
    """One kernel of a folder: `label` names it (its file, and its place when the file holds a list)."""

    label: str
    job: KernelJob
    device: str

    @property
    def start(self) -> UOp:
        """The kernel the search starts from: its preapplied opts applied."""
        return with_opts(self.job.ast, self.job.preapplied) if self.job.preapplied else self.job.ast


@dataclass(frozen=True)
class SearchSettings:
    width: int
    flags: CodegenFlags
    ignore_cache: bool = False


@dataclass(frozen=True)
class Outcome:
    kernel: FolderKernel
    result: BeamResult


@dataclass
class FolderReport:
    outcomes: list[Outcome] = field(default_factory=list)
    failures: list[tuple[FolderKernel, str]] = field(default_factory=list)  # kernels whose search failed, and why
    merged: ImportResult | None = None  # on a cluster: what the workers' exports added to the shared cache

    def ordered(self) -> list[Outcome]:
        """Outcomes in the plan's order (a cluster finishes them in any order)."""
        return sorted(self.outcomes, key=lambda o: o.kernel.label)


def plan_folder(folder: Path, device: str | None) -> list[FolderKernel]:
    """Every kernel in FOLDER/*.pkl, sorted by file name; each on `device`, else the device its dump recorded
    (else CPU). A BeamError names the first file that cannot be read or device that cannot time kernels."""
    if not folder.is_dir():
        raise BeamError(f"{folder} is not a folder")
    files = sorted(folder.glob("*.pkl"))
    if not files:
        raise BeamError(f"{folder} holds no kernel files (*.pkl): write them with tg-beam dump {folder} -- CMD")
    plan = []
    for path in files:
        jobs, provenance = load_kernel_file(path)
        name = check_device(device or provenance.get("device") or "CPU")
        for index, job in enumerate(jobs):
            label = path.name if len(jobs) == 1 else f"{path.name}[{index}]"
            plan.append(FolderKernel(label, job, name))
    return plan


def search_kernel(kernel: FolderKernel, settings: SearchSettings, search: Search = search_opts) -> BeamResult:
    """The one step both ways share: search one kernel (or find it in the cache)."""
    return search(kernel.start, kernel.device, settings.width, ignore_cache=settings.ignore_cache,
                  flags=settings.flags)  # fmt: skip


def search_here(
    plan: list[FolderKernel],
    settings: SearchSettings,
    search: Search = search_opts,
    on_done: Callable[[Outcome], None] | None = None,
) -> FolderReport:
    """Search every kernel of `plan` in this process, in order; each result goes to the shared cache."""
    report = FolderReport()
    for kernel in plan:
        outcome = Outcome(kernel, search_kernel(kernel, settings, search))
        report.outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)
    return report


def cached_result(kernel: FolderKernel, settings: SearchSettings) -> BeamResult | None:
    """The shared cache's result for `kernel` (None: it must be searched), unless the settings ignore the cache."""
    if settings.ignore_cache:
        return None
    return cached_opts(kernel.start, kernel.device, settings.width, settings.flags)


def search_into_export(kernel: FolderKernel, settings: SearchSettings, search: Search = search_opts) -> tuple[
        BeamResult, str]:  # fmt: skip
    """Search `kernel` in a cache folder of its own and return the result with that cache's export (the text of
    `tg-beam cache export`): what a cluster worker does, so that only whole results reach the shared cache."""
    with tempfile.TemporaryDirectory(prefix="tg-beam-task-") as folder, Context(TG_CACHE_DIR=folder):
        own = SearchSettings(settings.width, settings.flags, ignore_cache=True)  # the driver looked in the cache
        result = search_kernel(kernel, own, search)
        path = os.path.join(folder, "export.jsonl")
        export_cache(path)
        with open(path) as exported:
            return result, exported.read()


def merge_export(text: str, device: str) -> ImportResult:
    """Import one worker's export into the shared cache (through `tg-beam cache import`'s checks: entries made
    with another compiler, CPU model or codegen version are refused and counted)."""
    with tempfile.TemporaryDirectory(prefix="tg-beam-merge-") as folder:
        path = os.path.join(folder, "export.jsonl")
        with open(path, "w") as out:
            out.write(text)
        return import_cache(path, device)


def add_imports(total: ImportResult | None, more: ImportResult) -> ImportResult:
    if total is None:
        return more
    return ImportResult(total.imported + more.imported, total.other_machine + more.other_machine,
                        total.other_codegen + more.other_codegen)  # fmt: skip
