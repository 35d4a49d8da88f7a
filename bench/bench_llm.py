"""tg-llm speed on the embedded SmolLM2-135M-Instruct Q4_1: decode tok/s, prefill tok/s, memory bandwidth.

Run: `CC=gcc uv run python bench/bench_llm.py [--prefill 256] [--decode 32] [--positions 0,4000 --kv-cache f16]`
(`--positions`: decode tok/s at those positions, tg and llama-cpp-python taking turns; `--matvec float,int8`
times tg with both matvec types among them); `--first-answer 3` instead times
one short question in fresh `tg-llm` processes, cold cache and warm (median of 3); `--ttft 20` instead times the
first token of a 43-token chat prompt in this (loaded, warmed) process, median of 20, beside llama-cpp-python's
(1 and 2 threads) when installed. Prints tg's numbers, the profile
of one decode step (kernels, their time, Python overhead), the machine's load average (the figures depend on it)
and, when installed, the same run in transformers (float32) and llama-cpp-python on the same file.

Decode steps are TinyJit replays of the one decode capture (the position is a kernel argument, see tg.llm.model):
the median over --decode steps after the step that captured it. Prefill runs in chunks of 256: each chunk
captures one block's forward (float scratch matmuls) and replays it for every block; the first run also compiles
whatever kernels the disk cache lacks, so the second is reported as warm. GB/s is what a decode step must read,
the weights it uses (all but an untied token embedding, whose rows come from the file) and the filled KV cache
rows, over the step's median time. The calling thread's Python per replay is the time from the call until the
submit returns (before the kernels finish).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from tg.llm import registry
from tg.llm.generate import Generator
from tg.llm.model import Transformer, load_model
from tg.llm.session import Session
from tg.tensor import Context, GlobalCounters

KERNEL_LINE = re.compile(r"^\*\*\* \S+\s+\d+ (\S+)\s+shape \S+\s+([\d.]+) us")


def prompt_tokens(count: int) -> list[int]:
    return [(17 * i + 5) % 40000 + 100 for i in range(count)]


def profile_step(model: Transformer, token: int, position: int) -> dict:
    """One decode step run plainly (JIT=0) under DEBUG=2: kernel count, bytes touched, time per kernel name."""
    GlobalCounters.reset()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), Context(DEBUG=2, JIT=0):
        model.forward([token], position).numpy()
    by_name: collections.Counter[str] = collections.Counter()
    for line in out.getvalue().splitlines():
        if match := KERNEL_LINE.match(line):
            by_name[match.group(1)] += float(match.group(2)) * 1e-6
    return {"kernels": GlobalCounters.kernel_count, "kernel_s": GlobalCounters.time_sum_s,
            "bytes": GlobalCounters.global_mem, "top": by_name.most_common(6)}  # fmt: skip


def bench_tg(path, prefill_tokens: int, decode_tokens: int) -> dict:
    model, _ = load_model(path, max_context=prefill_tokens + decode_tokens + 8)
    prompt = prompt_tokens(prefill_tokens)
    generator = Generator(model)
    prefill_s = []
    for _ in range(2):  # cold (compiles what the disk cache lacks), then warm
        generator.cached = []
        start = time.perf_counter()
        generator.prefill(prompt)
        prefill_s.append(time.perf_counter() - start)
    token, steps = 42, []
    for _ in range(1 + decode_tokens):  # the first step of a window is captured (scheduled in Python)
        start = time.perf_counter()
        generator._forward([token], len(generator.cached))
        steps.append(time.perf_counter() - start)
        generator.cached.append(token)
    decode_s = statistics.median(steps[1:])
    position = len(generator.cached) - 1
    untied = "output.weight" in model.weights
    weights = sum(w.nbytes() for name, w in model.weights.items() if not (untied and name == "token_embd.weight"))
    kv_bytes = sum(cache.nbytes() // cache.shape[2] for cache in model.caches) * (position + 1)  # (2, kv, rows, hd)
    host_s = []
    for _ in range(5):  # the calling thread's part of a replay: inputs, argument patches, the submit
        start = time.perf_counter()
        logits = model.forward([token], position)
        host_s.append(time.perf_counter() - start)
        logits.numpy()
    # rewrites the last position's keys/values with the same ones; the least disturbed of 3 runs (a loaded machine)
    profile = min((profile_step(model, token, position) for _ in range(3)), key=lambda p: p["kernel_s"])
    return {
        "prefill_cold_tok_s": prefill_tokens / prefill_s[0],
        "prefill_tok_s": prefill_tokens / prefill_s[1],
        "decode_tok_s": 1 / decode_s,
        "decode_s": decode_s,
        "decode_best_tok_s": 1 / min(steps[1:]),
        "decode_gb_s": (weights + kv_bytes) / decode_s / 1e9,
        "host_s": statistics.median(host_s),
        "blocks": len(model.blocks),
        "weight_mb": sum(weight.nbytes() for weight in model.weights.values()) / 1e6,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
        **profile,
    }


def print_tg(tg: dict, args: argparse.Namespace) -> None:
    print(
        f"tg: decode {tg['decode_tok_s']:.1f} tok/s ({tg['decode_gb_s']:.2f} GB/s; median of {args.decode} replayed "
        f"steps at context {args.prefill}+, best {tg['decode_best_tok_s']:.1f} tok/s), prefill {args.prefill} tokens "
        f"{tg['prefill_tok_s']:.1f} tok/s warm ({tg['prefill_cold_tok_s']:.1f} cold); {tg['weight_mb']:.0f} MB "
        f"weights, peak RSS {tg['max_rss_mb']:.0f} MB"
    )
    overhead_s = tg["decode_s"] - tg["kernel_s"]
    overhead = (
        f"so about {overhead_s * 1e3:.1f} ms go to launches (the engine thread's Python, core handoffs)"
        if overhead_s > 0
        else "less than the kernels' timed sum: on a loaded machine kernel times vary from run to run"
    )
    print(
        f"one decode step: {tg['kernels']} kernels ({tg['kernels'] / tg['blocks']:.1f} per block), "
        f"{tg['kernel_s'] * 1e3:.1f} ms in kernels (timed one by one in a plain run, JIT=0 DEBUG=2), "
        f"{tg['bytes'] / 1e6:.0f} MB of buffers; the replayed step takes "
        f"{tg['decode_s'] * 1e3:.1f} ms, {overhead}; the calling thread's Python per replay: "
        f"{tg['host_s'] * 1e3:.2f} ms"
    )
    top = ", ".join(f"{name} {seconds * 1e3:.1f} ms" for name, seconds in tg["top"])
    print(f"  kernel time by name: {top}")


def llama_cpp_model(path, n_ctx: int, threads: int = 2):
    """llama-cpp-python's Llama on `path` with `threads` threads, or None when it is not installed."""
    try:
        import llama_cpp
        from llama_cpp import Llama
    except ImportError:
        return None
    without_amx = llama_cpp.llama_model_default_params()
    # llama.cpp's AMX matmul (its "extra buffer type", chosen on CPUs with AMX) crashed on this Q4_1 file
    # (llama-cpp-python 0.3.36, Xeon with AMX-INT8: SIGSEGV in ggml_backend_amx_mul_mat); without it llama.cpp uses
    # its AVX-512 VNNI dot products, as on any CPU without AMX
    without_amx.use_extra_bufts = False
    llama_cpp.llama.llama_cpp.llama_model_default_params = lambda: without_amx
    return Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False)


def bench_llama_cpp(path, prefill_tokens: int, decode_tokens: int) -> str:
    llm = llama_cpp_model(path, prefill_tokens + decode_tokens + 8)
    if llm is None:
        return "llama-cpp-python: not installed"
    prompt = [(17 * i + 5) % 40000 + 100 for i in range(prefill_tokens)]
    start = time.perf_counter()
    llm.eval(prompt)
    prefill = prefill_tokens / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(decode_tokens):
        llm.eval([42])
    decode = decode_tokens / (time.perf_counter() - start)
    return f"llama-cpp-python: decode {decode:.1f} tok/s, prefill {prefill:.1f} tok/s"


def bench_decode_at(path, positions: list[int], steps: int, kv_cache: str, matvecs: list[str]) -> None:
    """Decode tok/s at each of `positions` (the KV cache filled up to it), tg (one model per matvec type) and
    llama.cpp (two threads) taking turns step by step (the load changes all alike): median of `steps` steps each, at
    positions p+1 .. p+8."""
    context = max(positions) + 16
    models = {f"tg {matvec}": load_model(path, max_context=context, kv_cache=kv_cache, matvec=matvec)[0]
              for matvec in matvecs}  # fmt: skip
    for model in models.values():
        model.capture_store = None  # (capture in this process: a stored capture of another build would be replayed)
    llm = llama_cpp_model(path, context)
    prompt = prompt_tokens(context)
    filled = [0]

    def llama_step(position: int) -> None:
        assert llm is not None
        if position > filled[0]:  # llama.cpp needs every earlier position's keys and values
            llm.n_tokens = filled[0]
            llm.eval(prompt[filled[0] : position])
        llm.n_tokens, filled[0] = position, position + 1  # (n_tokens: where llama-cpp-python's eval writes)
        llm.eval([42])

    runners: dict[str, Callable[[int], object]] = {
        name: lambda position, model=model: model.forward([42], position).numpy() for name, model in models.items()
    }
    if llm is not None:
        runners["llama.cpp"] = llama_step
    for position in positions:
        for run in runners.values():
            run(position)  # tg captures its step at the first position; llama.cpp fills its cache
        times: dict[str, list[float]] = {name: [] for name in runners}
        for i in range(steps):
            for name, run in sorted(runners.items(), reverse=i % 2 == 1):
                start = time.perf_counter()
                run(position + 1 + i % 8)
                times[name].append(time.perf_counter() - start)
        tok_s = {name: 1 / statistics.median(seconds) for name, seconds in times.items()}
        for name in models:
            versus = ""  # (without llama-cpp-python, tg's figures alone)
            if "llama.cpp" in tok_s:
                versus = f", llama.cpp {tok_s['llama.cpp']:.1f} (tg/llama.cpp {tok_s[name] / tok_s['llama.cpp']:.2f})"
            print(f"decode at position {position} ({kv_cache} KV cache): {name} {tok_s[name]:.1f} tok/s"
                  f"{versus}, load {os.getloadavg()[0]:.2f}")  # fmt: skip


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


FIRST_ANSWER_QUESTION = "What is the capital of France?"


def first_answer_s(cache_dir: str) -> float:
    """Seconds for a fresh `tg-llm` process to answer FIRST_ANSWER_QUESTION (16 greedy tokens at most), piped."""
    env = {**os.environ, "TG_CACHE_DIR": cache_dir}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tg.llm", "chat", "--max-tokens", "16"], input=FIRST_ANSWER_QUESTION,
                          capture_output=True, text=True, env=env, check=True)  # fmt: skip
    elapsed = time.perf_counter() - start
    assert done.stdout.strip(), done.stderr
    return elapsed


def bench_first_answer(runs: int) -> None:
    """A fresh process's first answer, median of `runs`: cold (an empty cache directory every run), then warm (the
    cache the cold runs filled: compiled kernels and, with tg.llm.capture_store, the captured steps)."""
    with tempfile.TemporaryDirectory() as folder:
        cold = []
        for _ in range(runs):
            shutil.rmtree(folder)
            os.mkdir(folder)
            cold.append(first_answer_s(folder))
        warm = [first_answer_s(folder) for _ in range(runs)]
    cold_s, warm_s = statistics.median(cold), statistics.median(warm)
    print(f"first answer in a fresh process, median of {runs}: cold {cold_s:.2f} s, warm {warm_s:.2f} s "
          f"(warm/cold {warm_s / cold_s:.2f}); runs cold {[round(t, 2) for t in cold]}, "
          f"warm {[round(t, 2) for t in warm]}")  # fmt: skip


TTFT_QUESTION = "What is the capital of France and how many people live there?"  # 43 tokens in the template


def ttft_tg(session: Session, question: str) -> float:
    """Seconds from a new conversation's question to its first token: template, tokenizer, prefill, sampling."""
    session.clear()
    session.generator.cached = []  # a new conversation: no prefix of the last one is reused
    start = time.perf_counter()
    next(session.generator.generate(session.prompt_tokens(question), 1))
    return time.perf_counter() - start


def llama_cpp_ttft(path) -> dict[int, Callable[[list[int]], float]]:
    """{threads: a function timing llama.cpp's first token (greedy, on a cleared cache) after the token ids}."""

    def timer(llm) -> Callable[[list[int]], float]:
        def first_token_s(tokens: list[int]) -> float:
            llm.reset()
            start = time.perf_counter()
            llm.eval(tokens)
            llm.sample(temp=0.0)
            return time.perf_counter() - start

        return first_token_s

    models = {threads: llama_cpp_model(path, 512, threads) for threads in (1, 2)}
    return {threads: timer(llm) for threads, llm in models.items() if llm is not None}


def bench_ttft(runs: int) -> None:
    """Time to first token of TTFT_QUESTION's chat prompt, warm (kernels compiled, steps captured, two prompts
    answered first), median of `runs`, interleaved with llama.cpp's on the same token ids when it is installed."""
    path = registry.resolve(registry.EMBEDDED_NAME)
    start = time.perf_counter()
    session = Session.load(path, max_context=2048)
    tokens = session.prompt_tokens(TTFT_QUESTION)
    first = ttft_tg(session, TTFT_QUESTION)
    print(f"tg: load {time.perf_counter() - start - first:.2f} s, first prompt ({len(tokens)} tokens) {first:.2f} s")
    others = llama_cpp_ttft(path)
    times: dict[str, list[float]] = {"tg": [], **{f"llama.cpp {n} thread(s)": [] for n in others}}
    for round_ in range(runs + 1):  # round 0 warms up and is not counted
        seconds = {"tg": ttft_tg(session, TTFT_QUESTION)}
        seconds.update({f"llama.cpp {n} thread(s)": first_token_s(tokens) for n, first_token_s in others.items()})
        for name, value in seconds.items():
            if round_:
                times[name].append(value)
    for name, values in times.items():
        print(f"{name}: time to first token of a {len(tokens)}-token chat prompt, warm: median "
              f"{statistics.median(values) * 1e3:.0f} ms of {runs} (best {min(values) * 1e3:.0f} ms)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefill", type=int, default=256)
    parser.add_argument("--decode", type=int, default=32)
    first_answer_help = "only time a fresh process's first answer, cold and warm cache, median of RUNS"
    parser.add_argument("--first-answer", type=int, default=0, metavar="RUNS", help=first_answer_help)
    positions_help = "also time decode at these positions (comma-separated), tg and llama.cpp taking turns"
    parser.add_argument("--positions", default="", help=positions_help)
    parser.add_argument("--kv-cache", default="f32", help="the KV cache type for --positions (f32, f16)")
    matvec_help = "the matvec types for --positions (comma-separated: float,int8 times both in turns)"
    parser.add_argument("--matvec", default="float", help=matvec_help)
    ttft_help = "only time the first token of a 43-token chat prompt in a warm process, median of RUNS"
    parser.add_argument("--ttft", type=int, default=0, metavar="RUNS", help=ttft_help)
    args = parser.parse_args()
    load = os.getloadavg()
    if args.ttft:
        bench_ttft(args.ttft)
        print(f"load average before/after: {load[0]:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        return
    if args.first_answer:
        bench_first_answer(args.first_answer)
        print(f"load average before/after: {load[0]:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        return
    path = registry.resolve(registry.EMBEDDED_NAME)
    print_tg(bench_tg(path, args.prefill, args.decode), args)
    print(bench_llama_cpp(path, args.prefill, args.decode))
    print(bench_transformers(path, args.decode))
    if args.positions:
        positions = [int(p) for p in args.positions.split(",")]
        bench_decode_at(path, positions, args.decode, args.kv_cache, args.matvec.split(","))
    print(f"load average before/after: {load[0]:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("targets (issue 16): decode >= 60 tok/s, prefill of 256 >= 300 tok/s, on 2 cores")


if __name__ == "__main__":
    main()
