"""A right operand whose column strips alias in the CPU cache is packed strip by strip before the matmul (issue 23:
a GPT-2 MLP's 768x3072 weight ran at a third of the 768x2304 one's speed): the scheduler's layout stage,
tg.codegen.schedule.layout."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tg.codegen.dtype import dtypes
from tg.codegen.opt import KernelOptError, KernelOptimizer, Opt, OptOps, hand_coded_optimizations
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
    trained = Tensor.rand(768, 3072).realize().requires_grad_()  # strips alias, but it would be copied per product
    assert kernel_count(Tensor.rand(8, 768).realize() @ trained) == 1  # 8 rows sweep each strip once
    b = Tensor.rand(768, 1024).realize()
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


@pytest.mark.parametrize("rows", [1, 8])
def test_a_realized_weight_is_packed_for_a_decode_step_and_equals_numpy(l2_2mib: None, rows: int) -> None:
    """Its copy is kept, so even 1 or 8 rows pay for it: the product then reads each strip as one run of memory."""
    rng = np.random.default_rng(2)
    a_np = rng.standard_normal((rows, 768)).astype(np.float32)
    w_np = rng.standard_normal((768, 3072)).astype(np.float32)
    a, w = Tensor(a_np).realize(), Tensor(w_np).realize()
    assert kernel_count(a @ w) == 2  # the strip-major copy of w, then the product
    np.testing.assert_allclose((a @ w).numpy(), a_np @ w_np, rtol=1e-4, atol=1e-3)


def test_a_float16_weight_is_not_packed_for_a_decode_step() -> None:
    """Its copy would hold float32 values: the decode step would read twice the bytes."""
    w = Tensor(np.ones((768, 3072), np.float16)).realize()
    assert kernel_count(Tensor(np.ones((8, 768), np.float16)).realize().matmul(w, dtype=dtypes.float32)) == 1


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


def test_rows_alias_in_l1_when_the_tile_rows_outnumber_the_ways_of_the_sets_they_use() -> None:
    # 16 rows 4 KiB apart (k = 1024 float32) all fall in one set: 12 ways of a 48 KiB L1 cannot hold them
    assert layout.rows_alias_in_l1(1024 * 4, 48 << 10)
    assert layout.rows_alias_in_l1(4096 * 4, 48 << 10)
    # 2 KiB apart: 8 rows in each of 2 sets, beside the right operand's line: fits 12 ways, not 8
    assert not layout.rows_alias_in_l1(512 * 4, 48 << 10)
    assert layout.rows_alias_in_l1(512 * 4, 32 << 10)
    # 3 KiB apart (k = 768, GPT-2): 4 sets, and an odd number of elements spreads over all of them
    assert not layout.rows_alias_in_l1(768 * 4, 48 << 10)
    assert not layout.rows_alias_in_l1(1000 * 4, 32 << 10)


def packed_calls(tensor: Tensor) -> list[KernelCall]:
    return [item for item in create_schedule((tensor.uop,)).items if isinstance(item, KernelCall) and item.kept]


def test_a_left_operand_whose_rows_alias_is_packed_into_row_tiles_and_equals_numpy() -> None:
    rng = np.random.default_rng(8)
    a_np = rng.standard_normal((48, 1024)).astype(np.float32)
    b_np = rng.standard_normal((1024, 1024)).astype(np.float32)
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
    names = [call.ast.arg.name for call in packed_calls(a @ b)]
    assert names == ["E_3_1024_16", "E_64_1024_16"]  # a in 3 tiles of 16 rows (k-major), b in 64 strips
    np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-3)
    assert kernel_count(Tensor(a_np[:, :768]).realize() @ Tensor(b_np[:768]).realize()) == 2  # 3 KiB rows: b only


def test_the_tile_of_a_row_packed_product_is_16_rows_of_a_tile_by_16_columns() -> None:
    """The heuristics upcast the rows inside a tile (the left operand's 16 values of one column share a cache line),
    not 16 tiles (16 lines 64 KiB apart): the loops left run over tiles and strips."""
    a, b = Tensor.rand(1024, 1024).realize(), Tensor.rand(1024, 1024).realize()
    product = [item for item in create_schedule(((a @ b).uop,)).items if isinstance(item, KernelCall)][-1].ast
    k = KernelOptimizer(product, core_groups=True)
    for opt in hand_coded_optimizations(k, 256):
        k.apply_opt(opt)
    loops = sorted(k.full_shape[axis] for axis in k.axes_of(AxisType.LOOP, AxisType.GLOBAL))
    assert loops == [1024 // 16, 1024 // 16]
    upcasts = sorted(k.full_shape[axis] for axis in k.axes_of(AxisType.UPCAST))
    assert upcasts == [16, 16]


@pytest.mark.parametrize(("n", "k", "m"), [(48, 1024, 1024), (40, 1024, 1056), (130, 768, 1040), (64, 520, 3072)])
def test_float16_operands_accumulate_in_float32_packed_as_float32(n: int, k: int, m: int) -> None:
    """The packed copies hold the float32 values the multiply reads: gcc 12 converts float16 one element at a time,
    so a product that converts inside its tile ran at 5 GFLOP/s (1024^3)."""
    rng = np.random.default_rng(9)
    a_np, b_np = rng.standard_normal((n, k)).astype(np.float16), rng.standard_normal((k, m)).astype(np.float16)
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
    product = a.matmul(b, dtype=dtypes.float32)
    packs = packed_calls(product)
    assert packs and all(call.ast.src[0].src[0].src[0].dtype.base is dtypes.float32 for call in packs)
    expected = a_np.astype(np.float32) @ b_np.astype(np.float32)
    np.testing.assert_allclose(product.numpy(), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    ("n", "k", "m"),
    [(1, 768, 3072), (8, 768, 3072), (128, 768, 3072), (256, 256, 256), (512, 512, 512), (1040, 1024, 1024),
     (33, 1024, 1040), (130, 100, 48)],
)  # fmt: skip
def test_matmul_shapes_of_the_bench_and_their_edges_equal_numpy(n: int, k: int, m: int) -> None:
    rng = np.random.default_rng(10)
    a_np, b_np = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
    found = (Tensor(a_np).realize() @ Tensor(b_np).realize()).numpy()
    np.testing.assert_allclose(found, a_np @ b_np, rtol=1e-4, atol=1e-3)


def product_kernel(a: Tensor, b: Tensor) -> UOp:
    return [item for item in create_schedule(((a @ b).uop,)).items if isinstance(item, KernelCall)][-1].ast


def test_a_long_reduction_shares_each_strip_across_a_group_of_row_tiles_and_equals_numpy() -> None:
    """k = 4096: the 32 row tiles are cut into 2 groups of ROW_TILES_PER_STRIP, looped inside the strips."""
    from tg.codegen.opt.heuristics import ROW_TILES_PER_STRIP

    rng = np.random.default_rng(11)
    a_np, b_np = rng.standard_normal((512, 4096)).astype(np.float32), rng.standard_normal((4096, 64)).astype(np.float32)
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
    k = KernelOptimizer(product_kernel(a, b), core_groups=True)
    for opt in hand_coded_optimizations(k, 256):
        k.apply_opt(opt)
    loops = [k.full_shape[axis] for axis in k.axes_of(AxisType.LOOP, AxisType.GLOBAL)]
    assert loops == [512 // 16 // ROW_TILES_PER_STRIP, 64 // 16, ROW_TILES_PER_STRIP]  # groups, strips, tiles
    np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-2)
    short = KernelOptimizer(product_kernel(Tensor.rand(512, 1024).realize(), Tensor.rand(1024, 64).realize()))
    assert all(opt.op is not OptOps.SPLIT for opt in hand_coded_optimizations(short, 256))


def test_strips_in_groups_that_fit_half_of_l2_are_looped_outermost_and_the_product_equals_numpy() -> None:
    """1024^3 with a 2 MiB L2 on 2 cores: 4 groups of 16 strips (1 MiB each) outermost, then the 64 row tiles, then a
    group's strips; with a 1 MiB L2, 8 groups of 8 strips; 2048^3 (k = 2048), groups of 8 strips (1 MiB); k = 4096,
    groups of 4 (1 MiB). Not without an L2 size (a GPU Target), where not even 4 strips fit half of it (k = 8192), or
    with more groups than BLOCKED_MAX_GROUPS_PER_CORE per core."""
    from tg.codegen.opt.heuristics import BLOCKED_MAX_GROUPS_PER_CORE, GROUP_STRIPS

    assert GROUP_STRIPS == (16, 8, 4)
    rng = np.random.default_rng(12)
    a_np, b_np = (
        rng.standard_normal((1024, 1024)).astype(np.float32),
        rng.standard_normal((1024, 1024)).astype(np.float32),
    )
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()

    def loops(product: UOp, l2_bytes: int, cores: int = 2) -> list[int]:
        k = KernelOptimizer(product, core_groups=True)
        for opt in hand_coded_optimizations(k, 256, 0, l2_bytes, cores):
            k.apply_opt(opt)
        return [k.full_shape[axis] for axis in k.axes_of(AxisType.LOOP, AxisType.GLOBAL)]

    product = product_kernel(a, b)
    assert loops(product, 2 << 20) == [1024 // 16 // 16, 1024 // 16, 16]
    assert loops(product, 0) == [1024 // 16, 1024 // 16]  # (no L2 size: tiles, then strips)
    assert loops(product, 1 << 20) == [1024 // 16 // 8, 1024 // 16, 8]  # 16 strips are 1 MiB: half L2 holds 8
    assert loops(product, 1 << 20, cores=1) == [1024 // 16 // 8, 1024 // 16, 8]  # 8 groups on one core
    many_groups = 2 * 16 * (BLOCKED_MAX_GROUPS_PER_CORE + 1)  # strips: more than the limit of groups per core
    wide = product_kernel(Tensor.rand(1024, 1024).realize(), Tensor.rand(1024, 16 * many_groups).realize())
    assert loops(wide, 2 << 20) == [1024 // 16, many_groups]
    np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-2)  # the CPU Target: 2 MiB L2 here
    long_k = product_kernel(Tensor.rand(2048, 2048).realize(), Tensor.rand(2048, 2048).realize())
    assert loops(long_k, 2 << 20) == [2048 // 16 // 8, 2048 // 16, 8]
    left_np, right_np = (
        rng.standard_normal((512, 2048)).astype(np.float32),
        rng.standard_normal((2048, 512)).astype(np.float32),
    )
    left, right = Tensor(left_np).realize(), Tensor(right_np).realize()
    assert loops(product_kernel(left, right), 2 << 20) == [512 // 16 // 8, 512 // 16, 8]
    np.testing.assert_allclose((left @ right).numpy(), left_np @ right_np, rtol=1e-4, atol=1e-2)
    longer_k = product_kernel(Tensor.rand(1024, 4096).realize(), Tensor.rand(4096, 256).realize())
    assert loops(longer_k, 2 << 20) == [256 // 16 // 4, 1024 // 16, 4]  # (8 strips are 2 MiB, 4 are 1 MiB)
    longest_k = product_kernel(Tensor.rand(1024, 8192).realize(), Tensor.rand(8192, 256).realize())
    assert loops(longest_k, 2 << 20) == [1024 // 16 // 16, 256 // 16, 16]  # (4 strips are 2 MiB: row tiles shared)


def test_few_row_tiles_are_looped_inside_the_strips_and_the_product_equals_numpy() -> None:
    """128x768x3072 (a GPT-2 projection over 128 tokens): 8 row tiles and 192 strips, the strips outermost. Not
    where the row tiles are as many as the strips (256^3: 16 and 16) or BLOCKED_MIN_ROW_TILES or more (512 rows)."""
    from tg.codegen.opt.heuristics import BLOCKED_MIN_ROW_TILES

    def loops(n: int, k: int, m: int) -> list[int]:
        kernel = KernelOptimizer(product_kernel(Tensor.rand(n, k).realize(), Tensor.rand(k, m).realize()))
        for opt in hand_coded_optimizations(kernel, 256):
            kernel.apply_opt(opt)
        return [kernel.full_shape[axis] for axis in kernel.axes_of(AxisType.LOOP, AxisType.GLOBAL)]

    assert loops(128, 768, 3072) == [3072 // 16, 128 // 16]
    assert loops(256, 256, 256) == [256 // 16, 256 // 16]
    assert BLOCKED_MIN_ROW_TILES * 16 == 512 and loops(512, 768, 3072) == [512 // 16, 3072 // 16]
    rng = np.random.default_rng(13)
    a_np, b_np = rng.standard_normal((128, 768)).astype(np.float32), rng.standard_normal((768, 3072)).astype(np.float32)
    found = (Tensor(a_np).realize() @ Tensor(b_np).realize()).numpy()
    np.testing.assert_allclose(found, a_np @ b_np, rtol=1e-4, atol=1e-3)


def test_a_loop_split_needs_an_output_axis() -> None:
    k = KernelOptimizer(product_kernel(Tensor.rand(64, 256).realize(), Tensor.rand(256, 64).realize()))
    reduce_axis = k.axes_of(AxisType.REDUCE)[0]
    with pytest.raises(KernelOptError, match="LOOP splits an output axis"):
        k.apply_opt(Opt(OptOps.SPLIT, reduce_axis, (4, AxisType.LOOP)))


def test_values_sliced_from_a_projection_lie_on_separate_pages_and_weights_do_not() -> None:
    qkv = Tensor.rand(1, 128, 2304).realize()
    values = qkv[:, :, 1536:].reshape(1, 128, 12, 64).transpose(1, 2)  # (1, 12, 128, 64), rows 2304 floats apart
    assert layout.memory_stride(values.uop, 2) == 2304 and layout.memory_stride(values.uop, 1) == 64
    assert layout.rows_on_separate_pages(values.uop)
    assert not layout.rows_on_separate_pages(Tensor.rand(768, 2304).realize().uop)  # rows follow one another
    assert not layout.rows_on_separate_pages(Tensor.rand(12, 128, 64).realize().uop)
    assert not layout.rows_on_separate_pages(Tensor.rand(128, 768).realize()[:, :512].uop)  # 3 KiB apart


@pytest.mark.parametrize("tokens", [128, 512])
def test_attention_values_are_packed_and_attention_equals_numpy(tokens: int) -> None:
    """probabilities @ values reads a strip-major copy of the values (a kernel of its own) from PAGED_ROWS_MIN_ROWS
    query rows (at 512 tokens a strip, 32 KiB packed, would not fit half an L1: only the rows' pages decide); the
    causal attention of a qkv projection's slices equals numpy's."""
    rng = np.random.default_rng(11)
    qkv_np = rng.standard_normal((1, tokens, 2304)).astype(np.float32)
    probs_np = rng.random((1, 12, tokens, tokens)).astype(np.float32)
    qkv, probs = Tensor(qkv_np).realize(), Tensor(probs_np).realize()
    q, k, v = (qkv[:, :, i * 768 : (i + 1) * 768].reshape(1, tokens, 12, 64).transpose(1, 2) for i in range(3))
    assert kernel_count(probs @ v) == 2  # the copy of the values into strips, then the product
    if tokens == 512:
        assert kernel_count(probs[:, :, :64] @ v) == 1  # 64 rows: read in place
    q_np, k_np, v_np = (
        qkv_np[:, :, i * 768 : (i + 1) * 768].reshape(1, tokens, 12, 64).transpose(0, 2, 1, 3) for i in range(3)
    )
    np.testing.assert_allclose((probs @ v).numpy(), probs_np @ v_np, rtol=1e-4, atol=1e-3)
    scores = q_np @ k_np.transpose(0, 1, 3, 2) / 8 + np.triu(np.full((tokens, tokens), -np.inf, np.float32), 1)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    expected = (weights / weights.sum(-1, keepdims=True)) @ v_np
    attended = q.scaled_dot_product_attention(k, v, is_causal=True)
    np.testing.assert_allclose(attended.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_strips_alias_in_l1_when_their_lines_outnumber_the_sets_they_use_and_fit_it_packed() -> None:
    # 128 rows 12 KiB apart: one set per way, 12 of a 48 KiB L1's lines hold them; packed they are 8 KiB
    assert layout.strips_alias_in_l1(128, 3072 * 4, 48 << 10)
    assert layout.strips_alias_in_l1(128, 768 * 4, 48 << 10)  # 3 KiB apart: period 1024, 48 lines
    assert not layout.strips_alias_in_l1(32, 768 * 4, 48 << 10)  # 32 lines fit
    assert not layout.strips_alias_in_l1(768, 3072 * 4, 48 << 10)  # packed, 48 KiB: more than half the L1
    assert not layout.strips_alias_in_l1(128, 1000 * 4, 48 << 10)  # period 32: every set


def test_a_weight_gradient_over_few_tokens_packs_the_output_gradient_and_equals_numpy() -> None:
    """x^T @ g for a linear layer's weight over 128 tokens: g (computed, 128 rows 12 KiB apart) is copied into strips
    that stay in L1 while every tile of rows of x^T reads them; the gradients equal numpy's."""
    rng = np.random.default_rng(12)
    x_np, w_np = rng.standard_normal((128, 768)).astype(np.float32), rng.standard_normal((768, 3072)).astype(np.float32)
    g_np = rng.standard_normal((128, 3072)).astype(np.float32)
    x, w = Tensor(x_np).realize(), Tensor(w_np, requires_grad=True).realize()
    grad_output = Tensor(g_np).realize() * 2.0  # computed: not in memory when the layout stage runs
    # the copy into 192 strips of 128 rows by 16 (which computes the product's right operand), then the product
    assert kernel_names(x.T @ grad_output) == ["E_192_128_16", "r_768_192_16_128"]
    np.testing.assert_allclose((x.T @ grad_output).numpy(), x_np.T @ (2 * g_np), rtol=1e-4, atol=1e-3)
    (((x @ w).gelu()) * Tensor(g_np)).sum().backward()
    h = x_np @ w_np
    inner = np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)
    gelu_derivative = 0.5 * (1 + np.tanh(inner)) + 0.5 * h * (1 - np.tanh(inner) ** 2) * np.sqrt(2 / np.pi) * (
        1 + 3 * 0.044715 * h**2
    )
    np.testing.assert_allclose(w.grad.numpy(), x_np.T @ (g_np * gelu_derivative), rtol=1e-3, atol=1e-2)


def buffer_shapes(tensor: Tensor) -> list[int]:
    """The element counts of the buffers the schedule's kernels store."""
    calls = [item for item in create_schedule((tensor.uop,)).items if isinstance(item, KernelCall)]
    return [call.buffers[0].arg.size for call in calls]


def mlp_operands(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    return tuple(rng.standard_normal(shape).astype(np.float32) / 8 for shape in ((64, 128), (128, 1024), (1024, 64)))


def test_a_computed_left_operand_whose_rows_alias_is_stored_with_padded_rows_and_equals_numpy() -> None:
    """gelu(x @ up) @ down, k = 1024: the gelu gets a kernel of its own anyway (recomputing it for each of the 64
    columns costs more than storing it); it stores rows of 1024 + 16 floats, so the product's 16-row tiles do not
    fall in one set of the L1 cache. 64 columns are too few to pay for a copy into row tiles."""
    rng = np.random.default_rng(21)
    x_np, up_np, down_np = mlp_operands(rng)
    x, up, down = (Tensor(v).realize() for v in (x_np, up_np, down_np))
    out = (x @ up).gelu() @ down
    assert 64 * (1024 + layout.STRIP) in buffer_shapes(out)
    hidden = x_np @ up_np
    gelu = 0.5 * hidden * (1 + np.tanh(np.sqrt(2 / np.pi) * (hidden + 0.044715 * hidden**3)))
    np.testing.assert_allclose(out.numpy(), gelu @ down_np, rtol=1e-4, atol=1e-4)


def test_no_padded_rows_for_a_softmax_a_value_the_gradient_reads_too_or_rows_that_do_not_alias() -> None:
    """A softmax's rows are fused into the product (the realize stage computes its max and sum once per row); in a
    training step the weight gradient's product reads the activation too (padding it would need a second kernel);
    rows of 1000 floats spread over the L1's sets as they are."""
    rng = np.random.default_rng(22)
    x_np, up_np, down_np = mlp_operands(rng)
    x, down = Tensor(x_np).realize(), Tensor(down_np).realize()
    up = Tensor(up_np, requires_grad=True).realize()
    padded = 64 * (1024 + layout.STRIP)
    assert padded not in buffer_shapes((x @ up).softmax(-1) @ down)
    hidden = (x @ up).gelu()
    loss = (hidden @ Tensor(down_np, requires_grad=True).realize()).sum()
    (grad,) = loss.gradient(up)
    assert padded not in buffer_shapes(grad)
    up1000 = Tensor(rng.standard_normal((128, 1000)).astype(np.float32)).realize()
    down1000 = Tensor(rng.standard_normal((1000, 64)).astype(np.float32)).realize()
    assert 64 * (1000 + layout.STRIP) not in buffer_shapes((x @ up1000).gelu() @ down1000)


def test_a_stored_value_read_with_scattered_rows_is_stored_in_row_order() -> None:
    """Heads concatenated along the tokens, (heads, tokens, width), then viewed as (tokens, heads * width) rows for a
    projection (long causal attention's query blocks): the concatenation gets a kernel anyway, and it stores the
    values in the projection's row order, (tokens, heads, width), instead of leaving the product to read each row as
    4 runs of 16 floats, 2 KiB apart."""
    a, b, c, d = (Tensor.rand(4, 32, 16).realize() for _ in range(4))
    w = Tensor.rand(64, 64).realize()
    heads = (a @ c.transpose(-1, -2) @ d).cat(b, dim=1)
    out = heads.permute(1, 0, 2).reshape(64, 64) @ w
    names = [item.ast.arg.name for item in create_schedule((out.uop,)).items if isinstance(item, KernelCall)]
    assert "E_64_4_16" in names and "E_4_64_16" not in names, names
    an, bn, cn, dn = (t.numpy() for t in (a, b, c, d))
    expected = np.concatenate([an @ cn.transpose(0, 2, 1) @ dn, bn], axis=1).transpose(1, 0, 2).reshape(64, 64)
    np.testing.assert_allclose(out.numpy(), expected @ w.numpy(), rtol=1e-4, atol=1e-4)


def schedule_kernel_count(*tensors: Tensor) -> int:
    return sum(isinstance(item, KernelCall) for item in create_schedule(tuple(t.uop for t in tensors)).items)


def test_a_prefix_of_a_packed_operand_reads_the_copy_of_the_whole_one() -> None:
    """Products over the first 256 keys and over all 512 of the same keys (a causal attention's query blocks) pack
    the keys once: the prefix's product reads the first strips of that copy. Both equal numpy."""
    rng = np.random.default_rng(21)
    q_np, k_np = (rng.standard_normal((1, 12, 128, 64)).astype(np.float32), rng.standard_normal((1, 12, 512, 64)))
    q, k = Tensor(q_np).realize(), Tensor(k_np.astype(np.float32)).realize()
    whole, prefix = q @ k.transpose(-1, -2), q @ k[:, :, :256].transpose(-1, -2)
    assert schedule_kernel_count(prefix) == 2  # alone: its own copy, then the product
    assert schedule_kernel_count(whole, prefix) == 3  # together: one copy of the keys, two products
    keys_t = k_np.astype(np.float32).transpose(0, 1, 3, 2)
    np.testing.assert_allclose(whole.numpy(), q_np @ keys_t, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(prefix.numpy(), q_np @ keys_t[..., :256], rtol=1e-4, atol=1e-3)


def test_a_prefix_of_packed_values_along_the_reduction_reads_the_copy_of_the_whole_values() -> None:
    """probabilities @ values[:, :, :256] beside probabilities @ values (rows 2,304 floats apart, so both packed):
    one copy; the prefix's product reads the first 256 rows of each strip of it. Both equal numpy."""
    rng = np.random.default_rng(22)
    qkv_np = rng.standard_normal((1, 512, 2304)).astype(np.float32)
    probs_np = rng.random((1, 12, 128, 512)).astype(np.float32)
    qkv, probs = Tensor(qkv_np).realize(), Tensor(probs_np).realize()
    values = qkv[:, :, 1536:].reshape(1, 512, 12, 64).transpose(1, 2)
    whole, prefix = probs @ values, probs[..., :256] @ values[:, :, :256]
    assert schedule_kernel_count(whole, prefix) == 3  # one copy of the values, two products
    values_np = qkv_np[:, :, 1536:].reshape(1, 512, 12, 64).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(whole.numpy(), probs_np @ values_np, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(prefix.numpy(), probs_np[..., :256] @ values_np[:, :, :256], rtol=1e-4, atol=1e-3)


def test_only_a_view_that_starts_every_axis_at_zero_is_a_prefix() -> None:
    keys = Tensor.rand(1, 12, 512, 64).realize()
    assert layout.unshrunk(keys[:, :, :256].transpose(-1, -2).uop) is keys.transpose(-1, -2).uop
    assert layout.unshrunk(keys[:, :, :256].uop) is keys.uop
    assert layout.unshrunk(keys[:, :, 256:].uop) is None  # a suffix: its copy is not the start of the whole one's
    assert layout.unshrunk(keys.uop) is None
