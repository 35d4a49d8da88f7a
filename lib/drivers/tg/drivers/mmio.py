"""MMIOInterface: byte and 32-bit register access to one PCI BAR, whatever sits behind it.

Drivers are written against this class only, so the same code runs on a real BAR (an mmap of sysfs
`resourceN`) and on a simulated board (tg.drivers.sim), which overrides the access methods.
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod


class MMIOInterface(ABC):
    """A byte-addressed register window. Registers are 32-bit little-endian."""

    size: int

    @abstractmethod
    def read(self, offset: int, size: int) -> bytes:
        """Copy `size` raw bytes starting at `offset`."""

    @abstractmethod
    def write(self, offset: int, data: bytes) -> None:
        """Copy raw bytes to `offset`."""

    def read32(self, offset: int) -> int:
        return int.from_bytes(self.read(offset, 4), "little")

    def write32(self, offset: int, value: int) -> None:
        self.write(offset, (value & 0xFFFFFFFF).to_bytes(4, "little"))

    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, slice):
            start, stop = self._slice_bounds(key)
            return self.read(start, stop - start)
        return self.read(self._index(key), 1)[0]

    def __setitem__(self, key: int | slice, value: int | bytes) -> None:
        if isinstance(key, slice):
            start, stop = self._slice_bounds(key)
            data = bytes(value)
            if len(data) != stop - start:
                raise ValueError(f"slice of {stop - start} bytes cannot take {len(data)} bytes")
            self.write(start, data)
            return
        self.write(self._index(key), bytes([value]))  # type: ignore[list-item]

    def _index(self, key: int) -> int:
        if not 0 <= key < self.size:
            raise IndexError(f"MMIO offset 0x{key:x} outside the 0x{self.size:x}-byte BAR")
        return key

    def _slice_bounds(self, key: slice) -> tuple[int, int]:
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError("MMIO slices must be contiguous")
        return start, max(start, stop)


class BufferMMIO(MMIOInterface):
    """MMIO over a writable buffer (an mmap of a BAR, or a bytearray in tests).

    32-bit accesses go through a 4-byte-wide view so that a real BAR sees one aligned 32-bit load or
    store, never four byte accesses, which some registers do not accept.
    """

    def __init__(self, buffer: memoryview | bytearray) -> None:
        self._bytes = memoryview(buffer).cast("B")
        self.size = len(self._bytes)
        self._dwords = self._bytes[: self.size - self.size % 4].cast("I")

    @property
    def address(self) -> int:
        """The CPU address of byte 0 (what the HCQ layer views directly, as it does a real BAR's mmap)."""
        holder = ctypes.c_char.from_buffer(self._bytes)
        try:
            return ctypes.addressof(holder)
        finally:
            del holder

    def read(self, offset: int, size: int) -> bytes:
        self._check(offset, size)
        return bytes(self._bytes[offset : offset + size])

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        self._bytes[offset : offset + len(data)] = data

    def read32(self, offset: int) -> int:
        self._check(offset, 4)
        if offset % 4:
            return super().read32(offset)
        return self._dwords[offset // 4]

    def write32(self, offset: int, value: int) -> None:
        self._check(offset, 4)
        if offset % 4:
            super().write32(offset, value)
            return
        self._dwords[offset // 4] = value & 0xFFFFFFFF

    def _check(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise IndexError(f"MMIO access 0x{offset:x}+0x{size:x} outside the 0x{self.size:x}-byte BAR")
