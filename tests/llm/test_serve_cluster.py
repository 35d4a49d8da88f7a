"""tg-llm serve --replicas under Ray Serve (tests marked `cluster`, on a local Ray cluster): the same answers, stream
and error bodies as one `tg-llm serve`; replicas that die are replaced and a request in flight ends, not hangs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from llm_fixtures import write_model  # noqa: E402
from serve_helpers import RunningServer, bind, start  # noqa: E402

from tg.llm.cli import RAY_MISSING, app  # noqa: E402
from tg.llm.serve.server import ServeOptions  # noqa: E402

MODEL = "tiny"
CONTEXT = 256  # the fixture model's whole context: a long answer is still streaming when its replica is killed
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "temperature": 0, "max_tokens": 6}


def free_port() -> int:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return port


def wait_until_healthy(url: str, limit: float = 480) -> None:
    """Hang guard only: the replicas load the model before they answer. Beside two busy loops on 2 cores, a second
    Ray cluster (`ray start --head`) took over 300 s to serve; the limit stays under pytest's 600 s per test."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"{url} did not become healthy")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("serve") / f"{MODEL}.gguf", "llama", "F32", seed=3)


@pytest.fixture(scope="module")
def single(model_path: Path):
    running = start(model_path, CONTEXT, max_concurrency=2, max_queue=4)
    yield running
    running.close()


@pytest.fixture(scope="module")
def replicas(ray_cluster: ModuleType, model_path: Path):
    from tg.llm import serve_cluster

    options = ServeOptions(port=free_port(), max_concurrency=2, max_queue=4)
    url = serve_cluster.serve_replicas(model_path, CONTEXT, options, replicas=2, blocking=False)
    wait_until_healthy(url)
    yield url
    serve_cluster.stop()


def without_ids(document: dict) -> dict:
    """An answer less what differs between any two requests: its id and creation time, and how many prompt tokens
    the server had cached (that depends on what it answered before, not on this request)."""
    kept = {key: value for key, value in document.items() if key not in ("id", "created", "system_fingerprint")}
    if isinstance(kept.get("usage"), dict):
        kept["usage"] = {key: value for key, value in kept["usage"].items() if key != "prompt_tokens_details"}
    return kept


def stream_events(url: str, body: dict) -> list[str]:
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120) as response:
        assert response.status_code == 200
        return [line for line in response.iter_lines() if line.startswith("data: ")]


def stream_text(events: list[str]) -> str:
    chunks = [json.loads(event.removeprefix("data: ")) for event in events if event != "data: [DONE]"]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


@pytest.mark.cluster
@pytest.mark.slow
def test_replicas_answer_as_one_server_does(single: RunningServer, replicas: str) -> None:
    for path in ("/v1/chat/completions", "/v1/completions"):
        body = CHAT if "chat" in path else {"model": MODEL, "prompt": "once upon", "temperature": 0, "max_tokens": 6}
        alone = httpx.post(single.url + path, json=body, timeout=120)
        spread = httpx.post(replicas + path, json=body, timeout=120)
        assert alone.status_code == spread.status_code == 200
        assert without_ids(spread.json()) == without_ids(alone.json())
    cards = [httpx.get(url + "/v1/models", timeout=30).json()["data"] for url in (replicas, single.url)]
    # the same model card, but for when each server loaded the model
    assert [without_ids(card) for card in cards[0]] == [without_ids(card) for card in cards[1]]


@pytest.mark.cluster
@pytest.mark.slow
def test_a_stream_through_the_replicas_is_the_single_servers_stream(single: RunningServer, replicas: str) -> None:
    alone, spread = stream_events(single.url, CHAT), stream_events(replicas, CHAT)
    assert spread[-1] == alone[-1] == "data: [DONE]" and len(spread) == len(alone)
    assert stream_text(spread) == stream_text(alone) != ""


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize(
    "body",
    [{"model": MODEL}, {**CHAT, "model": "no-such-model"}, {**CHAT, "temperature": "hot"}, b"{not json"],
    ids=["no-messages", "unknown-model", "bad-type", "not-json"],
)
def test_error_statuses_and_bodies_are_the_single_servers(
    single: RunningServer, replicas: str, body: dict | bytes
) -> None:
    def post(url: str) -> httpx.Response:
        if isinstance(body, bytes):
            return httpx.post(url + "/v1/chat/completions", content=body, timeout=60,
                              headers={"Content-Type": "application/json"})  # fmt: skip
        return httpx.post(url + "/v1/chat/completions", json=body, timeout=60)

    alone, spread = post(single.url), post(replicas)
    assert 400 <= alone.status_code < 500 and spread.status_code == alone.status_code
    assert spread.json() == alone.json() and "error" in alone.json()


def replica_actors(ray: ModuleType) -> list:
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if "LlmReplica" in a["name"]]
    return [ray.get_actor(name, namespace="serve") for name in names]


@pytest.mark.cluster
def test_the_serve_controller_gives_a_slow_proxy_a_minute_to_start(ray_cluster: ModuleType, replicas: str) -> None:
    """Regression: on a loaded machine Serve's proxy took over its default 5 s to start, the controller killed it and
    serve.start failed with ActorDiedError. The controller this module starts reads a 60 s limit instead."""
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    from tg.llm.serve_cluster import PROXY_READY_SECONDS

    controller = ray_cluster.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)

    def ready_limit(_controller: object) -> float:
        from ray.serve._private import constants

        return constants.PROXY_READY_CHECK_TIMEOUT_S

    assert ray_cluster.get(controller.__ray_call__.remote(ready_limit), timeout=60) == PROXY_READY_SECONDS == 60


def test_a_replica_takes_requests_only_once_warmed_up(model_path: Path, ray_installed: ModuleType) -> None:
    """Regression: a replica's constructor returned before the warm-up, so Serve routed a request to a replica that
    answered 503 "warming up" while the other was ready (the cluster leg's replaced-replicas test, once)."""
    from tg.llm.serve_cluster import LlmReplica

    replica = LlmReplica.__new__(LlmReplica)  # Serve's ingress makes the constructor a coroutine: run it here
    asyncio.run(replica.__init__(str(model_path), CONTEXT, ServeOptions(max_concurrency=2, max_queue=4), {MODEL}))
    try:
        assert replica.state.engine.ready.is_set() and replica.state.engine.warmup_error is None
    finally:
        replica.state.engine.stop()


def test_ctrl_c_while_the_replicas_start_takes_them_down(
    model_path: Path, ray_installed: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: Ctrl-C during serve.run (it returns once every replica warmed up, which a client polling /health
    can see first) left the application running and exited 130. Now it takes the replicas down, as one later does."""
    from tg.llm import serve_cluster

    stopped: list[bool] = []

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(serve_cluster, "connect", lambda address: None)
    monkeypatch.setattr(serve_cluster, "launch", interrupted)
    monkeypatch.setattr(serve_cluster, "stop", lambda: stopped.append(True))
    url = serve_cluster.serve_replicas(model_path, CONTEXT, ServeOptions(port=8123), replicas=1, blocking=True)
    assert url == "http://127.0.0.1:8123" and stopped == [True]


@pytest.mark.parametrize("slow", ["timeout", "killed"])
def test_a_proxy_slower_than_serve_start_waits_is_reported_not_fatal(
    slow: str, ray_installed: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """serve.start gives up on the proxy after 60 s (TimeoutError, or ActorDiedError when the controller killed it
    first) while the controller goes on restarting it: serve_replicas carries on to wait for /health."""
    from tg.llm import serve_cluster

    def late_proxy(**_options: object) -> None:
        if slow == "timeout":
            raise TimeoutError("HTTP proxies not available after 60s.")
        raise ray_installed.exceptions.ActorDiedError()

    monkeypatch.setattr(serve_cluster.serve, "start", late_proxy)
    serve_cluster.start_serve(ServeOptions(port=free_port()))
    assert "HTTP proxy is slow to start" in capsys.readouterr().err


@pytest.mark.cluster
@pytest.mark.slow
def test_dead_replicas_are_replaced_and_a_request_in_flight_ends(ray_cluster: ModuleType, replicas: str) -> None:
    from ray import serve

    body = {**CHAT, "max_tokens": CONTEXT - 80, "stream": True}
    actors = replica_actors(ray_cluster)  # looked up first: the kill must come while the answer is being streamed
    assert len(actors) == 2
    finished = False
    with httpx.stream("POST", replicas + "/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert first != "data: [DONE]"
        for actor in actors:  # both: one of them holds this request
            ray_cluster.kill(actor, no_restart=True)
        try:
            rest = list(lines)  # must end: a hang fails on the 120 s read timeout below
            finished = "data: [DONE]" in rest
        except httpx.ReadTimeout:
            raise AssertionError("the stream hung after its replica died") from None
        except httpx.HTTPError:  # the connection was cut mid-stream: the client sees the failure
            pass
    assert not finished, "a stream whose replica died must not end as if it were complete"
    wait_until_healthy(replicas)
    deadline = time.monotonic() + 300
    while serve.status().applications["tg-llm"].status != "RUNNING" and time.monotonic() < deadline:
        time.sleep(1)
    answer = httpx.post(replicas + "/v1/chat/completions", json=CHAT, timeout=120)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
    assert len(replica_actors(ray_cluster)) == 2


def test_replicas_without_the_extra_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as it does without the extra
    monkeypatch.delitem(sys.modules, "tg.llm.serve_cluster", raising=False)
    result = CliRunner().invoke(app, ["serve", "--replicas", "2"])
    assert result.exit_code == 1 and result.stderr.strip().splitlines() == [f"error: {RAY_MISSING}"]


@pytest.mark.cluster
def test_an_unreachable_ray_address_is_one_error_line(model_path: Path, ray_installed: ModuleType) -> None:
    """Nothing listens at --ray-address: one `error:` line and exit 1 (in a process of its own: this one may have
    joined the test cluster), not Ray waiting for the cluster for ever."""
    address = f"127.0.0.1:{free_port()}"  # closed again before the server starts
    command = [str(Path(sys.executable).parent / "tg-llm"), "serve", "-m", str(model_path), "--replicas", "1",
               "--ray-address", address, "--no-warmup"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)  # (a hang guard)
    assert result.returncode == 1
    refused = f"error: cannot reach the Ray cluster at {address}: Connection refused"
    assert result.stderr.strip().splitlines() == [refused]


@pytest.mark.cluster
@pytest.mark.slow
def test_replicas_join_a_cluster_started_with_ray_start(single: RunningServer, model_path: Path, ray_head: Any) -> None:
    """tg-llm serve --replicas 1 --ray-address joins the cluster `ray start --head` started (in a process of its
    own: this one may have joined the test cluster) and answers as one server does; Ctrl-C takes it down."""
    port = free_port()
    command = [str(Path(sys.executable).parent / "tg-llm"), "serve", "-m", str(model_path), "--replicas", "1",
               "--ray-address", ray_head.address, "--port", str(port), "--max-context", str(CONTEXT)]  # fmt: skip
    server = subprocess.Popen(command, env={**os.environ, **ray_head.environment}, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url)
        spread = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=120)
        alone = httpx.post(single.url + "/v1/chat/completions", json=CHAT, timeout=120)
        assert spread.status_code == alone.status_code == 200
        assert without_ids(spread.json()) == without_ids(alone.json())
    finally:
        server.send_signal(signal.SIGINT)
        try:
            _, errors = server.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            _, errors = server.communicate()
    assert server.returncode == 0, errors
    assert "Connecting to existing Ray cluster" in errors  # Ray's own line: not a new local cluster
