"""The host facts the CPU device's Target is built from (tg.hcq.host), read from a fake sysfs cache folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tg.codegen.target import DEFAULT_L2_BYTES
from tg.hcq import Device
from tg.hcq.host import data_cache_bytes, parse_cache_size


def write_cache(folder: Path, index: int, level: int, kind: str, size: str) -> None:
    entry = folder / f"index{index}"
    entry.mkdir(parents=True)
    (entry / "level").write_text(f"{level}\n")
    (entry / "type").write_text(f"{kind}\n")
    (entry / "size").write_text(f"{size}\n")


def test_sysfs_sizes_are_read_in_bytes() -> None:
    assert parse_cache_size("2048K\n") == 2 << 20
    assert parse_cache_size("32M") == 32 << 20
    assert parse_cache_size("512") == 512
    assert parse_cache_size("a lot") is None


def test_the_data_cache_of_a_level_skips_the_instruction_cache(tmp_path: Path) -> None:
    write_cache(tmp_path, 0, 1, "Instruction", "64K")
    write_cache(tmp_path, 1, 1, "Data", "48K")
    write_cache(tmp_path, 2, 2, "Unified", "2048K")
    assert data_cache_bytes(1, tmp_path) == 48 << 10
    assert data_cache_bytes(2, tmp_path) == 2 << 20
    assert data_cache_bytes(3, tmp_path) is None
    assert data_cache_bytes(2, tmp_path / "missing") is None


def test_the_cpu_device_builds_its_target_once_with_the_renderers_capabilities() -> None:
    target = Device["CPU"].target
    assert target is Device["CPU"].renderer.target
    assert target.family == "CPU" and target.cores == Device["CPU"].cores.count
    assert (target.core_groups, target.software_transcendentals, target.has_local) == (True, True, False)
    assert target.l2_bytes == (data_cache_bytes(2) or DEFAULT_L2_BYTES)


@pytest.mark.parametrize(("flags", "int8_dot"), [("fpu avx512f avx512_vnni", True), ("fpu avx512f", False),
                                                 ("fpu avx_vnni", False)])  # fmt: skip
def test_the_c_renderers_target_has_int8_dot_products_where_the_cpu_has_avx512_vnni(
    monkeypatch: pytest.MonkeyPatch, flags: str, int8_dot: bool
) -> None:
    from tg.codegen.render.c import CRenderer
    from tg.codegen.render.python import PythonRenderer
    from tg.hcq import host

    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(host, "cpuinfo_field", lambda name: flags if name == "flags" else "")
    assert host.cpu_target(CRenderer, cores=2).int8_dot is int8_dot
    assert host.cpu_target(PythonRenderer, cores=2).int8_dot is False  # a kernel in Python has no VNNI
