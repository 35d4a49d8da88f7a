"""The one exception type of tg-autogen, in a module of its own so that the CLI can import it for free."""

from __future__ import annotations


class AutogenError(Exception):
    """An expected failure: printed as one `error: ...` line by the CLI."""
