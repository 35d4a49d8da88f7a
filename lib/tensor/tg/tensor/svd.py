"""`svd`: the singular value decomposition by one-sided Jacobi rotations, after a QR step (LAPACK working note 169).

A (..., m, n) with m >= n (else work on A^T) is first reduced by QR to its n x n triangle R. Jacobi then rotates
pairs of R's columns until they are orthogonal: for columns p, q with squared norms a, b and dot product g, the
rotation by t = sign(z) / (|z| + sqrt(1 + z^2)), z = (b - a) / 2g, makes them orthogonal. The pairs of one round
are disjoint (a round-robin tournament), so a round is one n x n rotation matrix J, built from constant one-hot
selectors of the pairs, and R <- R J, V <- V J. After the sweeps the columns of R are U * S: S are their norms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen.schedule.graph import ShapeError
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

SWEEPS = 8  # Jacobi converges quadratically: a handful of sweeps reaches float precision


def tournament_rounds(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs in which every pair of 0..n-1 meets exactly once (the circle method)."""
    players = list(range(n + (n % 2)))  # an odd count gets a dummy player n: its partner sits the round out
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append([(min(p), max(p)) for p in pairs if max(p) < n])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def _selectors(like: Tensor, n: int, pairs: list[tuple[int, int]]) -> tuple[Tensor, Tensor]:
    """One-hot (n, h) matrices whose column k picks column p_k (first) or q_k (second)."""
    import numpy as np

    first, second = np.zeros((n, len(pairs)), np.float32), np.zeros((n, len(pairs)), np.float32)
    for k, (p, q) in enumerate(pairs):
        first[p, k], second[q, k] = 1, 1
    make = type(like)
    return (make(first, device=like.device).cast(like.dtype), make(second, device=like.device).cast(like.dtype))


def _rotate(r: Tensor, v: Tensor, pairs: list[tuple[int, int]]) -> tuple[Tensor, Tensor]:
    n = concrete_size(r.shape[-1], "svd")
    pick_p, pick_q = _selectors(r, n, pairs)
    col_p, col_q = r @ pick_p, r @ pick_q  # (..., n, h)
    a, b, g = (col_p * col_p).sum(-2), (col_q * col_q).sum(-2), (col_p * col_q).sum(-2)  # (..., h)
    rotating = g != 0
    z = (b - a) / (2 * rotating.where(g, 1))
    t = (z >= 0).where(1.0, -1.0) / (z.abs() + (1 + z * z).sqrt())
    t = rotating.where(t, 0)
    c = 1 / (1 + t * t).sqrt()
    s = c * t
    # J = I + P diag(c-1) P^T + Q diag(c-1) Q^T + P diag(s) Q^T - Q diag(s) P^T: column p -> c p - s q, q -> s p + c q
    eye = r.eye(n, dtype=r.dtype, device=r.device)
    cm1, sd = (c - 1).unsqueeze(-2), s.unsqueeze(-2)
    pt, qt = pick_p.transpose(-2, -1), pick_q.transpose(-2, -1)
    rotation = eye + (pick_p * cm1) @ pt + (pick_q * cm1) @ qt + (pick_p * sd) @ qt - (pick_q * sd) @ pt
    return (r @ rotation).contiguous(), (v @ rotation).contiguous()


def svd(x: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """(U, S, Vh) with x = U diag(S) Vh, S descending (numpy's and torch's convention). `full_matrices` gives U
    (..., m, m) and Vh (..., n, n); otherwise the k = min(m, n) columns / rows that matter."""
    if x.ndim < 2:
        raise ShapeError(f"svd needs a matrix (2 or more dimensions), got shape {x.shape}")
    if not x.is_floating_point():
        x = x.float()
    m, n = (concrete_size(size, "svd") for size in x.shape[-2:])
    if m < n:
        u, s, vh = svd(x.transpose(-2, -1), full_matrices)
        return vh.transpose(-2, -1), s, u.transpose(-2, -1)
    batch = x.shape[:-2]
    q, r_full = x.qr()
    r = r_full[..., :n, :].contiguous()
    v = x.eye(n, dtype=x.dtype, device=x.device).expand(*batch, n, n).contiguous()
    for _ in range(SWEEPS if n > 1 else 0):
        for pairs in tournament_rounds(n):
            r, v = _rotate(r, v, pairs)
    norms = (r * r).sum(-2).sqrt()  # (..., n)
    s, order = norms.sort(-1, descending=True)
    columns = order.unsqueeze(-2).expand(*batch, n, n)
    u_small = r.gather(-1, columns) / (s != 0).where(s, 1).unsqueeze(-2)
    v = v.gather(-1, columns)
    if m > n:  # U = Q [[u_small, 0], [0, I]]: the last m - n columns of Q complete the basis
        lead = [(0, 0)] * len(batch)
        eye_m, eye_n = x.eye(m, dtype=x.dtype, device=x.device), x.eye(n, dtype=x.dtype, device=x.device)
        tail = eye_m - eye_n.pad(((0, m - n), (0, m - n)))
        u = q @ (u_small.pad([*lead, (0, m - n), (0, m - n)]) + tail)
    else:
        u = q @ u_small
    if not full_matrices:
        u = u[..., :, :n]
    return u, s, v.transpose(-2, -1)
