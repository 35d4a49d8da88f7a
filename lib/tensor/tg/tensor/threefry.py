"""Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), built
from uint32 tensor ops so that it runs inside kernels on every device.

A counter-based generator: the random bits of element i are a keyed hash of (key, counter i). Nothing is carried
from one draw to the next, so any element can be computed alone, in any order, on any device, and gives the same
bits. Every op here is a 32-bit add, xor, or shift, which wrap identically in every renderer. Key words and
counters may be tensors or Python ints: the arithmetic is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.codegen import dtypes

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # rotation distances of the 2x32 variant, four per round group
KEY_SCHEDULE_PARITY = 0x1BD11BDA  # the Threefish constant that makes the third key word
MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Key:
    """A 64-bit key as two 32-bit words: Python ints, or uint32 tensors (so that one compiled kernel serves every
    seed)."""

    low: int | Tensor
    high: int | Tensor

    @classmethod
    def from_seed(cls, seed: int) -> Key:
        seed &= (1 << 64) - 1
        return cls(seed & MASK32, seed >> 32)


def _rotate_left(x: Tensor, distance: int) -> Tensor:
    return (x << distance) | (x >> (32 - distance))


def threefry2x32(key: Key, counter_low: Tensor, counter_high: Tensor) -> tuple[Tensor, Tensor]:
    """The two 32-bit output words for the 64-bit counters (counter_low, counter_high), both uint32 tensors."""
    schedule = (key.low, key.high, key.low ^ key.high ^ KEY_SCHEDULE_PARITY)
    x0 = counter_low.cast(dtypes.uint32) + schedule[0]
    x1 = counter_high.cast(dtypes.uint32) + schedule[1]
    for group in range(5):
        for step in range(4):
            x0 = x0 + x1
            x1 = _rotate_left(x1, ROTATIONS[(group % 2) * 4 + step]) ^ x0
        injection = group + 1
        x0 = x0 + schedule[injection % 3]
        x1 = x1 + ((schedule[(injection + 1) % 3] + injection) & MASK32)
    return x0, x1
