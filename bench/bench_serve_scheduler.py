"""tg-llm serve's scheduler: how long running streams stall while a long prompt arrives, and tokens/s.

Run: `CC=gcc uv run python bench/bench_serve_scheduler.py [--streams 8] [--prompt 4000] [--tokens 200]`. The model is a
tiny synthetic GGUF written by the tests' helper (tests/llm/llm_fixtures.write_model, random weights, byte vocabulary,
context 4096), served on a loopback port to clients in a process of their own, warmed up as the server is by default
(`--warmup-context 512`: the first 512 positions' KV windows and the widest one); an untimed first round then runs every
step shape the measured rounds use (windows past the warm-up replay the widest window's capture; their own are captured
when the server is idle, between rounds). `--streams` clients stream greedy completions; once each has its first tokens,
one more client sends a `--prompt`-token prompt. The table gives the inter-token gaps the running streams saw while that
prompt was prefilled (p50, p99, max, pooled over `--rounds` rounds), with the scheduler's chunked prefill (32 tokens
between decode steps) and, as the peer measured in the same run, with the whole prompt prefilled before the next decode
step (chunk = the context). Then aggregate tokens/s at each of `--clients` (default 1, 8, 32; clients past
`--streams` + 1 wait in the server's queue, as they would in use). Ratios, not absolute times, are what carries across
machines.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "llm"))
from llm_fixtures import write_model  # noqa: E402

from tg.llm.serve.json_constraint import is_text  # noqa: E402
from tg.llm.serve.server import ServeOptions, ThreadedServer, load_state  # noqa: E402

CONTEXT = 4096


PROMPTS = itertools.count()
# banned: the special tokens (every stream runs to its max_tokens) and the tokens that are not whole UTF-8 text. The
# random model likes bytes of 4-byte characters, and a stream holds such bytes back until the character is whole: 6 of
# 8 streams then showed text only every 4 decode steps, so a "gap" between visible tokens was up to 4 steps and the
# p99 gap measured that, not the scheduler. Banned, every decode step shows each stream's token.
END_BIAS: dict[str, float] = {}


async def stream(client: httpx.AsyncClient, url: str, prompt: str, tokens: int, times: list[float]) -> None:
    """One streamed greedy completion; appends the arrival time of every token to `times`."""
    body = {"model": "bench", "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
            "logit_bias": END_BIAS}  # fmt: skip
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(chunk["error"]["message"])
                if chunk["choices"] and chunk["choices"][0]["text"]:
                    times.append(time.perf_counter())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def stall_round(url: str, streams: int, prompt_tokens: int, tokens: int) -> dict[str, list[float] | float]:
    """The running streams' gaps between tokens while the long prompt was being prefilled."""
    times: list[list[float]] = [[] for _ in range(streams)]
    async with httpx.AsyncClient(timeout=900) as client:
        runs = [asyncio.create_task(stream(client, url, f"stream {i} says", tokens, times[i])) for i in range(streams)]
        while any(len(t) < 3 for t in times):
            await asyncio.sleep(0.01)
            if any(run.done() for run in runs):
                raise RuntimeError("a stream ended before the long prompt came: raise --tokens")
        long_times: list[float] = []
        sent = time.perf_counter()
        # a prompt no slot holds a prefix of (a cached one would not be prefilled again)
        opening = f"prompt {next(PROMPTS)}: "
        await stream(client, url, opening + "x " * ((prompt_tokens - len(opening)) // 2), 1, long_times)
        answered = time.perf_counter()
        if any(run.done() for run in runs):
            raise RuntimeError("a stream ended while the long prompt was prefilled: raise --tokens")
        await asyncio.gather(*runs)
    gaps = []
    for arrivals in times:  # the gaps from the last token before the prompt came to the first after its answer
        before = [t for t in arrivals if t < sent][-1:]
        inside = [t for t in arrivals if sent <= t <= answered]
        after = [t for t in arrivals if t > answered][:1]
        spanned = before + inside + after
        gaps += [b - a for a, b in zip(spanned, spanned[1:], strict=False)]
    return {"gaps": gaps, "prefill": answered - sent}


async def throughput(url: str, clients: int, tokens: int) -> float:
    times: list[list[float]] = [[] for _ in range(clients)]
    async with httpx.AsyncClient(timeout=900) as client:
        start = time.perf_counter()
        await asyncio.gather(*(stream(client, url, f"client {i} says", tokens, times[i]) for i in range(clients)))
        return sum(len(t) for t in times) / (time.perf_counter() - start)


def ban(banned: list[int]) -> None:
    END_BIAS.update({str(token): -100 for token in banned})


def run_stall_round(url: str, streams: int, prompt_tokens: int, tokens: int) -> dict[str, list[float] | float]:
    return asyncio.run(stall_round(url, streams, prompt_tokens, tokens))


def run_throughput(url: str, clients: int, tokens: int) -> float:
    return asyncio.run(throughput(url, clients, tokens))


def pooled(rounds: list[dict[str, list[float] | float]]) -> dict[str, float]:
    """The gaps of all rounds together, and the mean time the long prompt took to be answered."""
    gaps = [gap for row in rounds for gap in row["gaps"]]  # type: ignore[union-attr]
    return {
        "p50": percentile(gaps, 0.5),
        "p99": percentile(gaps, 0.99),
        "max": max(gaps),
        "count": len(gaps),
        "prefill": sum(row["prefill"] for row in rounds) / len(rounds),  # type: ignore[misc]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=4000, help="tokens in the long prompt")
    parser.add_argument("--tokens", type=int, default=200, help="tokens each running stream asks for")
    parser.add_argument("--context", type=int, default=CONTEXT)
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per prefill policy")
    parser.add_argument("--warmup-context", type=int, default=512, help="positions the warm-up covers (0: none)")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts for the tokens/s rows")
    args = parser.parse_args()
    client_counts = [int(count) for count in args.clients.split(",")]
    context = args.context
    policies = {"chunked (32 tokens)": 32, "whole prompt (peer)": context}
    with tempfile.TemporaryDirectory() as folder:
        path = write_model(Path(folder) / "bench.gguf", "llama", "F32", seed=0, dim=128, context=context)
        options = ServeOptions(max_concurrency=args.streams + 1, max_queue=max(4, *client_counts),
                               warmup=args.warmup_context > 0,
                               warmup_context=args.warmup_context)  # fmt: skip
        server = ThreadedServer(load_state(path, context, options, aliases={"bench"}))
        engine = server.state.engine
        warming = time.perf_counter()
        assert engine.ready.wait(3600), engine.warmup_error
        warm_up = time.perf_counter() - warming
        tokenizer = engine.tokenizer
        partial = [token for token in range(len(tokenizer.tokens)) if not is_text(tokenizer.token_bytes(token))]
        banned = sorted(set(tokenizer.special_ids) | set(partial))
        # the clients run in a process of their own: in this one they would compete with the server's event loop
        # and scheduler thread for the GIL, and their delays would count as the scheduler's
        clients = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=ban,
                                      initargs=(banned,))  # fmt: skip
        try:
            started = time.perf_counter()
            # untimed: every step these rounds use is captured here (the policies run the same step shapes)
            clients.submit(run_stall_round, server.url, args.streams, args.prompt, args.tokens).result()
            clients.submit(run_throughput, server.url, 1, args.tokens).result()
            took = time.perf_counter() - started
            runner = engine.runner
            print(f"tg-llm serve scheduler, tiny synthetic llama (dim 128, 2 blocks, F32), context {context}, "
                  f"warm-up {warm_up:.0f}s ({engine.warm['total']} captures), untimed first round {took:.0f}s, "
                  f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
            print(f"{args.streams} streams running, then one {args.prompt}-token prompt ({args.rounds} rounds each):")
            print(f"{'prefill':>22} {'gap p50':>9} {'gap p99':>9} {'gap max':>9} {'prompt in':>10} {'gaps':>5}")
            rounds: dict[str, list] = {name: [] for name in policies}
            for _ in range(args.rounds):  # alternated, so a change in the machine's load hits both
                for name, chunk in policies.items():
                    engine.prefill_chunk = chunk
                    measured = clients.submit(run_stall_round, server.url, args.streams, args.prompt, args.tokens)
                    rounds[name].append(measured.result())
            rows = {name: pooled(measured) for name, measured in rounds.items()}
            for name, row in rows.items():
                load = os.getloadavg()[0]
                print(f"{name:>22} {row['p50'] * 1e3:>7.1f}ms {row['p99'] * 1e3:>7.1f}ms {row['max'] * 1e3:>7.1f}ms "
                      f"{row['prefill']:>9.2f}s {row['count']:>5}   (load {load:.2f})", flush=True)  # fmt: skip
            chunked, whole = rows["chunked (32 tokens)"], rows["whole prompt (peer)"]
            print(f"p99 gap, whole / chunked: {whole['p99'] / chunked['p99']:.1f}x; max gap: "
                  f"{whole['max'] / chunked['max']:.1f}x")  # fmt: skip
            engine.prefill_chunk = 32
            for count in client_counts:
                rate = clients.submit(run_throughput, server.url, count, args.tokens).result()
                print(f"tokens/s at {count} clients: {rate:.1f}   (load {os.getloadavg()[0]:.2f})", flush=True)
            print(f"captures after the warm-up: {runner.inline_captures} that a step waited for, "
                  f"{len(runner.deferred_made)} queued ones made while no request ran; {runner.covered_steps} steps "
                  f"replayed a wider window's capture; {len(runner.steps)} captures kept")  # fmt: skip
        finally:
            clients.shutdown()
            server.close()


if __name__ == "__main__":
    main()
