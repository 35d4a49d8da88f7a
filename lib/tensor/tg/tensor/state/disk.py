"""Tensors over byte ranges of a file, mapped through the DISK device: nothing is read until a tensor is used.

`FileView(path)` maps the whole file once (`Buffer("DISK:<path>")`); `tensor(offset, shape, dtype)` is a Tensor whose
memory is the bytes at `offset`, so reading one tensor of a 1 GB file touches only that tensor's pages.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from tg.codegen import DType, dtypes
from tg.hcq import Buffer
from tg.tensor.tensor import Tensor


class FileView:
    """The file at `path` as one DISK buffer, and tensors over ranges of it."""

    def __init__(self, path: str | Path) -> None:
        self.path = os.path.abspath(path)
        self.size = os.path.getsize(self.path)
        self.device = f"DISK:{self.path}"
        self._whole: Buffer | None = None

    def _buffer(self) -> Buffer:
        if self._whole is None:
            self._whole = Buffer(self.device, self.size, dtypes.uint8).allocate()
        return self._whole

    def tensor(self, offset: int, shape: tuple[int, ...], dtype: DType) -> Tensor:
        """The `shape` elements of `dtype` stored C-contiguously at byte `offset`, lazily, on the DISK device."""
        from tg.tensor.engine import buffer_over

        count = math.prod(shape)
        if count == 0:
            return Tensor.empty(*shape, dtype=dtype, device="CPU")  # no bytes to map: an empty tensor is the same
        node = buffer_over(self._buffer().view(count, dtype, offset))
        return Tensor(node, device=self.device).reshape(shape)

    def read(self, offset: int, size: int) -> bytes:
        """`size` bytes at `offset` (headers and other small reads, through an ordinary file read)."""
        with open(self.path, "rb") as f:
            f.seek(offset)
            return f.read(size)
