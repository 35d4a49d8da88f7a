"""Calls with output buffers: `UOp.call_with_output(s)`, `call.unbound_outputs`, and precompiled calls
(`Tensor.call(precompile=True)`, `@function(precompile=True)`) that run as one opaque unit (spec tensor.md §1.10)."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import Ops
from tg.codegen.schedule.calls import CallError, inline_calls
from tg.codegen.uop.spec import SpecError
from tg.hcq.engine.programs import program_cache_stats
from tg.tensor import Context, GlobalCounters, Tensor, TinyJit, UOp, dtypes, function

RNG = np.random.default_rng(32)
X = RNG.standard_normal((3, 4)).astype(np.float32)
Y = RNG.standard_normal((3, 4)).astype(np.float32)


def realized(array: np.ndarray, **kwargs) -> Tensor:
    return Tensor(array, **kwargs).realize()


def kernels_to_realize(t: Tensor) -> int:
    before = GlobalCounters.kernel_count
    t.realize()
    return GlobalCounters.kernel_count - before


# ---------------------------------------------------------------------------------------------------- call_with_output


def test_call_with_output_is_a_void_call_storing_into_an_unbound_output_buffer():
    x = realized(X)
    body = (x.as_param(0) * 2 + 1).exp()
    out = Tensor(body.uop.call_with_output(x.uop))
    call = out.uop.src[1]
    assert out.uop.op is Ops.AFTER and call.op is Ops.CALL and call.dtype is dtypes.void
    sink, argument, output = call.src
    assert argument is x.uop and output is out.uop.src[0] and output.src[0].op is Ops.BUFFER
    assert [store.src[0].arg.slot for store in sink.src] == [1]  # output PARAM m after the m inputs
    assert call.unbound_outputs == (out.uop,)
    np.testing.assert_allclose(out.numpy(), np.exp(X * 2 + 1), rtol=1e-6)


def test_an_ordinary_call_with_outputs_is_inlined_and_fuses_with_its_use():
    x, y = realized(X), realized(Y)
    body0 = x.as_param(0) * y.as_param(1)
    body1 = (x.as_param(0) - y.as_param(1)).sum(axis=1)
    prod, diff = (Tensor(u) for u in UOp.call_with_outputs((body0.uop, body1.uop), x.uop, y.uop))
    inlined = inline_calls((prod.uop, diff.uop))
    assert not any(n.op in (Ops.CALL, Ops.PARAM) for n in UOp.sink(*inlined).toposort())
    result = prod + 1
    assert kernels_to_realize(result) == 1  # the body fused with `+ 1`: no buffer of its own
    np.testing.assert_allclose(result.numpy(), X * Y + 1, rtol=1e-6)
    np.testing.assert_allclose(diff.numpy(), (X - Y).sum(1), rtol=1e-5)


def test_gradients_flow_through_the_body_of_a_call_with_outputs():
    x = Tensor(X.astype(np.float64), requires_grad=True)
    out = Tensor(x.as_param(0).sin().mul(x.as_param(0)).uop.call_with_output(x.uop))
    out.sum().backward()
    x64 = X.astype(np.float64)
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x64) * x64 + np.sin(x64), rtol=1e-12)


def test_a_grad_fxn_reads_the_forwards_result_from_unbound_outputs():
    seen = []

    def exp_gradient(gradient: UOp, call: UOp):
        (y,) = call.unbound_outputs  # d exp(x) / dx = exp(x): the forward's own output
        seen.append(y)
        return (Tensor(gradient) * Tensor(y)).uop, None  # one per argument: none for the output buffer

    x = Tensor(X, requires_grad=True)
    y = Tensor(x.as_param(0).exp().uop.call_with_output(x.uop, grad_fxn=exp_gradient))
    (y * Tensor(Y)).sum().backward()
    assert seen == [y.uop]
    np.testing.assert_allclose(x.grad.numpy(), np.exp(X) * Y, rtol=1e-6)


def test_unbound_outputs_of_a_custom_kernel_are_the_tensors_it_writes():
    from tg.tensor import KernelInfo

    def copy_kernel(out: UOp, x: UOp) -> UOp:
        i = UOp.range(4, 0)
        return out.index(i).store(x.index(i).load()).sink(arg=KernelInfo(name="copy"))

    out, _ = Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0]), fxn=copy_kernel)
    assert out.uop.src[1].unbound_outputs == (out.uop,)


def test_misuse_of_calls_with_outputs_is_a_clear_error():
    x = realized(X)
    body = x.as_param(0) + x.as_param(1)
    with pytest.raises(CallError, match="slots \\[0, 1\\], but it got 1"):
        body.uop.call_with_output(x.uop)
    with pytest.raises(CallError, match="one or more bodies"):
        UOp.call_with_outputs((), x.uop)
    with pytest.raises(CallError, match="void CALL"):
        _ = x.uop.unbound_outputs
    with pytest.raises(CallError, match="placeholder 0 is"):
        x.as_param(0).uop.call_with_output(Tensor([1, 2, 3]).uop)


def test_strict_spec_accepts_a_call_with_outputs_and_rejects_a_store_into_a_tensor():
    x = realized(X)
    with Context(SPEC=2):
        out = Tensor((x.as_param(0) * 3).uop.call_with_output(x.uop, precompile=True))
        np.testing.assert_allclose((out + 1).numpy(), X * 3 + 1, rtol=1e-6)
    store = UOp(Ops.STORE, dtypes.void, (x.uop, x.uop))  # a STORE only ever targets a call's output PARAM
    from tg.tensor.custom_kernel import verify_tensor_graph

    with Context(SPEC=2), pytest.raises(SpecError, match="STORE"):
        verify_tensor_graph(UOp.sink(store))


# ---------------------------------------------------------------------------------------------------- precompile


def test_a_precompiled_call_runs_its_body_as_one_kernel_of_its_own():
    x, y = realized(X), realized(Y)
    body = (x.as_param(0) * y.as_param(1) + 1).exp()
    inlined = Tensor.call(x, y, fxn=body) * 2
    precompiled = Tensor.call(x, y, fxn=body, precompile=True) * 2
    assert precompiled.uop.src[0].op is Ops.AFTER and precompiled.uop.src[0].src[1].arg.precompile
    assert kernels_to_realize(inlined) == 1  # the body fused into `* 2`
    assert kernels_to_realize(precompiled) == 2  # one kernel for the call's body, one for `* 2`, which reads its output
    np.testing.assert_allclose(precompiled.numpy(), inlined.numpy(), rtol=1e-6)
    np.testing.assert_allclose(precompiled.numpy(), np.exp(X * Y + 1) * 2, rtol=1e-5)


def test_a_precompiled_call_on_lazy_inputs_realizes_them_first_and_does_not_fuse_with_them():
    x = realized(X)
    out = Tensor.call(x * 3, fxn=(x.as_param(0) + 1).relu(), precompile=True)
    assert kernels_to_realize(out) == 2  # `x * 3` into a buffer, then the body over it
    np.testing.assert_allclose(out.numpy(), np.maximum(X * 3 + 1, 0), rtol=1e-6)


def test_a_precompiled_function_gives_all_its_outputs_from_one_call_that_runs_once():
    @function(precompile=True)
    def stats(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        return (x * y).exp(), (x - y).max(axis=1)

    x, y = realized(X), realized(Y)
    product, largest = stats(x, y)
    assert product.uop.src[1] is largest.uop.src[1]  # both outputs of one CALL
    assert kernels_to_realize(product) == 2  # the call computes every output (one kernel each here) ...
    assert kernels_to_realize(largest) == 0  # ... so realizing the other one later runs nothing
    np.testing.assert_allclose(product.numpy(), np.exp(X * Y), rtol=1e-6)
    np.testing.assert_allclose(largest.numpy(), (X - Y).max(1), rtol=1e-6)


def test_calling_a_precompiled_function_again_on_new_inputs_compiles_nothing():
    @function(precompile=True)
    def f(x: Tensor) -> Tensor:
        return (x * x).sum(axis=0).sqrt()

    f(realized(X)).realize()
    misses = program_cache_stats.misses
    result = f(realized(Y)).numpy()
    assert program_cache_stats.misses == misses
    np.testing.assert_allclose(result, np.sqrt((Y * Y).sum(0)), rtol=1e-6)


def test_gradients_through_a_precompiled_function_match_finite_differences():
    @function(precompile=True)
    def f(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).tanh()

    x64, w64 = X.astype(np.float64), RNG.standard_normal((4, 2))
    x, w = Tensor(x64, requires_grad=True), Tensor(w64, requires_grad=True)
    f(x, w).sum().backward()

    def value(w_: np.ndarray) -> float:
        return float(np.tanh(x64 @ w_).sum())

    eps, numeric = 1e-6, np.zeros_like(w64)
    for index in np.ndindex(*w64.shape):
        step = np.zeros_like(w64)
        step[index] = eps
        numeric[index] = (value(w64 + step) - value(w64 - step)) / (2 * eps)
    np.testing.assert_allclose(w.grad.numpy(), numeric, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(x.grad.numpy(), (1 - np.tanh(x64 @ w64) ** 2) @ w64.T, rtol=1e-10)


def test_a_precompiled_call_uses_its_grad_fxn():
    x = Tensor([0.2, 1.7, -2.6], requires_grad=True)
    y = Tensor.call(x, fxn=x.as_param(0).round(), grad_fxn=lambda grad, call: (grad, None), precompile=True)
    assert y.tolist() == [0.0, 2.0, -3.0]
    (y * Tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 2.0, 3.0]  # straight through, not round's zero gradient


def test_a_precompiled_call_inside_a_precompiled_call():
    @function(precompile=True)
    def inner(x: Tensor) -> Tensor:
        return x * 2

    @function(precompile=True)
    def outer(x: Tensor) -> Tensor:
        return inner(x + 1) + inner(x)

    np.testing.assert_allclose(outer(realized(X)).numpy(), (X + 1) * 2 + X * 2, rtol=1e-6)


def test_tinyjit_replays_a_precompiled_function():
    @function(precompile=True)
    def f(x: Tensor) -> Tensor:
        return x.exp() + 1

    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (f(x) * 2).realize()

    for n in range(4):
        data = X + n
        np.testing.assert_allclose(step(Tensor(data)).numpy(), (np.exp(data) + 1) * 2, rtol=1e-5)


def test_assigning_into_a_precompiled_output():
    out = Tensor.call(realized(X), fxn=Tensor.empty(3, 4).as_param(0) * 2, precompile=True)
    out.assign(Tensor.full((3, 4), 9.0))
    assert out.tolist() == [[9.0] * 4] * 3


def test_a_call_with_outputs_on_sharded_tensors_is_a_clear_error():
    x = Tensor(X).shard(("CPU:0", "CPU:1"), axis=1)
    with pytest.raises(CallError, match="not sharded ones"):
        Tensor.call(x, fxn=Tensor.empty(3, 4).as_param(0) * 2, precompile=True)
    with pytest.raises(CallError, match="not sharded ones"):
        (x.as_param(0) * 2).uop.call_with_output(x.uop)
