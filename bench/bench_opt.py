"""Kernel optimization benchmark: matmul, conv2d, a full sum and an elementwise chain on the CPU, float32, with
the peers measured in the same run: numpy (its BLAS, default threads; conv2d as im2col + tensordot), torch (CPU
build, conv only) and the tinygrad release from PyPI (DEV=CPU, no BEAM), all timed in turns in one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE uv run --inexact python bench/bench_opt.py [--repeats 5]

When gcc and clang are both installed it runs once per compiler (a child process each, see bench/compilers.py)
and prints the ratios side by side; `--cc gcc` measures one compiler with the full table; `--only "sum 16M"`
(repeatable) times just that row.

tg runs the workloads as Tensor ops with the hand-coded heuristics (NOOPT=1 shows the unoptimized kernels,
DEBUG=3 the opts each kernel got). Every time is the median of several repeats; each ratio is
peer_time / tg_time (above 1: tg is faster). The machine is shared: the load average is printed first.
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


# ---------------------------------------------------------------------------------------------------- tg workloads


Workloads = dict[str, Callable[[], object]]


def tg_workloads(data: dict[str, np.ndarray]) -> Workloads:
    """Each workload as a function that runs it to completion (checked against numpy first where cheap)."""
    from tg.hcq import Device
    from tg.tensor import Tensor

    def timed(build: Callable[[], Tensor]) -> Callable[[], object]:
        def run() -> None:
            build().realize()
            Device["CPU"].synchronize()

        return run

    results: Workloads = {}
    for n in (1024, 2048):
        a, b = Tensor(data[f"a{n}"]).realize(), Tensor(data[f"b{n}"]).realize()
        results[f"matmul {n}"] = timed(lambda a=a, b=b: a @ b)
    small = (a[:256, :256] @ b[:256, :256]).numpy()
    np.testing.assert_allclose(small, data["a2048"][:256, :256] @ data["b2048"][:256, :256], rtol=1e-3, atol=1e-3)
    x, w = Tensor(data["conv_x"]).realize(), Tensor(data["conv_w"]).realize()
    results["conv2d"] = timed(lambda: x.conv2d(w, padding=1))
    v = Tensor(data["v"]).realize()
    np.testing.assert_allclose(v.sum().numpy(), data["v"].sum(dtype=np.float64), rtol=1e-3, atol=1e-2)
    results["sum 16M"] = timed(lambda: v.sum())
    p, q, r = (Tensor(data[k]).realize() for k in ("p", "q", "r"))
    results["chain 16M"] = timed(lambda: (p * q + r).maximum(0))
    return results


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    data = {}
    for n in (1024, 2048):
        data[f"a{n}"] = rng.standard_normal((n, n), np.float32)
        data[f"b{n}"] = rng.standard_normal((n, n), np.float32)
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
    for n in (1024, 2048):
        a, b = data[f"a{n}"], data[f"b{n}"]
        results[f"matmul {n}"] = lambda a=a, b=b: a @ b
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


def alternating_medians(runs: list[Callable[[], object] | None], repeats: int) -> list[float]:
    """Median time of each run (None: not available, NaN), timed in turns so that a change in the machine's load
    hits all alike. Each call starts after a short pause, so one library's spinning threads do not steal the
    cores from the next."""
    present = [run for run in runs if run is not None]
    for run in present:
        run()  # warm-up: compile, allocate
    times: dict[int, list[float]] = {id(run): [] for run in present}
    for _ in range(repeats):
        for run in present:
            time.sleep(SETTLE_SECONDS)
            start = time.perf_counter()
            run()
            times[id(run)].append(time.perf_counter() - start)
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
    for n in (1024, 2048):
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


ROWS = [  # targets: the bars of issue 12 (numpy peers), the earlier one for torch's conv
    Row("matmul 1024", "numpy", 0.5),
    Row("matmul 2048", "numpy", 0.5),
    Row("conv2d", "numpy", 2.0),
    Row("conv2d", "torch", 0.3),
    Row("sum 16M", "numpy", 1.0),
    Row("chain 16M", "numpy", 3.0),
]
FLOPS = {
    "matmul 1024": 2 * 1024**3,
    "matmul 2048": 2 * 2048**3,
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
        mine, peer, tiny_time = alternating_medians([tg[row.name], peer_run, tiny_run], args.repeats)
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
    print(f"{'workload':<12} {'tg ms':>9} {'GFLOP/s':>8} {'peer':>6} {'peer ms':>9} {'ratio':>6} {'target':>7}"
          f" {'tinygrad ms':>12} {'tg vs tinygrad':>15}")  # fmt: skip
    for row in rows:
        ratio = f"{row['ratio']:5.2f}x" if row["ratio"] is not None else "  n/a"
        peer_text = f"{row['peer_ms']:9.2f}" if row["peer_ms"] is not None else "      n/a"
        tiny = row["tinygrad_ms"]
        tiny_text = f"{tiny:12.2f}" if tiny is not None else "         n/a"
        versus = f"{tiny / row['tg_ms']:14.2f}x" if tiny is not None else "            n/a"
        gflops = f"{row['gflops']:8.1f}" if row["gflops"] is not None else "        "
        target = f">= {row['target']}" if row["target"] else ""
        print(f"{row['workload']:<12} {row['tg_ms']:9.2f} {gflops} {row['peer']:>6} {peer_text} {ratio:>6} {target:>7}"
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
    args = parser.parse_args()
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
