"""tests/llm helpers (the GGUF fixture writer and the numpy reference forward) are importable as plain modules;
the `interactive` fixture runs the chat loop as on a terminal."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def interactive(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The chat loop as on a terminal, with every forward call recorded as (token count, start_pos)."""
    import tg.llm.cli as cli
    from tg.llm.generate import Generator

    calls: list[tuple[int, int]] = []
    original = Generator._forward

    def recording(self, tokens, start_pos):  # noqa: ANN001, ANN202
        calls.append((len(tokens), start_pos))
        return original(self, tokens, start_pos)

    monkeypatch.setattr(cli, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr(Generator, "_forward", recording)
    return calls


@pytest.fixture(autouse=True)
def own_capture_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test stores captured steps (tg.llm.capture_store) in a folder of its own, its subprocesses too: no test
    replays another's, and the shared cache directory does not fill with captures of temporary model files."""
    folder = tmp_path_factory.mktemp("captures")
    monkeypatch.setenv("TG_LLM_CAPTURES", str(folder))
    return folder
