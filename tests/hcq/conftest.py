"""Shared helpers for the tg.hcq tests, handed to tests as the `kit` fixture.

Test kernels are small C functions compiled with the real compiler wrapper (tg.codegen.compiler).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tg.codegen.dtype import dtypes
from tg.codegen.flags import Context
from tg.hcq import Buffer

float32, uint8, int32 = dtypes.float32, dtypes.uint8, dtypes.int32

# b[i] = a[i] + 1 for i = core_id: one element per call, the kernel of the spec's conformance suite.
ADD_ONE = """
void add_one(float* restrict b, const float* restrict a, int core_id) {
  b[core_id] = a[core_id] + 1.0f;
}
"""

# out[i] = x[i] * scale + shift over a chunk of 64 elements per core_id (buffers, then values, then core_id).
SCALE_SHIFT = """
void scale_shift(float* restrict out, const float* restrict x, int n, int scale, int shift, int core_id) {
  int start = core_id * 64;
  int end = start + 64 < n ? start + 64 : n;
  for (int i = start; i < end; i++) out[i] = x[i] * (float)scale + (float)shift;
}
"""

# out[core_id] = 1: shows exactly which core_ids a launch ran.
MARK = """
void mark(float* restrict out, int core_id) { out[core_id] = 1.0f; }
"""


def load_program(device: Any, name: str, source: str) -> Any:
    return device.runtime(name, device.compiler.compile(source))


def float_buffer(device: str, values: list[float]) -> Buffer:
    buf = Buffer(device, len(values), float32).allocate()
    buf.copyin(struct.pack(f"{len(values)}f", *values))
    return buf


def read_floats(raw: Any, count: int) -> list[float]:
    """Read floats straight from device memory (no synchronize): what the device has written so far."""
    return list(struct.unpack(f"{count}f", ctypes.string_at(raw.va_addr, 4 * count)))


def write_floats(raw: Any, values: list[float]) -> None:
    ctypes.memmove(raw.va_addr, struct.pack(f"{len(values)}f", *values), 4 * len(values))


@pytest.fixture
def kit() -> SimpleNamespace:
    return SimpleNamespace(
        ADD_ONE=ADD_ONE,
        SCALE_SHIFT=SCALE_SHIFT,
        MARK=MARK,
        float32=float32,
        uint8=uint8,
        int32=int32,
        load_program=load_program,
        float_buffer=float_buffer,
        read_floats=read_floats,
        write_floats=write_floats,
    )


@pytest.fixture
def fresh_cache_dir(tmp_path: Any) -> Iterator[Any]:
    """Point the on-disk caches at an empty directory for one test (compiles run in the test thread)."""
    with Context(TG_CACHE_DIR=str(tmp_path)):
        yield tmp_path
