"""Process replay: what capture costs a test run, and how many kernels per second a replay checks.

    uv run python bench/bench_replay.py [--tests tests/tensor/test_elementwise.py] [--repeats 3] [--jobs 2]

Each repeat runs the same pytest selection twice in fresh processes, without and with CAPTURE_PROCESS_REPLAY=1
(the disk cache of compiled binaries is warmed first, so both runs compile nothing new), then replays the
captured rows with `tg-replay diff` against this checkout. Medians of the repeats are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from tg.replay.database import summarize
from tg.replay.diff import Version, replay


def run_tests(selection: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", *selection, "-q", "-n", "0", "-p", "no:cacheprovider"],
                   env=env, check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", nargs="+", default=["tests/tensor/test_elementwise.py"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()

    base_env = dict(os.environ, CAPTURE_PROCESS_REPLAY="0")
    run_tests(args.tests, base_env)  # warm the binary cache
    plain, captured, rates, kernels = [], [], [], 0
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as scratch:
            db = os.path.join(scratch, "captures.db")
            plain.append(run_tests(args.tests, base_env))
            captured.append(run_tests(args.tests, dict(base_env, CAPTURE_PROCESS_REPLAY="1", TG_REPLAY_DB=db)))
            kernels = summarize(db).rows
            start = time.perf_counter()
            report = replay(db, Version("this version"), jobs=args.jobs)
            rates.append(report.kernels / (time.perf_counter() - start))
            assert not report.changed and not report.errors, report.summary_line()
    overhead = statistics.median(captured) / statistics.median(plain) - 1
    print(f"tests: {' '.join(args.tests)}  ({kernels} kernels captured)")
    print(
        f"test run without capture {statistics.median(plain):.2f} s, with capture {statistics.median(captured):.2f} s:"
        f" overhead {overhead * 100:+.1f}% (target <= 15%)"
    )
    print(f"replay: {statistics.median(rates):.0f} kernels/s with {args.jobs} workers (target >= 200)")


if __name__ == "__main__":
    main()
