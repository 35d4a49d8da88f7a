"""Captured decode and prefill steps kept on disk (tg.llm.capture_store): a new process replays them without
capturing, with the tokens of a capturing and of an uncaptured run; a corrupt, hostile or stale entry is captured
again; a changed model file or tg misses."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

from llm_fixtures import write_model  # noqa: E402

import tg.llm.capture_store as store  # noqa: E402
from tg.llm.generate import Generator  # noqa: E402
from tg.llm.model import load_model  # noqa: E402
from tg.tensor import Context  # noqa: E402
from tg.tensor.jit import TinyJit  # noqa: E402

PROMPT = list(range(3, 23))  # 20 tokens: one padded 32-row prefill step, then decode steps
ANSWER_TOKENS = 6
# the functions PROMPT's answer captures, and what on_capture is told
STEPS = ["_block_forward", "_chunk_logits", "_step"]
NOTED = ["a 32-row prefill step", "the logits of a 32-row prefill step", "the decode step"]


def greedy_answer(path: Path) -> tuple[list[int], list[str]]:
    """Greedy tokens after PROMPT from a freshly loaded model, and what it captured (on_capture's calls)."""
    model, _ = load_model(path, max_context=64)
    captured: list[str] = []

    def note(what: str):  # noqa: ANN202
        captured.append(what)
        return Context()

    model.on_capture = note
    tokens = list(Generator(model).generate(PROMPT, ANSWER_TOKENS))
    return tokens, captured


@pytest.fixture
def captures(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions TinyJit captures while the test runs."""
    names: list[str] = []
    original = TinyJit._capture

    def counting(self, *args):  # noqa: ANN001, ANN202
        names.append(getattr(self.fn, "__name__", None) or self.fn.func.__name__)
        return original(self, *args)

    monkeypatch.setattr(TinyJit, "_capture", counting)
    return names


def test_a_new_process_replays_the_stored_steps_without_capturing(
    tmp_path: Path, own_capture_store: Path, captures: list[str]
) -> None:
    path = write_model(tmp_path / "m.gguf", "llama", "Q4_1", seed=5)
    with Context(JIT=0):
        plain, _ = greedy_answer(path)
    first, noted = greedy_answer(path)
    assert captures == STEPS and noted == NOTED
    assert len(list(own_capture_store.glob("*.capture"))) == 3
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_capture_store import greedy_answer
        from tg.tensor.jit import TinyJit
        captured = []
        original = TinyJit._capture
        TinyJit._capture = lambda self, *args: captured.append(1) or original(self, *args)
        tokens, noted = greedy_answer(Path({str(path)!r}))
        print(json.dumps({{"tokens": tokens, "captures": len(captured), "noted": noted}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)  # (inherits
    assert done.returncode == 0, done.stderr  # TG_LLM_CAPTURES from own_capture_store)
    second = json.loads(done.stdout.splitlines()[-1])
    assert second == {"tokens": first, "captures": 0, "noted": []}
    assert first == plain


def test_a_corrupt_or_hostile_entry_is_captured_again_with_a_debug_line(
    tmp_path: Path, own_capture_store: Path, captures: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=6)
    first, _ = greedy_answer(path)
    entries = sorted(own_capture_store.glob("*.capture"))
    assert len(entries) == 3
    marker = tmp_path / "ran"

    class Hostile:
        def __reduce__(self):  # noqa: ANN204
            return (os.system, (f"touch {marker}",))

    entries[0].write_bytes(pickle.dumps(Hostile()))
    for entry in entries[1:]:
        entry.write_bytes(entry.read_bytes()[:1000])  # cut short
    captures.clear()
    capsys.readouterr()
    with Context(DEBUG=1):
        again, _ = greedy_answer(path)
    assert again == first and sorted(captures) == STEPS
    assert not marker.exists()
    assert capsys.readouterr().err.count("capturing again") == 3
    captures.clear()
    assert greedy_answer(path)[0] == first and captures == []  # the captures were stored again
    contents = [entry.read_bytes() for entry in entries]  # each entry in another's place: a capture of another step
    for entry, content in zip(entries, contents[1:] + contents[:1], strict=True):
        entry.write_bytes(content)
    capsys.readouterr()
    with Context(DEBUG=1):
        assert greedy_answer(path)[0] == first and sorted(captures) == STEPS
    assert capsys.readouterr().err.count("not the entry of this step") == 3


def test_a_changed_model_file_misses(tmp_path: Path, captures: list[str]) -> None:
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=7)
    greedy_answer(path)
    write_model(path, "llama", "F32", seed=8)  # the same size, other weights
    captures.clear()
    changed, _ = greedy_answer(path)
    assert sorted(captures) == STEPS
    with Context(JIT=0):
        assert changed == greedy_answer(path)[0]


def test_another_codegen_version_kv_cache_size_or_kv_cache_type_is_another_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=9)
    model, _ = load_model(path, max_context=64)
    entries = {model.capture_store.path("decode", model)}  # type: ignore[union-attr]
    bigger, _ = load_model(path, max_context=128)
    entries.add(bigger.capture_store.path("decode", bigger))  # type: ignore[union-attr]
    half, _ = load_model(path, max_context=64, kv_cache="f16")  # its decode step reads float16 caches
    entries.add(half.capture_store.path("decode", half))  # type: ignore[union-attr]
    quantized, _ = load_model(path, max_context=64, kv_cache="q8")  # int8 caches of wider rows
    entries.add(quantized.capture_store.path("decode", quantized))  # type: ignore[union-attr]
    monkeypatch.setattr(store.serial, "codegen_version", lambda: "another codegen")
    entries.add(model.capture_store.path("decode", model))  # type: ignore[union-attr]
    assert len(entries) == 5


def test_no_capture_is_stored_with_cachelevel_0(tmp_path: Path, own_capture_store: Path) -> None:
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=10)
    with Context(CACHELEVEL=0):
        greedy_answer(path)
    assert not list(own_capture_store.iterdir())


def test_the_stored_decode_step_holds_no_weights(tmp_path: Path, own_capture_store: Path) -> None:
    """Weights, caches and RoPE tables are rebound by name, scratch buffers are left out: the entry holds kernels."""
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=11)
    model, _ = load_model(path, max_context=64)
    Generator(model).generate([1, 2], 2).__next__()
    entry = model.capture_store.path("decode", model)  # type: ignore[union-attr]
    data = entry.read_bytes()
    for name in ("token_embd.weight", "blk.0.ffn_down.weight", "output_norm.weight"):
        weight = model.weights[name].data.numpy()  # type: ignore[union-attr]
        assert np.ascontiguousarray(weight[:4]).tobytes() not in data


def test_jit_0_runs_plainly_with_a_stored_capture_present(tmp_path: Path, captures: list[str]) -> None:
    """Regression: JIT=0 loaded the stored capture, which has no function to run plainly, and failed. Nothing is
    captured then, so no progress is shown either."""
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=12)
    jitted, _ = greedy_answer(path)
    with Context(JIT=0):
        assert greedy_answer(path) == (jitted, [])


def test_a_loaded_step_runs_plainly_under_a_later_jit_0_and_captures_again_after_reset(
    tmp_path: Path, captures: list[str]
) -> None:
    """Regression: a step loaded from the store had no Python function, so a JIT=0 call after it (bench_llm's
    profile of a decode step, in any process but the first) raised JitError, and so did a call after reset()."""
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=17)
    stored, _ = greedy_answer(path)
    model, _ = load_model(path, max_context=64)
    assert list(Generator(model).generate(PROMPT, ANSWER_TOKENS)) == stored  # its steps come from the store
    captures.clear()
    token, position = stored[-1], len(PROMPT) + ANSWER_TOKENS
    with Context(JIT=0):
        plain = model.forward([token], position).numpy()
    model.decode_steps["decode"].reset()
    again = model.forward([token], position).numpy()
    assert captures == ["_step"]
    np.testing.assert_allclose(again, plain, rtol=1e-5, atol=1e-5 * np.abs(plain).max())


def test_a_new_server_runner_replays_the_stored_steps(tmp_path: Path, captures: list[str]) -> None:
    """The server's steps (tg.llm.serve.runner) are stored too: a runner on a freshly loaded model captures
    nothing, and its logits match the float64 reference."""
    import llm_reference as reference

    from tg.llm.serve.runner import ModelRunner

    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=15)
    metadata, weights = reference.load(path)
    for run in range(2):
        runner = ModelRunner(load_model(path, max_context=32)[0], 2)
        first, second = runner.slots
        runner.prefill(first, [1, 2, 3])
        runner.prefill(second, [4, 5])
        logits = runner.decode([(first, 6), (second, 7)])
        for row, tokens in zip(logits, ([1, 2, 3, 6], [4, 5, 7]), strict=True):
            expected = reference.forward(metadata, weights, tokens)[-1]
            np.testing.assert_allclose(row, expected, atol=2e-3 * np.abs(expected).max())
        assert len(captures) == (2 if run == 0 else 0), captures
        captures.clear()


def test_a_stored_gemma3_step_replays_with_the_local_rope_tables(tmp_path: Path, own_capture_store: Path) -> None:
    """A Gemma 3 model's sliding blocks read RoPE tables of their own (base 10,000); a model loaded again replays the
    stored steps with them and answers as an uncaptured run does. The prompt is longer than the sliding window, so
    the decode steps are those that read the window only (tg.llm.model.SlidingWindow), stored under their own name."""
    path = write_model(tmp_path / "gemma3.gguf", "gemma3", "F32", seed=7, sliding_window=8)
    with Context(JIT=0):
        plain, _ = greedy_answer(path)
    first, noted = greedy_answer(path)
    assert "the decode window step" in noted and len(list(own_capture_store.glob("*.capture"))) == len(noted)
    again, noted_again = greedy_answer(path)
    assert noted_again == [] and first == again == plain


def test_a_copied_or_renamed_model_file_replays_the_captures_of_the_original(
    tmp_path: Path, captures: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key names the file's content, not its path: a copy elsewhere (another path, inode and modification time)
    and a renamed file replay what the original stored. The content is hashed once per file version: a second load
    of the same file reads the remembered digest."""
    original = write_model(tmp_path / "m.gguf", "llama", "F32", seed=13)
    hashed: list[str] = []
    file_digest = store.hashlib.file_digest
    monkeypatch.setattr(
        store.hashlib, "file_digest", lambda file, name: hashed.append(file.name) or file_digest(file, name)
    )
    first, _ = greedy_answer(original)
    assert sorted(captures) == STEPS and len(hashed) == 1
    captures.clear()
    assert greedy_answer(original) == (first, []) and len(hashed) == 1  # remembered, not hashed again
    copied = tmp_path / "elsewhere" / "copy.gguf"
    copied.parent.mkdir()
    shutil.copyfile(original, copied)
    renamed = original.rename(tmp_path / "renamed.gguf")
    for path in (copied, renamed):
        assert greedy_answer(path) == (first, [])
    assert captures == [] and hashed == [str(original), str(copied), str(renamed)]


def test_a_model_file_changed_at_the_same_size_and_modification_time_misses(
    tmp_path: Path, captures: list[str]
) -> None:
    """Regression: the key named the file by path, size and modification time, so other weights written at the same
    size with the modification time set back replayed the old file's captures (which read the same buffers, so the
    answers were right, but a capture of another layout would not be)."""
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=14)
    before = path.stat()
    greedy_answer(path)
    write_model(path, "llama", "F32", seed=15)  # the same size, other weights
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    captures.clear()
    changed, _ = greedy_answer(path)
    assert sorted(captures) == STEPS
    with Context(JIT=0):
        assert changed == greedy_answer(path)[0]


def test_the_least_recently_used_entries_are_evicted_past_the_size_cap(tmp_path: Path, own_capture_store: Path) -> None:
    """Oldest modification time first, until the rest fit; the entry just written stays even alone over the cap."""
    entries = {}
    for age, name in enumerate(["a", "b", "c", "new"]):
        entry = own_capture_store / f"{name}.capture"
        entry.write_bytes(b"x" * 1000)
        os.utime(entry, ns=(age * 10**9, age * 10**9))
        entries[name] = entry
    store.evict(2500, keep=entries["new"])
    assert sorted(path.stem for path in own_capture_store.glob("*.capture")) == ["c", "new"]
    store.evict(10, keep=entries["new"])
    assert [path.stem for path in own_capture_store.glob("*.capture")] == ["new"]


def test_a_load_renews_an_entry_and_a_write_evicts_past_tg_llm_captures_mb(
    tmp_path: Path, own_capture_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_model(tmp_path / "m.gguf", "llama", "F32", seed=16)
    model, _ = load_model(path, max_context=64)
    Generator(model).generate([1, 2], 2).__next__()  # stores the decode step
    decode = model.capture_store.path("decode", model)  # type: ignore[union-attr]
    os.utime(decode, ns=(0, 0))
    assert model.capture_store.load("decode", model, model._step) is not None  # type: ignore[union-attr]
    assert decode.stat().st_mtime_ns > 0
    monkeypatch.setenv("TG_LLM_CAPTURES_MB", "0")  # every write leaves only itself
    _, captured = greedy_answer(path)  # the prefill step's write evicts the decode step, captured and written again
    assert captured == NOTED
    assert [entry.name for entry in own_capture_store.glob("*.capture")] == [decode.name]
    monkeypatch.setenv("TG_LLM_CAPTURES_MB", "lots")
    with pytest.raises(ValueError, match="TG_LLM_CAPTURES_MB must be a whole number of megabytes, not 'lots'"):
        store.store_limit_bytes()
