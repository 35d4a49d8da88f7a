"""The tg-llm command line on a tiny random-weight GGUF fixture: flags, piped prompts, chat loop, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("gguf")

from llm_fixtures import write_model  # noqa: E402

from tg.llm.cli import app, normalize_argv  # noqa: E402


def run(args: list[str], stdin: str = "", env: dict | None = None):
    return CliRunner().invoke(app, normalize_argv(args), input=stdin, env=env)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("m") / "tiny.gguf", "llama", "F32", seed=3)


def test_seed_spellings_are_normalized() -> None:
    assert normalize_argv(["--no_chat_template", "-m", "x"]) == ["chat", "--no-chat-template", "-m", "x"]
    assert normalize_argv(["--max_context=64"]) == ["chat", "--max-context=64"]
    assert normalize_argv(["--benchmark"]) == ["chat", "--benchmark", "20"]
    assert normalize_argv(["--benchmark", "5", "--warmup"]) == ["chat", "--benchmark", "5", "--warmup"]
    assert normalize_argv(["pull", "qwen3:0.6b"]) == ["pull", "qwen3:0.6b"]


def test_piped_prompt_answers_once_and_exits(tiny: Path) -> None:
    result = run(["-m", str(tiny), "--max_context", "64", "--max-tokens", "4"], "hello there\n")
    assert result.exit_code == 0, result.output
    assert "using model" in result.stderr and "max context 64" in result.stderr
    raw = run(["-m", str(tiny), "--no_chat_template", "--max-tokens", "4", "--seed", "1"], "hello\n")
    assert raw.exit_code == 0, raw.output


def test_same_seed_same_text(tiny: Path) -> None:
    args = ["-m", str(tiny), "--no-chat-template", "--max-tokens", "6", "--temperature", "1.0", "--top-k", "50"]
    first, second = run([*args, "--seed", "7"], "hi\n"), run([*args, "--seed", "7"], "hi\n")
    assert first.exit_code == 0 and first.stdout == second.stdout


def test_benchmark_prints_one_line_per_token_and_logs(tiny: Path, tmp_path: Path) -> None:
    env = {"BENCHMARK_LOG": "tiny:llama", "TG_BENCH_DIR": str(tmp_path)}
    result = run(["-m", str(tiny), "--benchmark", "3", "--warmup"], env=env)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if "tok/s" in line]
    assert len(lines) == 3 and all("ms," in line and "GB/s" in line and "MB" in line for line in lines)
    records = [json.loads(line) for line in (tmp_path / "tiny:llama.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2] and records[0]["event"] == "step"


def test_absent_model_offline_is_one_line_naming_url_and_path(tmp_path: Path) -> None:
    result = run(["-m", "llama3.2:1b"], env={"TG_MODELS": str(tmp_path)})
    assert result.exit_code == 1
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1 and message.startswith("error: ")
    assert "Llama-3.2-1B-Instruct-Q6_K.gguf" in message and str(tmp_path) in message and "https://" in message


def test_corrupt_gguf_and_unknown_architecture_are_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x07\x00\x00\x00" + b"\x00" * 32)
    result = run(["-m", str(bad)], "hi\n")
    assert result.exit_code == 1 and result.stderr.startswith("error: ") and "version 7" in result.stderr
    import gguf

    writer = gguf.GGUFWriter(str(tmp_path / "rwkv.gguf"), "rwkv6")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    result = run(["-m", str(tmp_path / "rwkv.gguf")], "hi\n")
    assert result.exit_code == 1 and "architecture 'rwkv6' is not supported" in result.stderr


def test_context_overflow_is_an_error(tiny: Path) -> None:
    result = run(["-m", str(tiny), "--max-context", "4", "--no-chat-template"], "a long prompt that overflows\n")
    assert result.exit_code == 1 and "context overflow" in result.stderr


def test_list_shows_pulled_models(tmp_path: Path) -> None:
    (tmp_path / "Qwen3-0.6B-Q8_0.gguf").write_bytes(b"x" * 10)
    result = run(["list", "--json"], env={"TG_MODELS": str(tmp_path)})
    assert result.exit_code == 0
    names = [m["name"] for m in json.loads(result.stdout)["models"]]
    assert "qwen3:0.6b" in names
    assert "hf.co" not in result.stdout and "qwen3:0.6b" in json.loads(result.stdout)["registry"]


def test_pull_unknown_name_fails(tmp_path: Path) -> None:
    result = run(["pull", "nonexistent:1b"], env={"TG_MODELS": str(tmp_path)})
    assert result.exit_code == 1 and "unknown model" in result.stderr


def test_interactive_chat_is_multi_turn_and_exits_on_eof(tiny: Path, interactive: list) -> None:
    calls = interactive
    result = run(["-m", str(tiny), "--max-tokens", "3"], "hello\nagain\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.count(">>> ") == 3  # two turns, then the prompt that reads EOF
    prefills = [call for call in calls if call[0] > 1]
    assert len(prefills) == 2 and prefills[1][1] > 0  # the second turn reuses the first turn's cached prefix


def test_hf_names_and_split_files_resolve(tmp_path: Path) -> None:
    from tg.llm import registry

    assert (
        registry.hf_url("hf:owner/repo/sub/file.gguf") == "https://huggingface.co/owner/repo/resolve/main/sub/file.gguf"
    )
    result = run(["-m", "hf:owner/repo/file.gguf"], env={"TG_MODELS": str(tmp_path)})
    assert result.exit_code == 1 and str(tmp_path / "file.gguf") in result.stderr


def test_known_url_is_the_source_of_a_registry_or_hf_name_and_refuses_others() -> None:
    from tg.llm import registry

    assert registry.known_url("hf:owner/repo/file.gguf") == "https://huggingface.co/owner/repo/resolve/main/file.gguf"
    assert registry.known_url("qwen3:0.6b") == registry.REGISTRY["qwen3:0.6b"].url
    with pytest.raises(ValueError, match="unknown model 'nonexistent:1b'"):
        registry.known_url("nonexistent:1b")


def test_a_capture_on_a_terminal_shows_progress_on_stderr(tmp_path, monkeypatch, capsys) -> None:
    """A cold first step compiles for seconds: on a terminal the CLI shows what is being prepared and how many kernels
    are built (tg.llm.cli.capture_progress, entered by the model around each capture); piped, nothing."""
    import io
    import sys

    import tg.llm.cli as cli
    from tg.llm.generate import Generator

    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=13)
    monkeypatch.setattr(cli.registry, "resolve", lambda name: path)
    monkeypatch.setattr(cli.registry, "verify", lambda name, found: None)
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich draws as on a terminal
    monkeypatch.setattr(sys, "stderr", type("Terminal", (io.StringIO,), {"isatty": lambda self: True})())
    session = cli.open_session("m", 64, True)
    list(Generator(session.model).generate([1, 2], 2))
    shown = sys.stderr.getvalue()
    assert "preparing the decode step" in shown and "kernels built" in shown
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    other = write_model(tmp_path / "other.gguf", "llama", "F32", seed=14)  # (not captured yet either)
    monkeypatch.setattr(cli.registry, "resolve", lambda name: other)
    piped = cli.open_session("m", 64, True)
    list(Generator(piped.model).generate([1, 2], 2))
    assert "preparing" not in sys.stderr.getvalue()


@pytest.mark.parametrize("command", [[], ["serve"], ["--serve", "8123"]])
def test_an_unknown_kv_cache_type_is_one_error_line_before_the_model_loads(command: list[str]) -> None:
    result = run([*command, "-m", "/nonexistent/model.gguf", "--kv-cache", "q4"], "hi\n")
    assert result.exit_code == 2
    assert result.stderr == "error: unknown KV cache type 'q4' (--kv-cache): choose one of f32, f16, q8\n"


def test_kv_cache_reaches_the_model_in_chat_benchmark_and_serve(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.llm.serve import server
    from tg.llm.session import Session

    loaded = []
    real_load = Session.load.__func__  # type: ignore[attr-defined]

    def recording_load(cls: type[Session], *args: object, **kwargs: object) -> Session:
        session = real_load(cls, *args, **kwargs)
        loaded.append(session.model.caches[0].dtype.name)
        return session

    monkeypatch.setattr(Session, "load", classmethod(recording_load))
    monkeypatch.setattr(server, "run", lambda state, options: state.engine.stop())  # loaded, then stopped
    args = ["-m", str(tiny), "--max-context", "64", "--kv-cache", "f16"]
    assert run([*args, "--max-tokens", "2"], "hello\n").exit_code == 0
    assert run([*args, "--benchmark", "2"]).exit_code == 0
    assert run(["serve", *args, "--no-warmup"]).exit_code == 0
    assert run(["-m", str(tiny), "--max-context", "64", "--benchmark", "1"]).exit_code == 0
    assert run(["-m", str(tiny), "--max-context", "64", "--kv-cache", "q8", "--max-tokens", "2"], "hi\n").exit_code == 0
    assert loaded == ["half", "half", "half", "float", "char"]


def test_an_unknown_matvec_type_is_one_error_line_before_the_model_loads() -> None:
    result = run(["-m", "/nonexistent/model.gguf", "--matvec", "int4"], "hi\n")
    assert result.exit_code == 2
    assert result.stderr == "error: unknown matvec 'int4' (--matvec): choose one of float, int8\n"


def test_matvec_is_refused_with_serve() -> None:
    result = run(["-m", "/nonexistent/model.gguf", "--serve", "8123", "--matvec", "int8"])
    assert result.exit_code == 2
    assert result.stderr == "error: --matvec is not supported with --serve (serve runs float matvecs)\n"


def test_matvec_reaches_the_model_in_chat_and_benchmark(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.llm.session import Session

    loaded = []
    real_load = Session.load.__func__  # type: ignore[attr-defined]

    def recording_load(cls: type[Session], *args: object, **kwargs: object) -> Session:
        session = real_load(cls, *args, **kwargs)
        loaded.append(session.model.matvec)
        return session

    monkeypatch.setattr(Session, "load", classmethod(recording_load))
    args = ["-m", str(tiny), "--max-context", "64", "--matvec", "int8"]  # (tiny's float weights: nothing to mark)
    assert run([*args, "--max-tokens", "2"], "hello\n").exit_code == 0
    assert run([*args, "--benchmark", "1"]).exit_code == 0
    assert run(["-m", str(tiny), "--max-context", "64", "--benchmark", "1"]).exit_code == 0
    assert loaded == ["int8", "int8", "float"]
