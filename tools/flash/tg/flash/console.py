"""Output for the tg-flash CLI: text or one JSON document, progress bars on a terminal, plain lines
otherwise, errors as one `error: ...` line, and atomic output files."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer


class Reporter:
    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.started = time.monotonic()

    def line(self, text: str) -> None:
        """A progress or information line; suppressed in JSON mode so stdout stays one document."""
        if not self.json_mode:
            typer.echo(text)
            sys.stdout.flush()

    def result(self, text: str, payload: dict) -> None:
        if self.json_mode:
            typer.echo(json.dumps({"ok": True, **payload}, indent=2, sort_keys=True))
        else:
            typer.echo(text)

    def error(self, message: str) -> None:
        typer.echo(f"error: {message}", err=True)
        if self.json_mode:
            typer.echo(json.dumps({"ok": False, "error": message}, indent=2))

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def interactive(self) -> bool:
        return not self.json_mode and sys.stdout.isatty()


class Progress:
    """A rich bar on a terminal; otherwise the caller's plain lines through `note`."""

    def __init__(self, reporter: Reporter, bar, task) -> None:
        self.reporter = reporter
        self.bar = bar
        self.task = task

    def advance(self, amount: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, amount)

    def note(self, text: str) -> None:
        if self.bar is None:
            self.reporter.line(text)


@contextmanager
def progress(reporter: Reporter, description: str, total: int) -> Iterator[Progress]:
    if not reporter.interactive():
        yield Progress(reporter, None, None)
        return
    from rich.progress import BarColumn, DownloadColumn, TimeRemainingColumn
    from rich.progress import Progress as RichProgress

    columns = ("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with RichProgress(*columns, transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield Progress(reporter, bar, task)


def read_input(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder, not an image file") from None
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist") from None


def parse_int(text: str) -> int:
    """Integers in any base Python accepts: 4096, 0x1000, 0o10000, 0b1."""
    try:
        return int(str(text).replace("_", ""), 0)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an integer (decimal or 0x-prefixed hex)") from None


@contextmanager
def failures(reporter: Reporter, debug: bool) -> Iterator[None]:
    """Expected failures become one `error: ...` line and exit 1; Ctrl-C exits 130 after the restores ran."""
    import click

    try:
        yield
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise
    except KeyboardInterrupt as e:
        # a bare Ctrl-C ran the restores; one with a message (SIGTERM/SIGHUP, a silent remote server) says so
        reporter.error(str(e) or "interrupted; controller registers were restored")
        raise typer.Exit(128 + getattr(e, "signum", signal.SIGINT)) from None
    except (RuntimeError, TimeoutError, ValueError, OSError) as e:
        if debug:
            import traceback

            traceback.print_exc()
        reporter.error(str(e))
        raise typer.Exit(1) from None
