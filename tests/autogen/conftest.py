"""Helpers for tg-autogen tests: compile C with gcc into shared libraries and import generated modules."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tg.autogen.generate import Generated, Options, generate

_counter = itertools.count()


def load_module(path: Path) -> ModuleType:
    name = f"tg_autogen_test_{path.stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def gcc(args: list[str]) -> None:
    done = subprocess.run(["gcc", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def c_program_output(tmp_path: Path) -> Callable[..., str]:
    """c_program_output(source, flags) compiles SOURCE with gcc, runs it and returns its stdout."""
    return lambda source, flags=(): run_c_program(tmp_path, source, list(flags))


@pytest.fixture
def c_program(tmp_path: Path) -> Callable[..., str]:
    """c_program(source, flags=[]) compiles SOURCE with gcc, runs it and returns its stdout."""
    return lambda source, flags=(): run_c_program(tmp_path, source, list(flags))


def run_c_program(tmp_path: Path, source: str, flags: list[str]) -> str:
    """Compile SOURCE with gcc, run it and return its stdout."""
    c_file = tmp_path / f"oracle_{next(_counter)}.c"
    c_file.write_text(source)
    binary = c_file.with_suffix("")
    gcc([str(c_file), "-o", str(binary), *flags])
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout


class Bound:
    """A header, the shared library compiled from it, and the module tg-autogen generated for it."""

    def __init__(self, module: ModuleType, generated: Generated, header: Path) -> None:
        self.module, self.generated, self.header = module, generated, header

    @property
    def skipped_names(self) -> set[str]:
        return {s.name for s in self.generated.skipped}


def build_bound(
    folder: Path, setenv: Callable[[str, str], None], header_text: str, c_source: str = "", **options: object
) -> Bound:
    """Write HEADER_TEXT, compile C_SOURCE (if any) into lib<NAME>.so with gcc, generate and import the module."""
    index = next(_counter)
    header = folder / f"api{index}.h"
    header.write_text(header_text)
    lib = None
    if c_source:
        lib = f"tgtest{index}"
        source = folder / f"api{index}.c"
        source.write_text(f'#include "{header.name}"\n{c_source}')
        library = folder / f"lib{lib}.so"
        gcc(["-shared", "-fPIC", "-O1", str(source), "-o", str(library)])
        setenv(f"{lib.upper()}_PATH", str(library))
    generated = generate(Options(name=f"api{index}", headers=(str(header),), lib=lib, **options))  # type: ignore[arg-type]
    out = folder / f"api{index}.py"
    out.write_text(generated.source)
    return Bound(load_module(out), generated, header)


@pytest.fixture
def bind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Bound]:
    """bind(header_text, c_source="", **Options fields) -> Bound; the library is found through <NAME>_PATH."""
    return lambda header_text, c_source="", **options: build_bound(
        tmp_path, monkeypatch.setenv, header_text, c_source, **options
    )


@pytest.fixture(scope="module")
def bind_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Bound]:
    """Like `bind`, for module-scoped fixtures (the library path variable stays set for the whole module)."""
    patch = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("bound")
    yield lambda header_text, c_source="", **options: build_bound(
        folder, patch.setenv, header_text, c_source, **options
    )
    patch.undo()
