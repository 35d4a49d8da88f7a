"""Helpers shared by the tg-replay tests: a small captured program and the repository root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tg.codegen.capture import flush_captures
from tg.codegen.flags import Context
from tg.hcq.engine import clear_program_cache
from tg.tensor import Tensor

REPO = Path(__file__).resolve().parents[2]


def capture_small_program(db: Path) -> None:
    """Two CPU kernels (a matmul with relu, a sum: r_7_3_5 and r_3_7) and their schedule, captured into `db`."""
    clear_program_cache()  # kernels compiled earlier in this process would be cache hits, never captured
    with Context(CAPTURE_PROCESS_REPLAY=1, TG_REPLAY_DB=str(db)):
        a = Tensor(np.arange(35, dtype=np.float32).reshape(7, 5))
        b = Tensor(np.ones((5, 3), dtype=np.float32))
        ((a @ b).relu().sum(axis=0) + 1).numpy()
        flush_captures()


@pytest.fixture
def small_capture(tmp_path: Path) -> Callable[[], Path]:
    """Capture the small program into a fresh database; returns its path."""

    def make() -> Path:
        db = tmp_path / "captures.db"
        capture_small_program(db)
        return db

    return make


@pytest.fixture
def repo() -> Path:
    return REPO
