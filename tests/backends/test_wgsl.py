"""WGSL checked by naga, the WebGPU shader compiler inside wgpu-native (the `wgpu` wheel, dependency group
`wgsl-check`), and run on a software adapter: Mesa's lavapipe (Vulkan, `apt-get install mesa-vulkan-drivers`) or
llvmpipe (OpenGL). Without `wgpu` or without any adapter these tests skip, naming what to install.

1. Every WGSL kernel of the tensor programs of tests/backends/test_gpu_render.py, and a GROUP_REDUCE kernel (workgroup
   memory and barriers), passes naga's parser and validator and compiles to a compute pipeline.
2. Kernels run on the adapter and match numpy (grid, LOCAL and GROUP opts) and the edge-case table
   (tg.codegen.uop.alu.EDGE_CASES) for the dtypes WGSL has.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import pytest

from tg.codegen import KernelInfo, Ops, UOp, dtypes
from tg.codegen.dtype import DType, to_numpy
from tg.codegen.opt import Opt, OptOps
from tg.codegen.pipeline import CodegenFlags, lower_kernel, with_opts
from tg.codegen.render.gpu import GPUKernel
from tg.codegen.render.wgsl import WGSLRenderer

from .kernels import row_dots, row_sums, scaled_grid
from .test_edge_cases_backends import ROWS, result_dtype, same

INSTALL = "uv sync --group wgsl-check, and a software adapter: apt-get install mesa-vulkan-drivers"


@pytest.fixture(scope="module")
def gpu() -> Any:
    """A wgpu device with f16 when the adapter has it; skips naming what to install."""
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # Mesa's window-system probe warns without one
    wgpu = pytest.importorskip("wgpu", reason=f"missing wgpu: the wheel is not installed: {INSTALL}")
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="low-power")
    except RuntimeError as error:
        pytest.skip(f"missing wgpu: it found no adapter ({error}): {INSTALL}")
    if adapter is None:
        pytest.skip(f"missing wgpu: it found no adapter: {INSTALL}")
    features = [f for f in ("shader-f16",) if f in adapter.features]
    limits = {"max-storage-buffers-per-shader-stage": adapter.limits["max-storage-buffers-per-shader-stage"]}
    return adapter.request_device_sync(required_features=features, required_limits=limits)


def pipeline(gpu: Any, source: str) -> Any:
    """naga parses and validates `source`, then wgpu builds a compute pipeline from it (raises on an error)."""
    module = gpu.create_shader_module(code=source)
    entry = re.search(r"\bfn (\w+)\(", source)
    assert entry is not None, source
    return gpu.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": entry.group(1)})


def run(gpu: Any, kernel: GPUKernel, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Launch `kernel` on buffers holding `arrays` (bool arrays as WGSL's u32); the buffers' contents after."""
    import wgpu

    compute = pipeline(gpu, kernel.src)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
    stored = [a.astype(np.uint32) if a.dtype == np.bool_ else a for a in arrays]
    buffers = [gpu.create_buffer_with_data(data=np.ascontiguousarray(a).tobytes(), usage=usage) for a in stored]
    bindings = [{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in enumerate(buffers)]
    group = gpu.create_bind_group(layout=compute.get_bind_group_layout(0), entries=bindings)
    encoder = gpu.create_command_encoder()
    compute_pass = encoder.begin_compute_pass()
    compute_pass.set_pipeline(compute)
    compute_pass.set_bind_group(0, group)
    compute_pass.dispatch_workgroups(*kernel.global_size)
    compute_pass.end()
    gpu.queue.submit([encoder.finish()])
    results = [np.frombuffer(gpu.queue.read_buffer(b), a.dtype).copy() for a, b in zip(stored, buffers, strict=True)]
    return [r.astype(np.bool_) if a.dtype == np.bool_ else r for a, r in zip(arrays, results, strict=True)]


def group_reduction(rows: int = 8, cols: int = 64) -> GPUKernel:
    opts = (Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 16))
    return WGSLRenderer().render(lower_kernel(with_opts(row_sums(rows, cols), opts), CodegenFlags(has_local=True)))


def test_naga_validates_every_wgsl_kernel(gpu, capsys) -> None:  # noqa: ANN001
    from .test_gpu_render import rendered_sources

    sources = [*rendered_sources("WGSL", capsys), group_reduction().src]
    assert len(sources) >= 9
    for source in sources:
        pipeline(gpu, source)


def test_the_naga_check_is_not_vacuous(gpu) -> None:  # noqa: ANN001
    with pytest.raises(Exception, match="nope"):
        pipeline(gpu, group_reduction().src.replace("workgroupBarrier();", "nope();", 1))


def test_group_reduce_uses_workgroup_memory_and_matches_numpy(gpu) -> None:  # noqa: ANN001
    kernel = group_reduction()
    assert "var<workgroup> tg_group0: array<f32, 32>;" in kernel.src and "workgroupBarrier();" in kernel.src
    assert kernel.local_size == (2, 1, 16)
    a = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
    out, _ = run(gpu, kernel, [np.zeros(8, np.float32), a.reshape(-1)])
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opts", [(), (Opt(OptOps.LOCAL, 1, 4),), (Opt(OptOps.LOCAL, 0, 3), Opt(OptOps.UPCAST, 1, 4))])
def test_grid_kernels_run_and_match_numpy(gpu, opts) -> None:  # noqa: ANN001
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((12, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    linear = lower_kernel(with_opts(scaled_grid(12, 16), opts), CodegenFlags(has_local=True))
    out, _, _ = run(gpu, WGSLRenderer().render(linear), [np.zeros(192, np.float32), a.reshape(-1), b])
    np.testing.assert_allclose(out.reshape(12, 16), a * 3 + b, rtol=1e-6)


WGSL_DTYPES = (dtypes.int32, dtypes.uint32, dtypes.float32)
# What WGSL does not promise bit for bit: exp2, log2, sin and pow are within its precision rules, not correctly
# rounded, and fma need not round once (lavapipe computes fma(a, b, c) as a * b + c, two roundings).
NOT_EXACT_IN_WGSL = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW, Ops.MULACC)


def edge_row_kernel(op: Ops, dtype: DType, arity: int) -> UOp:
    zero = UOp.const(0, dtypes.index)
    loaded = tuple(UOp.param(1 + k, dtype, 1).index(zero).load() for k in range(arity))
    out = UOp.param(0, result_dtype(op, dtype), 1).index(zero).store(UOp(op, result_dtype(op, dtype), loaded))
    return UOp.sink(out, arg=KernelInfo(f"edge_{op.name.lower()}"))


@pytest.mark.parametrize(
    "name, op, dtype, operands, expected", [r for r in ROWS if r[2] in WGSL_DTYPES and r[1] not in NOT_EXACT_IN_WGSL]
)
def test_edge_case_table_on_wgsl(gpu, name, op, dtype, operands, expected) -> None:  # noqa: ANN001
    linear = lower_kernel(edge_row_kernel(op, dtype, len(operands)), CodegenFlags(noopt=True, has_local=True))
    arrays = [np.zeros(1, to_numpy(result_dtype(op, dtype)))] + [np.array([v], to_numpy(dtype)) for v in operands]
    got = run(gpu, WGSLRenderer().render(linear), arrays)[0][0].item()
    assert same(got, expected), (name, got, expected)


def test_bool_max_is_an_or(gpu) -> None:  # noqa: ANN001
    """Regression (found by naga on the tensor suite under NULL:WGSL): a max of bools (any-style reductions) was
    rendered as `a > b`, which WGSL does not define on bools."""
    linear = lower_kernel(edge_row_kernel(Ops.MAX, dtypes.bool, 2), CodegenFlags(noopt=True, has_local=True))
    for a, b in ((False, False), (False, True), (True, False), (True, True)):
        arrays = [np.zeros(1, np.bool_), np.array([a]), np.array([b])]
        assert run(gpu, WGSLRenderer().render(linear), arrays)[0][0] == (a or b)


def test_group_reduce_of_a_dot_product_runs(gpu) -> None:  # noqa: ANN001
    """A GROUP_REDUCE whose accumulator is updated by MULACC: the partials are added (see test_ptx.py)."""
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    linear = lower_kernel(with_opts(row_dots(8, 64), (Opt(OptOps.GROUP, 0, 16),)), CodegenFlags(has_local=True))
    out, _, _ = run(gpu, WGSLRenderer().render(linear), [np.zeros(8, np.float32), a.reshape(-1), b])
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
