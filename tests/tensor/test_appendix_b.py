"""The forward values of spec tensor.md Appendix B for the math ops (torch semantics), row by row, on CPU and
PYTHON. The gradient columns (hardsigmoid/relu6/hardswish grads, asin/acos/atan/erf slopes at 0) are not checked
here; the indexing and bitcast rows belong to the shape-and-indexing tests."""

import math

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES

inf = math.inf


def values(result: Tensor) -> list:
    return result.numpy().tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_hardsigmoid_rows(device):
    assert values(Tensor([1e7, 1e8, 2.68e8, 1e9], device=device).hardsigmoid()) == [1, 1, 1, 1]
    row = values(Tensor([-3.1, -3, -2.9, 2.9, 3, 3.1], device=device).hardsigmoid())
    assert row == pytest.approx([0, 0, 0.0166667, 0.9833333, 1, 1], abs=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_relu6_rows(device):
    assert values(Tensor([6.71089e7, 2.68435e8, 1e9], device=device).relu6()) == [6, 6, 6]
    assert values(Tensor([0.0, 6.0], device=device).relu6()) == [0, 6]


@pytest.mark.parametrize("device", DEVICES)
def test_hardswish_row(device):
    result = Tensor([-3.0, 3.0], device=device).hardswish().numpy()
    assert result.tolist() == [0, 3] and np.signbit(result[0])


@pytest.mark.parametrize("device", DEVICES)
def test_softplus_row(device):
    assert values(Tensor([-inf, inf, 0.0], device=device).softplus()) == pytest.approx([0, inf, 0.6931472], rel=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_logaddexp_row(device):
    result = Tensor([-inf, inf, 1, -inf], device=device).logaddexp(Tensor([-inf, inf, -inf, 1], device=device))
    assert values(result) == [-inf, inf, 1, 1]


@pytest.mark.parametrize("device", DEVICES)
def test_logsumexp_row(device):
    assert Tensor([-inf, -inf], device=device).logsumexp(0).item() == -inf


@pytest.mark.parametrize("device", DEVICES)
def test_logcumsumexp_row(device):
    assert values(Tensor([-inf, 0.0, 1.0], device=device).logcumsumexp()) == pytest.approx([-inf, 0, 1.3132617])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("exponent", [2.0**52, 2.0**52 + 2])
def test_pow_with_huge_exponents_row(exponent, device):
    assert values(Tensor([0.5, 1.0, 2.0], device=device) ** exponent) == [0, 1, inf]


@pytest.mark.parametrize("device", DEVICES)
def test_int64_truncation_row(device):
    t = Tensor([0x12345678ABCDEF01], dtype=dtypes.int64, device=device)
    assert values(t.cast(dtypes.uint32).cast(dtypes.int64)) == [2882400001]


@pytest.mark.parametrize("device", DEVICES)
def test_normalize_int_row(device):
    result = Tensor([[3, 4], [6, 8]], device=device).normalize(p=2, dim=1)
    assert result.dtype is dtypes.float32
    np.testing.assert_allclose(result.numpy(), [[0.6, 0.8], [0.6, 0.8]], rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_bitwise_and_row(device):
    t = Tensor([[1, -8, 1], [32, 1, 6]], dtype=dtypes.int32, device=device)
    assert values((t & 12) & t) == [[0, 8, 0], [0, 0, 4]]


@pytest.mark.parametrize("device", DEVICES)
def test_where_with_nan_condition_rows(device):
    x = Tensor([math.nan, 1, 2, -1], device=device)
    a, b = Tensor([10, 20, 30, 40], device=device), Tensor([-1, -2, -3, -4], device=device)
    assert values((x < 1).where(a, b)) == [-1, -2, -3, 40]
    assert values((x > 1).where(a, b)) == [-1, -2, 30, -4]
    assert values((x != 1).where(a, b)) == [10, -2, 30, 40]
    assert values((x == 1).where(a, b)) == [-1, 20, -3, -4]


def test_old_hardsigmoid_formula_fails_in_float32():
    """The bug demo row: relu(a) - relu(a - 1) with a = x/6 + 0.5 is 0 at 2.68e8 and 1e9 (should be 1)."""
    x = np.array([2.68e8, 1e9], dtype=np.float32)
    a = x / np.float32(6) + np.float32(0.5)
    assert (np.maximum(a, 0) - np.maximum(a - np.float32(1), 0)).tolist() == [0, 0]
    assert values(Tensor(x, device="CPU").hardsigmoid()) == [1, 1]
