"""tg-llm speed on the embedded SmolLM2-135M-Instruct Q4_1: decode tok/s, prefill tok/s, memory bandwidth.

Run: `CC=gcc uv run python bench/bench_llm.py [--prefill 256] [--decode 16]`. Prints tg's numbers, the profile
of one decode step (kernels, their time, Python overhead) and, when installed, the same run in transformers
(float32) and llama-cpp-python on the same file. tg has no TinyJit yet: every decode step rebuilds and
schedules its graph in Python, and each new position compiles its attention kernels once (cached on disk).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time

from tg.llm import registry
from tg.llm.generate import Generator
from tg.llm.model import load_model
from tg.tensor import Context, GlobalCounters


def bench_tg(path, prefill_tokens: int, decode_tokens: int) -> dict:
    model, _ = load_model(path, max_context=prefill_tokens + decode_tokens + 8)
    weight_bytes = sum(weight.nbytes() for weight in model.weights.values())
    prompt = [(17 * i + 5) % 40000 + 100 for i in range(prefill_tokens)]
    generator = Generator(model, chunk_size=32)
    start = time.perf_counter()
    generator.prefill(prompt)
    prefill_s = time.perf_counter() - start
    steps = []
    token, position = 42, prefill_tokens
    for _ in range(decode_tokens):
        start = time.perf_counter()
        model.forward([token], position).numpy()
        steps.append(time.perf_counter() - start)
        position += 1
    decode_s = statistics.median(steps)
    # the profile of one more (already compiled) decode step: kernel count and time under DEBUG=2
    model.forward([token], position - 1).numpy()
    GlobalCounters.reset()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), Context(DEBUG=2):
        start = time.perf_counter()
        model.forward([token], position - 1).numpy()
        profiled_s = time.perf_counter() - start
    return {
        "prefill_tok_s": prefill_tokens / prefill_s,
        "decode_tok_s": 1 / decode_s,
        "decode_gb_s": weight_bytes / decode_s / 1e9,
        "weight_mb": weight_bytes / 1e6,
        "kernels": GlobalCounters.kernel_count,
        "kernel_s": GlobalCounters.time_sum_s,
        "step_s": profiled_s,
    }


def bench_llama_cpp(path, prefill_tokens: int, decode_tokens: int) -> str:
    try:
        from llama_cpp import Llama
    except ImportError:
        return "llama-cpp-python: not installed"
    llm = Llama(model_path=str(path), n_ctx=prefill_tokens + decode_tokens + 8, n_threads=2, verbose=False)
    prompt = [(17 * i + 5) % 40000 + 100 for i in range(prefill_tokens)]
    start = time.perf_counter()
    llm.eval(prompt)
    prefill = prefill_tokens / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(decode_tokens):
        llm.eval([42])
    decode = decode_tokens / (time.perf_counter() - start)
    return f"llama-cpp-python: decode {decode:.1f} tok/s, prefill {prefill:.1f} tok/s"


def bench_transformers(path, decode_tokens: int) -> str:
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError:
        return "transformers: not installed"
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, torch_dtype=torch.float32)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        out = model(ids, use_cache=True)
        past = out.past_key_values
        start = time.perf_counter()
        for _ in range(decode_tokens):
            out = model(torch.tensor([[42]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
    return f"transformers (float32): decode {decode_tokens / (time.perf_counter() - start):.1f} tok/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefill", type=int, default=256)
    parser.add_argument("--decode", type=int, default=16)
    args = parser.parse_args()
    path = registry.resolve(registry.EMBEDDED_NAME)
    tg = bench_tg(path, args.prefill, args.decode)
    print(
        f"tg: decode {tg['decode_tok_s']:.2f} tok/s ({tg['decode_gb_s']:.3f} GB/s of {tg['weight_mb']:.0f} MB "
        f"weights, median of {args.decode} steps), prefill {args.prefill} tokens {tg['prefill_tok_s']:.2f} tok/s"
    )
    python_s = tg["step_s"] - tg["kernel_s"]
    print(
        f"one decode step: {tg['kernels']} kernels, {tg['kernel_s'] * 1e3:.1f} ms in kernels, "
        f"{python_s * 1e3:.1f} ms elsewhere (graph building, scheduling, Python), total {tg['step_s'] * 1e3:.1f} ms"
    )
    print(bench_llama_cpp(path, args.prefill, args.decode))
    print(bench_transformers(path, args.decode))
    print("targets (issue 16): decode >= 60 tok/s, prefill >= 300 tok/s; they need TinyJit (issue 15)")


if __name__ == "__main__":
    main()
