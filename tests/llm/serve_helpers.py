"""A real uvicorn server on a free loopback port, in a thread, for the serve tests."""

from __future__ import annotations

from pathlib import Path

from tg.llm.serve.server import ServeOptions, ThreadedServer, bind, load_state

RunningServer = ThreadedServer
__all__ = ["RunningServer", "bind", "start"]


def start(path: Path, max_context: int = 128, **options: object) -> ThreadedServer:
    """Load `path` and serve it on a free port."""
    cors = list(options.pop("cors_origins", ()))  # type: ignore[call-overload]
    state = load_state(path, max_context, ServeOptions(**options))  # type: ignore[arg-type]
    return ThreadedServer(state, cors)
