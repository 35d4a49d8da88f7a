"""The DISK device: a file as a buffer, through mmap, so large weight files are never read whole.

`Buffer("DISK:/path/model.safetensors", nbytes, dtypes.uint8)` maps the file; `view(...)` at an offset
gives one tensor's bytes, and only the pages actually read are loaded by the kernel. A buffer larger than
the file grows the file (when it is writable). The mapping lives as long as the device.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from tg.hcq.allocator import Allocator, BufferSpec
from tg.hcq.device import Compiled, DeviceSpec


@dataclass(frozen=True)
class DiskBuffer:
    """`size` bytes at `offset` in the device's file; `view` is the mapped memory of that range."""

    offset: int
    size: int
    view: memoryview

    def offset_by(self, offset: int, size: int) -> DiskBuffer:
        if offset < 0 or offset + size > self.size:
            raise ValueError(f"range [{offset}, {offset + size}) is outside a disk buffer of {self.size} bytes")
        return DiskBuffer(self.offset + offset, size, self.view[offset : offset + size])


def _file_identity(path: str) -> tuple[int, int, int] | None:
    """(device, inode, size) of the file at `path`: a different identity means the file was replaced or resized."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino, info.st_size


class DiskAllocator(Allocator):
    def __init__(self, device: DiskDevice) -> None:
        super().__init__(device)
        self.path = device.spec.path
        self._map: mmap.mmap | None = None
        self._identity: tuple[int, int, int] | None = None

    def _mapping(self, size: int) -> mmap.mmap:
        if self._map is not None and self._identity != _file_identity(self.path):
            self._map = None  # the file was replaced or resized since: map it again (old views keep the old map)
        if self._map is not None and len(self._map) >= size:
            return self._map
        if self._map is not None:
            raise RuntimeError(f"{self.path} is mapped with {len(self._map)} bytes; cannot grow it to {size}")
        writable = not os.path.exists(self.path) or os.access(self.path, os.W_OK)
        fd = os.open(self.path, (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY, 0o644)
        try:
            file_size = os.fstat(fd).st_size
            if file_size < size:
                if not writable:
                    raise ValueError(f"{self.path} has {file_size} bytes, fewer than the {size} requested")
                os.ftruncate(fd, size)
                file_size = size
            self._map = mmap.mmap(fd, file_size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
            self._identity = _file_identity(self.path)
        finally:
            os.close(fd)
        return self._map

    def _alloc(self, size: int, options: BufferSpec) -> DiskBuffer:
        mapping = self._mapping(size)
        return DiskBuffer(0, size, memoryview(mapping)[:size])

    def _offset(self, raw: DiskBuffer, offset: int, size: int) -> DiskBuffer:
        return raw.offset_by(offset, size)

    def _copyin(self, dest: DiskBuffer, src: memoryview) -> None:
        if dest.view.readonly:
            raise PermissionError(f"{self.path} is read-only")
        dest.view[:] = src

    def _copyout(self, dest: memoryview, src: DiskBuffer) -> None:
        dest[:] = src.view

    def _as_buffer(self, raw: DiskBuffer) -> memoryview:
        return raw.view


class DiskDevice(Compiled):
    """`Device["DISK:/path"]`: no compiler and no programs, only memory-mapped storage."""

    def __init__(self, spec: DeviceSpec) -> None:
        super().__init__(spec, allocator=None, compiler=None, program_class=None)
        self.allocator = DiskAllocator(self)
