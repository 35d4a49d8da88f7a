"""The tg-llm command line: a thin typer layer over the tg.llm library.

`tg-llm` chats with a model (the embedded SmolLM2 by default); `tg-llm pull NAME` downloads one; `tg-llm list`
shows what is present. The seed's underscore spellings (`--max_context`, `--no_chat_template`) work as well as
the dashed ones, and `--benchmark`/`--serve` take an optional value.
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import typer

from tg.llm import registry

app = typer.Typer(help="Run and serve LLMs from GGUF files.", add_completion=False)
COMMANDS = ("chat", "pull", "list", "serve")
# the seed's spellings, rewritten to the dashed option names typer declares
UNDERSCORE_FLAGS = {"--max_context": "--max-context", "--no_chat_template": "--no-chat-template"}
OPTIONAL_VALUE_FLAGS = {"--benchmark": "20", "--serve": "8000"}  # bare flag -> this value


class CLIError(Exception):
    """An expected failure: printed as one `error:` line, exit 1."""


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def normalize_argv(argv: list[str]) -> list[str]:
    """Accept underscore spellings, give bare `--benchmark`/`--serve` their default, default to `chat`."""
    out: list[str] = []
    for index, arg in enumerate(argv):
        name, sep, value = arg.partition("=")
        name = UNDERSCORE_FLAGS.get(name, name.replace("_", "-") if name.startswith("--") else name)
        out.append(name + sep + value)
        if name in OPTIONAL_VALUE_FLAGS and not sep:
            following = argv[index + 1] if index + 1 < len(argv) else None
            if following is None or not following.isdigit():
                out.append(OPTIONAL_VALUE_FLAGS[name])
    if not out or out[0] not in (*COMMANDS, "--help", "-h", "--version"):
        out.insert(0, "chat")
    return out


def _debug_flag() -> bool:
    """DEBUG >= 1, read through the flags registry (imported on the failure path: it loads tg.codegen)."""
    from tg.codegen.flags import DEBUG

    return DEBUG >= 1


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tg-llm {version('tg-llm')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run and serve LLMs from GGUF files."""


@app.command()
def chat(
    model: str = typer.Option(registry.EMBEDDED_NAME, "--model", "-m", help="Registry name, .gguf path or hf:..."),
    max_context: int = typer.Option(4096, "--max-context", help="KV cache size (capped at the model's)."),
    no_chat_template: bool = typer.Option(
        False, "--no-chat-template", help="Feed the prompt as raw text: no chat template, no role markup."
    ),
    benchmark: int = typer.Option(0, "--benchmark", help="Time N greedy tokens (bare flag: 20) and exit."),
    warmup: bool = typer.Option(False, "--warmup", help="Run a short generation first (compiles the kernels)."),
    serve: int = typer.Option(0, "--serve", help="Serve an OpenAI-compatible API on PORT (bare flag: 8000)."),
    max_tokens: int = typer.Option(512, "--max-tokens", help="Most tokens per answer."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 is greedy."),
    top_k: int = typer.Option(0, "--top-k"),
    top_p: float = typer.Option(1.0, "--top-p"),
    min_p: float = typer.Option(0.0, "--min-p"),
    repetition_penalty: float = typer.Option(1.0, "--repetition-penalty"),
    frequency_penalty: float = typer.Option(0.0, "--frequency-penalty"),
    presence_penalty: float = typer.Option(0.0, "--presence-penalty"),
    seed: int | None = typer.Option(None, "--seed"),
    stop: list[str] = typer.Option([], "--stop", help="Stop the answer at this text (repeatable)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Chat with a model (the default command): `>>> ` prompts, streamed answers, EOF exits."""
    from tg.llm.sampling import SamplingOptions

    if serve:  # the seed's spelling of `tg-llm serve --port PORT`
        from tg.llm.serve.server import ServeOptions

        start_server(model, max_context, ServeOptions(port=serve), debug)
        return
    options = SamplingOptions(
        temperature, top_k, top_p, min_p, repetition_penalty, frequency_penalty, presence_penalty, seed
    )
    try:
        session = open_session(model, max_context, no_chat_template)
        if warmup:
            session.warmup()
        if benchmark:
            run_benchmark(session, benchmark, model)
            return
        run_chat(session, options, max_tokens, stop)
    except typer.Exit:
        raise
    except Exception as error:  # expected failures are one line; --debug / DEBUG shows the traceback
        if debug or _debug_flag():
            raise
        fail(str(error).splitlines()[0] if str(error) else type(error).__name__)


def open_session(name: str, max_context: int, raw_prompt: bool) -> Any:
    from tg.llm.session import Session

    path = registry.resolve(name)
    registry.verify(name, path)
    session = Session.load(path, max_context, raw_prompt)
    typer.echo(
        f'using model "{session.model_name}" with {path.stat().st_size:,} bytes and {session.parameters:,} params, '
        f"max context {session.model.max_context} on CPU",
        err=True,
    )
    return session


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


def run_chat(session: Any, options: Any, max_tokens: int, stops: list[str]) -> None:
    interactive = stdin_is_terminal()
    if not interactive:  # a pipe: the whole input is one prompt, answered once
        prompt = sys.stdin.read().strip()
        if prompt:
            for text in session.reply(prompt, options, max_tokens, stops):
                sys.stdout.write(text)
                sys.stdout.flush()
            sys.stdout.write("\n")
        return
    while True:
        try:
            prompt = input(">>> ")
        except EOFError:
            sys.stdout.write("\n")
            return
        if not prompt.strip():
            continue
        for text in session.reply(prompt, options, max_tokens, stops):
            sys.stdout.write(text)
            sys.stdout.flush()
        sys.stdout.write("\n\n")


def run_benchmark(session: Any, count: int, name: str) -> None:
    """One line per generated token: ms, tok/s, GB/s (weights read per token), memory; BENCHMARK_LOG -> JSONL."""
    log_name = os.environ.get("BENCHMARK_LOG")
    log_path = Path(os.environ.get("TG_BENCH_DIR", "bench")) / f"{log_name}.jsonl" if log_name else None
    weight_bytes = session.weight_bytes
    decoder = session.tokenizer.stream_decoder()
    previous = time.perf_counter()
    for index, token in enumerate(session.benchmark_tokens(count)):
        now = time.perf_counter()
        seconds, previous = now - previous, now
        text = decoder.add(token).replace("\n", "\\n")
        rss = resident_mb()
        typer.echo(
            f"{seconds * 1e3:8.2f} ms, {1 / seconds:7.2f} tok/s, {weight_bytes / seconds / 1e9:6.2f} GB/s, "
            f"{rss:,.0f} MB  --  {text}"
        )
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "a") as file:
                record = {"name": log_name, "model": name, "event": "step", "wall": seconds, "index": index}
                file.write(json.dumps(record | {"device": "CPU"}) + "\n")


def resident_mb() -> float:
    with open("/proc/self/status") as file:
        for line in file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@app.command("serve")
def serve_command(
    model: str = typer.Option(registry.EMBEDDED_NAME, "--model", "-m", help="Registry name, .gguf path or hf:..."),
    max_context: int = typer.Option(4096, "--max-context", help="KV cache size per slot (capped at the model's)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (anything but loopback warns)."),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free one)."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="TG_LLM_API_KEY", help="Require 'Authorization: Bearer KEY' on the API."
    ),
    max_concurrency: int = typer.Option(4, "--max-concurrency", help="Requests generated at once (KV-cache slots)."),
    max_queue: int = typer.Option(16, "--max-queue", help="Requests waiting for a slot; more are answered 429."),
    max_body_bytes: int = typer.Option(1 << 20, "--max-body-bytes", help="Larger request bodies are answered 413."),
    cors_origin: list[str] = typer.Option([], "--cors-origin", help="Allow browser calls from ORIGIN (repeatable)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Serve an OpenAI-compatible API (/v1/chat/completions, /v1/completions, ...) and a chat page at /."""
    from tg.llm.serve.server import ServeOptions

    options = ServeOptions(host, port, api_key, max_concurrency, max_queue, max_body_bytes, tuple(cors_origin))
    start_server(model, max_context, options, debug)


def start_server(model: str, max_context: int, options: Any, debug: bool) -> None:
    from tg.llm.serve.server import load_state, run

    try:
        path = registry.resolve(model)
        registry.verify(model, path)
        state = load_state(path, max_context, options, aliases={model})
        run(state, options)
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        return
    except Exception as error:
        if debug or _debug_flag():
            raise
        fail(str(error).splitlines()[0] if str(error) else type(error).__name__)


@app.command()
def pull(name: str = typer.Argument(..., help="Registry name or hf:owner/repo/file.gguf")) -> None:
    """Download a model into the models directory ($TG_MODELS or ~/.cache/tg/models), resuming if interrupted."""
    try:
        url = registry.source_url(name)
        if url is None:
            fail(f"unknown model {name!r} (known: {', '.join(registry.REGISTRY)})")
        if name == registry.EMBEDDED_NAME and registry.embedded_model_path() is not None:
            typer.echo(f"{name} is embedded: {registry.embedded_model_path()}")
            return
        path = _pull_with_progress(name)
        typer.echo(str(path))
    except typer.Exit:
        raise
    except Exception as error:
        fail(f"could not download {name}: {error}")


def _pull_with_progress(name: str) -> Path:
    if not sys.stderr.isatty():
        return registry.pull(name)
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(), transient=True
    ) as progress:
        task = progress.add_task(name, total=None)
        return registry.pull(name, lambda done, total: progress.update(task, completed=done, total=total or None))


@app.command("list")
def list_models(as_json: bool = typer.Option(False, "--json", help="One JSON document.")) -> None:
    """Show the models present locally (the embedded one and pulled ones) and the registry."""
    rows = registry.present()
    if as_json:
        models = [{"name": name, "path": str(path), "bytes": size} for name, path, size in rows]
        typer.echo(json.dumps({"models": models, "registry": {k: v.url for k, v in registry.REGISTRY.items()}}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "size", "path")
    for name, path, size in rows:
        table.add_row(name, f"{size / 1e6:,.0f} MB", str(path))
    Console().print(table)


def main() -> None:
    sys.argv[1:] = normalize_argv(sys.argv[1:])
    app()


if __name__ == "__main__":
    main()
