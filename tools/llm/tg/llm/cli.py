"""The tg-llm command line: a thin typer layer over the tg.llm library.

`tg-llm` chats with a model (the embedded SmolLM2 by default); `tg-llm pull NAME` downloads one; `tg-llm list`
shows what is present. The seed's underscore spellings (`--max_context`, `--no_chat_template`) work as well as
the dashed ones, and `--benchmark`/`--serve` take an optional value.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from tg.env.version import print_version
from tg.llm import registry
from tg.llm.config import DEFAULT_KV_CACHE, DEFAULT_MATVEC, KV_CACHE_TYPES, MATVEC_TYPES, check_kv_cache, check_matvec

app = typer.Typer(
    help="Run and serve LLMs from GGUF files.",
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
COMMANDS = ("chat", "pull", "list", "serve")
KV_CACHE_HELP = (
    f"What the KV cache stores keys and values as: {', '.join(KV_CACHE_TYPES)} (f16: half the memory; q8: int8"
    " codes and a float32 scale per 32 of them, 9/32 of f32)."
)
MATVEC_HELP = (
    f"How a decode step multiplies quantized weights: {', '.join(MATVEC_TYPES)} (int8: the activations rounded to"
    " int8 per block of 32 and integer dot products, as llama.cpp does on AVX-512 VNNI CPUs; Q4_1 and Q8_0 weights)."
)
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
    print_version("tg-llm", value)


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
    kv_cache: str = typer.Option(DEFAULT_KV_CACHE, "--kv-cache", help=KV_CACHE_HELP),
    matvec: str = typer.Option(DEFAULT_MATVEC, "--matvec", help=MATVEC_HELP),
    no_chat_template: bool = typer.Option(
        False, "--no-chat-template", help="Feed the prompt as raw text: no chat template, no role markup."
    ),
    benchmark: int = typer.Option(0, "--benchmark", help="Time N greedy tokens (bare flag: 20) and exit."),
    warmup: bool = typer.Option(False, "--warmup", help="Run a short generation first (compiles the kernels)."),
    serve: int = typer.Option(0, "--serve", help="Serve an OpenAI-compatible API on PORT (bare flag: 8000)."),
    system: str | None = typer.Option(
        None, "--system", help="A system prompt: the first message of the conversation, kept when turns are dropped."
    ),
    max_tokens: int = typer.Option(512, "--max-tokens", help="Most tokens per answer (>= 1)."),
    temperature: float = typer.Option(
        0.0, "--temperature", help="Sampling temperature, >= 0: 0 is greedy, higher is more random."
    ),
    top_k: int = typer.Option(0, "--top-k", help="Sample from the K most likely tokens only (0: no limit)."),
    top_p: float = typer.Option(
        1.0, "--top-p", help="Sample from the smallest set of tokens whose probability reaches P, in (0, 1]."
    ),
    min_p: float = typer.Option(
        0.0, "--min-p", help="Drop tokens less likely than P times the most likely one, in [0, 1]."
    ),
    repetition_penalty: float = typer.Option(
        1.0, "--repetition-penalty", help="Divide the logits of tokens already generated by this (> 0; 1: off)."
    ),
    frequency_penalty: float = typer.Option(
        0.0, "--frequency-penalty", help="Subtract this times a token's count so far, in [-2, 2]."
    ),
    presence_penalty: float = typer.Option(
        0.0, "--presence-penalty", help="Subtract this from every token generated so far, in [-2, 2]."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the sampler (the same seed gives the same text)."),
    stop: list[str] = typer.Option([], "--stop", help="Stop the answer at this text (repeatable)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Chat with a model (the default command): `>>> ` prompts, streamed answers.

    Ctrl-C stops an answer and returns to the prompt; Ctrl-C at the prompt (or Ctrl-D) exits. `/clear` starts the
    conversation again. When the conversation outgrows the context, its oldest turns are dropped (the system
    prompt stays) with a notice."""
    from tg.llm.sampling import SamplingOptions, check_sampling_options

    if serve:  # the seed's spelling of `tg-llm serve --port PORT`
        from tg.llm.serve.server import ServeOptions

        check_kv_cache_option(kv_cache)
        if matvec != DEFAULT_MATVEC:
            typer.echo("error: --matvec is not supported with --serve (serve runs float matvecs)", err=True)
            raise typer.Exit(2)
        start_server(model, max_context, ServeOptions(port=serve, kv_cache=kv_cache), debug)
        return
    options = SamplingOptions(
        temperature, top_k, top_p, min_p, repetition_penalty, frequency_penalty, presence_penalty, seed
    )
    try:  # inputs are checked before the model is loaded
        check_kv_cache(kv_cache)
        check_matvec(matvec)
        check_sampling_options(options)
        if max_tokens < 1 or max_context < 1:
            raise ValueError(f"--max-tokens ({max_tokens}) and --max-context ({max_context}) must be >= 1")
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    try:
        session = open_session(model, max_context, no_chat_template, system, kv_cache, matvec)
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


def check_kv_cache_option(kv_cache: str) -> None:
    """Exit 2 with one `error:` line when --kv-cache names no KV cache type (before any model is loaded)."""
    try:
        check_kv_cache(kv_cache)
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


def open_session(
    name: str,
    max_context: int,
    raw_prompt: bool,
    system: str | None = None,
    kv_cache: str = DEFAULT_KV_CACHE,
    matvec: str = DEFAULT_MATVEC,
) -> Any:
    from tg.llm.session import Session

    path = registry.resolve(name)
    registry.verify(name, path)
    session = Session.load(path, max_context, raw_prompt, system, kv_cache, matvec)
    session.on_notice = lambda text: typer.echo(f"[{text}]", err=True)
    if sys.stderr.isatty():
        session.model.on_capture = capture_progress
    typer.echo(
        f'using model "{session.model_name}" with {path.stat().st_size:,} bytes and {session.parameters:,} params, '
        f"max context {session.model.max_context} on CPU",
        err=True,
    )
    return session


@contextlib.contextmanager
def capture_progress(what: str) -> Iterator[None]:
    """A spinner on stderr while `what` is captured (on a cold cache that compiles its kernels for seconds), with
    how many kernels have been built so far; gone when the capture is done."""
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from tg.hcq.engine import program_cache_stats

    class KernelsBuilt(ProgressColumn):
        def __init__(self) -> None:
            super().__init__()
            self.before = program_cache_stats.compiles

        def render(self, task: Task) -> Text:
            return Text(f"{program_cache_stats.compiles - self.before} kernels built")

    columns = (SpinnerColumn(), TextColumn(f"preparing {what}"), KernelsBuilt(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        progress.add_task(what, total=None)
        yield


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


def run_chat(session: Any, options: Any, max_tokens: int, stops: list[str]) -> None:
    from tg.llm.model import ContextOverflowError

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
        except (EOFError, KeyboardInterrupt):  # Ctrl-D or Ctrl-C at the prompt: leave
            sys.stdout.write("\n")
            return
        if not prompt.strip():
            continue
        if prompt.strip() == "/clear":
            session.clear()
            typer.echo("[conversation cleared]", err=True)
            continue
        try:
            answer_one_turn(session, prompt, options, max_tokens, stops)
        except ContextOverflowError as error:  # this message cannot fit; the conversation goes on
            typer.echo(f"error: {error}", err=True)
        sys.stdout.write("\n\n")


def answer_one_turn(session: Any, prompt: str, options: Any, max_tokens: int, stops: list[str]) -> None:
    """Stream one answer; a first Ctrl-C stops it after the current token, a second one while it stops exits."""
    with InterruptRequest() as interrupt:
        for text in session.reply(prompt, options, max_tokens, stops):
            sys.stdout.write(text)
            sys.stdout.flush()
            if interrupt.requested:
                break
    if interrupt.requested:
        sys.stdout.write(" [stopped]")


class InterruptRequest:
    """While active, the first SIGINT only sets `requested` (checked between tokens, so no kernel or capture is cut
    half-way); a second one raises KeyboardInterrupt as usual."""

    def __init__(self) -> None:
        self.requested = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> InterruptRequest:
        self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self.previous)


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
    kv_cache: str = typer.Option(DEFAULT_KV_CACHE, "--kv-cache", help=KV_CACHE_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (anything but loopback warns)."),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free one)."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="TG_LLM_API_KEY", help="Require 'Authorization: Bearer KEY' on the API."
    ),
    max_concurrency: int = typer.Option(4, "--max-concurrency", help="Requests generated at once (KV-cache slots)."),
    max_queue: int = typer.Option(16, "--max-queue", help="Requests waiting for a slot; more are answered 429."),
    max_body_bytes: int = typer.Option(1 << 20, "--max-body-bytes", help="Larger request bodies are answered 413."),
    cors_origin: list[str] = typer.Option([], "--cors-origin", help="Allow browser calls from ORIGIN (repeatable)."),
    allowed_host: list[str] = typer.Option(
        [], "--allowed-host", help="Also answer requests whose Host header is NAME (repeatable; '*': any)."
    ),
    warmup: bool = typer.Option(
        True, "--warmup/--no-warmup", help="Capture the steps requests need before /health says ok."
    ),
    warmup_context: int = typer.Option(
        512, "--warmup-context", help="Warm up the KV windows of this many positions (0: the whole context)."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
    replicas: int | None = typer.Option(
        None, "--replicas", min=1, help="Serve N replicas under Ray Serve (the cluster extra) behind --host/--port."
    ),
    ray_address: str | None = typer.Option(None, "--ray-address", help="With --replicas: the Ray cluster to use."),
) -> None:
    """Serve an OpenAI-compatible API (/v1/chat/completions, /v1/completions, ...) and a chat page at /."""
    from tg.llm.serve.server import ServeOptions

    check_kv_cache_option(kv_cache)
    options = ServeOptions(
        host,
        port,
        api_key,
        max_concurrency,
        max_queue,
        max_body_bytes,
        tuple(cors_origin),
        allowed_hosts=tuple(allowed_host),
        warmup=warmup,
        warmup_context=warmup_context or None,
        kv_cache=kv_cache,
    )
    if replicas is not None:
        start_replicas(model, max_context, options, debug, replicas, ray_address)
    else:
        start_server(model, max_context, options, debug)


RAY_MISSING = (
    "--replicas needs Ray Serve, which is not installed: uv sync --extra cluster (or pip install 'tg-llm[cluster]')"
)


def start_replicas(model: str, max_context: int, options: Any, debug: bool, replicas: int, address: str | None) -> None:
    try:
        from tg.llm.serve_cluster import serve_replicas
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "ray":
            raise
        fail(RAY_MISSING)
    try:
        path = registry.resolve(model)
        registry.verify(model, path)
        serve_replicas(path, max_context, options, {model}, replicas, address)
    except typer.Exit:
        raise
    except Exception as error:
        if debug or _debug_flag():
            raise
        fail(str(error).splitlines()[0] if str(error) else type(error).__name__)


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
