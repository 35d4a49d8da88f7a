"""Small functional helpers of tinygrad's Tensor API: `sequential`, `batchnorm`, `rearrange`, and `qr`.

`qr` is Householder's method: for each column k, a reflector H = I - beta v v^T (v zero above row k) zeroes the
entries of R below the diagonal, and Q collects the reflectors. Padding v to full length keeps every step a plain
matrix product (no concatenation), so it runs the same way on every device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce
from typing import TYPE_CHECKING

from tg.codegen.schedule.graph import ShapeError
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _householder_step(q: Tensor, r: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Q and R after zeroing column k of R below the diagonal."""
    m = r.shape[-2]
    column = r[..., k:, k]  # (..., m - k)
    norm = column.square().sum(-1, keepdim=True).sqrt()
    head = column[..., :1]
    sign = (head < 0).where(-1.0, 1.0)  # the sign that avoids cancellation; +1 for a zero head
    first = column.ones(1, dtype=column.dtype, device=column.device).pad(((0, m - k - 1),))  # e1 of length m - k
    v = column + sign * norm * first  # x - alpha e1 with alpha = -sign |x|
    v = v.pad([(0, 0)] * (v.ndim - 1) + [(k, 0)]).unsqueeze(-1)  # (..., m, 1), zero above row k
    squared = (v * v).sum((-2, -1), keepdim=True)
    beta = (squared > 0).where(2 / (squared > 0).where(squared, 1.0), 0.0)
    r = r - (beta * v) @ (v.transpose(-2, -1) @ r)
    q = q - (q @ v) @ (beta * v).transpose(-2, -1)
    return q, r


def qr(x: Tensor) -> tuple[Tensor, Tensor]:
    """(Q, R) with x = Q R, Q (..., m, m) orthogonal and R (..., m, n) upper triangular (numpy's mode 'complete')."""
    if x.ndim < 2:
        raise ShapeError(f"qr needs a matrix (2 or more dimensions), got shape {x.shape}")
    if not x.is_floating_point():
        x = x.float()
    m, n = (concrete_size(size, "qr") for size in x.shape[-2:])
    q = x.eye(m, dtype=x.dtype, device=x.device).expand(*x.shape[:-2], m, m)
    r = x
    for k in range(min(m - 1, n)):
        q, r = _householder_step(q, r, k)
        q, r = q.contiguous(), r.contiguous()  # keeps each step's graph small
    return q, r


class FunctionalOps(TensorBase):
    """`sequential, batchnorm, rearrange, qr, svd`."""

    def sequential(self, layers: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
        """Apply each callable in turn: `x.sequential([f, g])` is `g(f(x))`."""
        return reduce(lambda value, layer: layer(value), layers, as_tensor(self))

    def batchnorm(
        self,
        weight: Tensor | None,
        bias: Tensor | None,
        mean: Tensor,
        invstd: Tensor,
        axis: int | tuple[int, ...] = 1,
    ) -> Tensor:
        """(x - mean) * invstd * weight + bias, with the statistics laid along `axis` (the channel axis)."""
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(a % self.ndim for a in axes)
        shape = tuple(size if i in axes else 1 for i, size in enumerate(self.shape))
        centred = self - mean.reshape(shape)
        if weight is not None:
            centred = centred * weight.reshape(shape)
        scaled = centred * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return scaled if bias is None else scaled + bias.reshape(shape)

    def rearrange(self, formula: str, **sizes: int) -> Tensor:
        """einops-style: `x.rearrange("b (h w) c -> b c h w", h=4)`."""
        from tg.tensor.rearrange import rearrange

        return rearrange(as_tensor(self), formula, **sizes)

    def qr(self) -> tuple[Tensor, Tensor]:
        return qr(as_tensor(self))

    def svd(self, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        """(U, S, Vh) with self = U diag(S) Vh, S descending (see tg.tensor.svd)."""
        from tg.tensor.svd import svd

        return svd(as_tensor(self), full_matrices)
