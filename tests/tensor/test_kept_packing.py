"""The packed copy of a realized weight is kept (tg.hcq.engine.kept): a later product with the same weight launches
no packing kernel, and any write to the weight (assign, an optimizer step, a TinyJit replay, a copyin) makes the
next product pack again. Training with kept copies gives the same bits as without them (issue 23)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

import tg.hcq.engine.run as engine_run
from tg.codegen import Ops, UOp
from tg.codegen.schedule.graph import KEPT_COPY, new_buffer
from tg.codegen.schedule.schedule import KernelCall, create_schedule, schedule_graph
from tg.hcq import Device
from tg.hcq.engine import GlobalCounters, buffer_of
from tg.hcq.engine.kept import kept_copy
from tg.tensor import Tensor, TinyJit
from tg.tensor.nn.optim import SGD

pytestmark = pytest.mark.usefixtures("cpu_default")  # packing is for the CPU caches: these tensors live on the CPU

ROWS, K, M = 64, 768, 1024  # rows 4 KiB apart: their strips alias in a 2 MiB L2, so the weight is packed


@pytest.fixture(autouse=True)
def l2_2mib(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU device's Target with a 2 MiB L2 (its renderer swapped for one holding that Target): the layout stage
    then packs as on a machine with that cache, whatever this one has."""
    device = Device["CPU"]
    monkeypatch.setattr(device, "renderer", type(device.renderer)(replace(device.target, l2_bytes=2 << 20)))


def launches(run: Callable[[], object]) -> int:
    """How many kernels `run` launches."""
    before = GlobalCounters.kernel_count
    run()
    return GlobalCounters.kernel_count - before


def operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((ROWS, K)).astype(np.float32), rng.standard_normal((K, M)).astype(np.float32)


def test_a_second_product_with_the_same_weight_launches_no_packing_kernel() -> None:
    x_np, w_np = operands()
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    assert launches(lambda: (x @ w).realize()) == 2  # the packing copy, then the product
    results = []
    assert launches(lambda: results.append((x @ w).numpy())) == 1  # the product alone, reading the kept copy
    assert launches(lambda: results.append((x @ w).numpy())) == 1
    for result in results:
        np.testing.assert_allclose(result, x_np @ w_np, rtol=1e-4, atol=1e-3)


def test_a_transposed_weight_keeps_its_own_packed_copy() -> None:
    x_np, w_np = operands(1)
    x, w = Tensor(x_np[:, :512].copy()).realize(), Tensor(w_np[:512, :512].copy()).realize()
    assert launches(lambda: (x @ w.T).realize()) == 2
    assert launches(lambda: (x @ w.T).realize()) == 1
    np.testing.assert_allclose((x @ w.T).numpy(), x_np[:, :512] @ w_np[:512, :512].T, rtol=1e-4, atol=1e-3)


def test_an_assign_to_the_weight_makes_the_next_product_pack_again() -> None:
    x_np, w_np = operands(2)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    (x @ w).realize()
    w.assign(w * 2 + 1).realize()
    result: list[np.ndarray] = []
    assert launches(lambda: result.append((x @ w).numpy())) == 2
    np.testing.assert_allclose(result[0], x_np @ (w_np * 2 + 1), rtol=1e-4, atol=1e-2)


def test_a_product_built_before_an_assign_reads_the_weight_as_realized_after_it() -> None:
    """The kept copy is chosen when the product is realized, not when it is built: a lazy product reads the weight
    as it is then, exactly as without kept copies."""
    x_np, w_np = operands(3)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    (x @ w).realize()  # keeps the packed copy of the old weight
    product = x @ w
    w.assign(w - 1).realize()
    np.testing.assert_allclose(product.numpy(), x_np @ (w_np - 1), rtol=1e-4, atol=1e-2)


def test_a_copyin_to_the_weights_memory_makes_the_next_product_pack_again() -> None:
    x_np, w_np = operands(4)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    (x @ w).realize()
    buffer_of(w.uop.src[0] if w.uop.op is Ops.RESHAPE else w.uop).copyin(memoryview(-w_np).cast("B"))
    np.testing.assert_allclose((x @ w).numpy(), x_np @ -w_np, rtol=1e-4, atol=1e-3)


def kept_copy_of(product: Tensor) -> weakref.ref[UOp]:
    """A weak reference to the kept copy that realizing `product` would read (it must exist)."""
    (call,) = [item for item in create_schedule((product.uop,)).items if isinstance(item, KernelCall) and item.kept]
    copy = kept_copy(call)
    assert copy is not None
    return weakref.ref(copy)


def test_the_kept_copy_is_freed_with_its_weight() -> None:
    x_np, w_np = operands(5)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    (x @ w).realize()
    copy = kept_copy_of(x @ w)
    (x @ w).realize()
    assert kept_copy_of(x @ w)() is copy()  # one copy per weight and layout, however often it is used
    del w
    gc.collect()
    assert copy() is None


def test_a_write_to_the_weight_frees_its_stale_copy_at_once() -> None:
    """A training loop does not hold last step's packed weights until the next forward copies again."""
    x_np, w_np = operands(6)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    (x @ w).realize()
    copy = kept_copy_of(x @ w)
    w.assign(w * 0.5).realize()
    gc.collect()
    assert copy() is None


def test_a_copy_that_a_result_exposes_is_not_kept() -> None:
    """A kept copy must never be written by anything outside the engine: a root of the schedule could be."""
    source = new_buffer("CPU", 64, Tensor.rand(1).dtype)
    view = UOp(Ops.PERMUTE, source.dtype, (UOp(Ops.RESHAPE, source.dtype, (source,), (8, 8)),), (1, 0))
    packed = UOp(Ops.CONTIGUOUS, source.dtype, (view,), KEPT_COPY)
    exposed = schedule_graph((packed,))
    inner = schedule_graph((UOp(Ops.ADD, source.dtype, (packed, packed)),))
    assert [item.kept for item in exposed.items if isinstance(item, KernelCall)] == [False]
    assert [item.kept for item in inner.items if isinstance(item, KernelCall)] == [True, False]


def train(steps: int, keep: bool, monkeypatch: pytest.MonkeyPatch, jit: bool = False) -> list[np.ndarray]:
    """A small two-layer model trained with SGD and momentum, evaluated twice between steps (the second evaluation
    reuses the first one's kept copies; the next step makes them stale). Returns losses, evaluations, weights."""
    rng = np.random.default_rng(6)
    x = Tensor(rng.standard_normal((ROWS, K)).astype(np.float32)).realize()
    w1 = Tensor((rng.standard_normal((K, M)) * 0.03).astype(np.float32), requires_grad=True).realize()
    w2 = Tensor((rng.standard_normal((M, 256)) * 0.03).astype(np.float32), requires_grad=True).realize()
    optimizer = SGD([w1, w2], lr=0.1, momentum=0.9)
    if not keep:
        monkeypatch.setattr(engine_run, "kept_copy", lambda call: None)

    def step(x: Tensor) -> Tensor:
        with Tensor.train():
            optimizer.zero_grad()
            loss = ((x @ w1).relu() @ w2).square().mean()
            loss.backward()
            optimizer.step()
            return loss.realize()

    run_step = TinyJit(step) if jit else step
    seen: list[np.ndarray] = []
    for _ in range(steps):
        seen.append(run_step(x).numpy())
        for _ in range(2):
            seen.append(((x @ w1).relu() @ w2).numpy())
    return seen + [w1.numpy(), w2.numpy()]


@pytest.mark.parametrize("jit", [False, True], ids=["plain", "TinyJit"])
def test_training_with_kept_copies_equals_training_without_them_bit_for_bit(
    jit: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = train(4, keep=True, monkeypatch=monkeypatch, jit=jit)
    uncached = train(4, keep=False, monkeypatch=monkeypatch, jit=jit)
    assert len(kept) == len(uncached)
    for mine, reference in zip(kept, uncached, strict=True):
        assert np.array_equal(mine, reference)
    assert not np.array_equal(kept[1], kept[4])  # the steps changed the weights the evaluations read
