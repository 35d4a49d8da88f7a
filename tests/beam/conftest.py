"""tg-beam tests keep their BEAM cache in a fresh folder, so a result cached by one test never answers another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tg.codegen.flags import Context


@pytest.fixture(autouse=True)
def fresh_beam_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TG_CACHE_DIR", str(folder))  # for subprocesses and CliRunner runs
    with Context(TG_CACHE_DIR=str(folder)):
        yield folder
