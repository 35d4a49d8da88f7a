"""tg-autogen on a hostile header: N records, each pointing to the previous one (issue 36).

Run: uv run python bench/bench_autogen_hostile.py [--records 200000]

Writes the header to a temporary folder, runs `tg-autogen gen HEADER -o OUT` under /usr/bin/time -v and prints the
header size, wall and CPU seconds and the peak resident set size. 20,000 such records (2.4 MB) once took 19.5 GB;
the default is ten times that. tests/autogen/test_hostile_headers.py checks the growth is linear.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def write_chain(path: Path, records: int) -> None:
    """The shape of the 2.4 MB header: a 120-byte record per line, each with a pointer to the one before it."""
    with path.open("w") as out:
        out.write("struct record_00000000 { int payload[4]; };\n")
        for i in range(1, records):
            out.write(
                f"struct record_{i:08d} {{ struct record_{i - 1:08d} *previous; int payload[4];"
                f" unsigned long long stamp; char tag[8]; }};\n"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    gnu_time = "/usr/bin/time"  # the shell's `time` keyword has no -v
    if not Path(gnu_time).is_file():
        sys.exit("error: GNU time (/usr/bin/time) is needed for the peak RSS")
    tool = shutil.which("tg-autogen")
    if tool is None:
        sys.exit("error: tg-autogen is not on PATH (run through `uv run`)")
    with tempfile.TemporaryDirectory(prefix="tg-autogen-hostile-") as folder:
        header = Path(folder) / "chain.h"
        write_chain(header, args.records)
        done = subprocess.run(
            [gnu_time, "-v", tool, "gen", str(header), "-o", str(Path(folder) / "chain.py")],
            capture_output=True,
            text=True,
        )
        report = done.stderr
        fields = {
            "wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)",
            "user_s": r"User time \(seconds\): (\S+)",
            "system_s": r"System time \(seconds\): (\S+)",
            "peak_rss_kb": r"Maximum resident set size \(kbytes\): (\d+)",
        }
        found = {key: (m.group(1) if (m := re.search(pattern, report)) else "?") for key, pattern in fields.items()}
        size = header.stat().st_size
    print(f"records {args.records}, header {size / 1e6:.1f} MB, exit {done.returncode}")
    print(f"wall {found['wall']}, user {found['user_s']} s, system {found['system_s']} s")
    peak = found["peak_rss_kb"]
    print(f"peak RSS {int(peak) / 1024:.0f} MiB" if peak.isdigit() else "peak RSS ?")
    if done.returncode != 0:
        print(report[-2000:], file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
