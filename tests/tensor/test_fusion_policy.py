"""The scheduler's fusion policy (issue 23, item 1): an elementwise producer fuses into a reduction's input only
when recomputing it there costs less than a round trip through memory (tg.codegen.schedule.realize)."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen.flags import Context
from tg.codegen.schedule.realize import ROUND_TRIP_OPS, fuse_into_reduction
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
    assert len(kernel_asts(a.softmax())) == 3


def test_debug3_prints_the_decision(capsys: pytest.CaptureFixture[str]) -> None:
    x, w1, w2 = Tensor.rand(8, 32).realize(), Tensor.rand(32, 96).realize(), Tensor.rand(96, 32).realize()
    with Context(DEBUG=3):
        kernel_asts((x @ w1).gelu() @ w2)
    printed = capsys.readouterr().out
    assert "kept as its own kernel" in printed
    assert "recompute 32x" in printed  # the down projection reads each gelu once per output column
