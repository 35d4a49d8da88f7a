"""The OpenCL binding where OpenCL is installed: CI's clang leg installs opencl-headers, the ICD loader and PoCL and
runs this file with TG_REQUIRE=opencl, so a missing piece fails there instead of skipping (tests/conftest.py).

The committed binding was generated from one version of the headers; the check is that it agrees with the
headers installed here (every layout and integer constant, compiled by the C compiler), that a binding generated
from them agrees too, and that calls through it reach a real OpenCL platform.
"""

from __future__ import annotations

import ctypes
import importlib
from pathlib import Path

import pytest

from tests.autogen.conftest import load_module
from tests.autogen.test_abi_oracle import c_flags, c_prologue
from tg.autogen import oracle
from tg.autogen.regen import generate_target
from tg.autogen.targets import TARGETS
from tg.drivers.cbind import find_library

TARGET = TARGETS["opencl"]
PLATFORM_NOT_FOUND_KHR = -1001  # CL/cl_ext.h (not part of the target): the ICD loader found no platform
needs_headers = pytest.mark.skipif(
    not Path("/usr/include/CL/cl.h").is_file(), reason="missing opencl: opencl-headers are not installed"
)


def agrees_with_the_compiler(module: object, folder: Path) -> None:
    checks = [check for record in oracle.records(module) for check in oracle.record_checks(record)]  # type: ignore[arg-type]
    checks += oracle.constant_checks(module)  # type: ignore[arg-type]
    assert len(checks) > 500  # cl.h has hundreds of constants and a dozen records
    outcome = oracle.run_checks(checks, c_prologue(TARGET), c_flags(TARGET), folder)
    assert outcome.checked == len(checks) and not outcome.dropped, outcome.dropped[:10]
    assert not outcome.mismatches, outcome.mismatches[:10]


@needs_headers
def test_the_committed_binding_agrees_with_the_installed_headers(tmp_path: Path) -> None:
    agrees_with_the_compiler(importlib.import_module("tg.drivers.autogen.opencl"), tmp_path)


@needs_headers
def test_a_binding_generated_from_the_installed_headers_agrees_with_the_compiler(tmp_path: Path) -> None:
    generated = generate_target(TARGET)
    out = tmp_path / "opencl_fresh.py"
    out.write_text(generated.source)
    agrees_with_the_compiler(load_module(out), tmp_path)


@needs_headers
def test_calls_reach_an_opencl_platform_through_the_committed_binding() -> None:
    if find_library("OpenCL") is None:
        pytest.skip("missing opencl: no libOpenCL (ocl-icd-opencl-dev)")
    from tg.drivers.autogen import opencl

    count = ctypes.c_uint32(0)
    status = opencl.clGetPlatformIDs(0, None, ctypes.byref(count))
    if status == PLATFORM_NOT_FOUND_KHR or count.value == 0:
        pytest.skip("missing opencl: no OpenCL platform (pocl-opencl-icd)")
    assert status == opencl.CL_SUCCESS
    platforms = (opencl.cl_platform_id * count.value)()
    assert opencl.clGetPlatformIDs(count.value, platforms, None) == opencl.CL_SUCCESS
    name = ctypes.create_string_buffer(256)
    size = ctypes.c_size_t(0)
    status = opencl.clGetPlatformInfo(platforms[0], opencl.CL_PLATFORM_NAME, 256, name, ctypes.byref(size))
    assert status == opencl.CL_SUCCESS
    assert size.value == len(name.value) + 1 and name.value  # NUL-terminated, e.g. b"Portable Computing Language"
