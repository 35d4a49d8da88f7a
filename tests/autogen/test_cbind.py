"""tg.drivers.cbind, the runtime the generated modules import: library lookup, lazy loading, ioctl numbers."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tg.drivers import cbind


def test_find_library_skips_linker_scripts():
    # On Debian, libc.so is a text linker script; dlopen of it fails, so the ELF libc.so.6 must be chosen.
    path = cbind.find_library("c")
    assert path is not None and Path(path).read_bytes()[:4] == b"\x7fELF"


def test_library_path_override_from_the_environment(monkeypatch, tmp_path):
    fake = tmp_path / "libfake.so"
    monkeypatch.setenv("FAKE_LIB_PATH", str(fake))
    assert cbind.find_library("fake-lib") == str(fake)


def test_missing_library_fails_on_first_call_with_a_hint():
    dll = cbind.DLL("tg-no-such-library")
    function = dll.function("anything", ctypes.c_int, [])
    with pytest.raises(OSError, match="TG_NO_SUCH_LIBRARY_PATH"):
        function()


def test_ioctl_numbers_follow_the_asm_generic_encoding():
    class Args(cbind.Struct):
        pass

    Args.layout(12, [cbind.Field("a", ctypes.c_uint32, 0), cbind.Field("b", ctypes.c_uint64, 4)])
    # dir << 30 | size << 16 | type << 8 | nr, with READ = 2 and WRITE = 1
    assert cbind._IO("T", 5) == (ord("T") << 8) | 5
    assert cbind._IOR(0x4B, 1, Args) == (2 << 30) | (12 << 16) | (0x4B << 8) | 1
    assert cbind._IOW("K", 2, ctypes.c_int) == (1 << 30) | (4 << 16) | (ord("K") << 8) | 2
    assert cbind._IOWR("K", 3, Args).argtype is Args


def test_layout_rejects_a_size_it_cannot_reach():
    class Broken(cbind.Struct):
        pass

    with pytest.raises(TypeError):
        Broken.layout(2, [cbind.Field("x", ctypes.c_uint32, 0)])


def test_records_take_positional_and_keyword_fields():
    class Pair(cbind.Struct):
        pass

    Pair.layout(8, [cbind.Field("x", ctypes.c_int32, 0), cbind.Field("y", ctypes.c_int32, 4)])
    assert (Pair(1, 2).x, Pair(1, 2).y, Pair(y=5).y) == (1, 2, 5)
    with pytest.raises(TypeError, match="no field 'z'"):
        Pair(z=1)
