"""The tg-flash command line: a thin typer layer over the tg.flash library."""

from importlib.metadata import version

import typer

app = typer.Typer(
    help="Read, verify and program the 2 MiB SPI flash of AMD Navi31 boards.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tg-flash {version('tg-flash')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Read, verify and program the 2 MiB SPI flash of AMD Navi31 boards."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
