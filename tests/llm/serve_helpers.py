"""A real uvicorn server on a free loopback port, in a thread, for the serve tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tg.llm.serve.runner import ALL, LAST, POOLED, Slot
from tg.llm.serve.server import ServeOptions, ThreadedServer, bind, load_state

RunningServer = ThreadedServer
WARMUP_STEPS = 3
SCRIPTED_DIM = 4  # the width of a scripted embedding
__all__ = ["RunningServer", "ScriptedRunner", "bind", "start"]


def start(path: Path, max_context: int = 128, **options: object) -> ThreadedServer:
    """Load `path` and serve it on a free port (without a warm-up unless `warmup=True`)."""
    cors = list(options.pop("cors_origins", ()))  # type: ignore[call-overload]
    options.setdefault("warmup", False)
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
        self.calls: list[tuple] = []  # every prefill chunk and decode step, in order
        self.warm_gate = threading.Event()
        self.filling: dict[int, list[int]] = {}  # per slot: the prompt being prefilled

    def _logits(self, slot: Slot) -> np.ndarray:
        index = len(slot.cached) - self.starts[slot.index]
        logits = np.zeros(self.vocab, dtype=np.float32)
        logits[self.script[index] if index < len(self.script) else self.end] = 30.0
        return logits

    def reusable_prefix(self, slot: Slot, tokens: list[int]) -> int:
        return 0

    def prefill_step(self, slot: Slot, tokens: list[int], limit: int, output: str = LAST) -> np.ndarray | None:
        """Up to `limit` more tokens into the slot (recorded in `calls` as ("prefill", slot index, count)); the
        script's logits once all are in. ALL: zero logits for every token fed but the last prompt token's (the
        script's); POOLED: SCRIPTED_DIM copies of the number of tokens fed."""
        start = len(slot.cached) if self.filling.get(slot.index) is tokens else 0
        if start == 0:
            self.prompts.append(list(tokens))
            self.filling[slot.index] = tokens
        slot.cached = list(tokens[: start + limit])
        fed = len(slot.cached) - start
        self.calls.append(("prefill", slot.index, fed))
        done = len(slot.cached) == len(tokens)
        if done:
            self.starts[slot.index] = len(tokens)
        if output == POOLED:
            return np.full(SCRIPTED_DIM, float(fed))
        if output == ALL:
            rows = np.zeros((fed, self.vocab), dtype=np.float32)
            if done:
                rows[-1] = self._logits(slot)
            return rows
        if not done:
            return None
        self.starts[slot.index] = len(tokens)
        return self._logits(slot)

    def decode(self, steps: list[tuple[Slot, int]]) -> list[np.ndarray]:
        """Recorded in `calls` as ("decode", slot indexes)."""
        self.calls.append(("decode", tuple(slot.index for slot, _ in steps)))
        for slot, token in steps:
            slot.cached.append(token)
        return [self._logits(slot) for slot, _ in steps]

    def warm_up(self, report: Callable[[int, int], None], context: int | None = None) -> None:
        """Reports 0 of WARMUP_STEPS, waits for `warm_gate`, then reports them all done."""
        report(0, WARMUP_STEPS)
        assert self.warm_gate.wait(60)
        report(WARMUP_STEPS, WARMUP_STEPS)
