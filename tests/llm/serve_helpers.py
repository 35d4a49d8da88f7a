"""A real uvicorn server on a free loopback port, in a thread, for the serve tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tg.llm.serve.runner import Slot
from tg.llm.serve.server import ServeOptions, ThreadedServer, bind, load_state

RunningServer = ThreadedServer
__all__ = ["RunningServer", "ScriptedRunner", "bind", "start"]


def start(path: Path, max_context: int = 128, **options: object) -> ThreadedServer:
    """Load `path` and serve it on a free port."""
    cors = list(options.pop("cors_origins", ()))  # type: ignore[call-overload]
    state = load_state(path, max_context, ServeOptions(**options))  # type: ignore[arg-type]
    return ThreadedServer(state, cors)


class ScriptedRunner:
    """Stands in for ModelRunner: every slot's answer is `script` (token ids), then the end token."""

    def __init__(self, vocab: int, end: int, slots: int = 2, max_context: int = 512) -> None:
        self.vocab, self.end, self.max_context = vocab, end, max_context
        self.slots = [Slot(index, []) for index in range(slots)]
        self.script: list[int] = []
        self.starts: dict[int, int] = {}
        self.prompts: list[list[int]] = []  # every prompt prefilled, in order

    def _logits(self, slot: Slot) -> np.ndarray:
        index = len(slot.cached) - self.starts[slot.index]
        logits = np.zeros(self.vocab, dtype=np.float32)
        logits[self.script[index] if index < len(self.script) else self.end] = 30.0
        return logits

    def reusable_prefix(self, slot: Slot, tokens: list[int]) -> int:
        return 0

    def prefill(self, slot: Slot, tokens: list[int]) -> np.ndarray:
        self.prompts.append(list(tokens))
        slot.cached, self.starts[slot.index] = list(tokens), len(tokens)
        return self._logits(slot)

    def decode(self, steps: list[tuple[Slot, int]]) -> list[np.ndarray]:
        for slot, token in steps:
            slot.cached.append(token)
        return [self._logits(slot) for slot, _ in steps]
