"""bench/ prints both compilers side by side (issue 12): each benchmark measures one compiler with --cc and --json,
and bench/compilers.py runs it once per installed compiler."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc, the compiler the run names")
def test_bench_tensor_measures_one_compiler_as_json() -> None:
    command = [sys.executable, str(ROOT / "bench" / "bench_tensor.py"), "--size=4096", "--repeats=1", "--cc=gcc"]
    result = subprocess.run([*command, "--json"], capture_output=True, text=True, check=True, timeout=300)
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert [row["workload"] for row in rows][:2] == ["chain (a*b+c).maximum(0)", "full sum"]
    assert all(row["ratio"] > 0 and row["peer"] == "numpy" for row in rows)


def test_installed_compilers_lists_gcc_and_one_clang(monkeypatch) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import compilers
    finally:
        sys.path.remove(str(ROOT / "bench"))
    present = {"gcc", "clang-17", "clang-15"}
    monkeypatch.setattr(compilers.shutil, "which", lambda name: f"/usr/bin/{name}" if name in present else None)
    assert compilers.installed_compilers() == ["gcc", "clang-17"]
    present.clear()
    assert compilers.installed_compilers() == []
