"""tg-autogen: C headers to Python ctypes bindings through libclang."""

# Also in tools/autogen/pyproject.toml (a test keeps them equal); `--version` reads it here because
# importlib.metadata costs a noticeable part of the CLI's start-up.
__version__ = "0.1.0"
