"""The NULL device: compiles, never runs, refuses copyout unless NULL_ALLOW_COPYOUT=1."""

from __future__ import annotations

import pytest

from tg.codegen.flags import Context
from tg.hcq import Buffer, Device


def test_copyout_raises_by_default(kit) -> None:
    buf = Buffer("NULL", 4, kit.float32).allocate().copyin(bytes(16))
    with pytest.raises(RuntimeError, match=r"no copyout on NULL.*NULL_ALLOW_COPYOUT=1"):
        buf.as_buffer()


def test_copyout_returns_zeros_when_allowed(kit) -> None:
    buf = Buffer("NULL", 4, kit.float32).allocate().copyin(b"\x01" * 16)
    with Context(NULL_ALLOW_COPYOUT=1):
        assert buf.as_buffer().tolist() == [0.0] * 4


def test_null_compiles_for_real_and_runs_nothing(kit) -> None:
    null = Device["NULL"]
    lib = null.compiler.compile(kit.MARK)
    assert lib[:4] == b"\x7fELF"
    prg = null.runtime("mark", lib)
    out = Buffer("NULL", 4, kit.float32).allocate()
    assert prg(out.raw, global_size=(4, 1, 1), wait=True) == pytest.approx(1e-3)
    assert prg(out.raw, global_size=(4, 1, 1)) is None


def test_null_compile_errors_still_raise(kit) -> None:
    from tg.codegen.compiler import CompileError

    with pytest.raises(CompileError):
        Device["NULL"].compiler.compile("void f( {")


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201", "gfx950"])
def test_dev_selects_renderer_and_arch(arch: str) -> None:
    with Context(DEV=f"NULL:HIP:{arch}"):
        device = Device[Device.DEFAULT]
    assert (device.spec.name, device.renderer_name, device.arch) == ("NULL", "HIP", arch)
