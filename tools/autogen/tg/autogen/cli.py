"""The tg-autogen command line: a thin typer layer over the tg.autogen library."""

from importlib.metadata import version

import typer

app = typer.Typer(
    help="Turn C headers into Python ctypes bindings through libclang.", no_args_is_help=True, add_completion=False
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tg-autogen {version('tg-autogen')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Turn C headers into Python ctypes bindings through libclang."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
