"""Activations against textbook formulas evaluated by numpy in float64, on CPU and PYTHON, plus the extreme inputs
of spec tensor.md 1.7 (where the old difference-of-relus formulas cancel to 0)."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_softplus(x, beta=1.0, threshold=20.0):
    return np.where(x * beta > threshold, x, np.log1p(np.exp(x * beta)) / beta)


def np_erf(x):
    return np.vectorize(math.erf)(x)


SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805

# name -> (tg call, numpy float64 reference)
ACTIVATIONS = {
    "relu": (lambda t: t.relu(), lambda x: np.where(x > 0, x, 0.0)),
    "relu6": (lambda t: t.relu6(), lambda x: np.clip(x, 0, 6)),
    "hardtanh": (lambda t: t.hardtanh(-2.0, 1.5), lambda x: np.clip(x, -2.0, 1.5)),
    "hardsigmoid": (lambda t: t.hardsigmoid(), lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "hardswish": (lambda t: t.hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "leaky_relu": (lambda t: t.leaky_relu(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda t: t.elu(0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    "celu": (lambda t: t.celu(1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x / 1.5))),
    "selu": (lambda t: t.selu(), lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(x))),
    "sigmoid": (lambda t: t.sigmoid(), np_sigmoid),
    "logsigmoid": (lambda t: t.logsigmoid(), lambda x: -np.logaddexp(0, -x)),
    "softplus": (lambda t: t.softplus(), np_softplus),
    "softplus_beta": (lambda t: t.softplus(beta=2.0, threshold=5.0), lambda x: np_softplus(x, 2.0, 5.0)),
    "tanh": (lambda t: t.tanh(), np.tanh),
    "softsign": (lambda t: t.softsign(), lambda x: x / (1 + np.abs(x))),
    "gelu": (
        lambda t: t.gelu(),
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    "gelu_erf": (lambda t: t.gelu(approximate="none"), lambda x: 0.5 * x * (1 + np_erf(x / math.sqrt(2)))),
    "quick_gelu": (lambda t: t.quick_gelu(), lambda x: x * np_sigmoid(1.702 * x)),
    "silu": (lambda t: t.silu(), lambda x: x * np_sigmoid(x)),
    "swish": (lambda t: t.swish(), lambda x: x * np_sigmoid(x)),
    "mish": (lambda t: t.mish(), lambda x: x * np.tanh(np.log1p(np.exp(x)))),
}


def wide_inputs() -> np.ndarray:
    """Values across the interesting range: kinks (0, +-3, 6), tiny, moderate and large magnitudes."""
    rng = np.random.default_rng(7)
    special = [0.0, -0.0, 3.0, -3.0, 6.0, 1e-6, -1e-6, 1e-30, 30.0, -30.0, 80.0, -80.0]
    return np.concatenate([special, rng.uniform(-8, 8, 28)]).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_matches_numpy_in_float32(name, device):
    op, reference = ACTIVATIONS[name]
    x = wide_inputs()
    result = op(Tensor(x, device=device))
    assert result.dtype is dtypes.float32
    expected = reference(x.astype(np.float64))
    # erf (A&S 7.1.26 beyond 0.5) has an absolute error below 1.5e-7, which 1 + erf(x) keeps for negative x
    atol = 3e-7 if name == "gelu_erf" else 1e-7
    np.testing.assert_allclose(result.numpy(), expected, rtol=3e-6, atol=atol)


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "gelu", "silu", "hardswish", "softplus", "mish", "elu"])
def test_activation_on_float16_rounds_the_float64_result_once(name):
    op, reference = ACTIVATIONS[name]
    x = np.linspace(-6, 6, 49).astype(np.float16)
    result = op(Tensor(x, device="CPU"))
    assert result.dtype is dtypes.float16
    expected = reference(x.astype(np.float64)).astype(np.float16)
    ulp = np.spacing(np.abs(expected)).astype(np.float64)
    assert np.all(np.abs(result.numpy().astype(np.float64) - expected.astype(np.float64)) <= ulp + 1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_activation_of_ints_computes_in_the_default_float(device):
    result = Tensor([-2, 0, 3], device=device).sigmoid()
    assert result.dtype is dtypes.float32
    np.testing.assert_allclose(result.numpy(), np_sigmoid(np.array([-2.0, 0.0, 3.0])), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------- extremes


@pytest.mark.parametrize("device", DEVICES)
def test_hardsigmoid_is_exactly_one_at_huge_inputs(device):
    x = Tensor([1e7, 1e8, 2.68e8, 1e9], device=device)
    assert x.hardsigmoid().tolist() == [1.0, 1.0, 1.0, 1.0]
    assert (-x).hardsigmoid().tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("device", DEVICES)
def test_hardsigmoid_around_its_kinks(device):
    result = Tensor([-3.1, -3.0, -2.9, 2.9, 3.0, 3.1], device=device).hardsigmoid().numpy()
    np.testing.assert_allclose(result, [0, 0, 0.0166667, 0.9833333, 1, 1], atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_relu6_is_exactly_six_at_huge_inputs(device):
    assert Tensor([6.71089e7, 2.68435e8, 1e9], device=device).relu6().tolist() == [6.0, 6.0, 6.0]
    assert Tensor([0.0, 6.0], device=device).relu6().tolist() == [0.0, 6.0]


@pytest.mark.parametrize("device", DEVICES)
def test_hardswish_at_its_kinks(device):
    result = Tensor([-3.0, 3.0, 1e9, -1e9], device=device).hardswish().numpy()
    assert result.tolist() == [0.0, 3.0, 1e9, 0.0]
    assert math.copysign(1, result[0]) == -1  # torch: -3 * 0 / 6 = -0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["elu", "celu", "selu"])
def test_exponential_activations_are_linear_at_large_inputs(name, device):
    x = np.random.default_rng(3).uniform(300, 400, (3, 3)).astype(np.float32)
    result = ACTIVATIONS[name][0](Tensor(x, device=device)).numpy()
    scale = SELU_SCALE if name == "selu" else 1.0
    np.testing.assert_allclose(result, scale * x, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_selu_at_minus_one_zero_one(device):
    result = Tensor([-1.0, 0.0, 1.0], device=device).selu().numpy()
    np.testing.assert_allclose(result, [SELU_SCALE * SELU_ALPHA * math.expm1(-1), 0, SELU_SCALE], rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_softplus_at_infinities(device):
    result = Tensor([-math.inf, math.inf, 0.0], device=device).softplus().numpy()
    np.testing.assert_allclose(result, [0.0, math.inf, 0.6931472], rtol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_saturating_activations_at_infinities(device):
    x = Tensor([-math.inf, math.inf], device=device)
    assert x.sigmoid().tolist() == [0.0, 1.0]
    assert x.tanh().tolist() == [-1.0, 1.0]
    assert x.logsigmoid().tolist() == [-math.inf, 0.0]
    assert x.hardsigmoid().tolist() == [0.0, 1.0]
    assert x.elu().tolist() == [-1.0, math.inf]
    assert Tensor([-1e9, 1e9], device=device).gelu().tolist() == [0.0, 1e9]  # x^3 overflows on the way


@pytest.mark.parametrize("device", DEVICES)
def test_activations_keep_nan(device):
    x = Tensor([math.nan], device=device)
    for name, (op, _) in ACTIVATIONS.items():
        assert math.isnan(op(x).item()), name


@pytest.mark.parametrize("device", DEVICES)
def test_sigmoid_and_logsigmoid_far_from_zero_do_not_overflow(device):
    x = np.array([-100.0, -50.0, 50.0, 100.0], dtype=np.float32)
    # exp(x) for |x| ~ 50 carries the rounding of x * log2(e): a few ulps; sigmoid(-100) is a float32 subnormal
    expected = np_sigmoid(x.astype(np.float64)).astype(np.float32)
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    np.testing.assert_allclose(Tensor(x, device=device).sigmoid().numpy(), expected, rtol=5e-6, atol=tiny)
    expected = -np.logaddexp(0, -x.astype(np.float64))
    np.testing.assert_allclose(Tensor(x, device=device).logsigmoid().numpy(), expected, rtol=5e-6, atol=tiny)


def test_old_difference_of_relus_formula_fails_where_ours_holds():
    """The regression the spec names: numpy float32 relu(x) - relu(x - 6) is 8, 0, 0 at these inputs."""
    x = np.array([6.71089e7, 2.68435e8, 1e9], dtype=np.float32)
    old = np.maximum(x, 0) - np.maximum(x - np.float32(6), 0)
    assert old.tolist() == [8.0, 0.0, 0.0]
    assert Tensor(x, device="CPU").relu6().tolist() == [6.0, 6.0, 6.0]


def test_gelu_rejects_an_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        Tensor([1.0]).gelu(approximate="fast")


@pytest.mark.parametrize("device", DEVICES)
def test_tanh_far_out_is_exactly_one_and_keeps_nan(device):
    """tanh clamps |x| at 20 so its exp stays a normal float (issue 23); float32 tanh is +-1 from 9.02 on anyway."""
    x = np.array([9.5, -9.5, 20.0, -25.0, 1e30, -np.inf, np.inf], dtype=np.float32)
    assert Tensor(x, device=device).tanh().tolist() == np.tanh(x.astype(np.float64)).astype(np.float32).tolist()
    assert math.isnan(Tensor([math.nan], device=device).tanh().item())
    near = np.linspace(-12, 12, 97, dtype=np.float32)  # through the clamp's neighbourhood, against float64 tanh
    np.testing.assert_allclose(Tensor(near, device=device).tanh().numpy(), np.tanh(near.astype(np.float64)), rtol=2e-6)


def np_gelu_tanh(x):
    inner = np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
    return x * np_sigmoid(2 * inner)


@pytest.mark.parametrize("device", DEVICES)
def test_gelu_flushes_only_where_its_sigmoid_is_below_the_normal_floats(device):
    """gelu's sigmoid is 0 where it would be below exp(-87) (x < about -10.3), so exp never computes a subnormal
    (issue 23); everywhere else it matches the float64 formula. torch's tanh-formula gelu is already 0 there."""
    x = np.array([-1e3, -30.0, -12.0, -10.5, -9.9, -9.0, -5.0, -1.0, 0.0, 1.0, 5.0, 30.0], dtype=np.float32)
    got = Tensor(x, device=device).gelu().numpy()
    with np.errstate(over="ignore"):  # exp(2000) in the oracle: inf, so its sigmoid is 0
        expected = np_gelu_tanh(x.astype(np.float64))
    flushed = 2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(np.float64) ** 3) < -87
    assert flushed.tolist() == [True] * 4 + [False] * 8
    assert (got[flushed] == 0).all() and (np.abs(expected[flushed]) < 1e-36).all()
    # exp at arguments near -80 carries the rounding of the argument: a few ulps, as for sigmoid(-100) above
    np.testing.assert_allclose(got[~flushed], expected[~flushed], rtol=2e-5, atol=0)
