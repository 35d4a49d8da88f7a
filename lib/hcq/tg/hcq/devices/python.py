"""The PYTHON device: the reference emulator. Kernels are rendered to Python (tg.codegen.render.python) and
executed op by op with exact dtype semantics; memory is host bytes. Slow by design: use small tensors.

Every other device is checked against this one. Programs run synchronously, on the calling thread.
"""

from __future__ import annotations

import time
from typing import Any

from tg.codegen.render.emulate import load_function
from tg.codegen.render.python import PythonRenderer
from tg.hcq.allocator import BufferSpec, LRUAllocator
from tg.hcq.device import Compiled, DeviceSpec
from tg.hcq.host import cache_sizes
from tg.hcq.program import Program, ProgramCall


class PythonMemory:
    """A raw PYTHON-device buffer: a writable memoryview; `offset` views share its bytes."""

    def __init__(self, view: memoryview) -> None:
        self.view = view

    def offset(self, offset: int = 0, size: int | None = None) -> PythonMemory:
        end = len(self.view) if size is None else offset + size
        return PythonMemory(self.view[offset:end])


class PythonAllocator(LRUAllocator):
    def _alloc(self, size: int, options: BufferSpec) -> PythonMemory:
        return PythonMemory(memoryview(bytearray(size)))

    def _copyin(self, dest: PythonMemory, src: memoryview) -> None:
        dest.view[: src.nbytes] = src

    def _copyout(self, dest: memoryview, src: PythonMemory) -> None:
        dest[:] = src.view[: dest.nbytes]

    def _as_buffer(self, raw: PythonMemory) -> memoryview:
        return raw.view


class PythonCompiler:
    """The "binary" of a Python kernel is its source; there is nothing to compile ahead of time."""

    def identity(self) -> str:
        return "python"

    def compile(self, source: str) -> bytes:
        return source.encode()


class PythonProgram(Program):
    """A Python kernel function. Calls run it once per core_id of the global size, then return."""

    def __init__(self, dev: Any, name: str, lib: bytes) -> None:
        super().__init__(dev, name)
        self.function = load_function(lib.decode(), name)

    def run(self, bufs: tuple[PythonMemory, ...], call: ProgramCall) -> float | None:
        start = time.perf_counter()
        calls = call.global_size[0] * call.global_size[1] * call.global_size[2]
        for core_id in range(calls):
            self.function(*(b.view for b in bufs), *call.vals, core_id)
        return time.perf_counter() - start if call.wait else None


class PythonDevice(Compiled):
    def __init__(self, spec: DeviceSpec) -> None:
        allocator = PythonAllocator()
        super().__init__(spec, allocator, PythonCompiler(), PythonProgram)
        allocator.device = self
        self.renderer = PythonRenderer.for_machine(family="PYTHON", **cache_sizes())  # it runs on the host's CPU
