"""tg-beam --verify runs both kernels on several input families and names the one that shows a difference."""

from __future__ import annotations

import numpy as np

from tg.beam.kernels import FAMILIES, compare_kernels, family_contents
from tg.codegen.pipeline import CodegenFlags
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.ops import UOp
from tg.hcq.engine import scratch_buffers
from tg.tensor import Tensor


def kernel_of(t: Tensor) -> UOp:
    return [item for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall)][-1].ast


def test_a_max_that_starts_at_zero_is_caught_by_the_all_negative_family() -> None:
    """relu(x).max() equals x.max() on every row that holds a positive value: with 64 normal values per row that is
    every row of the normal family, so only the all-negative family tells the two apart."""
    x = Tensor.empty(8, 64)
    right, wrong = kernel_of(x.max(axis=1)), kernel_of(x.relu().max(axis=1))
    outcome = compare_kernels(right, wrong, "CPU", CodegenFlags())
    assert not outcome.matches
    assert outcome.detail.startswith("all-negative inputs: buffer 0 differs")
    same = compare_kernels(right, right, "CPU", CodegenFlags())
    assert same.matches and "normal, all-negative, large magnitude, mixed-sign integers" in same.detail
    assert "inf/nan" not in same.detail  # a MAX reduction's NaN depends on order: that family is left out


def test_an_elementwise_kernel_is_checked_on_inf_and_nan_too() -> None:
    x = Tensor.empty(16)
    kernel = kernel_of(x * 2 + 1)
    outcome = compare_kernels(kernel, kernel, "CPU", CodegenFlags())
    assert outcome.matches and outcome.detail.endswith("mixed-sign integers, inf/nan inputs")


def test_each_family_gives_the_values_it_names() -> None:
    buffer = scratch_buffers(kernel_of(Tensor.empty(4096) * 2), "CPU")[1]
    rng = np.random.default_rng(0)
    values = {family: np.frombuffer(family_contents(buffer, family, rng) or b"", np.float32) for family in FAMILIES}
    assert (values["all-negative"] < 0).all()
    assert np.abs(values["large magnitude"]).max() > 1e4
    mixed = values["mixed-sign integers"]
    assert (mixed == np.round(mixed)).all() and (mixed < 0).any() and (mixed > 0).any()
    assert np.isnan(values["inf/nan"]).any() and np.isposinf(values["inf/nan"]).any()
    assert np.isneginf(values["inf/nan"]).any()


def test_a_reordered_sum_of_large_values_still_verifies() -> None:
    """Regression (CI's beam leg on tiny_mlp): a matmul's sum in another order differs by rounding in proportion to
    the large inputs, hundreds where an output cancels to near zero; that is not a wrong kernel."""
    from tg.codegen.opt.opts import Opt, OptOps
    from tg.codegen.pipeline import with_opts

    x, w = Tensor.empty(32, 96), Tensor.empty(96, 10)
    kernel = kernel_of(x @ w)
    opts = (Opt(OptOps.SWAP, 0, 1), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UNROLL, 0, 4))
    outcome = compare_kernels(with_opts(kernel, ()), with_opts(kernel, opts), "CPU", CodegenFlags())
    assert outcome.matches, outcome.detail
