"""Tensor.call, UOp.param and Tensor.as_param (issue 32 item 2; spec tensor.md §1.10, codegen.md PARAM/CALL)."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import Ops
from tg.codegen.schedule.graph import ShapeError
from tg.tensor import GlobalCounters, Tensor, UOp, dtypes
from tg.tensor.custom_kernel import CustomKernelError

RNG = np.random.default_rng(3)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((3, 4))


def test_param_is_flat_storage_of_size_elements():
    param = UOp.param(2, dtypes.uint32, 1024)
    assert param.op is Ops.PARAM and param.arg.slot == 2
    assert param.dtype.base is dtypes.uint32 and param.dtype.size == 1024


def test_as_param_has_the_tensors_shape_dtype_and_device():
    t = Tensor(A.astype(np.float32), device="CPU:1")
    p = t.as_param(1)
    assert (p.shape, p.dtype, p.device) == ((3, 4), dtypes.float32, "CPU:1")
    (param,) = [n for n in p.uop.toposort() if n.op is Ops.PARAM]
    assert param.arg.slot == 1 and param.dtype.size == 12


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_call_of_a_tensor_body_equals_the_expression_and_fuses_into_one_kernel(device):
    a, b = Tensor(A.astype(np.float32), device=device), Tensor(B.astype(np.float32), device=device)
    body = (a.as_param(0) * 2 + b.as_param(1)).exp()
    before = GlobalCounters.kernel_count
    c = Tensor.call(a, b, fxn=body).realize()
    assert GlobalCounters.kernel_count - before == 1  # inlined: one fused kernel, no opaque call
    np.testing.assert_allclose(c.numpy(), np.exp(A * 2 + B).astype(np.float32), rtol=1e-5)
    np.testing.assert_allclose(a.call(b, fxn=body).numpy(), c.numpy())  # the method form


def test_a_call_is_a_node_until_the_scheduler_inlines_it():
    from tg.codegen.schedule.calls import inline_value_calls

    a, b = Tensor(A.astype(np.float32)), Tensor(B.astype(np.float32))
    c = Tensor.call(a, b, fxn=a.as_param(0) - b.as_param(1))
    assert c.uop.op is Ops.CALL and c.uop.src[1:] == (a.uop, b.uop) and c.shape == (3, 4)
    inlined = inline_value_calls(c.uop)
    assert not any(n.op in (Ops.CALL, Ops.PARAM) for n in inlined.toposort())
    # the arguments stand where the placeholders stood (each through a reshape to the PARAM's flat size and back)
    assert {n for n in inlined.toposort() if n.op is Ops.BUFFER} == {a.uop.src[0], b.uop.src[0]}
    np.testing.assert_array_equal(Tensor(inlined).numpy(), (a - b).numpy())


def test_nested_calls_and_an_argument_passed_twice():
    x = Tensor([1.0, 2.0, 3.0], dtype=dtypes.float64, requires_grad=True)
    p0, p1 = x.as_param(0), x.as_param(1)
    inner = Tensor.call(p0, p1, fxn=p0 * p1)  # a call inside a call's body
    outer = Tensor.call(x, x, fxn=inner + p0)
    assert outer.tolist() == [2.0, 6.0, 12.0]
    outer.sum().backward()
    assert x.grad.tolist() == [3.0, 5.0, 7.0]  # d(x*x + x)/dx = 2x + 1, counted once for the twice-passed x


def test_call_of_a_uop_body_over_params():
    a, b = Tensor(A.astype(np.float32).reshape(12)), Tensor(B.astype(np.float32).reshape(12))
    plus = UOp.param(0, dtypes.float, 12) + UOp.param(1, dtypes.float, 12)
    expected = (A + B).astype(np.float32).reshape(12)
    np.testing.assert_allclose(Tensor.call(a, b, fxn=plus).numpy(), expected, rtol=1e-6)
    # a 2-d tensor passed to a flat parameter of the same element count is read in row-major order
    np.testing.assert_allclose(Tensor.call(a.reshape(3, 4), b, fxn=plus).numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_gradients_flow_through_the_body_like_autograd_of_the_expression(device):
    def expression(x: Tensor, y: Tensor) -> Tensor:
        return (x * y.exp()).relu() - (x / (y * y + 1)).sum(axis=1, keepdim=True)

    called = [Tensor(v, dtype=dtypes.float64, device=device, requires_grad=True) for v in (A, B)]
    direct = [Tensor(v, dtype=dtypes.float64, device=device, requires_grad=True) for v in (A, B)]
    body = expression(called[0].as_param(0), called[1].as_param(1))
    Tensor.call(*called, fxn=body).sum().backward()
    expression(*direct).sum().backward()
    for c, d in zip(called, direct, strict=True):
        np.testing.assert_allclose(c.grad.numpy(), d.grad.numpy(), rtol=1e-12)

    # and both are the derivative: central finite differences in float64
    def value(a: np.ndarray) -> float:
        return float(np.sum(np.maximum(a * np.exp(B), 0) - (a / (B * B + 1)).sum(1, keepdims=True)))

    eps, numeric = 1e-6, np.zeros_like(A)
    for index in np.ndindex(A.shape):
        step = np.zeros_like(A)
        step[index] = eps
        numeric[index] = (value(A + step) - value(A - step)) / (2 * eps)
    np.testing.assert_allclose(called[0].grad.numpy(), numeric, rtol=1e-6, atol=1e-8)


def test_grad_fxn_replaces_autograd_of_the_body():
    def straight_through(grad: UOp, call: UOp):  # the gradient of round() taken as that of the identity
        assert call.op is Ops.CALL and len(call.src) == 2
        return (grad,)

    x = Tensor([0.2, 1.7, -2.6], requires_grad=True)
    y = Tensor.call(x, fxn=x.as_param(0).round(), grad_fxn=straight_through)
    assert y.tolist() == [0.0, 2.0, -3.0]
    (y * Tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 2.0, 3.0]


def test_an_equal_call_without_grad_fxn_differentiates_the_body_again():
    x = Tensor([0.2, 1.7, -2.6], requires_grad=True)
    body = x.as_param(0) * 3
    Tensor.call(x, fxn=body, grad_fxn=lambda grad, call: (grad,)).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]
    x.grad = None
    Tensor.call(x, fxn=body).sum().backward()  # the same CALL node (hash-consed), now without a grad_fxn
    assert x.grad.tolist() == [3.0, 3.0, 3.0]


def test_wrong_arity_is_a_clear_error():
    a, b = Tensor(A.astype(np.float32)), Tensor(B.astype(np.float32))
    body = a.as_param(0) + b.as_param(1)
    with pytest.raises(CustomKernelError, match=r"slots \[0, 1\], but it got 1 tensors"):
        Tensor.call(a, fxn=body)
    with pytest.raises(CustomKernelError, match=r"slots \[0, 1\], but it got 3 tensors"):
        Tensor.call(a, b, a, fxn=body)


def test_shape_and_dtype_mismatches_are_clear_errors():
    a = Tensor(A.astype(np.float32))
    body = a.as_param(0) * 2
    with pytest.raises(ShapeError, match="holds 12 elements"):
        Tensor.call(Tensor.ones(5), fxn=body)
    with pytest.raises(CustomKernelError, match="placeholder 0 is"):
        Tensor.call(Tensor.ones(3, 4, dtype=dtypes.int32), fxn=body)


def test_bad_arguments_are_clear_errors():
    a = Tensor(A.astype(np.float32))
    with pytest.raises(CustomKernelError, match="Tensor or UOp"):
        Tensor.call(a, fxn=lambda x: x)
    with pytest.raises(CustomKernelError, match="one or more Tensors"):
        Tensor.call(fxn=a.as_param(0))
    with pytest.raises(CustomKernelError, match="two different placeholders"):
        Tensor.call(a, fxn=a.as_param(0) + Tensor.ones(3, 4, dtype=dtypes.int32).as_param(0).float())


def test_a_call_on_sharded_tensors_is_lowered_like_its_body_and_differentiated():
    devices = ("CPU:0", "CPU:1")
    a = Tensor(A, requires_grad=True)
    sharded_a, sharded_b = a.shard(devices, axis=1), Tensor(B).shard(devices, axis=1)
    c = Tensor.call(sharded_a, sharded_b, fxn=(sharded_a.as_param(0) * sharded_b.as_param(1)).exp() + 2)
    assert c.device == sharded_a.device and c.shard_axis == 1
    np.testing.assert_allclose(c.numpy(), np.exp(A * B) + 2, rtol=1e-6)
    c.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), B * np.exp(A * B), rtol=1e-6)
