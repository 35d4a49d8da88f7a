"""Model weights as tg Tensors that stay in their GGUF encoding: quantized matrices are decoded inside the kernels
that use them (the decode is a lazy expression the scheduler fuses into the matmul's reduce)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tg.llm.quants import Blocks, dequantize
from tg.tensor import Tensor


@dataclass
class Weight:
    """A GGUF tensor: `data` is a float Tensor, or packed quantized `Blocks` `(*rows, n_blocks, ...)`."""

    data: Tensor | Blocks
    ggml_type: int
    shape: tuple[int, ...]
    _float: Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def quantized(self) -> bool:
        return isinstance(self.data, Blocks)

    def float(self) -> Tensor:
        """The values as a lazy float32 Tensor of `shape` (decoded in whatever kernel consumes them).

        The lazy expression is built once and reused: graphs are immutable, so every step's matmul can share it,
        which saves rebuilding the decode graph for every weight on every token."""
        if self._float is None:
            self._float = dequantize(self.data, self.ggml_type) if self.quantized else self.data.float()
        return self._float

    def rows(self, start: int, stop: int) -> Tensor:
        """Rows start..stop of the first axis, decoded (used for embedding lookups without a gather)."""
        data = self.data
        if isinstance(data, Blocks):
            halves = {offset: half[start:stop] for offset, half in data.halves.items()}
            data = Blocks(data.payload[start:stop], data.start, halves)
        else:
            data = data[start:stop]
        return Weight(data, self.ggml_type, (stop - start, *self.shape[1:])).float()

    def nbytes(self) -> int:
        if isinstance(self.data, Blocks):
            return self.data.payload.nbytes() + sum(half.nbytes() for half in self.data.halves.values())
        return self.data.nbytes()

    def numel(self) -> int:
        return math.prod(self.shape)


def linear(x: Tensor, weight: Weight, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T (+ bias): weight is `(out, in)` as GGUF stores it; a quantized one is decoded in the kernel."""
    out = x.matmul(weight.float().transpose(-1, -2))
    return out if bias is None else out + bias
