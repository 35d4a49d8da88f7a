"""The tg-beam command line: a thin typer layer over the tg.beam library."""

from importlib.metadata import version

import typer

app = typer.Typer(help="BEAM search for the fastest way to run one kernel.", no_args_is_help=True, add_completion=False)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tg-beam {version('tg-beam')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """BEAM search for the fastest way to run one kernel."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
