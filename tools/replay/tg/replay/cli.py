"""The tg-replay command line: a thin typer layer over the tg.replay library."""

from importlib.metadata import version

import typer

app = typer.Typer(
    help="Capture the kernels the compiler generates and diff them against another version.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tg-replay {version('tg-replay')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Capture the kernels the compiler generates and diff them against another version."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
