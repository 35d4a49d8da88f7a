"""Captured model steps kept on disk beside the kernel cache, so that a new process replays instead of capturing.

Capturing the decode step schedules the whole forward and loads every kernel: seconds, even when every binary is in
the kernel cache. The first process that captures a step writes it to `<cache dir>/llm-captures/<key>.capture`
($TG_LLM_CAPTURES names another folder)
(tg.tensor.jit_pickle's `dumps_capture`, written atomically); a later process with the same key loads it, rebinding
the model's own buffers (weights, KV caches, RoPE tables: `model_buffers`) by name, so no weight is stored twice.

The key is everything a capture depends on (its hash names the file, and the file repeats it): the model file's
content (a SHA-256 of its bytes, see `model_digest`), the step, the KV cache size and type, the matvec type, the
device, its Target and compiler, the codegen flags, tg.codegen's version, the sources of tg.tensor, tg.hcq and
tg.llm, and the git commit. A copied or renamed model file replays the captures of the original; a changed model
file or tg misses; an entry that does not load (corrupt, another step's, not a capture: it is read by
tg.codegen.serial's restricted unpickler, so it never runs code) is ignored with a DEBUG line and captured again.
CACHELEVEL=0 disables the store; JIT=0 does not read it.

The store holds at most $TG_LLM_CAPTURES_MB megabytes of entries (DEFAULT_STORE_MB): when an entry is written, the
least recently used ones (a load marks an entry used by its modification time) are removed until the rest fit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Callable
from dataclasses import fields
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tg.codegen import serial
from tg.codegen.flags import BEAM, CACHELEVEL, DEBUG, cache_dir
from tg.codegen.pipeline import CodegenFlags
from tg.codegen.schedule.realize import buffer_holding
from tg.hcq.buffer import Buffer
from tg.hcq.device import Device
from tg.hcq.engine.buffers import buffer_of
from tg.hcq.flags import JITBEAM
from tg.tensor.flags import JIT
from tg.tensor.jit import TinyJit
from tg.tensor.jit_pickle import JitPickleError, dumps_capture, loads_capture
from tg.tensor.tensor import Tensor

if TYPE_CHECKING:
    from tg.llm.model import Transformer

STORE_SCHEMA = 2
STORE_FOLDER = "llm-captures"
# the store's size cap in MB when $TG_LLM_CAPTURES_MB does not set one: Gemma 3 270M's decode step is 0.8 MB and
# a server's warm-up stores tens of steps, so this keeps hundreds of steps of many models
DEFAULT_STORE_MB = 512
# where the content digests of model files are remembered (see model_digest), inside the store's folder
DIGEST_FOLDER = "model-digests"


def captures_dir() -> Path:
    """Where stored captures live: $TG_LLM_CAPTURES, else a folder of the cache directory (TG_CACHE_DIR)."""
    return Path(os.environ.get("TG_LLM_CAPTURES") or Path(cache_dir()) / STORE_FOLDER)


def store_limit_bytes() -> int:
    """The store's size cap: $TG_LLM_CAPTURES_MB megabytes (a whole number), else DEFAULT_STORE_MB."""
    text = os.environ.get("TG_LLM_CAPTURES_MB") or str(DEFAULT_STORE_MB)
    if not text.isdigit():
        raise ValueError(f"TG_LLM_CAPTURES_MB must be a whole number of megabytes, not {text!r}")
    return int(text) * 1_000_000


def model_digest(model_file: str | os.PathLike[str]) -> str:
    """The SHA-256 of the model file's bytes, remembered in the store's folder under the file's path, inode, size
    and modification and change times: a later load of the unchanged file reads it there instead of hashing hundreds
    of MB again, and any write to the file (which changes its change time, even when the modification time is set
    back) hashes it again."""
    path = Path(model_file).resolve()
    stat = path.stat()
    identity = f"{path}\0{stat.st_dev}\0{stat.st_ino}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ctime_ns}"
    remembered = captures_dir() / DIGEST_FOLDER / hashlib.sha256(identity.encode()).hexdigest()[:32]
    with contextlib.suppress(OSError):
        digest = remembered.read_text()
        if len(digest) == 64 and all(char in "0123456789abcdef" for char in digest):
            return digest
    with path.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    if int(CACHELEVEL):
        try:
            _write_atomically(remembered, digest.encode())
        except OSError as error:
            _note(f"capture store: cannot remember the digest of {path}: {error}")
    return digest


def model_buffers(model: Transformer) -> dict[str, Tensor]:
    """Every realized Tensor the model holds (weights, norms, KV caches, RoPE tables), by a name that is the same in
    every process that loads the same file: a stored capture refers to these instead of holding their contents."""
    from tg.llm.model import block_tensors

    found: dict[str, Tensor] = {}
    for name, weight in model.weights.items():
        for index, tensor in enumerate(_weight_tensors(weight.data)):
            found[f"weight {name} {index}"] = tensor
    for number, block in enumerate(model.blocks):
        for index, tensor in enumerate(block_tensors(block)):
            found[f"block {number} {index}"] = tensor
    for number, kv_cache in enumerate(model.caches):
        found[f"kv cache {number}"] = kv_cache
    found["rope cos"], found["rope sin"] = model.rope_tables
    if model.local_rope_tables is not model.rope_tables:  # the sliding blocks' own (Gemma 2 and 3)
        found["local rope cos"], found["local rope sin"] = model.local_rope_tables
    found["positions"], found["output norm"] = model.positions, model.output_norm
    return {name: tensor for name, tensor in found.items() if buffer_holding(tensor.uop) is not None}


def _weight_tensors(data: Any) -> list[Tensor]:
    if isinstance(data, Tensor):
        return [data]
    return [value for item in fields(data) for value in _tensors_in(getattr(data, item.name))]


def _tensors_in(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, dict):
        return [v for key in sorted(value) for v in _tensors_in(value[key])]
    return []


class CaptureStore:
    """The stored captures of one model file (see the module docstring)."""

    def __init__(self, model_file: str | os.PathLike[str]) -> None:
        self.model_file = Path(model_file)

    @cached_property
    def model_identity(self) -> str:
        """The model file's content digest (see model_digest), first needed by the first load or save."""
        return f"model sha256 {model_digest(self.model_file)}"

    def key(self, step: str, model: Transformer) -> str:
        """Everything the capture of `step` depends on, as text (its hash names the file; the file repeats it)."""
        device_name = model.caches[0].device
        device = Device[device_name]
        parts = [
            f"schema {STORE_SCHEMA}",
            self.model_identity,
            f"step {step} max_context {model.max_context} kv_cache {model.kv_cache} matvec {model.matvec}",
            f"device {device_name} {device.target!r} {device.compiler.identity()!r}",
            f"flags {CodegenFlags.from_environment()!r} beam {int(BEAM)} jitbeam {int(JITBEAM)}",
            f"codegen {serial.codegen_version()} sources {_sources_version()} git {serial.git_state()!r}",
        ]
        return "\n".join(parts)

    def path(self, step: str, model: Transformer) -> Path:
        return captures_dir() / f"{hashlib.sha256(self.key(step, model).encode()).hexdigest()[:32]}.capture"

    def load(self, step: str, model: Transformer, function: Callable[..., Any]) -> TinyJit | None:
        """The stored capture of `step` for `model`, or None (nothing stored, an entry that does not load, or JIT=0,
        which runs steps plainly). `function` is the step's Python function: a pickled capture has none, and the
        loaded TinyJit runs it under a later JIT=0 (a profile of the step) and captures it again after reset()."""
        if int(CACHELEVEL) == 0 or not int(JIT):
            return None
        key, path = self.key(step, model), self.path(step, model)
        try:
            data = path.read_bytes()
            os.utime(path)  # used now: the last to be evicted (see evict)
        except FileNotFoundError:
            return None
        except OSError as error:
            _note(f"capture store: cannot read {path}: {error}")
            return None
        shared = {name: buffer_holding(tensor.uop) for name, tensor in model_buffers(model).items()}
        try:
            entry = serial.loads(data)
            if not (isinstance(entry, dict) and entry.get("key") == key and isinstance(entry.get("capture"), bytes)):
                raise serial.IRLoadError("it is not the entry of this step (another key, or not an entry)")
            jit = loads_capture(entry["capture"], {name: node for name, node in shared.items() if node is not None})
        except Exception as error:  # noqa: BLE001  (whatever is wrong with an entry, capturing again is the remedy)
            _note(f"capture store: ignoring {path} ({type(error).__name__}: {error}); capturing again")
            return None
        jit.fn = function
        return jit

    def save(self, step: str, model: Transformer, jit: TinyJit) -> None:
        """Store the captured `jit` of `step` (atomically; a failure to write is a DEBUG line, not an error)."""
        if int(CACHELEVEL) == 0:
            return
        path = self.path(step, model)
        try:
            # the step's own buffers are activations, written whole before they are read; the cache rows it
            # assigns are in the KV caches, which are shared
            entry = {"key": self.key(step, model), "capture": dumps_capture(jit, _namer(model), scratch_empty=True)}
            _write_atomically(path, serial.dumps(entry))
            evict(store_limit_bytes(), keep=path)
        except (OSError, JitPickleError) as error:
            _note(f"capture store: cannot store {path}: {error}")


def evict(limit: int, keep: Path) -> None:
    """Remove the least recently used entries (oldest modification time first; a load renews it) until the
    entries take at most `limit` bytes; `keep`, the entry just written, stays even when it alone is larger. An
    entry another process removes first is skipped."""
    entries = []
    for entry in captures_dir().glob("*.capture"):
        with contextlib.suppress(FileNotFoundError):
            stat = entry.stat()
            entries.append((stat.st_mtime_ns, stat.st_size, entry))
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries, key=lambda item: item[:2]):
        if total <= limit:
            break
        if entry != keep:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
            total -= size


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _namer(model: Transformer) -> Callable[[Buffer], str | None]:
    names: dict[int, str] = {}
    for name, tensor in model_buffers(model).items():
        node = buffer_holding(tensor.uop)
        if node is not None:
            names.setdefault(id(buffer_of(node)), name)
    return lambda buf: names.get(id(buf))


def _note(text: str) -> None:
    if int(DEBUG) >= 1:
        print(text, file=sys.stderr)


@cache
def _sources_version() -> str:
    """A hash of the Python sources of the packages a capture's structure comes from besides tg.codegen."""
    import tg.hcq.device
    import tg.llm.model
    import tg.tensor.tensor

    digest = hashlib.sha256()
    for module in (tg.tensor.tensor, tg.hcq.device, tg.llm.model):
        root = Path(module.__file__ or "").resolve().parent
        for source in sorted(root.rglob("*.py")):
            digest.update(str(source.relative_to(root)).encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
