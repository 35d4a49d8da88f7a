"""Fused attention written as custom kernels: the forward in one kernel, the backward in two (via grad_fxn).

Run with `uv run python examples/custom_attention.py`: it checks the output and the gradients of q, k and v
against `Tensor.scaled_dot_product_attention` (plain and causal) and prints the largest differences.

Each kernel is tg's IR written by hand: `UOp.param` placeholders (flat, C-contiguous), `UOp.range` loops, LOAD,
arithmetic, REDUCE over REDUCE ranges, STORE. The forward computes, for every row i of every (batch, head),
the softmax over j of the scores s_ij = scale * q_i . k_j without writing the scores anywhere: the row maximum
m_i and the normalizer l_i are reductions inside the same kernel, and it also stores lse_i = m_i + log l_i, which
the backward uses to rebuild the probabilities P_ij = exp(s_ij - lse_i) (as flash attention does).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import count

import numpy as np

from tg.codegen import Ops, UOp
from tg.codegen.uop.args import AxisType
from tg.tensor import KernelInfo, Tensor
from tg.tensor.custom_kernel import outputs_of

LOG2_E = 1 / math.log(2)


def _exp(x: UOp) -> UOp:
    return (x * LOG2_E).exp2()


def _log(x: UOp) -> UOp:
    return x.log2() * math.log(2)


class _Shape:
    """Index arithmetic for (n, t, d) tensors stored flat; `fresh` numbers the ranges of one kernel."""

    def __init__(self, heads: int, length: int, dim: int) -> None:
        self.heads, self.length, self.dim = heads, length, dim
        self.ids: Iterator[int] = count()

    def loop(self, size: int) -> UOp:
        return UOp.range(size, next(self.ids))

    def reduce(self, size: int) -> UOp:
        return UOp.range(size, next(self.ids), AxisType.REDUCE)

    def at(self, buf: UOp, n: UOp, t: UOp, d: UOp) -> UOp:
        return buf.index((n * self.length + t) * self.dim + d)

    def row(self, buf: UOp, n: UOp, t: UOp) -> UOp:
        return buf.index(n * self.length + t)


def _score(s: _Shape, q: UOp, k: UOp, n: UOp, i: UOp, j: UOp, scale: float, causal: bool) -> UOp:
    """s_ij (with its own reduce range over the head dimension); -inf above the diagonal when causal."""
    e = s.reduce(s.dim)
    score = (s.at(q, n, i, e).load() * s.at(k, n, j, e).load()).reduce(e) * scale
    return (j <= i).where(score, -math.inf) if causal else score


def forward_kernel(scale: float, causal: bool, shape: tuple[int, int, int]):  # noqa: ANN201 - a kernel builder
    def fxn(out: UOp, lse: UOp, q: UOp, k: UOp, v: UOp) -> UOp:
        s = _Shape(*shape)
        n, i, d = s.loop(s.heads), s.loop(s.length), s.loop(s.dim)
        j_max, j_sum, j = s.reduce(s.length), s.reduce(s.length), s.reduce(s.length)
        row_max = _score(s, q, k, n, i, j_max, scale, causal).reduce(j_max, arg=Ops.MAX)
        normalizer = _exp(_score(s, q, k, n, i, j_sum, scale, causal) - row_max).reduce(j_sum)
        weight = _exp(_score(s, q, k, n, i, j, scale, causal) - row_max)
        value = (weight * s.at(v, n, j, d).load()).reduce(j) / normalizer
        i2, n2 = s.loop(s.length), s.loop(s.heads)  # (lse's own loops: a store over (n, i) only)
        j2_max, j2_sum = s.reduce(s.length), s.reduce(s.length)
        m2 = _score(s, q, k, n2, i2, j2_max, scale, causal).reduce(j2_max, arg=Ops.MAX)
        l2 = _exp(_score(s, q, k, n2, i2, j2_sum, scale, causal) - m2).reduce(j2_sum)
        return UOp.sink(
            s.at(out, n, i, d).store(value).end(n, i, d),
            s.row(lse, n2, i2).store(m2 + _log(l2)).end(n2, i2),
            arg=KernelInfo(name="attention_forward"),
        )

    return fxn


def delta_kernel(shape: tuple[int, int, int]):  # noqa: ANN201
    """delta_i = sum_d dO_id * O_id (the row sums of dP * P)."""

    def fxn(delta: UOp, grad_out: UOp, out: UOp) -> UOp:
        s = _Shape(*shape)
        n, i, d = s.loop(s.heads), s.loop(s.length), s.reduce(s.dim)
        value = (s.at(grad_out, n, i, d).load() * s.at(out, n, i, d).load()).reduce(d)
        return s.row(delta, n, i).store(value).end(n, i).sink(arg=KernelInfo(name="attention_delta"))

    return fxn


def backward_kernel(scale: float, causal: bool, shape: tuple[int, int, int]):  # noqa: ANN201
    """dQ, dK and dV in one kernel (three stores), every P_ij and dS_ij recomputed where it is needed."""

    def fxn(dq: UOp, dk: UOp, dv: UOp, q: UOp, k: UOp, v: UOp, grad_out: UOp, lse: UOp, delta: UOp) -> UOp:
        s = _Shape(*shape)

        def probability(n: UOp, i: UOp, j: UOp) -> UOp:
            return _exp(_score(s, q, k, n, i, j, scale, causal) - s.row(lse, n, i).load())

        def grad_score(n: UOp, i: UOp, j: UOp) -> UOp:
            e = s.reduce(s.dim)
            grad_p = (s.at(grad_out, n, i, e).load() * s.at(v, n, j, e).load()).reduce(e)
            return probability(n, i, j) * (grad_p - s.row(delta, n, i).load())

        n, i, e, j = s.loop(s.heads), s.loop(s.length), s.loop(s.dim), s.reduce(s.length)
        grad_q = (grad_score(n, i, j) * s.at(k, n, j, e).load()).reduce(j) * scale
        n2, j2, e2, i2 = s.loop(s.heads), s.loop(s.length), s.loop(s.dim), s.reduce(s.length)
        grad_k = (grad_score(n2, i2, j2) * s.at(q, n2, i2, e2).load()).reduce(i2) * scale
        n3, j3, d3, i3 = s.loop(s.heads), s.loop(s.length), s.loop(s.dim), s.reduce(s.length)
        grad_v = (probability(n3, i3, j3) * s.at(grad_out, n3, i3, d3).load()).reduce(i3)
        return UOp.sink(
            s.at(dq, n, i, e).store(grad_q),
            s.at(dk, n2, j2, e2).store(grad_k),
            s.at(dv, n3, j3, d3).store(grad_v),
            arg=KernelInfo(name="attention_backward"),
        )

    return fxn


def fused_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False) -> Tensor:
    """softmax(q k^T / sqrt(d)) v for q, k, v of shape (..., length, dim), as one custom kernel (and two more
    for its gradient)."""
    *batch, length, dim = q.shape
    heads = math.prod(batch)
    shape = (heads, length, dim)
    scale = 1 / math.sqrt(dim)
    q_shape, k_shape, v_shape = q.shape, k.shape, v.shape  # (the grad_fxn captures no tensor: see below)

    def grad_fxn(grad: UOp, call: UOp) -> tuple[UOp | None, ...]:
        # the kernel holds its grad_fxn as long as autograd may need it, so tensors this closure captured would stay
        # alive with it: the inputs and outputs are read from the call instead
        _, _, q_in, k_in, v_in = (Tensor(src) for src in call.src[1:])
        out, lse = (Tensor(node) for node in outputs_of(call)[:2])
        grad_out = Tensor(grad)
        (delta,) = Tensor.empty(*batch, length).custom_kernel(grad_out, out, fxn=delta_kernel(shape))[:1]
        grads = Tensor.custom_kernel(
            Tensor.empty(*q_shape), Tensor.empty(*k_shape), Tensor.empty(*v_shape),
            q_in, k_in, v_in, grad_out, lse, delta, fxn=backward_kernel(scale, causal, shape),
        )  # fmt: skip
        return (None, None, grads[0].uop, grads[1].uop, grads[2].uop)

    out, *_ = Tensor.custom_kernel(
        Tensor.empty(*q.shape), Tensor.empty(*batch, length), q, k, v,
        fxn=forward_kernel(scale, causal, shape), grad_fxn=grad_fxn,
    )  # fmt: skip
    return out


def compare(causal: bool, seed: int = 0) -> tuple[float, float]:
    """The largest differences from scaled_dot_product_attention: (output, gradients of q, k, v)."""
    rng = np.random.default_rng(seed)
    data = [rng.standard_normal((2, 3, 8, 4)).astype(np.float32) for _ in range(3)]
    upstream = rng.standard_normal((2, 3, 8, 4)).astype(np.float32)
    results = []
    for attention in (fused_attention, None):
        q, k, v = (Tensor(x, requires_grad=True) for x in data)
        if attention is None:
            out = q.scaled_dot_product_attention(k, v, is_causal=causal)
        else:
            out = attention(q, k, v, causal=causal)
        (out * Tensor(upstream)).sum().backward()
        results.append([out.numpy(), *(t.grad.numpy() for t in (q, k, v))])
    (mine, reference) = results
    out_error = float(np.abs(mine[0] - reference[0]).max())
    grad_error = max(float(np.abs(a - b).max()) for a, b in zip(mine[1:], reference[1:], strict=True))
    return out_error, grad_error


def main() -> None:
    for causal in (False, True):
        out_error, grad_error = compare(causal)
        assert out_error < 1e-4 and grad_error < 1e-4, (out_error, grad_error)
        kind = "causal" if causal else "full"
        print(f"fused attention ({kind}): max error vs SDPA {out_error:.1e}, gradients {grad_error:.1e}")


if __name__ == "__main__":
    main()
