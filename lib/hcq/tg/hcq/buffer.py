"""`Buffer`: `size` elements of a dtype on a device, allocated lazily, with copyin/copyout and views.

A Buffer is the safe, checked face of a device allocation. Misuse raises instead of touching memory:
copies of the wrong size, reading before allocating, using a buffer after `deallocate()`, or using a view
whose base was freed. `raw` is the device's raw handle (an `HCQBuffer` on CPU) that programs take.
"""

from __future__ import annotations

from typing import Any

from tg.hcq.allocator import DEFAULT_SPEC, BufferSpec
from tg.hcq.device import Compiled, Device


class Buffer:
    """`size` elements of `dtype` on `device`. `base` + `offset` (in bytes) make it a view of another buffer.

    `dtype` is a `tg.codegen.dtype.DType` (anything with `name`, `itemsize` and `fmt`).
    """

    def __init__(
        self,
        device: str,
        size: int,
        dtype: Any,
        options: BufferSpec = DEFAULT_SPEC,
        base: Buffer | None = None,
        offset: int = 0,
        preallocate: bool = False,
    ) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"Buffer size must be a non-negative integer, got {size!r}")
        self.device = Device.canonicalize(device)
        self.size = size
        self.dtype = dtype
        self.options = options
        self.offset = offset
        self._base = base
        self._raw: Any = None
        self._freed = False
        self.derived: dict[Any, Any] | None = None  # what the engine made from this memory and keeps: see note_write
        if base is not None:
            if base._base is not None:
                raise ValueError("a view's base must be a base buffer; pass view.base")
            if base.device != self.device:
                raise ValueError(f"a view must be on its base's device ({base.device}), not {self.device}")
            if offset < 0 or offset + self.nbytes > base.nbytes:
                raise ValueError(
                    f"view of {self.nbytes} bytes at offset {offset} does not fit in a base of {base.nbytes} bytes"
                )
        if preallocate:
            self.allocate()

    # --- what this buffer is ---

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def base(self) -> Buffer:
        return self if self._base is None else self._base

    @property
    def dev(self) -> Compiled:
        return Device[self.device]

    @property
    def allocator(self) -> Any:
        return self.dev.allocator

    def __repr__(self) -> str:
        view = f" view at {self.offset}" if self._base is not None else ""
        return f"<Buffer {self.device} {self.size} {getattr(self.dtype, 'name', self.dtype)}{view}>"

    # --- lifetime ---

    def is_allocated(self) -> bool:
        if self._base is not None:
            return self._raw is not None and self._base.is_allocated()
        return self._raw is not None

    def allocate(self, opaque: Any = None) -> Buffer:
        """Allocate device memory (or adopt `opaque`, a raw handle the caller already owns)."""
        if self._raw is not None:
            raise RuntimeError(f"{self} is already allocated")
        if self._base is not None:
            self._base.ensure_allocated()
            self._raw = self.allocator._offset(self._base.raw, self.offset, self.nbytes)
        elif opaque is not None:
            self._raw = opaque
        else:
            self._raw = self.allocator.alloc(max(self.nbytes, 1), self.options)
        self._freed = False
        return self

    def ensure_allocated(self) -> Buffer:
        if self._freed and self._base is None:
            raise RuntimeError(f"{self} was deallocated; allocate() it again before use")
        return self if self.is_allocated() else self.allocate()

    def __del__(self) -> None:
        # A dropped base buffer gives its memory back to the allocator (and so to its LRU cache).
        if getattr(self, "_raw", None) is not None and self._base is None:
            try:
                self.deallocate()
            except Exception:  # at interpreter shutdown the device may be gone; the OS reclaims memory
                pass

    def deallocate(self) -> None:
        if self._raw is None:
            raise RuntimeError(f"{self} is not allocated (double free?)")
        if self._base is None:
            self.allocator.free(self._raw, max(self.nbytes, 1), self.options)
        self._raw = None
        self._freed = True

    @property
    def raw(self) -> Any:
        """The device's raw handle, for programs and queues. Raises if not (or no longer) allocated."""
        if self._raw is None:
            state = "was deallocated" if self._freed else "is not allocated"
            raise RuntimeError(f"{self} {state}")
        if self._base is not None and not self._base.is_allocated():
            raise RuntimeError(f"{self} is a view of a buffer that was deallocated")
        return self._raw

    # --- data ---

    def copyin(self, data: memoryview | bytes | bytearray) -> Buffer:
        """Copy host bytes into the buffer; `data` must be exactly `nbytes` long."""
        source = _as_bytes_view(data)
        if source.nbytes != self.nbytes:
            raise ValueError(f"copyin of {source.nbytes} bytes into {self} of {self.nbytes} bytes")
        self.allocator._copyin(self.raw, source)
        self.note_write()
        return self

    def note_write(self) -> None:
        """This buffer's memory is being written (its base's: a view shares it), so what the engine derived from it
        and kept (tg.hcq.engine.kept: a matmul's packed copy of a weight) is stale: it is dropped. The engine calls it
        for every kernel output, copy, copyin and TinyJit replay."""
        base = self if self._base is None else self._base
        if base.derived is not None:
            base.derived = None

    def copyout(self, dest: memoryview | bytearray) -> memoryview:
        """Copy the buffer into a writable host memoryview of exactly `nbytes` bytes."""
        target = _as_bytes_view(dest)
        if target.readonly:
            raise ValueError("copyout needs a writable destination")
        if target.nbytes != self.nbytes:
            raise ValueError(f"copyout of {self} ({self.nbytes} bytes) into {target.nbytes} bytes")
        self.allocator._copyout(target, self.raw)
        return target

    def as_buffer(self, allow_zero_copy: bool = False) -> memoryview:
        """The contents as a host memoryview, typed by the dtype's format when it has one.

        With `allow_zero_copy` a host-visible device returns a live view of the memory itself (after
        synchronizing); otherwise the result is a copy that later device work cannot change.
        """
        zero_copy = self.allocator._as_buffer(self.raw) if allow_zero_copy else None
        if zero_copy is not None:
            self.dev.synchronize()
            data = zero_copy
        else:
            data = self.copyout(memoryview(bytearray(self.nbytes)))
        fmt = getattr(self.dtype, "fmt", None)
        if not fmt:
            return data
        try:
            return data.cast(fmt)
        except (ValueError, TypeError):  # memoryview cannot cast to some formats (e.g. 'e' before Python 3.12)
            return data

    def host_view(self) -> memoryview | None:
        """A live view of the buffer's bytes (after synchronizing the device: earlier work is done), through which
        the host reads and writes the memory itself; None when the device's memory is not host-visible."""
        view = self.allocator._as_buffer(self.raw)
        if view is None:
            return None
        self.dev.synchronize()
        return view

    def numpy(self) -> Any:
        import numpy as np

        return np.frombuffer(self.as_buffer(), dtype=np.dtype(getattr(self.dtype, "fmt", None) or "B")).copy()

    def view(self, size: int, dtype: Any, offset: int) -> Buffer:
        """A buffer of `size` elements of `dtype` starting `offset` bytes into this one (shares memory)."""
        base = self.base
        view = Buffer(self.device, size, dtype, self.options, base=base, offset=self.offset + offset)
        if base.is_allocated():
            view.allocate()
        return view


def _as_bytes_view(data: memoryview | bytes | bytearray) -> memoryview:
    view = memoryview(data)
    if not view.c_contiguous:
        raise ValueError("copies need C-contiguous host memory")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view
