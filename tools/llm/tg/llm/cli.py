"""The tg-llm command line: a thin typer layer over the tg.llm library."""

from importlib.metadata import version

import typer

app = typer.Typer(help="Run and serve LLMs from GGUF files.", no_args_is_help=True, add_completion=False)


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
