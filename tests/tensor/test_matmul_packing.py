"""A right operand whose column strips alias in the CPU cache is packed strip by strip before the matmul (issue 23:
a GPT-2 MLP's 768x3072 weight ran at a third of the 768x2304 one's speed): the scheduler's layout stage,
tg.codegen.schedule.layout."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tg.codegen.opt import KernelOptimizer, Opt, OptOps, hand_coded_optimizations
from tg.codegen.pipeline import CodegenFlags, lower_kernel
from tg.codegen.schedule import layout
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.ops import Ops, UOp
from tg.hcq import Device
from tg.tensor import Tensor
from tg.tensor.linalg import constant_view

pytestmark = pytest.mark.usefixtures("cpu_default")  # packing is for the CPU's caches: these tensors live on the CPU


def kernel_count(tensor: Tensor) -> int:
    return sum(isinstance(item, KernelCall) for item in create_schedule((tensor.uop,)).items)


@pytest.fixture
def l2_2mib(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU device's Target with a 2 MiB L2 (its renderer swapped for one holding that Target): the layout stage
    then packs as on a machine with that cache, whatever this one has."""
    device = Device["CPU"]
    monkeypatch.setattr(device, "renderer", type(device.renderer)(replace(device.target, l2_bytes=2 << 20)))


def test_strips_alias_when_k_rows_a_power_of_two_apart_outnumber_the_sets_they_use(l2_2mib: None) -> None:
    # rows 12 KiB apart (768x3072 float32): period 4096, so 2 MiB / 4096 = 512 lines fit; 768 do not
    assert layout.strips_alias_in_cache(768, 3072 * 4, 2 << 20)
    # 9 KiB apart (768x2304): period 1024, 2048 lines fit
    assert not layout.strips_alias_in_cache(768, 2304 * 4, 2 << 20)
    # 3 KiB apart but 3072 rows (the 3072x768 down projection): period 1024, 2048 < 3072
    assert layout.strips_alias_in_cache(3072, 768 * 4, 2 << 20)
    assert not layout.strips_alias_in_cache(512, 512 * 4, 2 << 20)


def test_a_packed_matmul_is_a_copy_and_a_product_and_equals_numpy(l2_2mib: None) -> None:
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((64, 768)).astype(np.float32), rng.standard_normal((768, 1024)).astype(np.float32)
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
    assert kernel_count(a @ b) == 2  # the strip-major copy of b, then the product
    np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-3)


def test_no_packing_for_few_rows_computed_operands_or_harmless_strides(l2_2mib: None) -> None:
    b = Tensor.rand(768, 1024).realize()
    assert kernel_count(Tensor.rand(8, 768).realize() @ b) == 1  # a decode step sweeps each strip once
    a = Tensor.rand(32, 768).realize()
    assert kernel_count(a @ (b * 2)) == 1  # the scaled weight is computed inside the product, not stored
    columns = Tensor.rand(768, 2304).realize()[:, :1152]  # 9 KiB rows: period 1024, 2048 lines fit
    assert kernel_count(a @ columns) == 1  # a view of part of a buffer, not a weight: not kept, not worth a copy


def test_a_realized_weight_is_packed_even_when_its_strips_fit(l2_2mib: None) -> None:
    """Its packed copy is kept (tg.hcq.engine.kept), so the copy is paid once, and the packed product is faster."""
    w = Tensor.rand(768, 1152).realize()
    assert not layout.strips_alias_in_cache(768, 1152 * 4, 2 << 20)
    assert kernel_count(Tensor.rand(32, 768).realize() @ w) == 2
    w.requires_grad_()  # a trained weight changes at every step: a copy per product does not pay where strips fit
    assert kernel_count(Tensor.rand(32, 768).realize() @ w) == 1


def test_packed_matmul_gradients_match_numpy(l2_2mib: None) -> None:
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal((32, 640)).astype(np.float32), rng.standard_normal((640, 2048)).astype(np.float32)
    assert layout.strips_alias_in_cache(640, 2048 * 4, 2 << 20)
    a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
    (a @ b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.ones((32, 2048), np.float32) @ b_np.T, rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(b.grad.numpy(), a_np.T @ np.ones((32, 2048), np.float32), rtol=1e-4, atol=1e-2)


def test_a_transposed_right_operand_is_packed_in_one_copy() -> None:
    """nn.Linear's x @ w.T and attention's q @ k^T: the product's vector lanes would walk w with a stride of a row."""
    rng = np.random.default_rng(2)
    x_np, w_np = rng.standard_normal((64, 512)).astype(np.float32), rng.standard_normal((512, 512)).astype(np.float32)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    assert kernel_count(x @ w.T) == 2
    np.testing.assert_allclose((x @ w.T).numpy(), x_np @ w_np.T, rtol=1e-4, atol=1e-3)
    assert kernel_count(Tensor.rand(64, 32).realize() @ Tensor.rand(32, 32).realize().T) == 1  # small: no copy


def test_batched_scores_pack_the_transposed_keys() -> None:
    rng = np.random.default_rng(3)
    q_np, k_np = (rng.standard_normal((1, 12, 128, 64)).astype(np.float32) for _ in range(2))
    q, k = Tensor(q_np).realize(), Tensor(k_np).realize()
    scores = q @ k.transpose(-1, -2)
    assert kernel_count(scores) == 2
    np.testing.assert_allclose(scores.numpy(), q_np @ k_np.transpose(0, 1, 3, 2), rtol=1e-4, atol=1e-3)


def test_keys_sliced_from_a_projection_in_the_same_graph_are_packed() -> None:
    """The projection is a reduction the scores' reduction reads, so it gets a buffer: its keys are in memory."""
    rng = np.random.default_rng(4)
    x_np, w_np = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((64, 1536)).astype(np.float32)
    kv = Tensor(x_np).realize() @ Tensor(w_np).realize()
    q, k = (kv[:, i * 768 : (i + 1) * 768].reshape(128, 12, 64).transpose(0, 1) for i in range(2))
    scores = q @ k.transpose(-1, -2)
    assert kernel_count(scores) == 4  # the packed weight, the projection, the packed keys, the scores
    kv_np = x_np @ w_np
    q_np, k_np = (kv_np[:, i * 768 : (i + 1) * 768].reshape(128, 12, 64).transpose(1, 0, 2) for i in range(2))
    np.testing.assert_allclose(scores.numpy(), q_np @ k_np.transpose(0, 2, 1), rtol=1e-4, atol=1e-2)


def kernel_names(tensor: Tensor) -> list[str]:
    return [item.ast.arg.name for item in create_schedule((tensor.uop,)).items if isinstance(item, KernelCall)]


def output_loops_open_at_each_reduce_loop(ast: UOp) -> list[int]:
    """For the lowered program of `ast`: how many output loops are open where each reduce loop opens."""
    open_outputs: list[UOp] = []
    depths = []
    for node in lower_kernel(ast, CodegenFlags()).src:
        if node.op is Ops.RANGE and node.arg.axis_type in (AxisType.LOOP, AxisType.GLOBAL):
            open_outputs.append(node)
        elif node.op is Ops.RANGE and node.arg.axis_type is AxisType.REDUCE:
            depths.append(len(open_outputs))
        elif node.op is Ops.END and node.src[0] in open_outputs:
            open_outputs.remove(node.src[0])
    return depths


def test_the_input_gradient_of_a_packed_product_is_a_packed_product_of_its_own(l2_2mib: None) -> None:
    """d_x = g @ w^T: w^T is packed into strips of 16 columns (48 strips of 3072 rows) and the product reads them, as
    a forward product would; the primitives' gradient was one reduction over the packed copy of w along its strips
    (r_128_768_192_16), its vector lanes 16 elements apart (issue 23: 25 ms against 5 ms)."""
    rng = np.random.default_rng(5)
    x_np, w_np = rng.standard_normal((128, 768)).astype(np.float32), rng.standard_normal((768, 3072)).astype(np.float32)
    g_np = rng.standard_normal((128, 3072)).astype(np.float32)
    x, w = Tensor(x_np, requires_grad=True).realize(), Tensor(w_np).realize()
    ((x @ w) * Tensor(g_np).realize()).sum().backward()
    calls = [item for item in create_schedule((x.grad.uop,)).items if isinstance(item, KernelCall)]
    packs = [call for call in calls if call.kept]
    assert [call.ast.arg.name for call in packs] == ["E_48_3072_16"]  # w^T in 48 strips of 3072 rows
    assert packs[0].buffers[0] in calls[-1].buffers  # the product reads them
    assert "r_128_768_192_16" not in [call.ast.arg.name for call in calls]
    np.testing.assert_allclose(x.grad.numpy(), g_np @ w_np.T, rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_weight_update_through_a_batch_is_one_reduction(batch: int) -> None:
    """A block's activations (batch, tokens, dim) times a weight: the weight gradient sums the products of all rows in
    one reduction, and the update fuses into it (a second reduction over the batch axis, even of size 1, took two
    more kernels)."""
    rng = np.random.default_rng(6)
    x_np = rng.standard_normal((batch, 64, 96)).astype(np.float32)
    w_np = rng.standard_normal((96, 80)).astype(np.float32)
    g_np = rng.standard_normal((batch, 64, 80)).astype(np.float32)
    x, w = Tensor(x_np).realize(), Tensor(w_np, requires_grad=True).realize()
    ((x @ w) * Tensor(g_np).realize()).sum().backward()
    update = w.detach() - 0.5 * w.grad
    names = kernel_names(update)  # (the output gradient g * 1 may be stored first)
    assert [name for name in names if name.startswith("r_")] == [names[-1]]  # one reduction, the update fused in it
    expected = w_np - 0.5 * x_np.reshape(-1, 96).T @ g_np.reshape(-1, 80)
    np.testing.assert_allclose(update.numpy(), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    ("left_shape", "right_shape"),
    [((2, 3, 5, 7), (7, 4)), ((5, 7), (2, 7, 4)), ((3, 1, 5, 7), (2, 7, 4)), ((1, 5, 7), (7, 4)), ((7,), (7, 4)),
     ((5, 7), (7,))],
)  # fmt: skip
def test_product_gradients_with_broadcast_batches_match_numpy(left_shape: tuple, right_shape: tuple) -> None:
    rng = np.random.default_rng(7)
    a_np, b_np = rng.standard_normal(left_shape).astype(np.float32), rng.standard_normal(right_shape).astype(np.float32)
    g_np = rng.standard_normal(np.matmul(a_np, b_np).shape).astype(np.float32)
    a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
    ((a @ b) * Tensor(g_np)).sum().backward()
    # numpy oracle: matrices for the 1-d operands, the products' gradients, then summed back over broadcast axes
    a2, b2 = a_np.reshape(1, -1) if a_np.ndim == 1 else a_np, b_np.reshape(-1, 1) if b_np.ndim == 1 else b_np
    g2 = g_np.reshape(np.matmul(a2, b2).shape)
    da, db = np.matmul(g2, np.swapaxes(b2, -1, -2)), np.matmul(np.swapaxes(a2, -1, -2), g2)
    for grad, full, shape in ((a.grad, da, a2.shape), (b.grad, db, b2.shape)):
        extra = full.ndim - len(shape)
        full = full.sum(tuple(range(extra)))
        full = full.sum(tuple(i for i, s in enumerate(shape) if s == 1 and full.shape[i] != 1), keepdims=True)
        np.testing.assert_allclose(grad.numpy().reshape(shape), full, rtol=1e-4, atol=1e-4)


def test_a_sum_loss_gradient_is_one_row_of_the_product_broadcast(l2_2mib: None) -> None:
    """The gradient of (x @ w).sum() is one constant: every row of g @ w^T is the same, and every column of x^T @ g,
    so each is one vector of sums (no copy of w^T into strips, no product of 128 equal rows). The sums may be fused
    into the kernel that broadcasts them (a row reduction, tg.codegen.schedule.realize.fuse_row_reduction), but each
    is computed once per row: its reduce loop opens inside one output loop only."""
    rng = np.random.default_rng(8)
    x_np, w_np = rng.standard_normal((128, 768)).astype(np.float32), rng.standard_normal((768, 1024)).astype(np.float32)
    x, w = Tensor(x_np, requires_grad=True).realize(), Tensor(w_np, requires_grad=True).realize()
    (x @ w).sum().backward()
    for grad in (x.grad, w.grad):
        (reduction,) = [
            item.ast
            for item in create_schedule((grad.uop,)).items
            if isinstance(item, KernelCall) and item.ast.arg.name.startswith("r_")
        ]
        assert output_loops_open_at_each_reduce_loop(reduction) == [1]  # a vector of sums: one per row
    ones = np.ones((128, 1024), np.float32)
    np.testing.assert_allclose(x.grad.numpy(), ones @ w_np.T, rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(w.grad.numpy(), x_np.T @ ones, rtol=1e-4, atol=1e-2)


def test_a_constant_leaf_that_requires_grad_gets_its_gradient_in_every_row() -> None:
    w_np = np.random.default_rng(9).standard_normal((16, 8)).astype(np.float32)
    ones = Tensor.ones(4, 16).requires_grad_()
    assert constant_view(ones.uop)
    ((ones @ Tensor(w_np)) * Tensor(np.arange(32, dtype=np.float32).reshape(4, 8))).sum().backward()
    np.testing.assert_allclose(ones.grad.numpy(), np.arange(32, dtype=np.float32).reshape(4, 8) @ w_np.T, rtol=1e-5)


def packing_opts(left: Tensor, right: Tensor) -> tuple[Opt, ...]:
    (pack,) = [
        item for item in create_schedule(((left @ right).uop,)).items if isinstance(item, KernelCall) and item.kept
    ]
    return tuple(hand_coded_optimizations(KernelOptimizer(pack.ast)))


def test_packing_a_row_major_weight_reads_four_strips_of_a_row_per_step() -> None:
    """(strips, k, 16) from (k, m): each row step of the copy reads 4 adjacent lines of the row instead of one
    (tg.codegen.opt.heuristics.upcast_row_runs); a transposed weight's copy reads rows along its innermost axis."""
    x, w = Tensor.rand(128, 768).realize(), Tensor.rand(768, 3072).realize()
    assert packing_opts(x, w) == (Opt(OptOps.UPCAST, 0, 4),)
    assert packing_opts(Tensor.rand(128, 3072).realize(), w.T) == ()


def test_a_left_operand_with_scattered_rows_is_copied_first() -> None:
    """Attention's output (heads, tokens, 64) viewed as (tokens, heads * 64): each row is 12 runs 32 KiB apart. The
    product reads a contiguous copy instead (a kernel of its own); a view whose rows stay whole is read in place."""
    rng = np.random.default_rng(10)
    a_np, w_np = (
        rng.standard_normal((1, 12, 128, 64)).astype(np.float32),
        rng.standard_normal((768, 768)).astype(np.float32),
    )
    a, w = Tensor(a_np, requires_grad=True).realize(), Tensor(w_np).realize()
    left = a.transpose(1, 2).reshape(1, 128, 768)
    assert layout.scattered_rows(left.uop)
    assert not layout.scattered_rows(a.transpose(1, 2).uop)  # rows of 64, whole (the queries of q @ k^T)
    calls = [item for item in create_schedule(((left @ w).uop,)).items if isinstance(item, KernelCall)]
    copies = [call for call in calls if not call.kept and call is not calls[-1]]
    assert len(copies) == 1 and copies[0].buffers[0] in calls[-1].buffers  # the product reads the copy
    g_np = rng.standard_normal((1, 128, 768)).astype(np.float32)
    ((left @ w) * Tensor(g_np)).sum().backward()
    left_np = a_np.transpose(0, 2, 1, 3).reshape(1, 128, 768)
    np.testing.assert_allclose((left @ w).numpy(), left_np @ w_np, rtol=1e-4, atol=1e-3)
    expected = (g_np @ w_np.T).reshape(1, 128, 12, 64).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-4, atol=1e-3)
