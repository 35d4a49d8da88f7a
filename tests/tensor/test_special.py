"""Special functions against numpy (and Python's math.erf) in float64, on CPU and PYTHON: accuracy across each
domain, relative accuracy near 0, and the limits at the domain's edges and at +-inf."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES

RNG = np.random.default_rng(11)
TINY = [0.0, 1e-30, -1e-30, 1e-8, -1e-8, 1e-4, -1e-4]


def with_tiny(values) -> np.ndarray:
    return np.concatenate([TINY, values]).astype(np.float32)


# name -> (tg call, numpy reference, inputs)
FUNCTIONS = {
    "log1p": (lambda t: t.log1p(), np.log1p, with_tiny(RNG.uniform(-0.99, 50, 20))),
    "expm1": (lambda t: t.expm1(), np.expm1, with_tiny(RNG.uniform(-30, 30, 20))),
    "erf": (lambda t: t.erf(), np.vectorize(math.erf), with_tiny(RNG.uniform(-5, 5, 30))),
    "sinh": (lambda t: t.sinh(), np.sinh, with_tiny(np.r_[RNG.uniform(-10, 10, 20), 0.999, 1.0, 1.001, 89, -89])),
    "cosh": (lambda t: t.cosh(), np.cosh, with_tiny(np.r_[RNG.uniform(-10, 10, 20), 89, -89])),
    "asinh": (lambda t: t.asinh(), np.arcsinh, with_tiny(np.r_[RNG.uniform(-100, 100, 20), 1e20, -1e30])),
    "acosh": (lambda t: t.acosh(), np.arccosh, np.r_[1.0, 1.0 + 2**-20, RNG.uniform(1, 100, 20), 1e20, 1e30]),
    "atanh": (lambda t: t.atanh(), np.arctanh, with_tiny(RNG.uniform(-0.999, 0.999, 20))),
    "asin": (lambda t: t.asin(), np.arcsin, with_tiny(np.r_[RNG.uniform(-1, 1, 20), 1.0, -1.0, 0.9999])),
    "acos": (lambda t: t.acos(), np.arccos, with_tiny(np.r_[RNG.uniform(-1, 1, 20), 1.0, -1.0, 0.9999])),
    "atan": (lambda t: t.atan(), np.arctan, with_tiny(np.r_[RNG.uniform(-10, 10, 20), 1e30, -1e30, 0.41, 0.42])),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_special_function_matches_numpy_in_float32(name, device):
    op, reference, x = FUNCTIONS[name]
    x = np.asarray(x, dtype=np.float32)
    result = op(Tensor(x, device=device))
    assert result.dtype is dtypes.float32
    # a few float32 ulps relative; erf's A&S branch (|x| >= 0.5) has an absolute error below 1.5e-7
    atol = 2e-7 if name == "erf" else 0.0
    np.testing.assert_allclose(result.numpy(), reference(x.astype(np.float64)), rtol=4e-6, atol=atol)


@pytest.mark.parametrize("name", ["log1p", "expm1", "atan", "asinh", "sinh"])
def test_special_function_in_float64_is_more_precise_than_float32(name):
    op, reference, x = FUNCTIONS[name]
    x = np.asarray(x, dtype=np.float64)
    np.testing.assert_allclose(op(Tensor(x, device="CPU")).numpy(), reference(x), rtol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_special_functions_at_domain_edges_and_infinities(device):
    def values(op, xs):
        return op(Tensor(xs, device=device)).tolist()

    inf, nan = math.inf, math.nan
    assert values(lambda t: t.atanh(), [1.0, -1.0]) == [inf, -inf]
    assert all(math.isnan(v) for v in values(lambda t: t.atanh(), [1.5, -2.0]))
    assert all(math.isnan(v) for v in values(lambda t: t.asin(), [1.5, -1.01]))
    assert all(math.isnan(v) for v in values(lambda t: t.acos(), [1.5, -1.01]))
    assert all(math.isnan(v) for v in values(lambda t: t.acosh(), [0.5, -3.0, nan]))
    assert values(lambda t: t.atan(), [inf, -inf]) == pytest.approx([math.pi / 2, -math.pi / 2], rel=1e-7)
    assert values(lambda t: t.erf(), [inf, -inf, 10.0]) == [1.0, -1.0, 1.0]
    assert values(lambda t: t.sinh(), [inf, -inf, 1000.0]) == [inf, -inf, inf]
    assert values(lambda t: t.cosh(), [inf, -inf]) == [inf, inf]
    assert values(lambda t: t.asinh(), [inf, -inf]) == [inf, -inf]
    assert values(lambda t: t.acosh(), [inf]) == [inf]
    assert values(lambda t: t.expm1(), [inf, -inf, -100.0]) == [inf, -1.0, -1.0]
    assert values(lambda t: t.log1p(), [inf, -1.0]) == [inf, -inf]


@pytest.mark.parametrize("device", DEVICES)
def test_odd_functions_keep_the_sign_of_zero(device):
    for name in ["erf", "sinh", "asinh", "atanh", "asin", "atan"]:
        result = FUNCTIONS[name][0](Tensor([0.0, -0.0], device=device)).numpy()
        assert np.signbit(result).tolist() == [False, True], name


@pytest.mark.parametrize("device", DEVICES)
def test_logaddexp_matches_numpy_and_handles_infinities(device):
    a = RNG.uniform(-50, 50, 16).astype(np.float32)
    b = RNG.uniform(-50, 50, 16).astype(np.float32)
    result = Tensor(a, device=device).logaddexp(Tensor(b, device=device))
    np.testing.assert_allclose(result.numpy(), np.logaddexp(a.astype(np.float64), b), rtol=2e-6)
    inf = math.inf
    result = Tensor([-inf, inf, 1.0, -inf], device=device).logaddexp(Tensor([-inf, inf, -inf, 1.0], device=device))
    assert result.tolist() == [-inf, inf, 1.0, 1.0]
    assert Tensor([inf, -inf], device=device).logaddexp(Tensor([-inf, inf], device=device)).tolist() == [inf, inf]


@pytest.mark.parametrize("device", DEVICES)
def test_logaddexp_broadcasts_a_scalar_and_promotes_ints(device):
    result = Tensor([[0, 1], [2, 3]], device=device).logaddexp(0)
    assert result.dtype is dtypes.float32
    np.testing.assert_allclose(result.numpy(), np.logaddexp([[0.0, 1.0], [2.0, 3.0]], 0), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_copysign_uses_the_sign_bit(device):
    magnitudes = np.array([1.0, -2.0, 3.0, -0.0, 0.0, np.inf, 5.0], dtype=np.float32)
    signs = np.array([-1.0, 1.0, -0.0, 1.0, -3.0, -1.0, -np.nan], dtype=np.float32)
    result = Tensor(magnitudes, device=device).copysign(Tensor(signs, device=device)).numpy()
    expected = np.copysign(magnitudes, signs)
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(np.signbit(result), np.signbit(expected))


@pytest.mark.parametrize("device", DEVICES)
def test_copysign_of_ints_gives_floats(device):
    result = Tensor([1, -2, 3], device=device).copysign(-1)
    assert result.dtype is dtypes.float32
    assert result.tolist() == [-1.0, -2.0, -3.0]


@pytest.mark.parametrize("device", DEVICES)
def test_lerp_matches_torch_formula_and_is_exact_at_the_ends(device):
    start = RNG.uniform(-5, 5, 12).astype(np.float32)
    end = RNG.uniform(-5, 5, 12).astype(np.float32)
    weight = RNG.uniform(-0.5, 1.5, 12).astype(np.float32)
    result = Tensor(start, device=device).lerp(Tensor(end, device=device), Tensor(weight, device=device))
    np.testing.assert_allclose(result.numpy(), start + weight.astype(np.float64) * (end - start), rtol=1e-5, atol=1e-6)
    ends = Tensor(start, device=device).lerp(Tensor(end, device=device), 1.0).numpy()
    np.testing.assert_array_equal(ends, end)
    np.testing.assert_array_equal(Tensor(start, device=device).lerp(Tensor(end, device=device), 0.0).numpy(), start)


@pytest.mark.parametrize("device", DEVICES)
def test_special_functions_on_float16_round_once(device):
    x = np.linspace(-0.95, 0.95, 21).astype(np.float16)
    for name in ["erf", "atan", "asin", "atanh", "sinh"]:
        op, reference, _ = FUNCTIONS[name]
        result = op(Tensor(x, device=device))
        assert result.dtype is dtypes.float16
        expected = reference(x.astype(np.float64))
        ulp = np.spacing(np.abs(expected.astype(np.float16))).astype(np.float64)
        assert np.all(np.abs(result.numpy().astype(np.float64) - expected) <= ulp), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_and_allclose_match_numpy(equal_nan, device):
    a = np.array([1.0, 1.0 + 1e-6, 1.0 + 1e-3, np.inf, -np.inf, np.inf, np.nan, 0.0, 1e-9], dtype=np.float32)
    b = np.array([1.0, 1.0, 1.0, np.inf, np.inf, 1e38, np.nan, 1e-9, 0.0], dtype=np.float32)
    result = Tensor(a, device=device).isclose(Tensor(b, device=device), equal_nan=equal_nan)
    np.testing.assert_array_equal(result.numpy(), np.isclose(a, b, equal_nan=equal_nan))
    assert Tensor(a[:2], device=device).allclose(Tensor(b[:2], device=device))
    assert not Tensor(a, device=device).allclose(Tensor(b, device=device), equal_nan=equal_nan)
    assert Tensor([1, 2], device=device).isclose(Tensor([1, 3], device=device)).tolist() == [True, False]


@pytest.mark.parametrize("device", DEVICES)
def test_erf_in_float64_is_accurate_to_double_precision(device):
    x = np.r_[0.0, 1e-300, 1e-8, np.linspace(-6, 6, 61), 1.999999, 2.0, 2.000001, 27.0, -30.0]
    result = Tensor(x, device=device).erf().numpy()
    np.testing.assert_allclose(result, [math.erf(v) for v in x], rtol=2e-15, atol=5e-16)
    assert Tensor([np.inf, -np.inf], device=device).erf().tolist() == [1.0, -1.0]
