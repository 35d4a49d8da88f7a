"""@function: a Python function of Tensors as one call (issue 32 item 3; spec tensor.md §1.10, §1.5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tg.codegen import Ops
from tg.tensor import KernelInfo, Tensor, TinyJit, UOp, dtypes, function
from tg.tensor.custom_kernel import CustomKernelError
from tg.tensor.function import Function, ImplicitBufferError

X = np.array([0.5, -1.5, 2.0, 3.25])


def test_a_decorated_function_gives_the_functions_value():
    @function
    def f(x: Tensor, y: Tensor) -> Tensor:
        return x * 2 + y

    assert isinstance(f, Function) and f.__name__ == "f"
    assert f(Tensor([1.0, 2.0]), Tensor([10.0, 20.0])).tolist() == [12.0, 24.0]


def test_the_output_reads_placeholders_substituted_by_the_arguments():
    seen = []

    @function
    def f(x: Tensor) -> Tensor:
        seen.append(x)
        return x + 1

    x = Tensor([1.0, 2.0])
    out = f(x)
    assert len(seen) == 1 and seen[0] is x  # the function ran once, lazily, on the argument
    assert out.uop.op is Ops.CALL and out.uop.src[1] is x.uop  # a call of the body on x
    assert any(n.op is Ops.PARAM for n in out.uop.src[0].toposort())  # the body reads a placeholder, not x
    assert out.tolist() == [2.0, 3.0]


def test_tuple_returns_and_kwargs_and_nested_arguments():
    @function
    def stats(xs: list[Tensor], scale: Tensor) -> tuple[Tensor, Tensor]:
        total = xs[0] + xs[1]
        return total * scale, total.sum()

    a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
    scaled, total = stats([a, b], scale=Tensor([2.0, 0.5]))
    assert scaled.tolist() == [8.0, 3.0] and total.item() == 10.0


def test_as_a_method_decorator_the_objects_tensors_are_inputs_and_get_gradients():
    class Linear:
        def __init__(self) -> None:
            self.weight = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)

        @function
        def __call__(self, x: Tensor) -> Tensor:
            return x @ self.weight

    layer, x = Linear(), Tensor([[1.0, -1.0]])
    out = layer(x)  # no implicit-buffer error: self.weight is an input
    assert out.tolist() == [[-2.0, -2.0]]
    out.sum().backward()
    assert layer.weight.grad.tolist() == [[1.0, 1.0], [-1.0, -1.0]]


def test_assigning_into_the_output():
    @function
    def f(x: Tensor) -> Tensor:
        return x * 2

    out = f(Tensor.ones(4))
    out.assign(Tensor.full((4,), 9.0))
    assert out.tolist() == [9.0] * 4


def test_an_implicit_buffer_is_a_clear_error_unless_allowed():
    captured = Tensor([5.0, 5.0, 5.0, 5.0])

    def add_captured(x: Tensor) -> Tensor:
        return x + captured

    with pytest.raises(ImplicitBufferError, match="not one of its arguments.*allow_implicit=True"):
        function(add_captured)(Tensor(X))
    allowed = function(allow_implicit=True)(add_captured)
    np.testing.assert_allclose(allowed(Tensor(X)).numpy(), (X + 5).astype(np.float32))


def test_gradients_through_a_function_match_finite_differences():
    @function
    def f(x: Tensor) -> Tensor:
        return (x * x).sin() * x.exp()

    x = Tensor(X, dtype=dtypes.float64, requires_grad=True)
    f(x).sum().backward()
    eps = 1e-6

    def value(x: np.ndarray) -> float:
        return float(np.sum(np.sin(x**2) * np.exp(x)))

    numeric = [(value(X + eps * e) - value(X - eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-6)


def test_precompile_materializes_the_outputs_and_precompile_backward_the_gradients():
    @function(precompile=True, precompile_backward=True)
    def f(x: Tensor) -> Tensor:
        return (x * x).sin()

    x = Tensor(X, dtype=dtypes.float64, requires_grad=True)
    out = f(x)
    assert out.uop.op is Ops.AFTER and out.uop.src[1].arg.precompile  # one opaque call into its own output buffer
    np.testing.assert_allclose(out.numpy(), np.sin(X * X), rtol=1e-12)
    (grad,) = out.sum().gradient(x)
    assert any(n.op is Ops.CONTIGUOUS for n in grad.uop.toposort())
    np.testing.assert_allclose(grad.numpy(), 2 * X * np.cos(X * X), rtol=1e-12)


def test_grad_fxn_gives_the_gradient():
    def doubled_gradient(grad: UOp, call: UOp):
        return (Tensor(grad) * 2).uop

    @function(grad_fxn=doubled_gradient)
    def identity_ish(x: Tensor) -> Tensor:
        return x + 0.0

    x = Tensor([1.0, 2.0], requires_grad=True)
    identity_ish(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_a_function_calling_a_function():
    @function
    def inner(v: Tensor) -> Tensor:
        return v.exp()

    @function
    def outer(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        return inner(y) * 2, inner(x.reshape(2, 3)).sum(axis=0)  # the first output reads only y

    x = Tensor(np.arange(6.0).reshape(3, 2), dtype=dtypes.float64, requires_grad=True)
    y = Tensor([0.5, -1.0], dtype=dtypes.float64, requires_grad=True)
    first, second = outer(x, y)
    np.testing.assert_allclose(first.numpy(), 2 * np.exp([0.5, -1.0]), rtol=1e-12)
    np.testing.assert_allclose(second.numpy(), np.exp(np.arange(6.0).reshape(2, 3)).sum(0), rtol=1e-12)
    (first.sum() + second.sum()).backward()
    np.testing.assert_allclose(y.grad.numpy(), 2 * np.exp([0.5, -1.0]), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), np.exp(np.arange(6.0).reshape(3, 2)), rtol=1e-12)


def test_a_custom_kernel_inside_a_function():
    def twice(out: UOp, x: UOp) -> UOp:
        i = UOp.range(3, 0)
        return out.index(i).store(x.index(i).load() * 2).sink(arg=KernelInfo(name="twice"))

    @function
    def f(x: Tensor) -> Tensor:  # Tensor.empty has no memory yet: an output, not an implicit buffer
        return Tensor.empty(3).custom_kernel(x + 1, fxn=twice)[0] - 1

    assert f(Tensor([1.0, 2.0, 3.0])).tolist() == [3.0, 5.0, 7.0]


def test_gradient_of_a_custom_kernel_inside_a_function_uses_its_grad_fxn():
    def square(out: UOp, x: UOp) -> UOp:
        i = UOp.range(3, 0)
        return out.index(i).store(x.index(i).load() * x.index(i).load()).sink(arg=KernelInfo(name="square"))

    def grad_fxn(grad: UOp, call: UOp):
        return (None, (Tensor(grad) * Tensor(call.src[2]) * 2).uop)

    @function
    def f(x: Tensor) -> Tensor:  # the call's graph is rebuilt over placeholders: the kernel keeps its grad_fxn
        return Tensor.empty(3, dtype=dtypes.float64).custom_kernel(x * 3, fxn=square, grad_fxn=grad_fxn)[0]

    x = Tensor([1.0, -2.0, 0.5], dtype=dtypes.float64, requires_grad=True)
    out = f(x)
    assert out.tolist() == [9.0, 36.0, 2.25]
    out.sum().backward()
    assert x.grad.tolist() == [18.0, -36.0, 9.0]  # d(9 x^2)/dx


def test_tinyjit_captures_and_replays_a_function():
    @function
    def f(x: Tensor, y: Tensor) -> Tensor:
        return (x * 2 + y).relu()

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        return f(x, y).sum().realize()

    for n in range(4):
        assert step(Tensor([float(n), -1.0]), Tensor([1.0, 1.0])).item() == 2 * n + 1


def test_misuse_is_a_clear_error():
    with pytest.raises(CustomKernelError, match="must return a Tensor or tuple of Tensors"):
        function(lambda x: 3)(Tensor([1.0]))
    with pytest.raises(CustomKernelError, match="no Tensor arguments"):
        function(lambda: Tensor.ones(2))()


def test_the_package_exports_the_specifications_names():
    import tg.tensor

    for name in ("Tensor", "TinyJit", "function", "UOp", "Variable", "dtypes", "GlobalCounters", "Context", "Device",
                 "KernelInfo"):  # fmt: skip
        assert hasattr(tg.tensor, name), name


def test_the_readme_example_runs_and_gives_its_values():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Custom kernels, calls and `@function`")[1]
    code = section.split("```python")[1].split("```")[0]
    names: dict = {}
    exec(code, names)  # noqa: S102 - the README's own example
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(names["out"].numpy(), x + 1)
    assert names["y"].tolist() == [5.0, 8.0]
    assert names["z"].uop.src[1].arg.precompile and names["z"].tolist() == [5.0, 8.0]
    np.testing.assert_array_equal(names["hidden"].numpy(), x)
    assert names["total"].item() == x.sum()
