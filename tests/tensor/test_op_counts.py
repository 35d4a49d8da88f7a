"""DEBUG=2's GFLOP/s come from `ProgramSource.ops`: it must equal the analytic count of each kernel, with and
without opts, so the numbers can be trusted when tuning (issue 23, item 3).

Convention (tg.codegen.pipeline.estimate_ops): a multiply-add is two ops, so a matmul is 2*M*N*K and a convolution
2*N*Cout*OH*OW*Cin*KH*KW; a reduction counts one op per input element; an elementwise chain counts its ops once
per element; work that opts or fusion repeat (a fused layernorm inside a matmul) is counted once.
"""

from __future__ import annotations

import pytest

from tg.codegen.pipeline import CodegenFlags, ProgramSource, kernel_to_program
from tg.codegen.render.c import CRenderer
from tg.codegen.schedule import realize
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.hcq.engine.programs import CompiledProgram
from tg.hcq.engine.run import debug_line
from tg.tensor import Tensor


def programs(tensor: Tensor, noopt: bool) -> list[ProgramSource]:
    """The source of every kernel `tensor` needs, lowered with or without the opt heuristics."""
    calls = [item for item in create_schedule((tensor.uop,)).items if isinstance(item, KernelCall)]
    return [kernel_to_program(call.ast, CRenderer(), CodegenFlags(noopt=noopt)) for call in calls]


def only_program(tensor: Tensor, noopt: bool) -> ProgramSource:
    (program,) = programs(tensor, noopt)
    assert noopt or program.applied_opts, "the heuristics must have applied opts, or lanes are not exercised"
    return program


def product_program(tensor: Tensor, noopt: bool) -> ProgramSource:
    """The product's kernel: the last one (a realized weight is first packed into strips by a copy, of no ops)."""
    *copies, product = programs(tensor, noopt)
    assert [copy.ops for copy in copies] == [0] * len(copies)
    assert noopt or product.applied_opts, "the heuristics must have applied opts, or lanes are not exercised"
    return product


@pytest.mark.parametrize("noopt", [True, False])
def test_matmul_counts_two_ops_per_multiply_add(noopt: bool) -> None:
    m, n, k = 128, 2304, 768  # GPT-2's qkv projection, the kernel the issue saw at 440 "GFLOP/s"
    a, b = Tensor.rand(m, k).realize(), Tensor.rand(k, n).realize()
    assert product_program(a @ b, noopt).ops == 2 * m * n * k


@pytest.mark.parametrize("noopt", [True, False])
def test_a_fused_layernorm_is_counted_once_per_element_not_per_output(
    noopt: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(realize, "ROUND_TRIP_OPS", 10**9)  # the fusion policy fuses everything: recompute happens
    m, n, k = 32, 96, 64
    x, w = Tensor.rand(m, k).realize(), Tensor.rand(n, k).realize()
    *stats, matmul = programs(x.layernorm() @ w.T, noopt)
    assert len(stats) == 2  # mean and variance; the normalization is fused into the matmul's input
    # (x - mean) * rstd: sub and mul per (row, k); rstd = 1/sqrt(var/k + eps): four ops per row; mean/k: one per row
    normalize = 2 * m * k + 5 * m
    assert matmul.ops == 2 * m * n * k + normalize


@pytest.mark.parametrize("noopt", [True, False])
def test_conv_counts_two_ops_per_weight_tap(noopt: bool) -> None:
    batch, cin, cout, size = 4, 16, 32, 12
    x, w = Tensor.rand(batch, cin, size, size).realize(), Tensor.rand(cout, cin, 3, 3).realize()
    out = size - 2
    weight_copy, conv = programs(x.conv2d(w), noopt)  # the weights stored output channels innermost, then the conv
    assert weight_copy.ops == 0
    assert noopt or conv.applied_opts
    assert conv.ops == 2 * batch * cout * out * out * cin * 3 * 3


@pytest.mark.parametrize("noopt", [True, False])
def test_elementwise_chain_counts_its_ops_once_per_element(noopt: bool) -> None:
    a, b = Tensor.rand(64, 1000).realize(), Tensor.rand(64, 1000).realize()
    chain = ((a * b + a) * b - b) * 3.0  # mul, add, mul, sub, mul
    assert only_program(chain, noopt=True).ops == 5 * 64 * 1000
    assert programs(chain, noopt)[0].ops == 5 * 64 * 1000


def test_debug_line_prints_the_analytic_gflops_of_a_launch() -> None:
    m, n, k = 128, 2304, 768
    source = product_program(Tensor.rand(m, k).realize() @ Tensor.rand(k, n).realize(), noopt=False)
    line = debug_line("CPU", CompiledProgram("CPU", source, program=None), 4.6e-3, 10**6)
    # the issue timed this kernel at 4.6 ms: 2*M*N*K / 4.6 ms is 98.5 GFLOP/s (DEBUG=2 used to say 440)
    assert f"{2 * m * n * k / 4.6e-3 / 1e9:9.2f} GFLOP/s" in line
    assert "98.47 GFLOP/s" in line
    assert "0.22 GB/s" in line
