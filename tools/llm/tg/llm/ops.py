"""Small tensor helpers the model needs in a form every renderer compiles today."""

from __future__ import annotations

from tg.codegen import UOp
from tg.tensor import Tensor


def concat(tensors: list[Tensor], dim: int) -> Tensor:
    """`Tensor.cat` as zero padding plus addition.

    Tensor.cat of floats currently renders a float<->uint bitcast that gcc's C compiler rejects; padding each part
    into place and adding gives the same values (x + 0.0 == x) and fuses into the consumer just as well.
    """
    if len(tensors) == 1:
        return tensors[0]
    dim = dim % tensors[0].ndim
    total: int | UOp = sum(t.shape[dim] for t in tensors)  # a size may be symbolic: padding takes expressions
    start: int | UOp = 0
    placed: list[Tensor] = []
    for tensor in tensors:
        padding: list[tuple[int | UOp, int | UOp]] = [(0, 0)] * tensor.ndim
        padding[dim] = (start, total - start - tensor.shape[dim])
        placed.append(tensor.pad(padding))
        start += tensor.shape[dim]
    result = placed[0]
    for part in placed[1:]:
        result = result + part
    return result


def stack(tensors: list[Tensor], dim: int) -> Tensor:
    return concat([t.unsqueeze(dim) for t in tensors], dim)


def activate(x: Tensor, activation: str) -> Tensor:
    """The MLP's gate activation by name: "silu" (llama, qwen) or "gelu_tanh" (gemma: GELU's tanh approximation)."""
    if activation == "silu":
        return x.silu()
    if activation == "gelu_tanh":
        return x.gelu(approximate="tanh")
    raise ValueError(f"unknown activation {activation!r} (silu, gelu_tanh)")
