"""Small tensor helpers the model needs in a form every renderer compiles today."""

from __future__ import annotations

from tg.tensor import Tensor


def concat(tensors: list[Tensor], dim: int) -> Tensor:
    """`Tensor.cat` as zero padding plus addition.

    Tensor.cat of floats currently renders a float<->uint bitcast that gcc's C compiler rejects; padding each part
    into place and adding gives the same values (x + 0.0 == x) and fuses into the consumer just as well.
    """
    if len(tensors) == 1:
        return tensors[0]
    dim = dim % tensors[0].ndim
    total, start, result = sum(t.shape[dim] for t in tensors), 0, None
    for tensor in tensors:
        padding = [(0, 0)] * tensor.ndim
        padding[dim] = (start, total - start - tensor.shape[dim])
        placed = tensor.pad(padding)
        result = placed if result is None else result + placed
        start += tensor.shape[dim]
    return result


def stack(tensors: list[Tensor], dim: int) -> Tensor:
    return concat([t.unsqueeze(dim) for t in tensors], dim)
