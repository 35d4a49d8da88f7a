"""Every ALU op, cast and movement op through the whole engine (schedule, lower, render, run) on CPU and PYTHON,
against numpy in the same dtype."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.dtype import from_numpy
from tg.hcq.engine import buffer_from_bytes, read_bytes

from .devices import DEVICES
from .test_engine import alu, reduce, tensor, to_numpy

FLOATS = [np.float32, np.float16, np.float64]
INTS = [np.int32, np.int8, np.uint8]
rng = np.random.default_rng(1)


def sample(dtype: type, shape: tuple[int, ...] = (3, 5), low: float = -10, high: float = 10) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return rng.uniform(low, high, shape).astype(dtype)
    if dtype is np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's truncating integer division, with x / 0 = 0 (what the engine defines)."""
    safe = np.where(b == 0, 1, b)
    with np.errstate(all="ignore"):
        quotient = (np.abs(a.astype(np.int64)) // np.abs(safe.astype(np.int64))) * np.sign(a) * np.sign(safe)
    return np.where(b == 0, 0, quotient).astype(a.dtype)


BINARY_FLOAT = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.FDIV: np.divide,
    Ops.MAX: np.maximum,
    Ops.CMPLT: np.less,
    Ops.CMPNE: np.not_equal,
    Ops.CMPEQ: np.equal,
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", list(BINARY_FLOAT))
def test_binary_float_ops_round_like_numpy(device: str, dtype: type, op: Ops) -> None:
    a, b = sample(dtype), sample(dtype)
    b[0, 0] = 0  # division by zero gives inf, as in numpy
    with np.errstate(all="ignore"):
        expected = BINARY_FLOAT[op](a, b)
    np.testing.assert_array_equal(to_numpy(alu(op, tensor(a, device), tensor(b, device))), expected)


BINARY_INT = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.MAX: np.maximum,
    Ops.AND: np.bitwise_and,
    Ops.OR: np.bitwise_or,
    Ops.XOR: np.bitwise_xor,
    Ops.CMPLT: np.less,
    Ops.CMPEQ: np.equal,
    Ops.IDIV: trunc_div,
    Ops.MOD: lambda a, b: (a.astype(np.int64) - trunc_div(a, b).astype(np.int64) * b).astype(a.dtype) * (b != 0),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", list(BINARY_INT))
def test_binary_int_ops_wrap_like_numpy(device: str, dtype: type, op: Ops) -> None:
    a, b = sample(dtype), sample(dtype)
    b[0, :2] = 0
    if np.issubdtype(dtype, np.signedinteger):
        a[1, 0], b[1, 0] = np.iinfo(dtype).min, -1  # INT_MIN / -1 wraps instead of trapping
    with np.errstate(all="ignore"):
        expected = BINARY_INT[op](a, b)
    np.testing.assert_array_equal(to_numpy(alu(op, tensor(a, device), tensor(b, device))), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [Ops.SHL, Ops.SHR])
@pytest.mark.parametrize("dtype", INTS)
def test_shifts_match_numpy(device: str, op: Ops, dtype: type) -> None:
    a = sample(dtype)
    shift = rng.integers(0, np.iinfo(dtype).bits, a.shape).astype(dtype)
    expected = np.left_shift(a, shift) if op is Ops.SHL else np.right_shift(a, shift)
    np.testing.assert_array_equal(to_numpy(alu(op, tensor(a, device), tensor(shift, device))), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_bool_logic_matches_numpy(device: str) -> None:
    a, b = sample(np.bool_), sample(np.bool_)
    A, B = tensor(a, device), tensor(b, device)
    np.testing.assert_array_equal(to_numpy(alu(Ops.AND, A, B)), a & b)
    np.testing.assert_array_equal(to_numpy(alu(Ops.OR, A, B)), a | b)
    np.testing.assert_array_equal(to_numpy(alu(Ops.CMPNE, A, B)), a != b)
    np.testing.assert_array_equal(to_numpy(alu(Ops.NEG, A)), ~a)


UNARY_FLOAT = {
    Ops.NEG: (np.negative, 0),
    Ops.RECIPROCAL: (np.reciprocal, 0),
    Ops.SQRT: (np.sqrt, 0),
    Ops.TRUNC: (np.trunc, 0),
    Ops.EXP2: (np.exp2, 2),
    Ops.LOG2: (np.log2, 2),
    Ops.SIN: (np.sin, 2),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", list(UNARY_FLOAT))
def test_unary_float_ops_match_numpy(device: str, dtype: type, op: Ops) -> None:
    """Exactly rounded ops must be equal; transcendental ones within 2 units in the last place."""
    function, ulps = UNARY_FLOAT[op]
    a = sample(dtype)
    a[0, :3] = [0.0, -1.5, np.inf]
    if op is Ops.SQRT or op is Ops.LOG2:
        a = np.abs(a)
    with np.errstate(all="ignore"):
        expected = function(a)
    actual = to_numpy(alu(op, tensor(a, device)))
    if ulps == 0:
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_array_max_ulp(actual, expected, maxulp=ulps)


def test_float_max_propagates_nan_like_numpy() -> None:
    a = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    b = np.array([np.nan, 2.0, 1.0, np.nan], np.float32)
    for device in DEVICES:
        np.testing.assert_array_equal(to_numpy(alu(Ops.MAX, tensor(a, device), tensor(b, device))), np.maximum(a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_where_selects_like_numpy(device: str) -> None:
    c, a, b = sample(np.bool_), sample(np.float32), sample(np.float32)
    out = alu(Ops.WHERE, tensor(c, device), tensor(a, device), tensor(b, device))
    np.testing.assert_array_equal(to_numpy(out), np.where(c, a, b))


CASTS = [
    (np.float32, np.int32),
    (np.float32, np.uint8),
    (np.float32, np.int8),
    (np.float32, np.float16),
    (np.float16, np.float32),
    (np.float64, np.float32),
    (np.int32, np.float32),
    (np.int32, np.int8),
    (np.uint8, np.int32),
    (np.int8, np.uint8),
    (np.bool_, np.float32),
    (np.float32, np.bool_),
    (np.int32, np.bool_),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("source", "target"), CASTS)
def test_casts_match_numpy(device: str, source: type, target: type) -> None:
    a = sample(source, low=-100, high=100)
    if np.issubdtype(source, np.floating) and np.issubdtype(target, np.integer):
        info = np.iinfo(target)
        a = np.clip(a, info.min, info.max)  # out-of-range float -> int is undefined in numpy too
    node = UOp(Ops.CAST, from_numpy(np.dtype(target)), (tensor(a, device),))
    np.testing.assert_array_equal(to_numpy(node), a.astype(target))


@pytest.mark.parametrize("device", DEVICES)
def test_bitcast_reinterprets_bits(device: str) -> None:
    a = sample(np.float32)
    node = UOp(Ops.BITCAST, dtypes.int32, (tensor(a, device),))
    np.testing.assert_array_equal(to_numpy(node), a.view(np.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_float16_chain_rounds_after_every_op(device: str) -> None:
    a, b, c = (sample(np.float16, low=-3, high=3) for _ in range(3))
    A, B, C = (tensor(x, device) for x in (a, b, c))
    out = alu(Ops.ADD, alu(Ops.MUL, A, B), alu(Ops.MUL, C, C))
    np.testing.assert_array_equal(to_numpy(out), a * b + c * c)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_, np.float16])
def test_reductions_in_dtype(device: str, dtype: type) -> None:
    a = sample(dtype, (4, 6), low=-2, high=2)
    A = tensor(a, device)
    if dtype is not np.bool_:
        np.testing.assert_allclose(
            to_numpy(reduce(A, Ops.ADD, (1,))).astype(np.float64),
            a.sum(1, keepdims=True, dtype=dtype).astype(np.float64),
            rtol=1e-2 if dtype is np.float16 else 1e-6,
            atol=1e-2 if dtype is np.float16 else 0,  # float16 sums are summed in a different order
        )
        np.testing.assert_array_equal(to_numpy(reduce(A, Ops.MUL, (0,))), a.prod(0, keepdims=True, dtype=dtype))
    np.testing.assert_array_equal(to_numpy(reduce(A, Ops.MAX, (0, 1))), a.max(keepdims=True))


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_rounds_after_every_op_like_ml_dtypes(device: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a, b = (rng.standard_normal(64).astype(ml_dtypes.bfloat16) for _ in range(2))
    A, B = (buffer_from_bytes(x.tobytes(), dtypes.bfloat16, device) for x in (a, b))
    out = UOp(Ops.ADD, dtypes.bfloat16, (UOp(Ops.MUL, dtypes.bfloat16, (A, B)), A))
    result = np.frombuffer(read_bytes(out), ml_dtypes.bfloat16)
    np.testing.assert_array_equal(result.astype(np.float32), (a * b + a).astype(np.float32))
    widened = np.frombuffer(read_bytes(UOp(Ops.CAST, dtypes.float32, (A,))), np.float32)
    np.testing.assert_array_equal(widened, a.astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_int8_through_uint32_to_float_is_not_zero_extended(device: str) -> None:
    """Regression: clang 19 -march=native vectorized (float)(unsigned)(signed char)x as a zero-extension."""
    a = np.array([-24, 5, -128, 127], np.int8)
    node = UOp(Ops.CAST, dtypes.float32, (UOp(Ops.CAST, dtypes.uint32, (tensor(a, device),)),))
    np.testing.assert_array_equal(to_numpy(node), a.astype(np.uint32).astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_trunc_keeps_the_sign_of_zero(device: str) -> None:
    a = np.array([-0.5, 0.5, -0.0, -2.5], np.float64)
    result = to_numpy(alu(Ops.TRUNC, tensor(a, device)))
    np.testing.assert_array_equal(np.signbit(result), np.signbit(np.trunc(a)))


def test_float_to_int_of_nan_and_inf_is_zero_on_every_device() -> None:
    a = np.array([np.nan, np.inf, -np.inf, 2.5], np.float32)
    results = [to_numpy(UOp(Ops.CAST, dtypes.int64, (tensor(a, device),))) for device in DEVICES]
    for result in results:
        np.testing.assert_array_equal(result, [0, 0, 0, 2])
