"""A real uvicorn server on a free loopback port, in a thread, for the serve tests and the benchmark."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import uvicorn

from tg.llm.serve.app import ServerState, create_app
from tg.llm.serve.server import ServeOptions, bind, load_state, url_of


class RunningServer:
    def __init__(self, state: ServerState, cors_origins: list[str] | None = None) -> None:
        self.state = state
        sock = bind("127.0.0.1", 0)
        self.url = url_of(sock)
        self.server = uvicorn.Server(uvicorn.Config(create_app(state, cors_origins), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.state.engine.stop()


def start(path: Path, max_context: int = 128, **options: object) -> RunningServer:
    """Load `path` and serve it on a free port."""
    cors = list(options.pop("cors_origins", ()))  # type: ignore[call-overload]
    state = load_state(path, max_context, ServeOptions(**options))  # type: ignore[arg-type]
    return RunningServer(state, cors)
