"""The layout policy is a schedule stage (tg.codegen.schedule.layout): the Tensor front end builds the same graph
whatever the machine's caches, and only the kernels the scheduler makes for a device's Target differ."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest

from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.target import Target
from tg.codegen.uop.ops import Ops, UOp
from tg.hcq import Device
from tg.tensor import Tensor

pytestmark = pytest.mark.usefixtures("cpu_default")  # the layout stage packs for the CPU caches: tensors on the CPU

SMALL_L2, LARGE_L2 = 1 << 18, 4 << 20


@contextmanager
def cpu_with_l2(monkeypatch: pytest.MonkeyPatch, l2_bytes: int) -> Iterator[Target]:
    """The CPU device as a machine with an L2 of `l2_bytes` (its renderer holding that Target) inside the block."""
    device = Device["CPU"]
    target = replace(device.target, l2_bytes=l2_bytes)
    with monkeypatch.context() as patch:
        patch.setattr(device, "renderer", type(device.renderer)(target))
        yield target


def kernels(roots: tuple[UOp, ...], target: Target) -> list[KernelCall]:
    schedule = create_schedule(roots, lambda device: target)
    return [item for item in schedule.items if isinstance(item, KernelCall)]


def packs(calls: list[KernelCall]) -> int:
    """The kernels that copy one buffer into a packed layout (a CONTIGUOUS marked KEPT_COPY) the engine may keep."""
    return sum(call.kept for call in calls)


def products(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((128, 768)).astype(np.float32), rng.standard_normal((768, 3072)).astype(np.float32)


def test_a_matmul_builds_one_graph_on_every_l2_and_is_packed_only_where_strips_alias(monkeypatch) -> None:
    """768 rows 12 KiB apart: 512 of them fit a 2 MiB L2's sets, 64 a 256 KiB one's, 1024 a 4 MiB one's. The graph
    (and its key) is the same for both machines; the schedule packs the weight only for the small L2."""
    x_np, w_np = products(0)
    x, w = Tensor(x_np).realize(), Tensor(w_np, requires_grad=True).realize()  # trained: packed only if strips alias
    with cpu_with_l2(monkeypatch, SMALL_L2) as small:
        graph_small = (x @ w).uop
    with cpu_with_l2(monkeypatch, LARGE_L2) as large:
        graph_large = (x @ w).uop
    assert graph_small is graph_large
    assert not any(u.op is Ops.CONTIGUOUS for u in graph_small.toposort())  # no layout in the front end's graph
    assert packs(kernels((graph_small,), small)) == 1 and len(kernels((graph_small,), small)) == 2
    assert packs(kernels((graph_large,), large)) == 0 and len(kernels((graph_large,), large)) == 1
    for l2 in (SMALL_L2, LARGE_L2):
        with cpu_with_l2(monkeypatch, l2):
            np.testing.assert_allclose((x @ w).numpy(), x_np @ w_np, rtol=1e-4, atol=1e-3)


def test_a_device_that_is_not_a_cpu_gets_no_packing() -> None:
    x_np, w_np = products(1)
    graph = (Tensor(x_np).realize() @ Tensor(w_np).realize()).uop
    assert packs(kernels((graph,), Target(family="CPU", l2_bytes=SMALL_L2))) == 1
    assert packs(kernels((graph,), Target(family="PYTHON", l2_bytes=SMALL_L2))) == 0


def conv_inputs(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (4, 8, 32, 32), w (16, 8, 3, 3) and the oracle of d(sum of the padded 3x3 conv)/dw (a sum over pixels)."""
    rng = np.random.default_rng(seed)
    x_np = rng.standard_normal((4, 8, 32, 32)).astype(np.float32)
    w_np = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    padded = np.pad(x_np, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oracle = np.empty_like(w_np)
    for i in range(3):
        for j in range(3):  # d(sum out)/dw[o, c, i, j] = sum over n, pixels of x_padded[n, c, y + i, x + j]
            oracle[:, :, i, j] = padded[:, :, i : i + 32, j : j + 32].sum(axis=(0, 2, 3))[None, :]
    return x_np, w_np, oracle


def test_a_conv_weight_gradient_builds_one_graph_on_every_l2_and_is_chunked_only_where_it_does_not_fit(
    monkeypatch,
) -> None:
    """The operands of all 32 rows of 4 images take 4 * 32 * (16 + 8) * 32 * 4 bytes = 384 KiB: a quarter of a 4 MiB
    L2 holds them (one reduction), of a 256 KiB one it does not (partial results per chunk, then their sum)."""
    x_np, w_np, oracle = conv_inputs(2)
    x, w = Tensor(x_np).realize(), Tensor(w_np, requires_grad=True).realize()
    with cpu_with_l2(monkeypatch, SMALL_L2) as small:
        (grad_small,) = x.conv2d(w, padding=1).sum().gradient(w)
    with cpu_with_l2(monkeypatch, LARGE_L2) as large:
        (grad_large,) = x.conv2d(w, padding=1).sum().gradient(w)
    assert grad_small.uop is grad_large.uop
    reductions = {
        name: sum(u.op is Ops.REDUCE for call in kernels((grad_small.uop,), target) for u in call.ast.toposort())
        for name, target in (("small", small), ("large", large))
    }
    assert reductions["small"] == reductions["large"] + 1  # the partials' own sum
    for l2 in (SMALL_L2, LARGE_L2):
        with cpu_with_l2(monkeypatch, l2):
            np.testing.assert_allclose(grad_small.numpy(), oracle, rtol=1e-4, atol=1e-3)


def test_the_layout_stage_runs_alone_and_leaves_no_tags() -> None:
    """The stage is a named object of the scheduler's list: run by itself it packs for one Target and not for
    another, and the graph it gives has no tags left for the later stages."""
    from tg.codegen.schedule.graph import KEPT_COPY
    from tg.codegen.schedule.schedule import GRAPH_STAGES

    (stage,) = [stage for stage in GRAPH_STAGES if stage.name == "layout policy"]
    x_np, w_np = products(3)
    graph = (Tensor(x_np).realize() @ Tensor(w_np, requires_grad=True).realize()).uop
    assert graph.tag is not None
    for l2, packed in ((SMALL_L2, True), (LARGE_L2, False)):
        (laid_out,) = stage.run((graph,), lambda device, l2=l2: Target(family="CPU", l2_bytes=l2))
        nodes = laid_out.toposort()
        assert all(node.tag is None for node in nodes)
        assert any(node.op is Ops.CONTIGUOUS and node.arg == KEPT_COPY for node in nodes) == packed
