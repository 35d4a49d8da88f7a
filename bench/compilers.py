"""Run a benchmark once per installed C compiler and print the results side by side (issue 12: gcc is what a fresh
machine has, clang what many developers have; the speed bars hold for both).

A benchmark that uses this takes `--cc NAME` (measure with that compiler only) and `--json` (print its rows as one
JSON document); without `--cc` it calls `side_by_side`, which runs it again in a child process per compiler. Each
child times tg and its peers in turns, in one process, so every ratio compares runs made at the same time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys


def installed_compilers() -> list[str]:
    """gcc and the first clang found (clang, then clang-19 down to clang-14), those that are installed."""
    found = ["gcc"] if shutil.which("gcc") else []
    clang = next((name for name in ("clang", *(f"clang-{v}" for v in range(19, 13, -1))) if shutil.which(name)), None)
    return found + ([clang] if clang else [])


def run_with(script: str, argv: list[str], compiler: str) -> list[dict]:
    """The rows `script --cc compiler --json` measures (a child process with CC set)."""
    command = [sys.executable, script, *argv, "--cc", compiler, "--json"]
    result = subprocess.run(command, env={**os.environ, "CC": compiler}, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"error: the {compiler} run failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def side_by_side(script: str, argv: list[str], compilers: list[str]) -> None:
    """Run the benchmark once per compiler and print each workload's ratio (peer time / tg time) per compiler."""
    results = {cc: run_with(script, argv, cc) for cc in compilers}
    print(f"load average (1, 5, 15 min) after the runs: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("ratio = peer time / tg time (above 1: tg is faster); each compiler's run times tg and the peer in turns")
    header = f"{'workload':<26} {'peer':<14}" + "".join(f" {cc + ' ms':>12} {cc:>8}" for cc in compilers)
    print(header + f" {'bar':>7}")
    for position, row in enumerate(results[compilers[0]]):
        cells = ""
        for cc in compilers:
            other = results[cc][position]
            ratio = other.get("ratio")
            cells += f" {other['tg_ms']:12.2f} " + (f"{ratio:7.2f}x" if ratio is not None else f"{'n/a':>8}")
        target = row.get("target")
        print(f"{row['workload']:<26} {row['peer']:<14}{cells} {'>= ' + str(target) if target else '':>7}")
