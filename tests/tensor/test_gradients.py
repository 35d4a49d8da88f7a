"""Gradients of every differentiable Tensor op, checked against central finite differences in float64.

For an op f and inputs x_i, the test takes a scalar loss L = sum(f(x) * w) with random weights w, asks autograd for
dL/dx_i, and compares its inner product with a random direction d against (L(x_i + h d) - L(x_i - h d)) / 2h, which
only runs the forward. A wrong gradient element changes that inner product unless d happens to be orthogonal to
the error, which a random d is not. Two directions per input, on CPU and on PYTHON (the reference emulator).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES

STEP = 1e-6


@dataclass(frozen=True)
class Case:
    """An op under test: `fn(*tensors)`, the input shapes, and the range the inputs are drawn from."""

    name: str
    fn: Callable[..., Tensor]
    shapes: tuple[tuple[int, ...], ...]
    low: float = -2.0
    high: float = 2.0
    inputs: Callable[[np.random.Generator], list[np.ndarray]] | None = field(default=None, compare=False)
    devices: tuple[str, ...] = ("CPU", "PYTHON")


def _positive_definite_away_from_ties(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct values (no ties for max/sort), spread at least 0.05 apart."""
    values = rng.permutation(np.prod(shape)).astype(np.float64) * 0.1 - 0.05 * np.prod(shape)
    return values.reshape(shape) + rng.uniform(0, 0.01, shape)


def _distinct(*shapes: tuple[int, ...]) -> Callable[[np.random.Generator], list[np.ndarray]]:
    return lambda rng: [_positive_definite_away_from_ties(rng, shape) for shape in shapes]


def _probabilities(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.uniform(0.1, 0.9, (3, 4)), rng.uniform(0.0, 1.0, (3, 4))]


def _with_zeros(rng: np.random.Generator) -> list[np.ndarray]:
    """Rows with no zero, one zero and two zeros: prod is multilinear, so finite differences are exact there."""
    values = rng.uniform(0.5, 1.5, (3, 4))
    values[1, 2] = 0.0
    values[2, 0] = values[2, 3] = 0.0
    return [values]


def _index(like: Tensor, values: list) -> Tensor:
    """A constant index tensor on `like`'s device."""
    return Tensor(values, device=like.device)


def _labels_fixed(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """Loss ops take integer class labels; they are fixed, only the logits vary."""
    return lambda x: fn(x, Tensor([1, 0, 3], device=x.device))


CASES = [
    # elementwise arithmetic
    Case("add", lambda a, b: a + b, ((2, 3), (2, 3))),
    Case("add_broadcast", lambda a, b: a + b, ((2, 3), (3,))),
    Case("sub", lambda a, b: a - b, ((2, 3), (1, 3))),
    Case("mul", lambda a, b: a * b, ((2, 3), (2, 1))),
    Case("div", lambda a, b: a / b, ((2, 3), (2, 3)), low=0.5, high=2.0),
    Case("rdiv_scalar", lambda a: 2.0 / a, ((2, 3),), low=0.5, high=2.0),
    Case("neg", lambda a: -a, ((2, 3),)),
    Case("pow", lambda a, b: a**b, ((2, 3), (2, 3)), low=0.5, high=2.0),
    Case("pow_scalar_exponent", lambda a: a**3, ((2, 3),)),
    Case("rpow", lambda a: 2.0**a, ((2, 3),)),
    Case("mod", lambda a, b: a % b, ((2, 3), (2, 3)), low=0.7, high=2.9),
    Case("fmod", lambda a, b: a.fmod(b), ((2, 3), (2, 3)), low=0.7, high=2.9),
    Case("maximum", lambda a, b: a.maximum(b), ((2, 3), (2, 3))),
    Case("minimum", lambda a, b: a.minimum(b), ((2, 3), (2, 3))),
    Case("where", lambda a, b: (a > 0).where(a, b), ((2, 3), (2, 3))),
    Case("clip", lambda a: a.clip(-1.0, 1.0), ((3, 4),)),
    Case("clamp_min_only", lambda a: a.clamp(min_=0.5), ((3, 4),)),
    Case("lerp", lambda a, b, c: a.lerp(b, c), ((2, 3), (2, 3), (2, 3))),
    Case("copysign", lambda a, b: a.copysign(b), ((2, 3), (2, 3))),
    Case("logaddexp", lambda a, b: a.logaddexp(b), ((2, 3), (2, 3))),
    Case("masked_fill", lambda a: a.masked_fill(a > 0, 2.0), ((2, 3),)),
    # unary math
    Case("abs", lambda a: a.abs(), ((2, 3),)),
    Case("exp", lambda a: a.exp(), ((2, 3),)),
    Case("exp2", lambda a: a.exp2(), ((2, 3),)),
    Case("expm1", lambda a: a.expm1(), ((2, 3),)),
    Case("log", lambda a: a.log(), ((2, 3),), low=0.1, high=3.0),
    Case("log2", lambda a: a.log2(), ((2, 3),), low=0.1, high=3.0),
    Case("log10", lambda a: a.log10(), ((2, 3),), low=0.1, high=3.0),
    Case("log1p", lambda a: a.log1p(), ((2, 3),), low=-0.5, high=3.0),
    Case("sqrt", lambda a: a.sqrt(), ((2, 3),), low=0.1, high=3.0),
    Case("rsqrt", lambda a: a.rsqrt(), ((2, 3),), low=0.1, high=3.0),
    Case("reciprocal", lambda a: a.reciprocal(), ((2, 3),), low=0.5, high=3.0),
    Case("square", lambda a: a.square(), ((2, 3),)),
    Case("sin", lambda a: a.sin(), ((2, 3),)),
    Case("cos", lambda a: a.cos(), ((2, 3),)),
    Case("tan", lambda a: a.tan(), ((2, 3),), low=-1.2, high=1.2),
    Case("sinh", lambda a: a.sinh(), ((2, 3),)),
    Case("cosh", lambda a: a.cosh(), ((2, 3),)),
    Case("tanh", lambda a: a.tanh(), ((2, 3),)),
    Case("asin", lambda a: a.asin(), ((2, 3),), low=-0.9, high=0.9),
    Case("acos", lambda a: a.acos(), ((2, 3),), low=-0.9, high=0.9),
    Case("atan", lambda a: a.atan(), ((2, 3),)),
    Case("asinh", lambda a: a.asinh(), ((2, 3),)),
    Case("acosh", lambda a: a.acosh(), ((2, 3),), low=1.1, high=3.0),
    Case("atanh", lambda a: a.atanh(), ((2, 3),), low=-0.9, high=0.9),
    Case("erf", lambda a: a.erf(), ((2, 3),)),
    Case("contiguous", lambda a: (a * 2).contiguous() * a, ((2, 3),)),
    Case("clone", lambda a: a.clone() * a, ((2, 3),)),
    # activations
    Case("relu", lambda a: a.relu(), ((3, 4),)),
    Case("relu6", lambda a: a.relu6(), ((3, 4),), low=-3.0, high=9.0),
    Case("leaky_relu", lambda a: a.leaky_relu(0.1), ((3, 4),)),
    Case("elu", lambda a: a.elu(), ((3, 4),)),
    Case("celu", lambda a: a.celu(0.5), ((3, 4),)),
    Case("selu", lambda a: a.selu(), ((3, 4),)),
    Case("sigmoid", lambda a: a.sigmoid(), ((3, 4),)),
    Case("logsigmoid", lambda a: a.logsigmoid(), ((3, 4),)),
    Case("hardsigmoid", lambda a: a.hardsigmoid(), ((3, 4),), low=-5.0, high=5.0),
    Case("hardswish", lambda a: a.hardswish(), ((3, 4),), low=-5.0, high=5.0),
    Case("hardtanh", lambda a: a.hardtanh(), ((3, 4),)),
    Case("gelu", lambda a: a.gelu(), ((3, 4),)),
    Case("gelu_erf", lambda a: a.gelu(approximate="none"), ((3, 4),)),
    Case("quick_gelu", lambda a: a.quick_gelu(), ((3, 4),)),
    Case("silu", lambda a: a.silu(), ((3, 4),)),
    Case("swish", lambda a: a.swish(), ((3, 4),)),
    Case("mish", lambda a: a.mish(), ((3, 4),)),
    Case("softplus", lambda a: a.softplus(), ((3, 4),)),
    Case("softsign", lambda a: a.softsign(), ((3, 4),)),
    # reductions
    Case("sum", lambda a: a.sum(), ((3, 4),)),
    Case("sum_axis", lambda a: a.sum(axis=1, keepdim=True), ((3, 4),)),
    Case("mean", lambda a: a.mean(axis=0), ((3, 4),)),
    Case("prod", lambda a: a.prod(axis=1), ((3, 4),), low=0.5, high=1.5),
    Case("max", lambda a: a.max(axis=1), ((3, 4),), inputs=_distinct((3, 4))),
    Case("max_all", lambda a: a.max(), ((3, 4),), inputs=_distinct((3, 4))),
    Case("min", lambda a: a.min(axis=0), ((3, 4),), inputs=_distinct((3, 4))),
    Case("var", lambda a: a.var(axis=1), ((3, 4),)),
    Case("std", lambda a: a.std(axis=1), ((3, 4),)),
    Case("var_mean", lambda a: a.var_mean(axis=1)[0] + a.var_mean(axis=1)[1] * 2, ((3, 4),)),
    Case("std_mean", lambda a: a.std_mean(axis=0)[0] + a.std_mean(axis=0)[1] * 2, ((3, 4),)),
    Case("softmax", lambda a: a.softmax(), ((3, 4),)),
    Case("log_softmax", lambda a: a.log_softmax(), ((3, 4),)),
    Case("softmin", lambda a: a.softmin(), ((3, 4),)),
    Case("logsumexp", lambda a: a.logsumexp(axis=1), ((3, 4),)),
    Case("normalize", lambda a: a.normalize(dim=1), ((3, 4),)),
    Case("layernorm", lambda a: a.layernorm(), ((3, 4),)),
    Case("rms_norm", lambda a: a.rms_norm(), ((3, 4),)),
    Case(
        "batchnorm",
        lambda x, w, b, m, v: x.batchnorm(w, b, m, (v * v + 1).rsqrt()),
        ((2, 3, 2), (3,), (3,), (3,), (3,)),
    ),
    # scans
    Case("cumsum", lambda a: a.cumsum(axis=1), ((3, 4),)),
    Case("cumprod", lambda a: a.cumprod(axis=1), ((3, 4),), low=0.5, high=1.5),
    Case("cummax", lambda a: a.cummax(axis=1)[0], ((3, 4),), inputs=_distinct((3, 4))),
    Case("cummin", lambda a: a.cummin(axis=1)[0], ((3, 4),), inputs=_distinct((3, 4))),
    Case("logcumsumexp", lambda a: a.logcumsumexp(axis=1), ((3, 4),)),
    # movement and shape
    Case("reshape", lambda a: a.reshape(4, 3) * Tensor.arange(3, device=a.device), ((3, 4),)),
    Case("view", lambda a: a.view(12), ((3, 4),)),
    Case("permute", lambda a: a.permute(2, 0, 1), ((2, 3, 4),)),
    Case("transpose", lambda a: a.transpose(0, 1), ((3, 4),)),
    Case("T", lambda a: a.T, ((3, 4),)),
    Case("expand", lambda a: a.expand(3, 2, 4), ((3, 1, 4),)),
    Case("pad", lambda a: a.pad(((1, 2), (0, 1))), ((3, 4),)),
    Case("pad_value", lambda a: a.pad(((1, 0), (2, 1)), value=3.0), ((3, 4),)),
    Case("shrink", lambda a: a.shrink(((1, 3), (0, 2))), ((3, 4),)),
    Case("pad_to", lambda a: a.pad_to(4, 6), ((3, 4),)),
    Case("shrink_to", lambda a: a.shrink_to(2, 3), ((3, 4),)),
    Case("rearrange", lambda a: a.rearrange("a b c -> c (a b)"), ((2, 3, 2),)),
    Case("flip", lambda a: a.flip(1), ((3, 4),)),
    Case("squeeze", lambda a: a.squeeze(1), ((3, 1, 4),)),
    Case("unsqueeze", lambda a: a.unsqueeze(0), ((3, 4),)),
    Case("flatten", lambda a: a.flatten(), ((2, 3, 2),)),
    Case("unflatten", lambda a: a.unflatten(1, (2, 2)), ((3, 4),)),
    Case("getitem", lambda a: a[1:, ::2], ((3, 4),)),
    Case("getitem_tensor", lambda a: a[Tensor([2, 0, 2], device=a.device)], ((3, 4),)),
    Case("cat", lambda a, b: a.cat(b, dim=1), ((2, 3), (2, 2))),
    Case("stack", lambda a, b: a.stack(b, dim=0), ((2, 3), (2, 3))),
    Case("repeat", lambda a: a.repeat(2, 1), ((2, 3),)),
    Case("repeat_interleave", lambda a: a.repeat_interleave(2, dim=1), ((2, 3),)),
    Case("split", lambda a: a.split(2, dim=1)[1] * 3, ((2, 4),)),
    Case("chunk", lambda a: a.chunk(2, dim=1)[0] * 3, ((2, 4),)),
    Case("unfold", lambda a: a.unfold(1, 2, 1), ((2, 4),)),
    Case("roll", lambda a: a.roll(1, 1), ((2, 4),)),
    Case("tril", lambda a: a.tril(), ((3, 3),)),
    Case("triu", lambda a: a.triu(1), ((3, 3),)),
    Case("diagonal", lambda a: a.diagonal(), ((3, 3),)),
    Case("diag", lambda a: a.diag(), ((3,),)),
    Case("gather", lambda a: a.gather(1, Tensor([[0, 0], [2, 1]], device=a.device)), ((2, 3),)),
    # issue 30: scatter (a repeated index: one source lands), scatter_reduce, meshgrid, prod through zeros
    Case("scatter", lambda a, s: a.scatter(1, Tensor([[0, 2], [1, 1]], device=a.device), s), ((2, 3), (2, 2))),
    Case(
        "scatter_reduce_sum",
        lambda a, s: a.scatter_reduce(1, Tensor([[0, 2], [1, 1]], device=a.device), s, "sum"),
        ((2, 3), (2, 2)),
    ),
    Case(
        "scatter_reduce_amax",
        lambda a, s: a.scatter_reduce(1, Tensor([[0, 2], [1, 1]], device=a.device), s, "amax"),
        ((2, 3), (2, 2)),
        inputs=_distinct((2, 3), (2, 2)),
    ),
    # reading by index tensors (a GATHER node), repeated positions included
    Case("getitem_two_index_tensors", lambda a: a[_index(a, [[0, 1], [1, 1]]), _index(a, [2, 0])], ((2, 3),)),
    Case("getitem_index_and_slice", lambda a: a[:, _index(a, [3, 0, 3])], ((2, 4),)),
    Case("max_unpool2d", lambda x: x.max_unpool2d(_index(x, [[[[0, 3], [9, 14]]]]), 2), ((1, 1, 2, 2),)),
    Case("meshgrid", lambda a, b: a.meshgrid(b)[0] * a.meshgrid(b)[1], ((3,), (2,))),
    Case("prod_through_zeros", lambda a: a.prod(axis=1), ((3, 4),), inputs=_with_zeros),
    Case("pad_reflect_negative", lambda a: a.pad(((0, 0), (-1, 2)), mode="reflect"), ((2, 4),)),
    Case("sort", lambda a: a.sort(1)[0], ((2, 4),), inputs=_distinct((2, 4))),
    Case("topk", lambda a: a.topk(2)[0], ((2, 4),), inputs=_distinct((2, 4))),
    # linear algebra, convolution, pooling
    Case("matmul", lambda a, b: a @ b, ((2, 3), (3, 4))),
    # regression: eye is ones padded into a diagonal, which the matmul gradient took for a uniform constant
    Case("eye_matmul", lambda a: a.eye(3, dtype=a.dtype, device=a.device) @ a, ((3, 3),)),
    Case("qr", lambda a: a.qr()[0] * 2 + a.qr()[1].pad(((0, 0), (0, 0))), ((3, 3),), devices=("CPU",)),
    Case("svd_singular_values", lambda a: a.svd()[1], ((3, 3),), inputs=_distinct((3, 3)), devices=("CPU",)),
    Case("matmul_batched", lambda a, b: a.matmul(b), ((2, 2, 3), (3, 2))),
    Case("dot", lambda a, b: a.dot(b), ((3,), (3, 2))),
    Case("linear", lambda a, w, b: a.linear(w, b), ((2, 3), (3, 4), (4,))),
    Case("einsum", lambda a, b: Tensor.einsum("ij,jk->ik", a, b), ((2, 3), (3, 2))),
    Case("conv2d", lambda x, w, b: x.conv2d(w, b, padding=1), ((1, 2, 4, 4), (3, 2, 3, 3), (3,))),
    Case("conv2d_strided", lambda x, w: x.conv2d(w, stride=2, dilation=1), ((2, 1, 5, 5), (2, 1, 3, 3))),
    Case("conv_transpose2d", lambda x, w: x.conv_transpose2d(w, stride=2), ((1, 2, 3, 3), (2, 1, 2, 2))),
    Case("avg_pool2d", lambda x: x.avg_pool2d(2), ((1, 2, 4, 4),)),
    Case("max_pool2d", lambda x: x.max_pool2d(2), ((1, 1, 4, 4),), inputs=_distinct((1, 1, 4, 4))),
    Case("interpolate", lambda x: x.interpolate((5, 3), mode="linear"), ((1, 1, 3, 2),)),
    Case(
        "scaled_dot_product_attention",
        lambda q, k, v: q.scaled_dot_product_attention(k, v),
        ((1, 3, 4), (1, 3, 4), (1, 3, 4)),
    ),
    Case(
        "scaled_dot_product_attention_causal",
        lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
        ((3, 2),) * 3,
    ),
    # losses
    Case("cross_entropy", lambda a, b: a.cross_entropy(b.softmax()), ((3, 4), (3, 4))),
    Case("sparse_categorical_crossentropy", _labels_fixed(Tensor.sparse_categorical_crossentropy), ((3, 4),)),
    Case("nll_loss", _labels_fixed(lambda x, y: x.log_softmax().nll_loss(y)), ((3, 4),)),
    Case("binary_crossentropy", lambda p, t: p.binary_crossentropy(t), ((3, 4), (3, 4)), inputs=_probabilities),
    Case("binary_crossentropy_logits", lambda a, b: a.binary_crossentropy_logits(b.sigmoid()), ((3, 4), (3, 4))),
]


def _loss(case: Case, arrays: list[np.ndarray], weights: np.ndarray | None, device: str) -> tuple[Tensor, list]:
    tensors = [Tensor(array, device=device, dtype=dtypes.float64) for array in arrays]
    out = case.fn(*tensors)
    if weights is None:
        return out, tensors
    return (out * Tensor(weights, device=device, dtype=dtypes.float64)).sum(), tensors


def _inputs(case: Case, rng: np.random.Generator) -> list[np.ndarray]:
    if case.inputs is not None:
        return case.inputs(rng)
    return [rng.uniform(case.low, case.high, shape) for shape in case.shapes]


@pytest.mark.parametrize(
    ("case", "device"),
    [(case, device) for case in CASES for device in DEVICES if device in case.devices],
    ids=lambda value: value if isinstance(value, str) else value.name,
)
def test_gradient_matches_finite_differences(case: Case, device: str):
    rng = np.random.default_rng(sum(map(ord, case.name)))
    arrays = _inputs(case, rng)
    out, _ = _loss(case, arrays, None, device)
    assert out.dtype is dtypes.float64, f"{case.name} computes in {out.dtype}"
    weights = rng.uniform(0.5, 1.5, out.shape)
    loss, tensors = _loss(case, arrays, weights, device)
    grads = [g.numpy() for g in loss.gradient(*tensors)]
    for i, (array, grad) in enumerate(zip(arrays, grads, strict=True)):
        assert grad.shape == array.shape
        for _ in range(2):
            direction = rng.uniform(-1, 1, array.shape)
            shifted = [[*arrays[:i], array + sign * STEP * direction, *arrays[i + 1 :]] for sign in (1, -1)]
            above, below = (_loss(case, inputs, weights, device)[0].item() for inputs in shifted)
            numeric = (above - below) / (2 * STEP)
            analytic = float((grad * direction).sum())
            assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-6), f"input {i}"
