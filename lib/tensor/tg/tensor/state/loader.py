"""One entry point for weights files: `load(path)` picks the reader by the file's contents, not only its name."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tg.tensor.state.errors import StateFileError
from tg.tensor.state.safetensors import safe_load
from tg.tensor.state.torch_zip import flatten_tensors, torch_load
from tg.tensor.tensor import Tensor

GGUF_MAGIC = b"GGUF"
ZIP_MAGIC = b"PK\x03\x04"


def detect_format(path: str | Path) -> str:
    """'safetensors', 'torch' or 'gguf' from the first bytes (a zip is a torch checkpoint, a JSON object after the
    8-byte size is safetensors); a file named .safetensors goes to that reader, which says what is wrong with it."""
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:4] == GGUF_MAGIC:
        return "gguf"
    if head[:4] == ZIP_MAGIC or zipfile.is_zipfile(path):  # the magic still marks a zip whose end was cut off
        return "torch"
    if head[8:9] == b"{" or Path(path).suffix == ".safetensors":
        return "safetensors"
    raise StateFileError(path, "unknown weights format (expected safetensors, a torch zip checkpoint or GGUF)")


def load(path: str | Path, device: str | None = None) -> dict[str, Tensor]:
    """Every tensor in a safetensors file, torch checkpoint or GGUF file, by name.

    Tensors stay lazy on the DISK device (only what is used is read) unless `device` names where to copy them;
    the copy is lazy too. A torch checkpoint's nested dicts are flattened into 'outer.inner' names."""
    kind = detect_format(path)
    if kind == "gguf":
        return _gguf_tensors(path, device)
    tensors = safe_load(path) if kind == "safetensors" else flatten_tensors(torch_load(path))
    return tensors if device is None else {name: tensor.to(device) for name, tensor in tensors.items()}


def _gguf_tensors(path: str | Path, device: str | None) -> dict[str, Tensor]:
    """GGUF through tg.tensor.gguf (the tg-llm work owns it and its quantized types): dequantized tensors."""
    try:
        from tg.tensor.gguf import gguf_load
    except ImportError:
        raise StateFileError(path, "GGUF support (tg.tensor.gguf) is not in this version of tg") from None
    return gguf_load(path, device)[1]
