"""float64 exp2, log2, sin and pow on PTX (tg.codegen.render.ptx_f64): ptxas assembles them, and the PTX interpreter
(exact IEEE f64 arithmetic) computes them within F64_ULP_BOUND (test_ptx) ulps of numpy on sweeps that include the
special values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen import KernelInfo, Ops, UOp, dtypes
from tg.codegen.render.ptx import PTXRenderer
from tg.codegen.render.ptx_f64 import REDUCED_UP_TO

from .test_ptx import (  # noqa: F401 (a fixture)
    assemble,
    assert_within_ulps,
    launches,
    lowered,
    needs_ptxas,
    null_ptx_runs_on_the_interpreter,
    run_emulator,
    run_ptx,
)

SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 5e-324, -5e-324, 2.2250738585072014e-308]


def elementwise(op: Ops, count: int, operands: int = 1) -> UOp:
    """out[i] = op(a[i], ...) over `count` float64 elements."""
    out = UOp.param(0, dtypes.float64, count)
    i = UOp.range(count, 0)
    ins = [UOp.param(1 + k, dtypes.float64, count).index(i).load() for k in range(operands)]
    store = out.index(i).store(UOp(op, dtypes.float64, tuple(ins)))
    return UOp.sink(store, arg=KernelInfo(f"{op.name.lower()}_f64_{count}"))


def compute(op: Ops, *inputs: np.ndarray) -> np.ndarray:
    """op on the PTX interpreter."""
    linear = lowered(elementwise(op, len(inputs[0]), len(inputs)))
    return run_ptx(linear, [np.zeros(len(inputs[0])), *(np.asarray(a, np.float64) for a in inputs)])[0]


@needs_ptxas
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW], ids=lambda op: op.name)
def test_ptxas_assembles_the_float64_functions(op: Ops) -> None:
    assemble(PTXRenderer("sm_80").render(lowered(elementwise(op, 4, 2 if op is Ops.POW else 1))).src)


def test_exp2_is_within_the_ulp_bound() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([SPECIALS, [1024.0, 1023.999, -1022.0, -1074.0, -1074.5, -1075.0, -1080.0, 1e300, -1e300],
                        [0.5, -0.5, 1e-17, -1e-17], rng.uniform(-1, 1, 40), rng.uniform(-1100, 1030, 80)])  # fmt: skip
    with np.errstate(over="ignore"):
        assert_within_ulps(compute(Ops.EXP2, x), np.exp2(x), x)


def test_log2_is_within_the_ulp_bound() -> None:
    rng = np.random.default_rng(1)
    near_one = 1 + rng.uniform(-1e-3, 1e-3, 20)
    x = np.concatenate([SPECIALS, [-2.0, 2.0, 0.5, 1e-310, 1.7976931348623157e308, 1 + 2**-52, 1 - 2**-53],
                        near_one, rng.uniform(0, 4, 40), 2.0 ** rng.uniform(-1074, 1024, 60)])  # fmt: skip
    with np.errstate(divide="ignore", invalid="ignore"):
        assert_within_ulps(compute(Ops.LOG2, x), np.log2(x), x)


def test_sin_is_within_the_ulp_bound() -> None:
    rng = np.random.default_rng(2)
    multiples = np.array([k * math.pi / 2 for k in (1, 2, 3, 4, 7, 100, 10001, 1 << 20)])
    x = np.concatenate([SPECIALS, multiples, np.nextafter(multiples, 0), [1e-9, -3e-8, 0.785, -2.0, 1e6, -1e9],
                        rng.uniform(-7, 7, 60), rng.uniform(-1e4, 1e4, 30),
                        rng.uniform(-REDUCED_UP_TO, REDUCED_UP_TO, 30)])  # fmt: skip
    with np.errstate(invalid="ignore"):
        assert_within_ulps(compute(Ops.SIN, x), np.sin(x), x)


def test_sin_of_huge_arguments_is_within_the_ulp_bound() -> None:
    """Beyond REDUCED_UP_TO the reduction is Payne-Hanek's: every exponent up to the largest double."""
    rng = np.random.default_rng(4)
    worst_case = 6381956970095103 * 2.0**797  # the double nearest a multiple of pi/2
    extremes = [REDUCED_UP_TO, 2.0**31, 1e22, 2.0**1023, 1.7976931348623157e308, -1e300, worst_case]
    x = np.concatenate(
        [extremes, np.ldexp(rng.uniform(1, 2, 60), rng.integers(30, 1024, 60)) * rng.choice([-1, 1], 60)]
    )
    assert_within_ulps(compute(Ops.SIN, x), np.sin(x), x)


def test_pow_matches_the_emulator_on_special_values_and_numpy_elsewhere() -> None:
    rng = np.random.default_rng(3)
    bases = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, math.inf, -math.inf, math.nan, 10.0, -10.0]
    exponents = [0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, math.inf, -math.inf, math.nan, 1001.0, -1001.0]
    a, b = (np.array(v) for v in zip(*[(x, y) for x in bases for y in exponents], strict=True))
    linear = lowered(elementwise(Ops.POW, len(a), 2))
    arrays = [np.zeros(len(a)), a, b]
    got, want = run_ptx(linear, arrays)[0], run_emulator(linear, arrays)[0]
    assert_within_ulps(got, want, np.stack([a, b], 1))
    x, y = rng.uniform(0, 8, 60), rng.uniform(-60, 60, 60)
    with np.errstate(over="ignore"):
        assert_within_ulps(compute(Ops.POW, x, y), np.power(x, y), np.stack([x, y], 1))


def test_pow_near_overflow_is_within_the_ulp_bound() -> None:
    """Regression: log2's error is scaled by y in pow, so log2 |x| has to be carried past a double's precision
    (with log2 to 2**-58 only, pow(1.38, 922) was 11 ulps off)."""
    rng = np.random.default_rng(5)
    x = np.concatenate([[1.3765027919870578, 1.411858567881775, 2.0, 0.5], rng.uniform(1, 2, 40)])
    y = np.concatenate([[921.6643634153996, 993.7804002328855, 1023.5, -1074.25], rng.uniform(0, 1000, 40)])
    with np.errstate(over="ignore"):  # 2 ** 1023.5 is inf
        assert_within_ulps(compute(Ops.POW, x, y), np.power(x, y), np.stack([x, y], 1))


def test_float64_tensor_functions_compute_on_null_ptx(null_ptx_runs_on_the_interpreter: str) -> None:  # noqa: F811
    """Tensor float64 exp, log, sin, cos and pow (built on EXP2/LOG2/SIN/POW) through the whole pipeline on
    NULL:PTX, run on the interpreter, equal the CPU backend's (C's libm) within a few ulps: the tensor library's own
    roundings (the scale by ln 2 in exp and log) are the same on both. cos is 1 - 2 sin(x/2)**2, whose error is
    absolute (a few ulps of 1), not relative."""
    from tg.tensor import Tensor

    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(0.1, 20, 30), [1.0, 1e-300, 700.0]])
    y = rng.uniform(-3, 3, len(x))

    def functions(device: str) -> dict[str, np.ndarray]:
        a, b = Tensor(x, device=device), Tensor(y, device=device)
        return {"exp": a.exp(), "log": a.log(), "sin": a.sin(), "cos": a.cos(), "pow": a.pow(b)}

    ptx, cpu = functions(null_ptx_runs_on_the_interpreter), functions("CPU")
    for name, tensor in ptx.items():
        ran = len(launches)
        got, want = tensor.numpy(), cpu[name].numpy()
        assert len(launches) > ran, f"{name} ran no PTX kernel"
        assert got.dtype == np.float64, name
        if name == "cos":
            np.testing.assert_allclose(got, want, rtol=0, atol=4 * 2.0**-53)
        else:
            assert_within_ulps(got, want, x, bound=4)
