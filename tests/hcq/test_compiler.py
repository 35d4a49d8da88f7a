"""The C compiler wrapper: real compiles, the on-disk cache, errors, and compiler choice."""

from __future__ import annotations

import ctypes
import os
import shutil
import sqlite3
import tempfile

import pytest

from tg.codegen.compiler import CCompiler, CompileError, find_c_compiler
from tg.codegen.compiler.cache import TABLE
from tg.codegen.flags import Context

SQUARE = "int square(int x) { return x * x; }\n"


def call_square(lib: bytes, x: int) -> int:
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(lib)
        f.flush()
        return ctypes.CDLL(f.name).square(x)


def test_kernels_use_512_bit_vectors_exactly_on_an_x86_cpu_with_avx512() -> None:
    import pathlib
    import platform

    from tg.codegen.compiler.c import DEFAULT_FLAGS, GCC_WITHOUT_AVX512_FLAGS, WIDE_VECTOR_FLAGS

    cpuinfo = pathlib.Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    avx512 = platform.machine() == "x86_64" and " avx512f " in next(
        (line + " " for line in cpuinfo.splitlines() if line.startswith("flags")), ""
    )
    from tg.hcq.host import host_c_compiler

    gcc = shutil.which("gcc")
    assert gcc is not None, "gcc is what a fresh machine has"
    without_avx512 = GCC_WITHOUT_AVX512_FLAGS if platform.machine() == "x86_64" else ()
    flags = host_c_compiler(cc=gcc).flags
    assert flags == DEFAULT_FLAGS + (WIDE_VECTOR_FLAGS if avx512 else without_avx512)
    assert CCompiler(cc=gcc).flags == DEFAULT_FLAGS + without_avx512  # codegen itself reads nothing of the CPU


def test_only_gcc_gets_the_flags_for_a_cpu_without_avx512() -> None:
    from tg.codegen.compiler.c import is_gcc

    assert is_gcc(shutil.which("gcc") or "gcc")
    clang = shutil.which("clang") or shutil.which("clang-19")
    if clang is not None:  # the clang CI leg has one
        assert not is_gcc(clang)


def test_compile_returns_a_loadable_shared_object(fresh_cache_dir) -> None:
    lib = CCompiler().compile(SQUARE)
    assert lib[:4] == b"\x7fELF"
    assert call_square(lib, 12) == 144


def test_second_compile_is_served_from_the_disk_cache(fresh_cache_dir, monkeypatch) -> None:
    compiler = CCompiler()
    first = compiler.compile(SQUARE)
    assert os.path.exists(fresh_cache_dir / "cache.db")
    monkeypatch.setattr(CCompiler, "compile_uncached", lambda self, src: pytest.fail("compiled again"))
    assert CCompiler().compile(SQUARE) == first


def test_cache_table_carries_a_schema_version(fresh_cache_dir) -> None:
    CCompiler().compile(SQUARE)
    with sqlite3.connect(fresh_cache_dir / "cache.db") as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert TABLE in tables and TABLE.endswith("_v1")


def test_cachelevel_zero_compiles_every_time(fresh_cache_dir, monkeypatch) -> None:
    calls = []
    original = CCompiler.compile_uncached
    monkeypatch.setattr(CCompiler, "compile_uncached", lambda self, src: calls.append(1) or original(self, src))
    with Context(CACHELEVEL=0):
        CCompiler().compile(SQUARE)
        CCompiler().compile(SQUARE)
    assert len(calls) == 2
    assert not os.path.exists(fresh_cache_dir / "cache.db")


def test_different_flags_do_not_share_a_cache_entry(fresh_cache_dir) -> None:
    assert CCompiler(flags=("-O0", "-fPIC", "-shared")).identity() != CCompiler().identity()
    slow = CCompiler(flags=("-O0", "-fPIC", "-shared")).compile(SQUARE)
    fast = CCompiler().compile(SQUARE)
    assert slow != fast
    assert call_square(slow, 7) == call_square(fast, 7) == 49


def test_compile_error_shows_compiler_message_and_source(fresh_cache_dir) -> None:
    source = "int broken(int x) {\n  return x +;\n}\n"
    with pytest.raises(CompileError) as info:
        CCompiler().compile(source)
    message = str(info.value)
    assert "expected expression" in message or "error" in message
    assert "   2 |   return x +;" in message
    assert info.value.source == source


def test_clang_is_preferred_when_installed() -> None:
    with Context(CC=""):  # without an explicit CC, whatever the environment sets
        chosen = os.path.basename(find_c_compiler())
    if shutil.which("clang") or any(shutil.which(f"clang-{v}") for v in range(14, 20)):
        assert chosen.startswith("clang")
    else:
        assert chosen in ("gcc", "cc")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_cc_flag_overrides_the_compiler(fresh_cache_dir) -> None:
    with Context(CC="gcc"):
        compiler = CCompiler()
    assert os.path.basename(compiler.cc) == "gcc"
    assert call_square(compiler.compile(SQUARE), 9) == 81


def test_missing_cc_is_a_clear_error() -> None:
    with Context(CC="no-such-compiler-xyz"), pytest.raises(FileNotFoundError, match="no-such-compiler-xyz"):
        CCompiler()


def test_nan_and_inf_keep_ieee_semantics(fresh_cache_dir) -> None:
    """The flags must not include -ffinite-math-only: isnan and inf comparisons have to work."""
    source = "int is_nan(float x) { return x != x; }\nint is_inf(float x) { return (x - x) != (x - x); }\n"
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(CCompiler().compile(source))
        f.flush()
        lib = ctypes.CDLL(f.name)
        lib.is_nan.argtypes = lib.is_inf.argtypes = [ctypes.c_float]
        assert lib.is_nan(float("nan")) == 1
        assert lib.is_nan(1.0) == 0
        assert lib.is_inf(float("inf")) == 1
        assert lib.is_inf(2.0) == 0


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc, the compiler this test names")
def test_debug_1_names_the_compiler_and_its_version(capsys) -> None:
    import subprocess

    version = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    with Context(CC="gcc", DEBUG=1):
        CCompiler()
    err = capsys.readouterr().err
    assert version in err and shutil.which("gcc") in err
    with Context(CC="gcc", DEBUG=0):
        CCompiler()
    assert capsys.readouterr().err == ""


def test_no_compiler_at_all_says_what_to_install(monkeypatch) -> None:
    import tg.codegen.compiler.c as c_compiler

    monkeypatch.setattr(c_compiler.shutil, "which", lambda name: None)
    with Context(CC=""), pytest.raises(FileNotFoundError) as info:
        find_c_compiler()
    message = str(info.value)
    assert "apt-get install gcc" in message and "dnf install gcc" in message and "CC" in message
