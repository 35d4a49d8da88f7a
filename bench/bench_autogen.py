"""Time tg-autogen against tinygrad's generator (tinygrad.runtime.support.autogen.gen): start-up and generation.

Run: uv sync --group bench && uv run --group bench python bench/bench_autogen.py [--repeats N]

Three measurements, each the median of N runs, ours and tinygrad's side by side in the same run:
- start-up: a fresh process until the tool is ready (`tg-autogen --version`; for tinygrad, which has no CLI,
  importing its generator module), wall-clock and CPU seconds (CPU time is what a loaded machine distorts least);
- CLI run: `tg-autogen gen HEADER -o FILE` end to end, start-up included (tinygrad: import + gen in one process);
- generation: the generator called in-process after one warm-up, so imports and libclang loading are not timed.
tinygrad's generator loads the system libclang (e.g. libclang-19); ours uses the pinned libclang wheel (18.1.1).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HEADERS = ["/usr/include/elf.h", "/usr/include/linux/vfio.h", "/usr/include/linux/io_uring.h"]
TINYGRAD_IMPORT = "from tinygrad.runtime.support.autogen import gen"


def has_tinygrad() -> bool:
    try:
        import tinygrad.runtime.support.autogen  # noqa: F401
    except Exception:  # not installed, or no libclang for it on this machine
        return False
    return True


def ours(header: str) -> Callable[[], object]:
    from tg.autogen.generate import gen

    return lambda: gen("bench", [header])


def tinygrads(header: str) -> Callable[[], object]:
    from tinygrad.runtime.support.autogen import gen

    return lambda: gen("bench", [header])


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def process_seconds(command: list[str], repeats: int) -> tuple[float, float]:
    """Median wall-clock and CPU (user + system) seconds of running COMMAND as a new process."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def ratio(theirs: float, mine: float) -> str:
    return f"{theirs / mine:6.2f}x" if mine else "-"


def startup(repeats: int, tinygrad: bool) -> None:
    cli = shutil.which("tg-autogen") or str(Path(sys.executable).parent / "tg-autogen")
    wall, cpu = process_seconds([cli, "--version"], repeats)
    print(f"start-up   tg-autogen --version              {wall:7.3f}s wall {cpu:7.3f}s cpu")
    base_wall, base_cpu = process_seconds([sys.executable, "-c", "pass"], repeats)
    print(f"           (bare python interpreter           {base_wall:7.3f}s wall {base_cpu:7.3f}s cpu)")
    if tinygrad:
        t_wall, t_cpu = process_seconds([sys.executable, "-c", TINYGRAD_IMPORT], repeats)
        print(
            f"           tinygrad: import its gen           {t_wall:7.3f}s wall {t_cpu:7.3f}s cpu   "
            f"ratio {ratio(t_wall, wall)} wall {ratio(t_cpu, cpu)} cpu"
        )
    header = HEADERS[0]
    with tempfile.TemporaryDirectory() as folder:
        wall, cpu = process_seconds([cli, "gen", header, "-o", f"{folder}/out.py"], repeats)
    print(f"CLI run    tg-autogen gen {Path(header).name:15}      {wall:7.3f}s wall {cpu:7.3f}s cpu")
    if tinygrad:
        script = f"{TINYGRAD_IMPORT}; gen('bench', ['{header}'])"
        t_wall, t_cpu = process_seconds([sys.executable, "-c", script], repeats)
        print(
            f"           tinygrad: import + gen             {t_wall:7.3f}s wall {t_cpu:7.3f}s cpu   "
            f"ratio {ratio(t_wall, wall)} wall {ratio(t_cpu, cpu)} cpu"
        )


def generation(repeats: int, tinygrad: bool) -> None:
    print(f"generation {'header':32} {'tg-autogen':>10} {'tinygrad gen':>13} {'ratio':>7}")
    for header in HEADERS:
        if not Path(header).is_file():
            print(f"           {header:32} missing")
            continue
        mine = ours(header)
        theirs = tinygrads(header) if tinygrad else None
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            mine()
            if theirs:
                theirs()
        ours_s = median_seconds(mine, repeats)
        if theirs is None:
            print(f"           {header:32} {ours_s:9.3f}s {'unavailable':>13}")
            continue
        theirs_s = median_seconds(theirs, repeats)
        print(f"           {header:32} {ours_s:9.3f}s {theirs_s:12.3f}s {ratio(theirs_s, ours_s)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    tinygrad = has_tinygrad()
    print(f"median of {args.repeats}; ratio = tinygrad / tg-autogen (above 1: tg-autogen is faster)")
    startup(args.repeats, tinygrad)
    generation(args.repeats, tinygrad)


if __name__ == "__main__":
    main()
