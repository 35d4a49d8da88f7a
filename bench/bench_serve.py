"""tg-llm serve under concurrent streaming clients, on the embedded SmolLM2-135M-Instruct.

Run: `CC=gcc uv run python bench/bench_serve.py [--clients 1,4,8] [--tokens 16] [--unbatched]`. For each client
count, every client streams one chat completion (each its own question, greedy, `max_tokens` tokens) against an
in-process server on a loopback port; the table gives aggregate tok/s (all completion tokens / wall time), time to
first token p50/p95, errors, and the speed-up over one client. A warm-up round with the same requests runs first,
so kernels compiled for new shapes are not timed. `--unbatched` adds rows where the server decodes the requests
one at a time (interleaved, no batched forward): the ratio shows what batching gives.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import httpx

from tg.llm import registry
from tg.llm.serve.server import ServeOptions, ThreadedServer, load_state

QUESTIONS = [
    "What is the capital of France?",
    "Name a primary colour.",
    "How many legs does a spider have?",
    "What is 7 times 6?",
    "Which planet is the largest?",
    "What do bees make?",
    "Say hello in Spanish.",
    "What is the boiling point of water?",
]


async def one_client(client: httpx.AsyncClient, url: str, question: str, tokens: int) -> dict:
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start, first, text, usage = time.perf_counter(), None, "", None
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                return {"error": f"{response.status_code}"}
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return {"error": chunk["error"]["message"]}
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk["choices"]:
                    if choice["delta"].get("content"):
                        first = first or time.perf_counter()
                        text += choice["delta"]["content"]
    except httpx.HTTPError as error:
        return {"error": repr(error)}
    return {"ttft": (first or time.perf_counter()) - start, "tokens": usage["completion_tokens"], "text": text}


async def round_of(url: str, clients: int, tokens: int) -> tuple[float, list[dict]]:
    async with httpx.AsyncClient(timeout=600) as client:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(one_client(client, url, QUESTIONS[i % len(QUESTIONS)], tokens) for i in range(clients))
        )
        return time.perf_counter() - start, list(results)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(clients: int, tokens: int, batched: bool, max_context: int) -> dict:
    path = registry.resolve(registry.EMBEDDED_NAME)
    options = ServeOptions(max_concurrency=clients, max_queue=clients, batched=batched)
    server = ThreadedServer(load_state(path, max_context, options, aliases={"bench"}))
    try:
        asyncio.run(round_of(server.url, clients, tokens))  # warm-up: compiles this round's kernels
        wall, results = asyncio.run(round_of(server.url, clients, tokens))
    finally:
        server.close()
    good = [r for r in results if "error" not in r]
    ttfts = [r["ttft"] for r in good]
    return {
        "clients": clients,
        "batched": batched,
        "wall_s": wall,
        "tokens": sum(r["tokens"] for r in good),
        "tok_s": sum(r["tokens"] for r in good) / wall,
        "ttft_p50": percentile(ttfts, 0.5) if ttfts else float("nan"),
        "ttft_p95": percentile(ttfts, 0.95) if ttfts else float("nan"),
        "errors": len(results) - len(good),
        "answers": {QUESTIONS[i % len(QUESTIONS)]: r.get("text") for i, r in enumerate(results)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,4,8")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--max-context", type=int, default=256)
    parser.add_argument("--unbatched", action="store_true", help="also measure without batched decode")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    plan = [(c, True) for c in counts] + ([(c, False) for c in counts if c > 1] if args.unbatched else [])
    print(f"tg-llm serve, {registry.EMBEDDED_NAME}, {args.tokens} tokens per client, load {os.getloadavg()[0]:.2f}")
    print(
        f"{'clients':>7} {'decode':>10} {'tok/s':>8} {'x 1 client':>10} {'TTFT p50':>9} {'TTFT p95':>9} {'errors':>6}"
    )
    base, single = None, {}
    for clients, batched in plan:  # one row at a time: a slow machine still shows what it measured
        row = measure(clients, args.tokens, batched, args.max_context)
        base = base or row["tok_s"]
        single = single or row["answers"]
        differing = sum(1 for q, a in row["answers"].items() if q in single and a != single[q])
        mode = "batched" if batched else "one-by-one"
        print(
            f"{clients:>7} {mode:>10} {row['tok_s']:>8.2f} {row['tok_s'] / base:>10.2f} {row['ttft_p50']:>8.2f}s "
            f"{row['ttft_p95']:>8.2f}s {row['errors']:>6}   (load {os.getloadavg()[0]:.2f}"
            + (f", {differing} answers differ from 1 client)" if differing else ")"),
            flush=True,
        )


if __name__ == "__main__":
    main()
