"""The one error a state file raises when it cannot be loaded: it names the file and, where known, the tensor."""

from __future__ import annotations

from pathlib import Path


class StateFileError(ValueError):
    """A weights file that is corrupt, truncated or uses something tg cannot read.

    Loading validates every tensor before it returns any, so this error never comes with a partial model."""

    def __init__(self, path: str | Path, problem: str, tensor: str | None = None) -> None:
        self.path, self.problem, self.tensor = str(path), problem, tensor
        where = f" (tensor {tensor!r})" if tensor is not None else ""
        super().__init__(f"{self.path}{where}: {problem}")
