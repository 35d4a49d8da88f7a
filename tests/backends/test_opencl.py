"""OpenCL on a real driver: the CL device over libOpenCL (tg-autogen bindings), kernels from the OpenCL C renderer.

On a machine without an OpenCL driver these tests skip, naming the package that provides one on Debian (PoCL).
LOCAL opts become work-group dimensions here, so they are checked on real execution against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.codegen.compiler import CompileError
from tg.codegen.opt import Opt, OptOps
from tg.hcq import Device
from tg.hcq.devices.cl import all_devices
from tg.tensor import Tensor

from .kernels import row_sums, run_kernel, scaled_grid

pytestmark = pytest.mark.skipif(
    not all_devices(), reason="missing opencl: no OpenCL device; install pocl-opencl-icd (PoCL) to run the CL tests"
)

rng = np.random.default_rng(7)


def test_device_opens_and_names_its_driver() -> None:
    cl = Device["CL"]
    assert cl.device == "CL" and cl.device_name and cl.platform_name
    assert type(cl.renderer).__name__ == "OpenCLRenderer"


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.uint8, np.int64])
def test_tensor_ops_match_numpy(dtype) -> None:  # noqa: ANN001
    a = rng.uniform(-20, 20, (9, 13)).astype(dtype)
    b = rng.uniform(1, 5, (9, 13)).astype(dtype)
    got = (Tensor(a, device="CL") * Tensor(b, device="CL") + Tensor(a, device="CL")).max(axis=0).numpy()
    np.testing.assert_array_equal(got, (a * b + a).max(axis=0))


def test_matmul_and_bool_buffers() -> None:
    a, b = rng.standard_normal((33, 47)).astype(np.float32), rng.standard_normal((47, 20)).astype(np.float32)
    np.testing.assert_allclose((Tensor(a, device="CL") @ Tensor(b, device="CL")).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    mask = (Tensor(a, device="CL") > 0).numpy()
    np.testing.assert_array_equal(mask, a > 0)


def test_integer_edge_cases_agree_with_the_emulator() -> None:
    a = np.array([7, -7, -(2**31), 5, 9], dtype=np.int32)
    b = np.array([0, 2, -1, -1, 4], dtype=np.int32)
    to_int = lambda x, y: (x.cast(dtypes.float32) / 0).cast(dtypes.int32)  # noqa: E731 - inf and nan to int
    for build in (lambda x, y: x // y, lambda x, y: x % y, to_int):
        got = build(Tensor(a, device="CL"), Tensor(b, device="CL")).numpy()
        np.testing.assert_array_equal(got, build(Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON")).numpy())


def test_output_loops_become_work_groups() -> None:
    a, b = rng.standard_normal((6, 10)).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    got, src = run_kernel(scaled_grid(6, 10), "CL", [a, b], 60, opts=())
    assert "get_group_id(1)" in src and "get_group_id(0)" in src and "for (" not in src
    np.testing.assert_array_equal(got.reshape(6, 10), a * 3 + b)


@pytest.mark.parametrize(
    "opts, local",
    [
        ((Opt(OptOps.LOCAL, 1, 4),), "reqd_work_group_size(4, 1, 1)"),
        # four output ranges: the three outer ones are the grid, the last local range a loop in each thread
        ((Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 8)), "reqd_work_group_size(2, 1, 1)"),
        ((Opt(OptOps.LOCAL, 0, 3), Opt(OptOps.UPCAST, 1, 2)), "reqd_work_group_size(3, 1, 1)"),
    ],
)
def test_local_opts_run_as_work_group_threads(opts, local) -> None:  # noqa: ANN001
    a, b = rng.standard_normal((12, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    got, src = run_kernel(scaled_grid(12, 16), "CL", [a, b], 192, opts=opts)
    assert "get_local_id(" in src and local in src
    np.testing.assert_array_equal(got.reshape(12, 16), a * 3 + b)


@pytest.mark.parametrize(
    "opts",
    [(), (Opt(OptOps.LOCAL, 0, 4),), (Opt(OptOps.GROUP, 0, 4),), (Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 4))],
)
def test_reductions_with_local_and_group_opts_match_numpy(opts) -> None:  # noqa: ANN001
    a = rng.standard_normal((8, 32)).astype(np.float32)
    got, _ = run_kernel(row_sums(8, 32), "CL", [a], 8, opts=opts)
    np.testing.assert_allclose(got, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_bad_source_raises_compile_error_with_the_build_log() -> None:
    with pytest.raises(CompileError, match="undeclared|error"):
        Device["CL"].compiler.compile_uncached("__kernel void k(__global float* a) { a[0] = nope; }")


def test_binaries_are_cached_on_disk(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from tg.codegen.flags import Context

    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    compiler = Device["CL"].compiler
    source = "__kernel void cached(__global float* a) { a[get_global_id(0)] += 1.0f; }"
    with Context(CACHELEVEL=1):
        first = compiler.compile(source)
        calls = []
        original = compiler.compile_uncached
        compiler.compile_uncached = lambda src: calls.append(src) or original(src)  # type: ignore[method-assign]
        try:
            assert compiler.compile(source) == first and not calls
        finally:
            del compiler.compile_uncached
    assert "opencl|" in compiler.identity()


@pytest.mark.parametrize(
    "opts, reduce_op",
    [
        ((Opt(OptOps.GROUP, 0, 4),), "sum"),
        ((Opt(OptOps.GROUPTOP, 0, 8), Opt(OptOps.UPCAST, 0, 2)), "sum"),
        ((Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 16)), "sum"),
    ],
)
def test_group_reductions_meet_in_local_memory_behind_barriers(opts, reduce_op) -> None:  # noqa: ANN001
    """GROUP opts: the threads of a work-group each reduce a share; partials combine through __local memory."""
    a = rng.standard_normal((8, 64)).astype(np.float32)
    got, src = run_kernel(row_sums(8, 64), "CL", [a], 8, opts=opts)
    assert "__local float tg_group0[" in src and src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2
    np.testing.assert_allclose(got, a.sum(axis=1), rtol=1e-5, atol=1e-5)
