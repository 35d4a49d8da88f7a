"""GGUF, the llama.cpp model container: header, typed metadata, tensor table, aligned data.

`gguf_read(path)` parses the container (versions 2 and 3, every metadata value type, `general.alignment`, split
files `NAME-00001-of-0000N.gguf`) without loading tensor data. `gguf_load(path)` also loads every tensor into a
Tensor: float types in their own dtype (BF16 as float32, decoded with tensor ops), quantized types as their raw
uint8 blocks shaped `(*rows, blocks_per_row, bytes_per_block)`. Quantized types are decoded by their users (tg.llm
keeps them packed and dequantizes inside the matmul), so this module only needs to know their block sizes.
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tg.codegen import DType, dtypes

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# metadata value type id -> struct format (scalars); 8 = string, 9 = array are handled separately
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9

# ggml type id -> (name, elements per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    39: ("MXFP4", 32, 17),
}
# the ggml types that are plain arrays of one dtype
FLOAT_TYPES: dict[str, DType] = {
    "F32": dtypes.float32,
    "F16": dtypes.float16,
    "I8": dtypes.int8,
    "I16": dtypes.int16,
    "I32": dtypes.int32,
    "I64": dtypes.int64,
    "F64": dtypes.float64,
}
_SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


class GGUFError(ValueError):
    """The file is not a GGUF container this reader understands (bad magic, version, type, truncation)."""


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One entry of the tensor table. `shape` is row-major (GGUF stores dims fastest-first; we reverse them)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute byte offset of the data in `path`
    path: Path

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]

    @property
    def nbytes(self) -> int:
        _, block_elements, block_bytes = GGML_TYPES[self.ggml_type]
        return math.prod(self.shape) // block_elements * block_bytes


@dataclass
class GGUFFile:
    """A parsed container: its metadata and tensor table (data stays on disk until loaded)."""

    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensorInfo]
    alignment: int


class _Reader:
    """Sequential little-endian reads over a byte buffer, raising GGUFError on truncation."""

    def __init__(self, data: memoryview, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.data):
            raise GGUFError(f"{self.path}: truncated GGUF header at byte {self.pos}")
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        length = self.take("Q")
        if self.pos + length > len(self.data):
            raise GGUFError(f"{self.path}: truncated GGUF string at byte {self.pos}")
        text = bytes(self.data[self.pos : self.pos + length]).decode("utf-8", errors="replace")
        self.pos += length
        return text

    def value(self, value_type: int) -> Any:
        if value_type in _SCALAR_FORMATS:
            return self.take(_SCALAR_FORMATS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            item_type, count = self.take("i"), self.take("Q")
            if item_type in _SCALAR_FORMATS and item_type != 7:  # numeric arrays: one struct call, not a loop
                fmt = _SCALAR_FORMATS[item_type]
                size = struct.calcsize(fmt) * count
                if self.pos + size > len(self.data):
                    raise GGUFError(f"{self.path}: truncated GGUF array at byte {self.pos}")
                items = list(struct.unpack_from(f"<{count}{fmt}", self.data, self.pos))
                self.pos += size
                return items
            return [self.value(item_type) for _ in range(count)]
        raise GGUFError(f"{self.path}: unknown GGUF metadata value type {value_type}")


def split_paths(path: str | Path) -> list[Path]:
    """All files of a split model given any one of them (`x-00002-of-00003.gguf`), or just `[path]`."""
    path = Path(path)
    match = _SPLIT_NAME.match(path.name)
    if match is None:
        return [path]
    count = int(match["count"])
    return [path.with_name(f"{match['stem']}-{index:05d}-of-{count:05d}.gguf") for index in range(1, count + 1)]


def _read_one(path: Path) -> GGUFFile:
    import mmap

    with open(path, "rb") as file:
        try:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            raise GGUFError(f"{path}: not a GGUF file (empty)") from None
    with mapped:
        view = memoryview(mapped)
        try:
            return _parse(view, path, len(mapped))
        finally:
            view.release()


def _parse(view: memoryview, path: Path, file_size: int) -> GGUFFile:
    reader = _Reader(view, path)
    if bytes(view[:4]) != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {bytes(view[:4])!r})")
    reader.pos = 4
    version = reader.take("I")
    if version not in (2, 3):
        raise GGUFError(f"{path}: unsupported GGUF version {version} (2 and 3 are supported)")
    n_tensors, n_metadata = reader.take("q"), reader.take("q")
    metadata: dict[str, Any] = {}
    for _ in range(n_metadata):
        key = reader.string()
        metadata[key] = reader.value(reader.take("I"))
    raw_infos = []
    for _ in range(n_tensors):
        name = reader.string()
        dims = [reader.take("Q") for _ in range(reader.take("I"))]
        ggml_type, offset = reader.take("I"), reader.take("Q")
        if ggml_type not in GGML_TYPES:
            raise GGUFError(f"{path}: tensor {name!r} has GGML type {ggml_type}, which is not supported")
        raw_infos.append((name, tuple(reversed(dims)), ggml_type, offset))
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    data_start = -(-reader.pos // alignment) * alignment
    tensors = {}
    for name, shape, ggml_type, offset in raw_infos:
        info = GGUFTensorInfo(name, shape, ggml_type, data_start + offset, path)
        if math.prod(shape) % GGML_TYPES[ggml_type][1]:
            blocks = f"{info.type_name} blocks"
            raise GGUFError(f"{path}: tensor {name!r} of shape {shape} is not a whole number of {blocks}")
        if info.offset + info.nbytes > file_size:
            raise GGUFError(f"{path}: tensor {name!r} runs past the end of the file (truncated download?)")
        tensors[name] = info
    return GGUFFile(version, metadata, tensors, alignment)


def gguf_read(path: str | Path) -> GGUFFile:
    """Parse a GGUF file's metadata and tensor table; split files are merged (metadata from the first part)."""
    parts = split_paths(path)
    missing = [str(part) for part in parts if not part.exists()]
    if missing:
        raise FileNotFoundError(f"missing GGUF file(s): {', '.join(missing)}")
    files = [_read_one(part) for part in parts]
    merged = files[0]
    for extra in files[1:]:
        merged.tensors.update(extra.tensors)
    return merged


def bf16_to_float(bits: Any) -> Any:
    """float32 values of bfloat16 bit patterns (an integer Tensor), exact, with tensor arithmetic only.

    bfloat16 is the top half of a float32, so this is a bitcast of `bits << 16`; it is spelled as arithmetic
    (sign, 8-bit exponent, 7-bit mantissa) because the C renderer cannot yet bitcast under gcc.
    """
    bits = bits.cast(dtypes.uint32)
    sign = (bits >> 15) & 1
    exponent = (bits >> 7) & 0xFF
    mantissa = bits & 0x7F
    # subnormals have no implicit leading one; 2**-67 * 2**-67 keeps each step exact and representable
    significand = (mantissa + (exponent > 0).cast(dtypes.uint32) * 128).cast(dtypes.float32) * 2.0**-67 * 2.0**-67
    half_exponent = exponent.maximum(1) >> 1
    value = significand * pow2(half_exponent) * pow2(exponent.maximum(1) - half_exponent)
    special = (mantissa == 0).where(math.inf, math.nan)
    value = (exponent == 0xFF).where(special, value)
    return (sign == 1).where(-value, value)


def half_to_float(bits: Any) -> Any:
    """float32 values of IEEE half bit patterns (an integer Tensor), exact, with tensor arithmetic only.

    Spelled as arithmetic (sign, 5-bit exponent, 10-bit mantissa) rather than a bitcast for the same reason as
    `bf16_to_float`.
    """
    bits = bits.cast(dtypes.uint32)
    sign = (bits >> 15) & 1
    exponent = (bits >> 10) & 0x1F
    mantissa = bits & 0x3FF
    significand = (mantissa + (exponent > 0).cast(dtypes.uint32) * 1024).cast(dtypes.float32) * 2.0**-25
    value = significand * pow2(exponent.maximum(1))
    special = (mantissa == 0).where(math.inf, math.nan)
    value = (exponent == 0x1F).where(special, value)
    return (sign == 1).where(-value, value)


def pow2(exponent: Any) -> Any:
    """2.0**exponent as float32 for an integer Tensor 0 <= exponent < 128, exact (a product of bit factors)."""
    result = None
    for bit in range(7):
        factor = (((exponent >> bit) & 1) == 1).where(2.0 ** (1 << bit), 1.0)
        result = factor if result is None else result * factor
    return result


def load_tensor(info: GGUFTensorInfo, data: memoryview, device: str | None = None) -> Any:
    """One tensor from its file bytes: float types in their dtype, BF16 as float32, quantized as raw blocks."""
    import numpy as np

    from tg.tensor.tensor import Tensor

    name, block_elements, block_bytes = GGML_TYPES[info.ggml_type]
    raw = np.frombuffer(data, dtype=np.uint8, count=info.nbytes, offset=info.offset)
    if name in FLOAT_TYPES:
        from tg.codegen import to_numpy

        return Tensor(raw.view(to_numpy(FLOAT_TYPES[name])).reshape(info.shape), device=device)
    if name == "BF16":
        halves = Tensor(raw.view(np.uint16).reshape(info.shape), device=device)
        return bf16_to_float(halves)
    rows, row_elements = info.shape[:-1], info.shape[-1] if info.shape else 1
    if row_elements % block_elements:
        raise GGUFError(f"tensor {info.name!r}: rows of {row_elements} are not whole {name} blocks")
    return Tensor(raw.reshape(*rows, row_elements // block_elements, block_bytes), device=device)


def mapped_tensors(gguf: GGUFFile) -> Iterator[tuple[GGUFTensorInfo, memoryview]]:
    """Each tensor's info with a view of the memory-mapped file part that holds it. Use what a view gives before
    asking for the next tensor: a part's mapping closes once its last tensor has been handed out."""
    by_path: dict[Path, list[GGUFTensorInfo]] = {}
    for info in gguf.tensors.values():
        by_path.setdefault(info.path, []).append(info)
    for part, infos in by_path.items():
        with open(part, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                for info in infos:
                    yield info, view
                    _drop_pages(mapped, info.offset, info.nbytes)
            finally:
                view.release()


def _drop_pages(mapped: mmap.mmap, offset: int, size: int) -> None:
    """Take a tensor's pages of the file mapping out of this process's resident memory once its bytes were read:
    they were copied to the device, and otherwise a load's peak held the file twice (SmolLM2-135M's 98 MB of
    weights: 240 MB peak against 147 MB after the load). The pages stay in the page cache; reading them again maps
    them back (a read-only file mapping loses nothing)."""
    start = offset - offset % mmap.PAGESIZE
    mapped.madvise(mmap.MADV_DONTNEED, start, offset + size - start)


def gguf_load(path: str | Path, device: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, {name: Tensor}) for a GGUF file; see the module docstring for how each type is loaded."""
    gguf = gguf_read(path)
    tensors = {info.name: load_tensor(info, view, device).realize() for info, view in mapped_tensors(gguf)}
    return gguf.metadata, tensors
