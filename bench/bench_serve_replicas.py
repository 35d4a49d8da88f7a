"""tg-llm serve --replicas: aggregate throughput of 1 vs N Ray Serve replicas under concurrent streaming clients.

Run: `CC=gcc uv run --extra cluster python bench/bench_serve_replicas.py [--replicas 1,2] [--clients 8]
[--tokens 16]`, on the embedded SmolLM2-135M-Instruct. For each replica count the model is served by that many
replicas on a local Ray cluster (one CPU each), a warm-up round compiles the kernels, then every client streams one
chat completion (bench_serve.py's clients and questions); the table gives aggregate tok/s and its ratio to the first
row, time to first token p50, errors, and whether the answers equal the first row's (greedy: they must).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from bench_serve import QUESTIONS, percentile, round_of  # noqa: E402

from tg.llm import registry  # noqa: E402
from tg.llm.serve.server import ServeOptions  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(replicas: int, clients: int, tokens: int, max_context: int) -> dict:
    from tg.llm import serve_cluster

    path = registry.resolve(registry.EMBEDDED_NAME)
    options = ServeOptions(port=free_port(), max_concurrency=clients, max_queue=clients)
    url = serve_cluster.serve_replicas(path, max_context, options, {"bench"}, replicas, blocking=False)
    try:
        for _ in range(replicas):  # warm-up: each replica compiles this round's kernels (the proxy spreads rounds)
            asyncio.run(round_of(url, clients, tokens))
        wall, results = asyncio.run(round_of(url, clients, tokens))
    finally:
        serve_cluster.stop()
    good = [r for r in results if "error" not in r]
    return {
        "tok_s": sum(r["tokens"] for r in good) / wall,
        "ttft_p50": percentile([r["ttft"] for r in good], 0.5) if good else float("nan"),
        "errors": len(results) - len(good),
        "answers": {QUESTIONS[i % len(QUESTIONS)]: r.get("text") for i, r in enumerate(results)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="1,2")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--max-context", type=int, default=256)
    args = parser.parse_args()
    counts = [int(c) for c in args.replicas.split(",")]
    import ray

    ray.init(num_cpus=max(counts), include_dashboard=False, log_to_driver=False)
    print(f"tg-llm serve --replicas, {registry.EMBEDDED_NAME}, {args.clients} clients x {args.tokens} tokens, "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    base, first_answers = None, None
    for replicas in counts:
        row = measure(replicas, args.clients, args.tokens, args.max_context)
        base = base or row["tok_s"]
        first_answers = first_answers or row["answers"]
        same = row["answers"] == first_answers
        print(f"{replicas:>2} replicas: {row['tok_s']:7.2f} tok/s ({row['tok_s'] / base:.2f}x), TTFT p50 "
              f"{row['ttft_p50']:.2f} s, {row['errors']} errors, answers {'equal' if same else 'DIFFER'} "
              f"(load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
    ray.shutdown()


if __name__ == "__main__":
    main()
