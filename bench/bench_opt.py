"""Kernel optimization benchmark: matmul, conv2d, a full sum and an elementwise chain on the CPU, float32, with
the peers measured in the same run: numpy (its BLAS, default threads; conv2d as im2col + tensordot), torch (CPU
build, conv only) and the tinygrad release from PyPI (DEV=CPU, no BEAM), all timed in turns in one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE uv run --inexact python bench/bench_opt.py [--repeats 5] [--matmuls]

When gcc and clang are both installed it runs once per compiler (a child process each, see bench/compilers.py)
and prints the ratios side by side; `--cc gcc` measures one compiler with the full table; `--only "sum 16M"`
(repeatable) times just that row.

tg runs the workloads as Tensor ops with the hand-coded heuristics (NOOPT=1 shows the unoptimized kernels,
DEBUG=3 the opts each kernel got). Every time is the median of several repeats; each ratio is
peer_time / tg_time (above 1: tg is faster). The machine is shared: the load average is printed first.

Matmuls (issue 38): square 256 to 4096, the skinny GPT-2 shapes batch x 768 x 3072 (batch 1, 8, 128), and
float16 operands accumulated in float32 (`a.matmul(b, dtype=float32)`; its peer is numpy's float32 matmul of the
same values, converted beforehand: numpy has no float16 BLAS). Both operands are realized tensors, so tg's packed
copies of them are kept between calls (tg.codegen.schedule.layout), as numpy's operands need no copy either. A
sample of a small product is several calls back to back (`calls_per_sample`), after untimed calls of the same
library for LEAD_IN_SECONDS, so that waking the worker threads of tg and of the BLAS, and the caches of the cores, after
the pause between samples is not what is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from compilers import installed_compilers, side_by_side

SUM_SIZE = 1 << 24
CONV = (8, 64, 56, 3)  # batch, channels in = out, height = width, window; padding 1
SQUARE_SIZES = (256, 512, 1024, 2048, 4096)
SKINNY_BATCHES = (1, 8, 128)  # batch x 768 x 3072: a GPT-2 MLP's first projection at decode, small and prefill batches
HALF_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (128, 768, 3072))  # float16 in, float32 accumulated
MIN_SAMPLE_FLOP = 1 << 28  # a timed sample of a matmul does at least this much work (calls back to back)


def matmul_shapes() -> dict[str, tuple[int, int, int]]:
    """The float32 matmul rows: name -> (n, k, m) for an (n, k) @ (k, m) product."""
    shapes = {f"matmul {n}": (n, n, n) for n in SQUARE_SIZES}
    shapes.update({f"matmul {b}x768x3072": (b, 768, 3072) for b in SKINNY_BATCHES})
    return shapes


def half_shapes() -> dict[str, tuple[int, int, int]]:
    """The float16-in, float32-accumulate matmul rows."""
    return {f"matmul f16 {'x'.join(map(str, shape)) if len(set(shape)) > 1 else shape[0]}": shape
            for shape in HALF_SHAPES}  # fmt: skip


def operand_keys(name: str) -> tuple[str, str]:
    """The inputs() keys of a matmul row's operands (square sizes keep the names other benches use: a1024, b1024)."""
    shape = {**matmul_shapes(), **half_shapes()}[name]
    suffix = str(shape[0]) if len(set(shape)) == 1 else "x".join(map(str, shape))
    return f"a{suffix}", f"b{suffix}"


def calls_per_sample(name: str) -> int:
    """Calls timed back to back in one sample of row `name`: enough for MIN_SAMPLE_FLOP (1 for the other rows)."""
    flop = FLOPS.get(name)
    return max(1, MIN_SAMPLE_FLOP // flop) if flop else 1


# ---------------------------------------------------------------------------------------------------- tg workloads


Workloads = dict[str, Callable[[], object]]


def tg_workloads(data: dict[str, np.ndarray]) -> Workloads:
    """Each workload as a function that runs it to completion (checked against numpy first where cheap)."""
    from tg.codegen.dtype import dtypes
    from tg.hcq import Device
    from tg.tensor import Tensor

    def timed(build: Callable[[], Tensor]) -> Callable[[], object]:
        def run() -> Tensor:
            result = build().realize()
            Device["CPU"].synchronize()
            return result

        return run

    results: Workloads = {}
    for name in matmul_shapes():
        a, b = (Tensor(data[key]).realize() for key in operand_keys(name))
        results[name] = timed(lambda a=a, b=b: a @ b)
    for name in half_shapes():
        a, b = (Tensor(data[key].astype(np.float16)).realize() for key in operand_keys(name))
        results[name] = timed(lambda a=a, b=b: a.matmul(b, dtype=dtypes.float32))
    check_matmuls(results, data)
    x, w = Tensor(data["conv_x"]).realize(), Tensor(data["conv_w"]).realize()
    results["conv2d"] = timed(lambda: x.conv2d(w, padding=1))
    v = Tensor(data["v"]).realize()
    np.testing.assert_allclose(v.sum().numpy(), data["v"].sum(dtype=np.float64), rtol=1e-3, atol=1e-2)
    results["sum 16M"] = timed(lambda: v.sum())
    p, q, r = (Tensor(data[k]).realize() for k in ("p", "q", "r"))
    results["chain 16M"] = timed(lambda: (p * q + r).maximum(0))
    return results


def check_matmuls(results: Workloads, data: dict[str, np.ndarray]) -> None:
    """Every matmul row's result against numpy's float32 product (float16 rows: of the float16 values)."""
    for name in (*matmul_shapes(), *half_shapes()):
        a, b = (data[key] for key in operand_keys(name))
        if name in half_shapes():
            a, b = (x.astype(np.float16).astype(np.float32) for x in (a, b))
        found = results[name]().numpy()  # type: ignore[attr-defined]
        np.testing.assert_allclose(found, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(a.shape[1]), err_msg=name)


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    data = {}
    for name in (*matmul_shapes(), *half_shapes()):
        (n, k, m), (a, b) = {**matmul_shapes(), **half_shapes()}[name], operand_keys(name)
        if a not in data:
            data[a], data[b] = rng.standard_normal((n, k), np.float32), rng.standard_normal((k, m), np.float32)
    batch, channels, size, window = CONV
    data["conv_x"] = rng.standard_normal((batch, channels, size, size), np.float32)
    data["conv_w"] = rng.standard_normal((channels, channels, window, window), np.float32)
    for name in ("v", "p", "q", "r"):
        data[name] = rng.standard_normal(SUM_SIZE, np.float32)
    return data


# ---------------------------------------------------------------------------------------------------- peers


def numpy_im2col_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """conv2d with padding 1 the way numpy users write it: windows (im2col as a strided view) times the weights."""
    from numpy.lib.stride_tricks import sliding_window_view

    window = w.shape[2]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (window, window), axis=(2, 3))  # (batch, channels, h, w, kh, kw)
    return np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def numpy_workloads(data: dict[str, np.ndarray]) -> Workloads:
    results: Workloads = {}
    results["conv2d"] = lambda: numpy_im2col_conv(data["conv_x"], data["conv_w"])
    for name in matmul_shapes():
        a, b = (data[key] for key in operand_keys(name))
        results[name] = lambda a=a, b=b: a @ b
    for name in half_shapes():
        a, b = (data[key].astype(np.float16).astype(np.float32) for key in operand_keys(name))
        results[name] = lambda a=a, b=b: a @ b
    v, p, q, r = data["v"], data["p"], data["q"], data["r"]
    results["sum 16M"] = lambda: v.sum()
    results["chain 16M"] = lambda: np.maximum(p * q + r, 0)
    return results


def torch_workloads(data: dict[str, np.ndarray]) -> Workloads | str:
    try:
        import torch
    except ImportError:
        return "torch is not installed (CONTRIBUTING.md: its CPU wheel, for benchmarks only): no torch column"
    x, w = torch.from_numpy(data["conv_x"]), torch.from_numpy(data["conv_w"])

    def conv() -> object:
        with torch.no_grad():
            return torch.nn.functional.conv2d(x, w, padding=1)

    print(f"  torch {torch.__version__}: {torch.get_num_threads()} threads (its default)")
    return {"conv2d": conv}


SETTLE_SECONDS = 0.3  # BLAS and OpenMP worker threads spin for a while after a call; let them go idle first
# Untimed calls of a run between the pause and its sample, for at least LEAD_IN_SECONDS (one call at least). A sample
# that starts right after the pause times this 2-core VM waking up more than the library: a 256^3 product right after
# 0.3 s of sleep took tg 1.34 ms against 0.40 warm, numpy 0.43 against 0.14-0.18, and pure Python (building tg's graph)
# 6x its warm time. numpy is warm again after one call; tg's calls, whose core threads sleep between calls, only after
# some 30 ms of them (512^3, 60 calls after each pause, median of 7 pauses: 2.1, 1.5, 1.4, 1.4, 2.1 ms ... 1.9 ms at
# the 20th call, 1.19-1.23 from the 30th on; numpy 1.47, then 0.92-0.97 ms). The rows compare warm calls, as a loop of
# matmuls makes them; bench_blocks.py and bench_call_overhead.py lead in with untimed calls too.
LEAD_IN_SECONDS = 0.05


def lead_in(run: Callable[[], object]) -> None:
    """Call `run` untimed until LEAD_IN_SECONDS have passed (once at least)."""
    start = time.perf_counter()
    run()
    while time.perf_counter() - start < LEAD_IN_SECONDS:
        run()


def alternating_medians(runs: list[Callable[[], object] | None], repeats: int, calls: int = 1) -> list[float]:
    """Median time of one call of each run (None: not available, NaN), timed in turns so that a change in the
    machine's load hits all alike. Each sample (`calls` calls back to back) starts after a short pause, so one
    library's spinning threads do not steal the cores from the next, and untimed calls of its run (`lead_in`)."""
    present = [run for run in runs if run is not None]
    for run in present:
        run()  # warm-up: compile, allocate
    times: dict[int, list[float]] = {id(run): [] for run in present}
    for _ in range(repeats):
        for run in present:
            time.sleep(SETTLE_SECONDS)
            lead_in(run)
            start = time.perf_counter()
            for _ in range(calls):
                run()
            times[id(run)].append((time.perf_counter() - start) / calls)
    return [statistics.median(times[id(run)]) if run is not None else float("nan") for run in runs]


def find_clang() -> str | None:
    """A clang on PATH: tinygrad's CPU backend compiles with $CC (else `clang`) and clang-only flags (--target)."""
    import shutil

    from tg.codegen.compiler.c import CLANG_CANDIDATES

    return next((path for name in CLANG_CANDIDATES if (path := shutil.which(name))), None)


def tinygrad_workloads(data: dict[str, np.ndarray], beam: int = 0) -> Workloads | str:
    """The same workloads on the tinygrad release (DEV=CPU, BEAM=beam: its search runs at the warm-up call), in this
    process so that they are timed in turns with tg's."""
    os.environ["DEV"], os.environ["BEAM"] = "CPU", str(beam)
    try:
        from tinygrad import Device, Tensor
    except ImportError:
        return "tinygrad is not installed (uv sync --group bench --inexact): no tinygrad column"
    clang = find_clang()
    if clang is None:
        return "no clang on PATH (tinygrad's CPU backend passes clang-only flags): no tinygrad column"
    from tg.hcq import Device as TgDevice

    TgDevice["CPU"].compiler  # noqa: B018  (tg chooses its compiler now, from the CC it was given)
    # from here on CC names tinygrad's clang: its compile workers are processes, restarted every few tasks, that
    # read CC when they start (tg's BEAM timing process inherits it too, but it only loads binaries)
    os.environ["CC"] = clang

    def timed(build: Callable[[], Tensor]) -> Callable[[], object]:
        def run() -> None:
            build().realize()
            Device[Device.DEFAULT].synchronize()

        return run

    results: Workloads = {}
    for n in (512, 1024, 2048):
        a, b = Tensor(data[f"a{n}"]).realize(), Tensor(data[f"b{n}"]).realize()
        results[f"matmul {n}"] = timed(lambda a=a, b=b: a @ b)
    x, w = Tensor(data["conv_x"]).realize(), Tensor(data["conv_w"]).realize()
    results["conv2d"] = timed(lambda: x.conv2d(w, padding=1))
    v = Tensor(data["v"]).realize()
    results["sum 16M"] = timed(lambda: v.sum())
    p, q, r = (Tensor(data[k]).realize() for k in ("p", "q", "r"))
    results["chain 16M"] = timed(lambda: (p * q + r).maximum(0))
    return results


# ---------------------------------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Row:
    name: str
    peer: str
    target: float | None  # the least peer_time / tg_time asked for


ROWS = [  # targets: issue 38's bar for matmuls, those of issue 12 (numpy peers), the earlier one for torch's conv
    *(Row(name, "numpy", 1.0) for name in (*matmul_shapes(), *half_shapes())),
    Row("conv2d", "numpy", 2.0),
    Row("conv2d", "torch", 0.3),
    Row("sum 16M", "numpy", 1.0),
    Row("chain 16M", "numpy", 3.0),
]
FLOPS = {
    **{name: 2 * n * k * m for name, (n, k, m) in {**matmul_shapes(), **half_shapes()}.items()},
    "conv2d": 2 * CONV[0] * CONV[1] ** 2 * CONV[3] ** 2 * CONV[2] ** 2,
}


def describe_machine() -> None:
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        print(f"  {name}={os.environ.get(name, '(unset)')}")
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        print("  numpy BLAS: threadpoolctl is not installed, cannot say which kernel")
        return
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            print(
                f"  numpy BLAS: {pool.get('internal_api')} {pool.get('version')} "
                f"kernel={pool.get('architecture')} threads={pool.get('num_threads')} (its default)"
            )


def measure(args: argparse.Namespace) -> list[dict]:
    """Every row timed in turns with its peer and tinygrad; the rows as dicts (what --json prints)."""
    data = inputs()
    tg = tg_workloads(data)
    peers = {"numpy": numpy_workloads(data), "torch": torch_workloads(data)}
    tiny = "skipped (--no-tinygrad)" if args.no_tinygrad else tinygrad_workloads(data)
    for note in (peers["torch"], tiny):
        if isinstance(note, str) and not args.json:
            print(f"  note: {note}")
    rows = []
    for row in ROWS:
        if args.only and row.name not in args.only:
            continue
        peer_work = peers[row.peer]
        peer_run = peer_work.get(row.name) if isinstance(peer_work, dict) else None
        tiny_run = tiny.get(row.name) if isinstance(tiny, dict) else None
        runs = [tg[row.name], peer_run, tiny_run]
        mine, peer, tiny_time = alternating_medians(runs, args.repeats, calls_per_sample(row.name))
        rows.append({
            "workload": row.name, "peer": row.peer, "tg_ms": mine * 1e3,
            "peer_ms": peer * 1e3 if peer_run else None, "ratio": peer / mine if peer_run else None,
            "target": row.target, "tinygrad_ms": tiny_time * 1e3 if tiny_run else None,
            "gflops": FLOPS[row.name] / mine / 1e9 if row.name in FLOPS else None,
        })  # fmt: skip
    return rows


def print_table(rows: list[dict], repeats: int) -> None:
    print(f"medians of {repeats} repeats, float32; ratio = peer time / tg time (above 1: tg is faster);")
    print("tg, its peer and tinygrad are timed in turns, in this process")
    print(f"{'workload':<22} {'tg ms':>9} {'GFLOP/s':>8} {'peer':>6} {'peer ms':>9} {'ratio':>6} {'target':>7}"
          f" {'tinygrad ms':>12} {'tg vs tinygrad':>15}")  # fmt: skip
    for row in rows:
        ratio = f"{row['ratio']:5.2f}x" if row["ratio"] is not None else "  n/a"
        peer_text = f"{row['peer_ms']:9.2f}" if row["peer_ms"] is not None else "      n/a"
        tiny = row["tinygrad_ms"]
        tiny_text = f"{tiny:12.2f}" if tiny is not None else "         n/a"
        versus = f"{tiny / row['tg_ms']:14.2f}x" if tiny is not None else "            n/a"
        gflops = f"{row['gflops']:8.1f}" if row["gflops"] is not None else "        "
        target = f">= {row['target']}" if row["target"] else ""
        print(f"{row['workload']:<22} {row['tg_ms']:9.2f} {gflops} {row['peer']:>6} {peer_text} {ratio:>6} {target:>7}"
              f" {tiny_text} {versus}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-tinygrad", action="store_true", help="skip the tinygrad column")
    parser.add_argument("--cc", help="measure with this C compiler only (default: each installed one)")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON document")
    parser.add_argument(
        "--only", action="append", choices=sorted({row.name for row in ROWS}), help="time only this row (repeatable)"
    )
    parser.add_argument("--matmuls", action="store_true", help="time only the matmul rows (issue 38's table)")
    args = parser.parse_args()
    if args.matmuls:
        args.only = [*(args.only or ()), *(row.name for row in ROWS if row.name.startswith("matmul"))]
    if args.cc is None:
        compilers = installed_compilers()
        if len(compilers) > 1:
            describe_machine()
            forwarded = [f"--repeats={args.repeats}", *(["--no-tinygrad"] if args.no_tinygrad else [])]
            forwarded += [f"--only={name}" for name in args.only or ()]
            side_by_side(__file__, forwarded, compilers)
            return
    else:
        os.environ["CC"] = args.cc
    if args.json:
        print(json.dumps(measure(args)))
        return
    describe_machine()
    print(f"C compiler: {os.environ.get('CC') or 'the default (see DEBUG=1)'}")
    print_table(measure(args), args.repeats)
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
