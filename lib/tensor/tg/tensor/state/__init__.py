"""Weights files: safetensors (load and save), torch zip checkpoints (load, without torch), GGUF (through
tg.tensor.gguf), behind one `load(path) -> {name: Tensor}`.

Loaded tensors are lazy views of the file on the DISK device: a 1 GB file loads by reading its header, and each
tensor's bytes are read when that tensor is used. Every reader checks the whole file's table before returning, and
raises `StateFileError` (a ValueError naming the file and the tensor) for corrupt or truncated files.
"""

from tg.tensor.state.archives import tar_extract, zip_extract
from tg.tensor.state.errors import StateFileError
from tg.tensor.state.loader import detect_format, load
from tg.tensor.state.safetensors import safe_load, safe_load_metadata, safe_save
from tg.tensor.state.torch_zip import torch_load

__all__ = [
    "StateFileError", "detect_format", "load", "safe_load", "safe_load_metadata", "safe_save", "tar_extract",
    "torch_load", "zip_extract",
]  # fmt: skip
