"""`--version` for every tg tool: the tool's name and its installed version."""

from __future__ import annotations


def version_text(distribution: str) -> str:
    """`tg-flash 0.1.0`: the distribution's name and installed version ("unknown" when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version  # only when asked: a tool's start-up stays light

    try:
        installed = version(distribution)
    except PackageNotFoundError:
        installed = "unknown"
    return f"{distribution} {installed}"


def print_version(distribution: str, wanted: bool) -> None:
    """A `--version` option's callback: print the version and end the program (exit status 0) when `wanted`."""
    if wanted:
        print(version_text(distribution))
        raise SystemExit(0)


__all__ = ["print_version", "version_text"]
