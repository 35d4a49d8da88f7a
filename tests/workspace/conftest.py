"""What the workspace tests share: importing a script of bench/ as a module."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def import_bench_script(name: str) -> ModuleType:
    """bench/NAME.py as a module (bench/ is a folder of scripts, not a package: on sys.path only for the import)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="session")
def import_bench() -> Callable[[str], ModuleType]:
    return import_bench_script
