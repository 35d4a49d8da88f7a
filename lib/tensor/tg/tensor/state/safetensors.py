"""safetensors files: load (memory-mapped through the DISK device) and save (atomically).

The format: 8 bytes little-endian N, then N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {str: str}}, then the data; offsets count from the end of the header. Every tensor is checked
(dtype, shape, offsets, bytes present) before any is returned, so a corrupt or truncated file raises
`StateFileError` naming the file and the tensor, never a partial model.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tg.codegen import DType, dtypes
from tg.tensor.state.disk import FileView
from tg.tensor.state.errors import StateFileError
from tg.tensor.tensor import Tensor

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
    "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2,
}  # fmt: skip
DTYPE_NAMES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
HEADER_LIMIT = 100 << 20  # the format's own limit on the JSON header


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the header, checked: where its bytes are (from the start of the file) and what they hold."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    offset: int
    nbytes: int


def _read_header(view: FileView) -> tuple[dict[str, Any], int]:
    """The parsed JSON header and the file offset where the data starts."""
    if view.size < 8:
        raise StateFileError(view.path, f"not a safetensors file: {view.size} bytes, fewer than the 8-byte header size")
    header_size = int.from_bytes(view.read(0, 8), "little")
    if header_size > HEADER_LIMIT or 8 + header_size > view.size:
        raise StateFileError(view.path, f"header of {header_size} bytes does not fit in a file of {view.size} bytes")
    try:
        header = json.loads(view.read(8, header_size).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StateFileError(view.path, f"the header is not valid JSON ({error})") from None
    if not isinstance(header, dict):
        raise StateFileError(view.path, "the header is not a JSON object")
    return header, 8 + header_size


def _entry(view: FileView, name: str, info: Any, data_start: int) -> TensorEntry:
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise StateFileError(view.path, "entry needs dtype, shape and data_offsets", name)
    dtype = SAFETENSORS_DTYPES.get(info["dtype"])
    if dtype is None:
        raise StateFileError(view.path, f"unsupported dtype {info['dtype']!r}", name)
    shape, offsets = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or not all(isinstance(size, int) and size >= 0 for size in shape):
        raise StateFileError(view.path, f"shape {shape!r} is not a list of non-negative ints", name)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise StateFileError(view.path, f"data_offsets {offsets!r} is not [begin, end]", name)
    begin, end = offsets
    nbytes = math.prod(shape) * dtype.itemsize
    if not 0 <= begin <= end or end - begin != nbytes:
        raise StateFileError(view.path, f"data_offsets {offsets} do not hold {nbytes} bytes for shape {shape}", name)
    if data_start + end > view.size:
        available = view.size - data_start
        problem = f"truncated: needs data bytes [{begin}, {end}) but only {available} exist"
        raise StateFileError(view.path, problem, name)
    return TensorEntry(name, dtype, tuple(shape), data_start + begin, nbytes)


def read_entries(path: str | Path) -> tuple[FileView, list[TensorEntry], dict[str, str]]:
    """The file's mapping, its checked tensor entries in file order, and its metadata."""
    view = FileView(path)
    header, data_start = _read_header(view)
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise StateFileError(view.path, "__metadata__ must map strings to strings")
    entries = sorted((_entry(view, name, info, data_start) for name, info in header.items()), key=lambda e: e.offset)
    for before, after in zip(entries, entries[1:], strict=False):
        if after.offset < before.offset + before.nbytes:
            raise StateFileError(view.path, f"its bytes overlap those of {before.name!r}", after.name)
    return view, entries, metadata


def safe_load_metadata(path: str | Path) -> dict[str, str]:
    """The `__metadata__` strings of a safetensors file (reads only the header)."""
    return read_entries(path)[2]


def safe_load(path: str | Path) -> dict[str, Tensor]:
    """Every tensor of a safetensors file, lazily on the DISK device (`.to("CPU")` or `.numpy()` reads one)."""
    view, entries, _ = read_entries(path)
    return {entry.name: view.tensor(entry.offset, entry.shape, entry.dtype) for entry in entries}


def _header_bytes(tensors: dict[str, Tensor], metadata: dict[str, str] | None) -> bytes:
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(key): str(value) for key, value in metadata.items()}
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in DTYPE_NAMES:
            raise TypeError(f"safetensors cannot store tensor {name!r} of dtype {tensor.dtype!r}")
        header[name] = {"dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + tensor.nbytes()]}  # fmt: skip
        offset += tensor.nbytes()
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned, as the reference writer does
    return len(encoded).to_bytes(8, "little") + encoded


def safe_save(tensors: dict[str, Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` (realized as needed) to a safetensors file, atomically: a temporary file, then a rename."""
    if "__metadata__" in tensors:
        raise ValueError("'__metadata__' is reserved by the format and cannot name a tensor")
    header = _header_bytes(tensors, metadata)
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".safetensors")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(header)
            for tensor in tensors.values():
                f.write(tensor.data())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
