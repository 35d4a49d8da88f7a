"""torch `.pt`/`.pth` checkpoints (the zip format torch.save has written since 1.6), read without importing torch.

The zip holds `<root>/data.pkl`, a pickle of the saved object, and one member `<root>/data/<key>` per storage. The
pickle refers to storages through persistent ids ("storage", <dtype class>, key, location, numel) and rebuilds
tensors with `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`. A restricted unpickler
resolves only those names (anything else is refused, so a checkpoint cannot run code), and every tensor becomes a
lazy view of its storage's bytes in the zip, mapped through the DISK device (torch stores members uncompressed).
"""

from __future__ import annotations

import math
import pickle
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tg.codegen import DType, dtypes
from tg.tensor.state.disk import FileView
from tg.tensor.state.errors import StateFileError
from tg.tensor.tensor import Tensor

STORAGE_DTYPES: dict[str, DType] = {
    "DoubleStorage": dtypes.float64, "FloatStorage": dtypes.float32, "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
    "UInt16Storage": dtypes.uint16, "UInt32Storage": dtypes.uint32, "UInt64Storage": dtypes.uint64,
    "Float8_e4m3fnStorage": dtypes.fp8e4m3, "Float8_e5m2Storage": dtypes.fp8e5m2,
    "Float8_e4m3fnuzStorage": dtypes.fp8e4m3fnuz, "Float8_e5m2fnuzStorage": dtypes.fp8e5m2fnuz,
}  # fmt: skip
TORCH_DTYPES: dict[str, DType] = {
    "float64": dtypes.float64, "float32": dtypes.float32, "float16": dtypes.float16, "bfloat16": dtypes.bfloat16,
    "int64": dtypes.int64, "int32": dtypes.int32, "int16": dtypes.int16, "int8": dtypes.int8, "uint8": dtypes.uint8,
    "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64, "bool": dtypes.bool,
    "float8_e4m3fn": dtypes.fp8e4m3, "float8_e5m2": dtypes.fp8e5m2, "float8_e4m3fnuz": dtypes.fp8e4m3fnuz,
    "float8_e5m2fnuz": dtypes.fp8e5m2fnuz,
}  # fmt: skip
LOCAL_HEADER_SIZE = 30  # a zip local file header before its name and extra field


@dataclass(frozen=True)
class StorageKind:
    """What `torch.FloatStorage` (and the other storage classes) unpickle to: the element dtype."""

    dtype: DType


@dataclass(frozen=True)
class Storage:
    key: str
    dtype: DType
    numel: int


@dataclass(frozen=True)
class PendingTensor:
    """A tensor the pickle described; it becomes a Tensor once its name is known (so errors can name it)."""

    storage: Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


@dataclass(frozen=True)
class TorchDtype:
    """What `torch.float8_e4m3fn` (and the other dtype objects) unpickle to."""

    dtype: DType


def _rebuild_tensor(storage: Storage, offset: int, size: Any, stride: Any, *_: Any) -> PendingTensor:
    return PendingTensor(storage, int(offset), tuple(size), tuple(stride))


def _rebuild_tensor_v3(
    storage: Storage, offset: int, size: Any, stride: Any, requires_grad: Any, hooks: Any, dtype: TorchDtype, *_: Any
) -> PendingTensor:
    """torch's form for dtypes without a storage class (fp8, unsigned ints): an untyped (byte) storage + a dtype."""
    typed = Storage(storage.key, dtype.dtype, storage.numel // dtype.dtype.itemsize)
    return PendingTensor(typed, int(offset), tuple(size), tuple(stride))


def _rebuild_parameter(data: PendingTensor, *_: Any) -> PendingTensor:
    return data


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch.storage", "UntypedStorage"): StorageKind(dtypes.uint8),
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("collections", "OrderedDict"): OrderedDict,
}


class _CheckpointUnpickler(pickle.Unpickler):
    def __init__(self, data: Any, path: str) -> None:
        super().__init__(data)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in STORAGE_DTYPES:
            return StorageKind(STORAGE_DTYPES[name])
        if module == "torch" and name in TORCH_DTYPES:
            return TorchDtype(TORCH_DTYPES[name])
        found = _ALLOWED.get((module, name))
        if found is None:
            raise StateFileError(self.path, f"the pickle needs {module}.{name}, which a weights file should not")
        return found

    def persistent_load(self, pid: Any) -> Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], StorageKind)):
            raise StateFileError(self.path, f"unsupported storage reference {pid!r}")
        return Storage(str(pid[2]), pid[1].dtype, int(pid[4]))


def member_data_offset(view: FileView, info: zipfile.ZipInfo) -> int:
    """Where a stored (uncompressed) member's bytes start in the file: after its local header."""
    local = view.read(info.header_offset, LOCAL_HEADER_SIZE)
    if len(local) < LOCAL_HEADER_SIZE or local[:4] != b"PK\x03\x04":
        raise StateFileError(view.path, f"no zip local header for {info.filename}")
    name_length, extra_length = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
    return info.header_offset + LOCAL_HEADER_SIZE + name_length + extra_length


def _contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(size):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


class TorchCheckpoint:
    """An opened checkpoint: its pickled object (tensors still pending) and where each storage's bytes are."""

    def __init__(self, path: str | Path) -> None:
        self.view = FileView(path)
        try:
            self.archive = zipfile.ZipFile(self.view.path)
            pickles = [name for name in self.archive.namelist() if name.endswith("/data.pkl") or name == "data.pkl"]
            if not pickles:
                raise StateFileError(self.view.path, "no data.pkl in the zip: not a torch checkpoint")
            self.root = pickles[0][: -len("data.pkl")]
            byteorder = self.root + "byteorder"
            if byteorder in self.archive.namelist() and self.archive.read(byteorder).strip() != b"little":
                raise StateFileError(self.view.path, "big-endian checkpoints are not supported")
            with self.archive.open(pickles[0]) as data:
                self.object = _CheckpointUnpickler(data, self.view.path).load()
        except zipfile.BadZipFile as error:
            problem = f"not a readable zip ({error}): truncated, or a legacy (pre-1.6) torch file"
            raise StateFileError(self.view.path, problem) from None
        except (pickle.UnpicklingError, EOFError, ValueError) as error:
            if isinstance(error, StateFileError):
                raise
            raise StateFileError(self.view.path, f"data.pkl is corrupt ({error})") from None

    def tensor(self, name: str, pending: PendingTensor) -> Tensor:
        """The Tensor `pending` describes, checked against its storage member (errors name `name`)."""
        storage = pending.storage
        try:
            info = self.archive.getinfo(f"{self.root}data/{storage.key}")
        except KeyError:
            raise StateFileError(self.view.path, f"storage data/{storage.key} is missing", name) from None
        if info.compress_type != zipfile.ZIP_STORED:
            raise StateFileError(self.view.path, f"storage data/{storage.key} is compressed; cannot map it", name)
        needed = storage.numel * storage.dtype.itemsize
        start = member_data_offset(self.view, info)
        if info.file_size < needed or start + needed > self.view.size:
            raise StateFileError(self.view.path, f"truncated: storage data/{storage.key} lacks bytes", name)
        count = math.prod(pending.size)
        if count and pending.offset + sum((n - 1) * s for n, s in zip(pending.size, pending.stride, strict=True)) >= (
            storage.numel
        ):
            raise StateFileError(self.view.path, "its view reaches past the end of its storage", name)
        if count == 0:
            return Tensor.empty(*pending.size, dtype=storage.dtype)
        if pending.stride == _contiguous_strides(pending.size) or count == 1:  # exactly its own bytes, mapped
            return self.view.tensor(start + pending.offset * storage.dtype.itemsize, pending.size, storage.dtype)
        return _strided_copy(self.view.tensor(start, (storage.numel,), storage.dtype), pending)


def _strided_copy(whole: Tensor, pending: PendingTensor) -> Tensor:
    """A non-contiguous saved view (a transpose, a slice): read its storage and take the strided elements."""
    import numpy as np

    values = whole.numpy()
    picked = np.lib.stride_tricks.as_strided(
        values[pending.offset :], pending.size, tuple(s * values.itemsize for s in pending.stride)
    )
    return Tensor(np.ascontiguousarray(picked), dtype=whole.dtype)


def _child(name: str, key: Any) -> str:
    return f"{name}.{key}" if name else str(key)


def _resolve(checkpoint: TorchCheckpoint, value: Any, name: str) -> Any:
    """`value` with every pending tensor made a Tensor (all checked before anything is returned)."""
    if isinstance(value, PendingTensor):
        return checkpoint.tensor(name, value)
    if isinstance(value, dict):
        return type(value)((key, _resolve(checkpoint, item, _child(name, key))) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(checkpoint, item, _child(name, i)) for i, item in enumerate(value))
    return value


def torch_load(path: str | Path) -> Any:
    """The object a torch checkpoint holds (usually a state dict), with every tensor a lazy tg Tensor on DISK."""
    checkpoint = TorchCheckpoint(path)
    return _resolve(checkpoint, checkpoint.object, "")


def flatten_tensors(value: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor inside nested dicts, lists and tuples, named by its path joined with '.' (non-tensors dropped)."""
    if isinstance(value, Tensor):
        return {prefix: value}
    found: dict[str, Tensor] = {}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found.update(flatten_tensors(item, _child(prefix, key)))
    return found
