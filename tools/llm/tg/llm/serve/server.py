"""Loading a model into a server and running it under uvicorn (what `tg-llm serve` calls)."""

from __future__ import annotations

import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import uvicorn

from tg.llm.config import DEFAULT_KV_CACHE
from tg.llm.serve.app import ServerState, create_app
from tg.llm.serve.engine import Engine
from tg.llm.serve.runner import ModelRunner

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    max_concurrency: int = 4
    max_queue: int = 16
    max_body_bytes: int = 1 << 20
    cors_origins: tuple[str, ...] = ()
    batched: bool = True
    allowed_hosts: tuple[str, ...] = ()  # Host header names accepted besides IP addresses and localhost
    warmup: bool = True  # capture the steps requests will need before /health says ok
    warmup_context: int | None = 512  # ... for the KV windows of this many positions (None: the whole context)
    kv_cache: str = DEFAULT_KV_CACHE  # what the slots' KV caches store (see KV_CACHE_TYPES)


def load_state(path: Path, max_context: int, options: ServeOptions, aliases: set[str] | None = None) -> ServerState:
    """Load the GGUF at `path` and start its scheduler thread."""
    from tg.llm.session import Session

    if options.max_concurrency < 1 or options.max_queue < 0 or options.max_body_bytes < 1:
        raise ValueError("--max-concurrency and --max-body-bytes must be at least 1, --max-queue at least 0")
    session = Session.load(path, max_context, kv_cache=options.kv_cache)
    runner = ModelRunner(session.model, options.max_concurrency, options.batched, defer_captures=True)
    engine = Engine(
        runner, session.tokenizer, options.max_queue, warmup=options.warmup, warmup_context=options.warmup_context
    )
    return ServerState(
        engine,
        session.tokenizer,
        session.template,
        session.model_name,
        session.model.max_context,
        options.api_key,
        options.max_body_bytes,
        set(aliases or ()) | {path.stem},
        model_dim=session.model.config.dim,
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one), bound before uvicorn starts so the URL printed is the real one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run(state: ServerState, options: ServeOptions) -> None:
    """Serve until interrupted; prints where, what and how to stderr first."""
    from tg.tensor import Device

    device = Device.DEFAULT
    if options.host not in LOOPBACK:
        print(
            f"warning: listening on {options.host}: anyone who can reach this machine can use the model"
            + ("" if options.api_key else " (no --api-key set)"),
            file=sys.stderr,
        )
    sock = bind(options.host, options.port)
    auth = "API key required" if options.api_key else "no API key"
    print(
        f'serving "{state.model_id}" at {url_of(sock)} (OpenAI API under /v1, chat page at /), max context '
        f"{state.max_context}, device {device}, {options.max_concurrency} slots, queue {options.max_queue}, {auth}"
        + (", warming up (/health says loading until then)" if options.warmup else ""),
        file=sys.stderr,
        flush=True,
    )
    app = create_app(state, list(options.cors_origins), allowed_hosts(options))
    server = DrainingServer(state, uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    try:
        server.run(sockets=[sock])
    finally:
        state.engine.stop()


def allowed_hosts(options: ServeOptions) -> set[str]:
    """The Host names the server answers to: --allowed-host's, and --host when it is a name."""
    return set(options.allowed_hosts) | {options.host}


class DrainingServer(uvicorn.Server):
    """uvicorn whose exit (SIGTERM, SIGINT) first ends every job, so each open stream sends its last chunk and
    `data: [DONE]` while uvicorn waits for the connections to finish."""

    def __init__(self, state: ServerState, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.state.engine.shutdown()
        super().handle_exit(sig, frame)


class ThreadedServer:
    """uvicorn serving `state` on a free loopback port in a background thread (tests and bench/bench_serve.py)."""

    def __init__(self, state: ServerState, cors_origins: list[str] | None = None) -> None:
        self.state = state
        sock = bind("127.0.0.1", 0)
        self.url = url_of(sock)
        config = uvicorn.Config(create_app(state, cors_origins), log_level="warning", timeout_graceful_shutdown=5)
        self.server = DrainingServer(state, config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.01)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.state.engine.stop()
