"""tg-beam search DIR, here and on a local Ray cluster (tests marked `cluster`): the same cache either way with a
deterministic cost, a dead worker costs only its task, and without Ray --ray is one error line."""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from tg.beam.batch import SearchSettings, plan_folder, search_here
from tg.beam.cli import RAY_MISSING, app
from tg.codegen.opt import Opt, OptOps
from tg.codegen.opt.search import Candidate, beam_search
from tg.codegen.pipeline import CodegenFlags
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.serial import write_file
from tg.codegen.uop.ops import UOp
from tg.hcq.engine.beam import BeamResult, cached_opts, export_cache, store_opts
from tg.tensor import Tensor

runner = CliRunner()


def kernels_of(t: Tensor) -> list[UOp]:
    return [item.ast for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall)]


def dump_folder(folder: Path) -> Path:
    """Three kernels as `tg-beam dump` writes them (with the device in the provenance): a matmul, a sum, an add."""
    folder.mkdir()
    asts = [
        *kernels_of(Tensor.empty(24, 16) @ Tensor.empty(16, 8)),
        *kernels_of(Tensor.empty(32, 48).sum(axis=1)),
        *kernels_of(Tensor.empty(64, 8) + Tensor.empty(64, 8)),
    ]
    for number, ast in enumerate(asts):
        write_file(folder / f"k{number}.pkl", ast, device="CPU", compiler="cc", flags="")
    return folder


def candidate_cost(candidates: list[Candidate]) -> list[float]:
    """A cost that depends on the candidate's opts alone (crc32 is the same in every process, unlike hash())."""
    return [1e-6 * (1 + zlib.crc32(repr(c.opts).encode()) % 997) for c in candidates]


def deterministic_search(ast: UOp, device: str, width: int, ignore_cache: bool | None = None,
                         flags: CodegenFlags | None = None, on_round: object = None) -> BeamResult:  # fmt: skip
    """search_opts with candidate_cost in place of timing: the cache lookup, the beam search and the store."""
    if not ignore_cache:
        hit = cached_opts(ast, device, width, flags)
        if hit is not None:
            return hit
    opts, seconds = beam_search(ast, width, candidate_cost)
    result = BeamResult(opts, seconds, cached=False)
    store_opts(ast, device, width, result)
    return result


def crash_once_search(attempts: Path, victim: str, ast: UOp, device: str, width: int, **options: object) -> BeamResult:
    """deterministic_search that records each attempt, and whose first attempt at the `victim` kernel kills its
    worker process outright (no exception, no cleanup: what a lost node looks like to Ray)."""
    key = ast.key.hex()
    record = attempts / key
    first = not record.exists()
    with record.open("a") as out:
        out.write("attempt\n")
    if key == victim and first:
        os._exit(1)
    return deterministic_search(ast, device, width, **options)  # type: ignore[arg-type]


def failing_search(victim: str, ast: UOp, device: str, width: int, **options: object) -> BeamResult:
    if ast.key.hex() == victim:
        raise RuntimeError("this kernel cannot be searched")
    return deterministic_search(ast, device, width, **options)  # type: ignore[arg-type]


def exported_entries(path: Path) -> list[dict]:
    export_cache(str(path))
    lines = path.read_text().splitlines()
    return sorted((json.loads(line) for line in lines[1:]), key=lambda e: e["kernel"])


@pytest.fixture
def cluster(ray_cluster: ModuleType) -> ModuleType:
    """tg.beam.cluster, with this test module shipped to the workers by value (they cannot import it by name)."""
    ray_cluster.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    import tg.beam.cluster

    return tg.beam.cluster


def settings(ignore_cache: bool = True) -> SearchSettings:
    return SearchSettings(width=2, flags=CodegenFlags.from_environment(), ignore_cache=ignore_cache)


@pytest.mark.cluster
def test_a_cluster_search_fills_the_cache_exactly_as_a_local_one(
    tmp_path: Path, cluster: ModuleType, fresh_beam_cache: Path
) -> None:
    plan = plan_folder(dump_folder(tmp_path / "kernels"), None)
    local = search_here(plan, settings(), search=deterministic_search)
    local_entries = exported_entries(tmp_path / "local.jsonl")
    assert len(local_entries) == len(plan) == 3
    assert any(json.loads(e["opts"]) for e in local_entries)  # the cost made the search pick opts somewhere
    (fresh_beam_cache / "beam.db").unlink()  # an empty shared cache for the cluster run
    report = cluster.search_on_ray(plan, settings(), search=deterministic_search)
    assert report.failures == [] and report.merged is not None and report.merged.imported == 3
    assert exported_entries(tmp_path / "cluster.jsonl") == local_entries
    assert [o.result.opts for o in report.ordered()] == [o.result.opts for o in local.ordered()]


@pytest.mark.cluster
def test_kernels_already_in_the_shared_cache_start_no_task(tmp_path: Path, cluster: ModuleType) -> None:
    plan = plan_folder(dump_folder(tmp_path / "kernels"), None)
    search_here(plan, settings(), search=deterministic_search)
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    counting = functools.partial(crash_once_search, attempts, "no victim")
    report = cluster.search_on_ray(plan, settings(ignore_cache=False), search=counting)
    assert all(o.result.cached for o in report.outcomes) and len(report.outcomes) == 3
    assert list(attempts.iterdir()) == [] and report.merged is None


@pytest.mark.cluster
def test_a_worker_that_dies_costs_only_its_task(tmp_path: Path, cluster: ModuleType, fresh_beam_cache: Path) -> None:
    plan = plan_folder(dump_folder(tmp_path / "kernels"), None)
    search_here(plan, settings(), search=deterministic_search)
    local_entries = exported_entries(tmp_path / "local.jsonl")
    (fresh_beam_cache / "beam.db").unlink()
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    victim = plan[1].start.key.hex()
    report = cluster.search_on_ray(plan, settings(), search=functools.partial(crash_once_search, attempts, victim))
    assert report.failures == []
    tries = {path.name: len(path.read_text().splitlines()) for path in attempts.iterdir()}
    assert tries == {k.start.key.hex(): 2 if k.start.key.hex() == victim else 1 for k in plan}
    assert exported_entries(tmp_path / "cluster.jsonl") == local_entries


@pytest.mark.cluster
def test_a_failed_search_is_reported_and_the_others_are_merged(tmp_path: Path, cluster: ModuleType) -> None:
    plan = plan_folder(dump_folder(tmp_path / "kernels"), None)
    victim = plan[0].start.key.hex()
    report = cluster.search_on_ray(plan, settings(), search=functools.partial(failing_search, victim))
    assert [(k.label, why) for k, why in report.failures] == [
        ("k0.pkl", "RuntimeError: this kernel cannot be searched")
    ]
    assert report.merged is not None and report.merged.imported == 2
    assert {e["kernel"] for e in exported_entries(tmp_path / "cache.jsonl")} == {k.start.key.hex() for k in plan[1:]}


@pytest.mark.cluster
@pytest.mark.slow
def test_the_cli_searches_a_folder_on_the_cluster_with_the_real_search(tmp_path: Path, cluster: ModuleType) -> None:
    folder = dump_folder(tmp_path / "kernels")
    result = runner.invoke(app, ["search", str(folder), "--ray", "--beam", "1", "--json"])
    assert result.exit_code == 0, result.output
    documents = json.loads(result.stdout)
    assert [d["name"] for d in documents] == ["k0.pkl", "k1.pkl", "k2.pkl"]
    assert all(d["time_us"] > 0 and not d["cached"] and d["device"] == "CPU" for d in documents)
    assert "merged 3 results into the cache" in result.stderr
    again = runner.invoke(app, ["search", str(folder), "--beam", "1", "--json"])  # here, from the merged cache
    assert again.exit_code == 0 and all(d["cached"] for d in json.loads(again.stdout))


def test_ray_without_the_extra_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = dump_folder(tmp_path / "kernels")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as it does without the extra
    monkeypatch.delitem(sys.modules, "tg.beam.cluster", raising=False)
    result = runner.invoke(app, ["search", str(folder), "--ray"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"error: {RAY_MISSING}"]
    assert "uv sync --extra cluster" in RAY_MISSING


def test_search_of_a_folder_without_kernels_is_one_error_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["search", str(tmp_path)])
    assert result.exit_code == 1 and result.stderr.startswith("error: ") and "holds no kernel files" in result.stderr


def test_a_local_folder_search_caches_every_kernel_then_answers_from_the_cache(tmp_path: Path) -> None:
    plan = plan_folder(dump_folder(tmp_path / "kernels"), None)
    assert [k.label for k in plan] == ["k0.pkl", "k1.pkl", "k2.pkl"] and {k.device for k in plan} == {"CPU"}
    first = search_here(plan, settings(), search=deterministic_search)
    assert not any(o.result.cached for o in first.outcomes) and len(exported_entries(tmp_path / "a.jsonl")) == 3
    again = search_here(plan, settings(ignore_cache=False), search=deterministic_search)
    assert [o.result.opts for o in again.outcomes] == [o.result.opts for o in first.outcomes]
    assert all(o.result.cached for o in again.outcomes)


@pytest.mark.cluster
def test_tasks_ask_for_the_resources_their_device_needs(cluster: ModuleType) -> None:
    assert cluster.task_options("CPU", 3, None) == {"num_cpus": 1, "max_retries": 3}
    assert cluster.task_options("AMD", 1, None) == {"num_cpus": 1, "max_retries": 1, "num_gpus": 1}
    assert cluster.task_options("CPU:LLVM", 0, "zen4")["resources"] == {"zen4": 1}


def tool(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a tool's command in a process of its own (this one may have joined the test cluster already), with a
    hang guard."""
    command = [str(Path(sys.executable).parent / name), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def closed_port() -> int:
    """A loopback port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.cluster
def test_the_cli_exits_1_when_one_kernel_fails_on_the_cluster(tmp_path: Path, cluster: ModuleType) -> None:
    """The real search on the cluster: a kernel whose preapplied opt cannot apply (an axis of 512 split by 7)
    fails its task; the CLI reports it in one line, still merges the other kernels' results, and exits 1."""
    folder = dump_folder(tmp_path / "kernels")
    (add,) = kernels_of(Tensor.empty(64, 8) * Tensor.empty(64, 8))
    write_file(folder / "k3.pkl", (add, (Opt(OptOps.UPCAST, 0, 7),)), device="CPU", compiler="cc", flags="")
    result = runner.invoke(app, ["search", str(folder), "--ray", "--beam", "1", "--ignore-cache", "--json"])
    assert result.exit_code == 1, result.output
    assert [d["name"] for d in json.loads(result.stdout)] == ["k0.pkl", "k1.pkl", "k2.pkl"]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: k3.pkl: KernelOptError: cannot split an axis of 512 by 7: not a divisor"]
    assert "merged 3 results into the cache" in result.stderr


@pytest.mark.cluster
@pytest.mark.slow
def test_ray_address_joins_a_cluster_started_with_ray_start(tmp_path: Path, ray_head: Any) -> None:
    """tg-beam search --ray-address joins the cluster `ray start --head` started: its tasks ask for a resource
    only that cluster has (a new local cluster could never run them), and every kernel's result comes back."""
    folder = dump_folder(tmp_path / "kernels")
    environment = {**ray_head.environment, "TG_CACHE_DIR": str(tmp_path / "cache")}
    result = tool("tg-beam", "search", str(folder), "--ray-address", ray_head.address, "--ray-resource",
                  ray_head.resource, "--beam", "1", "--json", env=environment)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [d["name"] for d in json.loads(result.stdout)] == ["k0.pkl", "k1.pkl", "k2.pkl"]
    assert "merged 3 results into the cache" in result.stderr


@pytest.mark.cluster
def test_an_unreachable_ray_address_is_one_error_line(tmp_path: Path, ray_installed: ModuleType) -> None:
    """Nothing listens at the address: one `error:` line and exit 1, not Ray waiting for the cluster for ever."""
    address = f"127.0.0.1:{closed_port()}"
    result = tool("tg-beam", "search", str(dump_folder(tmp_path / "kernels")), "--ray-address", address)
    assert result.returncode == 1
    refused = f"error: cannot reach the Ray cluster at {address}: Connection refused"
    assert result.stderr.strip().splitlines() == [refused]
