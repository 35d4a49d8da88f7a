"""The scheduler's fusion policy (issue 23, item 1): an elementwise producer fuses into a reduction's input only
when recomputing it there costs less than a round trip through memory (tg.codegen.schedule.realize)."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen.flags import Context
from tg.codegen.schedule.realize import ROUND_TRIP_OPS, fuse_into_reduction, share_reduction
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.ops import Ops
from tg.tensor import Tensor


def kernel_asts(tensor: Tensor) -> list:
    return [item.ast for item in create_schedule((tensor.uop,)).items if isinstance(item, KernelCall)]


def count(ast, op: Ops) -> int:
    return sum(node.op is op for node in ast.toposort())


def test_the_policy_compares_recompute_times_cost_with_a_round_trip() -> None:
    assert fuse_into_reduction(recompute=1, op_cost=1)
    assert fuse_into_reduction(recompute=1, op_cost=ROUND_TRIP_OPS - 1)
    assert not fuse_into_reduction(recompute=1, op_cost=ROUND_TRIP_OPS)
    assert not fuse_into_reduction(recompute=768, op_cost=20)  # a gelu read by a 768-wide down projection


def test_gelu_between_two_matmuls_keeps_its_own_kernel_and_is_computed_once() -> None:
    m, d, hidden = 16, 64, 256
    x, w1, w2 = Tensor.rand(m, d).realize(), Tensor.rand(d, hidden).realize(), Tensor.rand(hidden, d).realize()
    out = (x @ w1).gelu() @ w2
    asts = kernel_asts(out)
    assert len(asts) == 3  # up projection, gelu, down projection
    down = asts[-1]
    assert count(down, Ops.EXP2) == 0, "the gelu must not be recomputed inside the down projection"
    assert sum(count(ast, Ops.EXP2) for ast in asts) == 1  # one gelu, computed once per element in its kernel
    h = x.numpy() @ w1.numpy()
    gelu = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    np.testing.assert_allclose(out.numpy(), gelu @ w2.numpy(), rtol=1e-4, atol=1e-4)


def test_a_cheap_producer_read_once_by_a_reduction_still_fuses() -> None:
    a = Tensor.rand(100, 100).realize()
    (kernel,) = kernel_asts((a * 2).sum(axis=1))
    assert count(kernel, Ops.MUL) >= 1 and count(kernel, Ops.REDUCE) == 1
    assert len(kernel_asts(a.softmax())) == 1  # its max and sum fuse too, once per row (tests/tensor/test_row_fusion)


def test_debug3_prints_the_decision(capsys: pytest.CaptureFixture[str]) -> None:
    x, w1, w2 = Tensor.rand(8, 32).realize(), Tensor.rand(32, 96).realize(), Tensor.rand(96, 32).realize()
    with Context(DEBUG=3):
        kernel_asts((x @ w1).gelu() @ w2)
    printed = capsys.readouterr().out
    assert "kept as its own kernel" in printed
    assert "recompute 32x" in printed  # the down projection reads each gelu once per output column


def resnet_block(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    return x.conv2d(w1, padding=1).relu().conv2d(w2, padding=1).relu() + x


def test_conv1_relu_keeps_its_own_kernel_out_of_conv2s_padded_input() -> None:
    x = Tensor.rand(2, 4, 10, 10).realize()
    w1, w2 = (Tensor.rand(4, 4, 3, 3) - 0.5).realize(), (Tensor.rand(4, 4, 3, 3) - 0.5).realize()
    out = resnet_block(x, w1, w2)
    asts = kernel_asts(out)
    # pad x, conv1+relu, pad its result, conv2+relu+x: each conv is computed once, in a kernel of its own
    assert len(asts) == 4
    assert [count(ast, Ops.REDUCE) for ast in asts] == [0, 1, 0, 1]
    padded_x, padded_conv1 = [ast for ast in asts if count(ast, Ops.REDUCE) == 0]
    assert padded_conv1 == padded_x, "conv2's padded input is a plain copy, the same kernel as x's"
    xs, a, b = x.numpy(), w1.numpy(), w2.numpy()
    np.testing.assert_allclose(out.numpy(), numpy_resnet_block(xs, a, b), rtol=1e-4, atol=1e-4)


def numpy_conv3x3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A padded 3x3 cross-correlation, one tap at a time (the oracle for conv2d(padding=1))."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, wd = x.shape[2:]
    out = np.zeros((x.shape[0], w.shape[0], h, wd), np.float64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i : i + h, j : j + wd], w[:, :, i, j])
    return out


def numpy_resnet_block(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    return relu(numpy_conv3x3(relu(numpy_conv3x3(x, w1)), w2)) + x


def test_the_padded_copy_rule_prints_its_decision_and_the_read_count(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor.rand(1, 1, 16, 16).realize()
    w1, w2 = Tensor.rand(1, 1, 3, 3).realize(), Tensor.rand(1, 1, 3, 3).realize()
    with Context(DEBUG=3):
        kernel_asts(resnet_block(x, w1, w2))
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "padded copy" in line]
    # conv2 reads its 18x18 padded input through 16x16 windows of 9 taps: 9 * 256 / 324 = 7.1, counted up
    kept = "fusion: kept WHERE+REDUCE_AXIS as its own kernel: in a padded copy that a reduction reads 8x per element"
    assert line == kept


def test_a_reduction_read_through_a_pad_keeps_its_own_kernel() -> None:
    """A conv under a PAD used to fuse into the padded output's kernel, its reduction gated over the bigger grid and
    without the conv's tiling: 124 ms for conv(8x64x56x56).relu().pad(1) * 2 against 8.7 ms in two kernels."""
    x, w = Tensor.rand(2, 3, 8, 8).realize(), (Tensor.rand(3, 3, 3, 3) - 0.5).realize()
    out = x.conv2d(w, padding=1).relu().pad((1, 1, 1, 1)) * 2
    padded_x, conv, padded_output = kernel_asts(out)
    assert [count(ast, Ops.REDUCE) for ast in (padded_x, conv, padded_output)] == [0, 1, 0]
    expected = np.pad(np.maximum(numpy_conv3x3(x.numpy(), w.numpy()), 0), ((0, 0), (0, 0), (1, 1), (1, 1))) * 2
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_cat_of_matmuls_computes_each_in_a_matmul_kernel_of_its_own() -> None:
    """`cat` pads each part to the whole and adds them. The two products used to fuse into one kernel that computed
    both over the whole output, gated, at 11 GFLOP/s (84 ms for two 512x1024x256 products against 3.1 ms now)."""
    a, b, c, d = (Tensor.rand(*shape).realize() for shape in ((32, 48), (48, 16), (32, 48), (48, 16)))
    out = (a @ b).cat(c @ d, dim=0)
    asts = kernel_asts(out)
    products = [ast for ast in asts if count(ast, Ops.REDUCE)]
    assert len(products) == 2 and all(count(ast, Ops.REDUCE) == 1 for ast in products)
    assert count(asts[-1], Ops.REDUCE) == 0  # the cat itself is a copy
    expected = np.concatenate([a.numpy() @ b.numpy(), c.numpy() @ d.numpy()])
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_padded_row_reduction_is_not_fused_into_the_padded_grid() -> None:
    x = Tensor.rand(6, 40).realize()
    out = x.sum(axis=1, keepdim=True).pad(((1, 1), (0, 0))) + 1
    reduction, padded = kernel_asts(out)
    assert count(reduction, Ops.REDUCE) == 1 and count(padded, Ops.REDUCE) == 0
    np.testing.assert_allclose(out.numpy(), np.pad(x.numpy().sum(1, keepdims=True), ((1, 1), (0, 0))) + 1, rtol=1e-5)


def heuristic_opts(tensor: Tensor) -> list[list]:
    """The hand-coded opts of each reduction kernel of `tensor`'s schedule."""
    from tg.codegen.opt import KernelOptimizer, hand_coded_optimizations

    asts = [ast for ast in kernel_asts(tensor) if count(ast, Ops.REDUCE)]
    return [hand_coded_optimizations(KernelOptimizer(ast)) for ast in asts]


def test_a_causal_softmax_gets_the_opts_of_a_plain_one() -> None:
    """Item 2 of issue 23: the mask's index loads are not reuse worth upcasting for (they made the max and sum
    kernels upcast rows whose scores lie 128 floats apart, gathering every lane)."""
    scores = Tensor.rand(12, 128, 128).realize()
    mask = Tensor.ones(128, 128).tril().cast("bool")
    plain, causal = heuristic_opts(scores.softmax(-1)), heuristic_opts(mask.where(scores, float("-inf")).softmax(-1))
    assert len(plain) == len(causal) == 1  # max, sum of exp and normalization in one kernel
    assert causal == plain == [[]]
    q = Tensor.rand(12, 128, 64).realize()
    causal_sdpa = q.scaled_dot_product_attention(q, q, is_causal=True)
    assert [] in heuristic_opts(causal_sdpa)  # its softmax reductions too (its matmuls keep their register tiles)


def test_a_reduction_shares_its_buffer_when_recomputing_costs_more_than_a_round_trip() -> None:
    assert share_reduction(kernels=2, reduced_per_element=64)  # a matmul row read by two kernels
    assert not share_reduction(kernels=2, reduced_per_element=4)  # a sum of 4: cheaper to add again
    assert not share_reduction(kernels=1, reduced_per_element=1 << 20)


def test_a_reduction_two_kernels_read_is_computed_once(capsys: pytest.CaptureFixture[str]) -> None:
    """A training step's relu mask and the forward's padded copy both read a conv result; here two copies (one
    transposed) both read a matmul: it gets its own kernel instead of being computed in each copy."""
    a, b = Tensor.rand(32, 64).realize(), Tensor.rand(64, 48).realize()
    product = a @ b
    doubled, shifted = (product * 2).contiguous(), (product + 1).permute(1, 0).contiguous()
    with Context(DEBUG=3):
        asts = [item.ast for item in create_schedule((doubled.uop, shifted.uop)).items if isinstance(item, KernelCall)]
    assert "read by several kernels" in capsys.readouterr().out
    assert len(asts) == 3 and sum(count(ast, Ops.REDUCE) for ast in asts) == 1
    Tensor.realize(doubled, shifted)
    want = a.numpy() @ b.numpy()
    np.testing.assert_allclose(doubled.numpy(), want * 2, rtol=1e-5)
    np.testing.assert_allclose(shifted.numpy(), (want + 1).T, rtol=1e-5)
