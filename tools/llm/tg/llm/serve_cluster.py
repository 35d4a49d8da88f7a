"""tg-llm serve --replicas N: N copies of the server under Ray Serve, behind one HTTP address.

    url = serve_replicas(Path("model.gguf"), 4096, ServeOptions(port=8000), replicas=2, blocking=False)

Each replica is a Ray Serve deployment replica that loads the model itself and serves the very app `tg-llm serve`
serves (tg.llm.serve.app.create_app): the same routes, OpenAI-compatible bodies, streaming and error bodies. Ray
Serve's HTTP proxy listens on --host/--port and spreads requests over the replicas; a replica whose process dies,
or whose scheduler thread has stopped (its health check fails), is replaced by the Serve controller. A request in
flight on a replica that dies ends with an error status from the proxy (a stream is cut off), never a hang.

Only this module imports Ray (the `cluster` extra); the CLI imports it only behind --replicas.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

# Under `uv run`, Ray would start each worker with `uv run` in an uploaded copy of the working folder: an environment
# without the cluster extra, so without Ray. Workers run this interpreter instead (read when ray is first imported).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray  # noqa: E402
from ray import serve  # noqa: E402

from tg.codegen.flags import flags_from_environment  # noqa: E402
from tg.env.ray_address import check_reachable  # noqa: E402
from tg.llm.serve.app import create_app  # noqa: E402
from tg.llm.serve.server import ServeOptions, allowed_hosts, load_state  # noqa: E402

APP_NAME = "tg-llm"
LOCAL_FLAGS = ("TG_CACHE_DIR", "TG_DUMP_KERNELS", "TG_REPLAY_DB", "CAPTURE_PROCESS_REPLAY")
# Serve's controller kills an HTTP proxy that is not ready within RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S (5 s by
# default), and serve.start then fails with ActorDiedError. On a loaded machine a new Ray worker takes longer than
# that to import Serve, so the controller we start gives its proxies as long as serve.start waits for them (60 s).
PROXY_READY_SECONDS = 60
CONTROLLER_OPTIONS = {"runtime_env": {"env_vars": {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": str(PROXY_READY_SECONDS)}}}


def connect(address: str | None) -> None:
    """Join the cluster at `address` (None: RAY_ADDRESS, else a new local one), unless already joined;
    ClusterUnreachable (one line) when the address does not answer (see tg.env.ray_address)."""
    if ray.is_initialized():
        return
    check_reachable(address or os.environ.get("RAY_ADDRESS"))
    options: dict[str, Any] = {"runtime_env": {"env_vars": flags_from_environment(exclude=LOCAL_FLAGS)}}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        options["include_dashboard"] = False
    ray.init(address=address, **options)


@serve.ingress()
class LlmReplica:
    """One replica: the model loaded here, served by the same Starlette app as a single `tg-llm serve`."""

    def __init__(self, path: str, max_context: int, options: ServeOptions, aliases: set[str]) -> None:
        self.options = options
        self.state = load_state(Path(path), max_context, options, aliases)
        # Serve routes requests to a replica once its constructor returns: returning before the warm-up is done let
        # a request reach a replica that answered 503 "warming up" while another was ready (the proxy holds
        # requests until some replica is ready). A warm-up that failed fails the replica's start, as it should.
        engine = self.state.engine
        while not engine.ready.wait(timeout=1):
            if not engine.thread.is_alive():
                raise RuntimeError("the scheduler thread stopped before the warm-up finished")
        if engine.warmup_error is not None:
            raise RuntimeError(f"the model failed to warm up: {engine.warmup_error}")

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(self.state, list(self.options.cors_origins), allowed_hosts(self.options))

    def check_health(self) -> None:
        """Called by the Serve controller: a replica whose scheduler thread has died is replaced."""
        if not self.state.engine.thread.is_alive():
            raise RuntimeError("the scheduler thread has stopped")


def deployment(path: Path, max_context: int, options: ServeOptions, aliases: set[str], replicas: int) -> Any:
    """The bound Serve application: `replicas` copies of LlmReplica, each taking as many requests at once as a
    single server holds (its slots and its queue; the proxy queues the rest)."""
    replica = serve.deployment(
        LlmReplica,
        name="LlmReplica",
        num_replicas=replicas,
        ray_actor_options={"num_cpus": 1},
        max_ongoing_requests=options.max_concurrency + options.max_queue,
        health_check_period_s=2,
        health_check_timeout_s=30,
    )
    return replica.bind(str(path), max_context, options, aliases)


def start_serve(options: ServeOptions) -> None:
    """Start Serve's controller and HTTP proxy. serve.start waits 60 s for the proxy; on a machine loaded enough that
    it is not up by then, the controller goes on restarting it (each time with a longer limit), so that is reported
    and not fatal: the replicas are waited for through /health like any other slow start."""
    try:
        serve.start(http_options={"host": options.host, "port": options.port}, controller_options=CONTROLLER_OPTIONS)
    except (TimeoutError, ray.exceptions.ActorDiedError) as slow:
        print(f"Serve's HTTP proxy is slow to start ({type(slow).__name__}); its controller keeps restarting it",
              file=sys.stderr, flush=True)  # fmt: skip


def serve_replicas(path: Path, max_context: int, options: ServeOptions, aliases: set[str] | None = None,
                   replicas: int = 2, address: str | None = None, blocking: bool = True) -> str:  # fmt: skip
    """Start `replicas` replicas behind Serve's proxy on options.host:options.port; returns the URL. `blocking`:
    serve until interrupted (Ctrl-C while the replicas still start included), then take the application down."""
    if replicas < 1:
        raise ValueError("--replicas must be at least 1")
    connect(address)
    url = f"http://{options.host}:{options.port}"
    names = set(aliases or ()) | {path.stem}
    if not blocking:
        launch(path, max_context, options, names, replicas, url)
        return url
    try:
        launch(path, max_context, options, names, replicas, url)
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
    return url


def launch(path: Path, max_context: int, options: ServeOptions, aliases: set[str], replicas: int, url: str) -> None:
    """Start Serve and the application, and say where it serves. serve.run returns once the application is running:
    its replicas warmed up, which a client polling /health can see before this returns."""
    start_serve(options)
    serve.run(deployment(path, max_context, options, aliases, replicas), name=APP_NAME, route_prefix="/",
              blocking=False)  # fmt: skip
    auth = "API key required" if options.api_key else "no API key"
    line = (f'serving "{path.stem}" at {url} on {replicas} Ray Serve replicas (OpenAI API under /v1, chat page at /), '
            f"{options.max_concurrency} slots and queue {options.max_queue} each, {auth}")  # fmt: skip
    print(line, file=sys.stderr, flush=True)


def stop() -> None:
    """Take the replicas and Serve's proxy down: a later serve_replicas on this cluster then listens where it is
    told (a running proxy would keep its first host and port)."""
    serve.shutdown()
