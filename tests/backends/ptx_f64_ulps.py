"""Measures the largest error, in ulps of the exact result, of PTX's software float64 exp2, log2, sin and
pow (tg.codegen.render.ptx_f64) on the PTX interpreter; the exact result is computed in Decimal at 60 digits
(400 for sin's reduction).

    CC=gcc uv run python -m tests.backends.ptx_f64_ulps [count]
"""

from __future__ import annotations

import sys
from decimal import Decimal, getcontext, localcontext

import numpy as np

from tg.codegen import Ops
from tg.codegen.render.ptx_f64 import _LN2, _PI, REDUCED_UP_TO

from .test_ptx_f64 import compute

getcontext().prec = 60


def exact_sin(x: float) -> Decimal:
    """sin x: x loses its whole turns of a 420-digit 2 pi (at 400 digits: x may be 1e308), then the Taylor series."""
    with localcontext() as context:
        context.prec = 400
        value = Decimal(x)
        turn = 2 * _PI
        value -= turn * (value / turn).to_integral_value()
    term, total, k = value, value, 1
    while abs(term) > Decimal(10) ** -70:
        term *= -value * value / ((2 * k) * (2 * k + 1))
        total += term
        k += 1
    return total


EXACT = {
    Ops.EXP2: lambda x: (Decimal(x) * _LN2).exp(),
    Ops.LOG2: lambda x: Decimal(x).ln() / _LN2,
    Ops.SIN: exact_sin,
    Ops.POW: lambda x, y: (Decimal(y) * Decimal(x).ln()).exp(),
}


def max_ulps(op: Ops, *x: np.ndarray) -> tuple[float, tuple[float, ...]]:
    got = compute(op, *x)
    worst, at = 0.0, ()
    for values, result in zip(zip(*x, strict=True), got, strict=True):
        exact = EXACT[op](*(float(v) for v in values))
        error = float(abs(Decimal(float(result)) - exact)) / float(np.spacing(abs(float(exact))))
        if error > worst:
            worst, at = error, tuple(float(v) for v in values)
    return worst, at


def main(count: int) -> None:
    rng = np.random.default_rng(0)
    sweeps = {
        Ops.EXP2: np.concatenate([rng.uniform(-1, 1, count), rng.uniform(-1022, 1023, count)]),
        Ops.LOG2: np.concatenate([rng.uniform(0.5, 2, count), 2.0 ** rng.uniform(-1022, 1023, count)]),
        Ops.SIN: np.concatenate(
            [
                rng.uniform(-8, 8, count),
                rng.uniform(-REDUCED_UP_TO, REDUCED_UP_TO, count),
                np.ldexp(rng.uniform(-2, 2, count), rng.integers(30, 1024, count)),
            ]
        ),
    }
    for op, x in sweeps.items():
        worst, at = max_ulps(op, x)
        print(f"{op.name.lower():5} f64: max {worst:.3f} ulps over {len(x)} inputs (at {at!r})")
    # pow: moderate results, and results up to near overflow (where log2's error is scaled by the exponent)
    base = np.concatenate([rng.uniform(0, 8, count), rng.uniform(1, 2, count)])
    exponent = np.concatenate([rng.uniform(-60, 60, count), rng.uniform(0, 1000, count)])
    worst, at = max_ulps(Ops.POW, base, exponent)
    print(f"pow   f64: max {worst:.3f} ulps over {len(base)} inputs (at {at!r})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
