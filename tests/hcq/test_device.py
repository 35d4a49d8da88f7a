"""The device registry and DEV parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tg.codegen.flags import Context
from tg.hcq import Device, DeviceSpec, UnknownDeviceError, parse_device


@pytest.mark.parametrize(
    "text, expected",
    [
        ("CPU", DeviceSpec("CPU")),
        ("cpu", DeviceSpec("CPU")),
        ("CPU:1", DeviceSpec("CPU", index=1)),
        ("CPU:LLVM", DeviceSpec("CPU", renderer="LLVM")),
        ("CPU:0:LLVM", DeviceSpec("CPU", renderer="LLVM")),
        ("NULL:HIP:gfx950", DeviceSpec("NULL", renderer="HIP", arch="gfx950")),
        ("SIM+AMD", DeviceSpec("AMD", iface="SIM")),
        ("PCI+AMD:2:HIP:gfx1100", DeviceSpec("AMD", index=2, iface="PCI", renderer="HIP", arch="gfx1100")),
        ("DISK:/tmp/weights.bin", DeviceSpec("DISK", path="/tmp/weights.bin")),
    ],
)
def test_parse_device(text: str, expected: DeviceSpec) -> None:
    assert parse_device(text) == expected


@pytest.mark.parametrize("text", ["", "CPU:A:B:C", "CPU::X", "DISK"])
def test_malformed_device_strings_are_rejected(text: str) -> None:
    with pytest.raises(UnknownDeviceError):
        parse_device(text)


def test_same_device_string_gives_the_same_device() -> None:
    assert Device["CPU"] is Device["CPU"] is Device["CPU:0"] is Device["cpu"]
    assert Device["CPU:1"] is not Device["CPU"]
    assert Device["CPU:1"].device == "CPU:1"


def test_unknown_device_lists_the_available_ones() -> None:
    with pytest.raises(UnknownDeviceError, match=r"unknown device .TPU.*available devices: AMD, CL, CPU, DISK, NULL"):
        Device["TPU"]


def test_default_comes_from_dev() -> None:
    with Context(DEV="NULL:HIP:gfx1100"):
        # The renderer DEV names is the device's default: the name leaves it out, a bare "NULL" gets it.
        assert Device.DEFAULT == "NULL"
        device = Device[Device.DEFAULT]
        assert (device.renderer_name, device.arch) == ("HIP", "gfx1100")
        assert Device["NULL"] is device is Device["NULL:HIP:gfx1100"]
        assert Device["NULL:HIP:gfx950"] is not device and Device["NULL:HIP:gfx950"].arch == "gfx950"
    with Context(DEV=""):
        assert Device.DEFAULT == "CPU"


def test_a_device_name_is_parsed_once_per_dev_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every buffer and launch looks its device up by name: a name seen before must not be parsed again, while a
    new DEV setting (which may give the device another renderer) is."""
    import tg.hcq.device as device_module

    calls: list[str] = []
    real_parse = device_module.parse_device
    monkeypatch.setattr(device_module, "parse_device", lambda text: calls.append(text) or real_parse(text))
    with Context(DEV="CPU"):
        Device["CPU"]
        calls.clear()
        assert Device["CPU"] is Device["CPU"] and Device.canonicalize("CPU") == "CPU"
        assert calls == []
    with Context(DEV="NULL:HIP:gfx1100"):
        assert Device.spec("NULL").arch == "gfx1100"
    with Context(DEV="NULL:HIP:gfx950"):
        assert Device.spec("NULL").arch == "gfx950"
    for i in range(device_module.SPEC_CACHE_SIZE + 10):  # one name per file: the cache stays bounded
        assert Device.spec(f"DISK:/tmp/weights-{i}.bin").path == f"/tmp/weights-{i}.bin"
    assert len(Device._specs) <= device_module.SPEC_CACHE_SIZE


def test_default_can_be_overridden_and_reset() -> None:
    Device.DEFAULT = "NULL"
    try:
        assert Device.DEFAULT == "NULL"
    finally:
        Device.DEFAULT = None
    with Context(DEV="CPU"):
        assert Device.DEFAULT == "CPU"


def test_device_exposes_allocator_compiler_runtime_and_renderer() -> None:
    from tg.codegen.compiler import CCompiler
    from tg.codegen.compiler.llvm import LLVMCompiler
    from tg.codegen.render.c import CRenderer
    from tg.codegen.render.llvmir import LLVMRenderer

    with Context(DEV=""):
        llvm, c = Device["CPU:LLVM"], Device["CPU:C"]
    assert llvm.renderer_name == "LLVM" and llvm.device == "CPU:LLVM"
    assert isinstance(llvm.compiler, LLVMCompiler) and isinstance(llvm.renderer, LLVMRenderer)
    assert isinstance(c.compiler, CCompiler) and isinstance(c.renderer, CRenderer)
    assert llvm.allocator is not None and llvm.program_class is not None


@pytest.mark.parametrize(
    "text, message",
    [
        ("CPU:FOO", r"unknown renderer 'FOO'; known renderers: C, CLANG, LLVM"),
        ("NULL:HIP:gfx1", r"unknown arch 'gfx1' for HIP; known archs: gfx1100, .*gfx950"),
        (
            "NULL:BAR",
            r"unknown renderer 'BAR'; known renderers: C, CLANG, LLVM, OPENCL, CUDA, PTX, HIP, AMD, METAL, WGSL, "
            r"PY",
        ),
        ("NULL:PTX:sm_1", r"unknown arch 'sm_1' for PTX; known archs: sm_80, .*sm_90"),
        ("CPU:LLVM:x86", r"renderer LLVM takes no arch"),
    ],
)
def test_unknown_renderer_or_arch_lists_the_known_ones(text: str, message: str) -> None:
    with pytest.raises(UnknownDeviceError, match=message):
        Device[text]


def test_documented_device_strings_select_renderer_index_and_arch() -> None:
    with Context(DEV=""):
        assert Device.spec("NULL:HIP:gfx1100") == DeviceSpec("NULL", renderer="HIP", arch="gfx1100")
        assert Device.spec("CPU:LLVM") == DeviceSpec("CPU", renderer="LLVM")
        assert Device.spec("CPU:1:LLVM").canonical == "CPU:1:LLVM"
        assert Device.spec("CL:1") == DeviceSpec("CL", index=1) and Device.spec("CL:1:OPENCL").renderer == "OPENCL"
        assert Device.spec("NULL:PTX:sm_80") == DeviceSpec("NULL", renderer="PTX", arch="sm_80")
    with Context(DEV="CPU:LLVM"):
        assert Device.DEFAULT == "CPU" and Device.spec("CPU").renderer == "LLVM"
        assert Device.spec("CPU:1").renderer == ""  # DEV names the first CPU only


def test_import_starts_no_thread() -> None:
    import subprocess
    import sys

    code = "import threading, tg.hcq; print(threading.active_count())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"


names = st.sampled_from(["CPU", "NULL", "AMD", "NV"])
words = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,7}", fullmatch=True).filter(lambda w: not w.isdigit())


@given(
    name=names,
    index=st.integers(0, 99),
    iface=st.sampled_from(["", "SIM", "PCI", "USB"]),
    renderer=st.one_of(st.just(""), words.map(str.upper)),
    arch=words,
)
def test_canonical_name_parses_back_to_the_same_spec(name, index, iface, renderer, arch) -> None:
    spec = DeviceSpec(name, index, iface, renderer, arch if renderer else "")
    assert parse_device(spec.canonical) == spec


def test_a_device_string_with_an_interface_the_device_lacks_is_an_error() -> None:
    """Issue 12 item 7: DEV=PCI+CPU used to open the CPU and ignore `PCI+`."""
    with pytest.raises(UnknownDeviceError, match=r"CPU has no interface PCI\+.*takes no interface"):
        Device["PCI+CPU"]
