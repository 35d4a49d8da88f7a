"""Suite-wide pytest settings: hardware tests run only when TG_HW=1; TG_REQUIRE turns a missing tool into a failure;
Hypothesis keeps no wall-clock deadline.

A test that needs an optional tool (clang, an OpenCL driver, a wgpu adapter) skips on a machine without it, with a
reason that starts `missing NAME:`. A CI leg that installed the tool sets TG_REQUIRE=NAME[,NAME...]: there such a
skip is a failure, so a broken install fails the leg instead of passing it with the tool's tests skipped."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["pytester"]

# Hypothesis times every example against the wall clock (a 200 ms deadline, the too_slow health check), so a loaded
# machine would fail property tests for its load alone; how fast an example runs is not what they check.
settings.register_profile("tg", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tg")


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C raises KeyboardInterrupt in every test process, however the suite was started. A shell without job
    control starts a background job (`pytest &`, a script's `cmd &`) with SIGINT ignored; Python then keeps it
    ignored and so do the xdist workers and every subprocess a test starts, and the tests of Ctrl-C fail for how
    the suite was launched, not for the code (four Ctrl-C tests and the tg-flash serve test did, beside a busy loop)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


RAY_FIXTURES = {"ray_cluster", "ray_head", "ray_installed"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under xdist (--dist loadgroup) the tests that start Ray all run in one worker: each worker would otherwise
    # start a Ray cluster (and a Serve application) of its own, and on a loaded 2-core machine two of them starting
    # at once took minutes to schedule their first actor.
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("ray"))
    if os.environ.get("TG_HW") == "1":
        return
    skip_hw = pytest.mark.skip(reason="needs real hardware; set TG_HW=1 to run")
    for item in items:
        if "hw" in item.keywords:
            item.add_marker(skip_hw)


def required_tools() -> set[str]:
    return {name.strip() for name in os.environ.get("TG_REQUIRE", "").split(",") if name.strip()}


def missing_required_tool(reason: str) -> str | None:
    """The tool a skip reason says is missing, when TG_REQUIRE names it."""
    reason = reason.removeprefix("Skipped: ")
    if not reason.startswith("missing "):
        return None
    name = reason.removeprefix("missing ").partition(":")[0]
    return name if name in required_tools() else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple):  # (path, line, reason) for a skip
        reason = str(report.longrepr[2])
        if (tool := missing_required_tool(reason)) is not None:
            report.outcome = "failed"
            report.longrepr = f"TG_REQUIRE names {tool}, which this machine should have: {reason}"
    return None


@pytest.fixture(autouse=True)
def sigint_handler_is_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test must leave Ctrl-C as it found it: a handler left installed (a hold-back that never restored, a late
    signal that landed outside its block) makes Ctrl-C do nothing in every later test of that worker process, and
    the failure would show far from its cause. The leaking test fails here, and the handler is put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    blocked_before = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"{request.node.nodeid} left the SIGINT handler {after!r} installed (it found {before!r})")
    if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []) and not blocked_before:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        pytest.fail(f"{request.node.nodeid} left SIGINT blocked in the main thread")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[ModuleType]:
    """A local Ray cluster of 2 CPUs for the tests marked `cluster` (yields the ray module). Without Ray (the
    `cluster` extra) they skip with `missing ray:`, which TG_REQUIRE=ray (the CI leg that installs it) makes a
    failure."""
    # under `uv run`, Ray would start workers with `uv run` in a copy of the folder (no extra): see tg.beam.cluster
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ModuleNotFoundError:
        pytest.skip("missing ray: install the cluster extra (uv sync --extra cluster)")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception:  # on a loaded machine the raylet can give up on its slow-starting agents: one more try
        ray.shutdown()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def ray_installed() -> ModuleType:
    """The ray module, imported but not started (a test that runs the tools in subprocesses); skips as
    `ray_cluster` does without the cluster extra."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ModuleNotFoundError:
        pytest.skip("missing ray: install the cluster extra (uv sync --extra cluster)")
    return ray


@dataclass(frozen=True)
class RayHead:
    address: str  # 127.0.0.1:PORT
    # what a process that joins it needs in its environment: the head runs without token authentication (a driver
    # would need the head's token), and under `uv run` no runtime environment of its own
    environment: dict[str, str]
    resource: str  # a custom resource only this cluster has


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def ray_head(ray_installed: ModuleType) -> Iterator[RayHead]:
    """A Ray cluster started here as a user would (`ray start --head`), with 2 CPUs and a custom resource, for
    the tools to join in subprocesses (run with its `environment`). Its own
    temporary folder, so `ray.init()` in this process (the `ray_cluster` fixture) never finds it, and its own
    process group, which is stopped at the end (never `ray stop`: that would stop every Ray on the machine)."""
    port = unused_port()
    head_info = RayHead(f"127.0.0.1:{port}", {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"},
                        "tg_test_head")  # fmt: skip
    folder = tempfile.mkdtemp(prefix="tgray-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    command = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={port}",
               "--num-cpus=2", f'--resources={{"{head_info.resource}": 100}}', f"--temp-dir={folder}",
               "--include-dashboard=false", "--disable-usage-stats"]  # fmt: skip
    head = subprocess.Popen(command, env={**os.environ, **head_info.environment}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # a hang guard: the head's control store accepts connections
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ray start --head did not come up (exit status {head.poll()})") from None
                time.sleep(0.5)
        yield head_info
    finally:
        stop_group(head, signal.SIGTERM)  # the head and every process it started (its session)
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            stop_group(head, signal.SIGKILL)
            head.wait()
        shutil.rmtree(folder, ignore_errors=True)


def stop_group(leader: subprocess.Popen, signal_number: int) -> None:
    try:
        os.killpg(leader.pid, signal_number)
    except ProcessLookupError:  # the group is gone already
        pass
