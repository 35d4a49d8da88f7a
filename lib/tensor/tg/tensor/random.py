"""Random numbers from a counter-based generator (Threefry-2x32, tg.tensor.threefry) computed in kernels.

The generator's state is a seed and a 64-bit counter, both on the host. Every draw of n elements takes the next n
counters when the tensor is *created* and hashes (seed, counter) in its kernel. So a seed fixes every value, and the
values do not depend on the order in which tensors are realized, on the device, or on what else shares the kernel.

From the two 32-bit words of every hash: uniform floats use the top mantissa-width bits (exact multiples of 2**-24
for float32, never 1.0), normals use Box-Muller on the two words, integers a multiply-shift of one word into the
range.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from tg.codegen import DType, dtypes
from tg.codegen.schedule.graph import Shape
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.creation import canonical_device, normalize_shape, takes_requires_grad
from tg.tensor.errors import ArgumentError
from tg.tensor.positions import positions
from tg.tensor.promotion import dtype_argument
from tg.tensor.symbolic import concrete_size
from tg.tensor.threefry import MASK32, Key, threefry2x32

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


@dataclass
class GeneratorState:
    """The seed and the next unused counter."""

    seed: int
    counter: int = 0

    def take(self, count: int) -> int:
        """Reserve `count` counters; returns the first."""
        first = self.counter
        self.counter += count
        return first


STATE = GeneratorState(seed=int.from_bytes(os.urandom(8), "little"))


@dataclass(frozen=True)
class Draw:
    """One draw of `count` counters: `params` is the uploaded (key, first counter) the draw's kernels read."""

    params: Tensor
    count: int


# Set by a TinyJit capture: every draw inside it is recorded, so that each replay uploads fresh counters.
_recorded_draws: list[Draw] | None = None


@contextmanager
def record_draws() -> Iterator[list[Draw]]:
    """Record the random draws made inside the block."""
    global _recorded_draws
    outer, _recorded_draws = _recorded_draws, []
    try:
        yield _recorded_draws
    finally:
        _recorded_draws = outer


def draw_words(count: int) -> Any:
    """The four uint32 words of a draw of `count` counters (key low/high, first counter low/high), numpy."""
    import numpy as np

    first = STATE.take(count)
    key = Key.from_seed(STATE.seed)
    return np.array([key.low, key.high, first & MASK32, (first >> 32) & MASK32], dtype=np.uint32)


def random_words(tensor_type: type, shape: Shape, device: str) -> tuple[Tensor, Tensor]:
    """Two uint32 tensors of `shape` with fresh random bits (the next prod(shape) counters).

    The seed and the first counter reach the kernel through a small uploaded buffer, not as constants in its
    source: the kernel is then the same for every draw of this shape and compiles once."""
    sizes = tuple(size for size in shape if isinstance(size, int))
    if len(sizes) != len(shape):  # symbolic: draw for the largest sizes, view the bound ones
        largest = tuple(size if isinstance(size, int) else int(size.vmax) for size in shape)
        x0, x1 = random_words(tensor_type, largest, device)
        bounds = tuple((0, size) for size in shape)
        return x0.shrink(bounds), x1.shrink(bounds)
    count = math.prod(sizes)
    params = tensor_type(draw_words(count), device=device)
    if _recorded_draws is not None:
        _recorded_draws.append(Draw(params, count))
    key_low, key_high, low_start, high_start = (params[i] for i in range(4))
    low = positions(params, count, dtypes.uint32) + low_start  # wraps modulo 2**32 ...
    carry = (low < low_start).cast(dtypes.uint32)  # ... and carries into the high word
    x0, x1 = threefry2x32(Key(key_low, key_high), low, high_start + carry)
    return x0.reshape(shape), x1.reshape(shape)


def unit_float(word: Tensor, dtype: DType) -> Tensor:
    """A uniform value in [0, 1) of `dtype` from 32 random bits, exact in that dtype."""
    mantissa_bits = {dtypes.float16: 11, dtypes.bfloat16: 8}.get(dtype, 24)
    compute = dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype
    top = (word >> (32 - mantissa_bits)).cast(compute)
    return (top * (2.0**-mantissa_bits)).cast(dtype)


def unit_double(x0: Tensor, x1: Tensor) -> Tensor:
    """A uniform float64 in [0, 1) from 53 random bits of the two words."""
    high, low = (x0 >> 5).cast(dtypes.float64), (x1 >> 6).cast(dtypes.float64)
    return (high * (2.0**26) + low) * (2.0**-53)


def _float_dtype(dtype: DType | str | None) -> DType:
    dtype = dtype_argument(dtype) or dtypes.default_float
    if not dtypes.is_float(dtype):
        raise TypeError(f"random floats need a float dtype, got {dtype}")
    return dtype


def _element_count(shape: Shape) -> int:
    """The number of elements of a concrete shape (the scaled initializers need one)."""
    return math.prod(concrete_size(size, "a scaled initializer") for size in shape)


class RandomOps(TensorBase):
    """`manual_seed, rand, randn, randint, uniform, normal, randperm, multinomial, dropout` (+ `_like` forms)."""

    training: ClassVar[bool] = False  # dropout is the identity unless this is set

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Restart the generator: the draws after this depend only on `seed` and the order of the draws."""
        STATE.seed, STATE.counter = seed, 0

    @classmethod
    @takes_requires_grad
    def rand(cls, *shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Uniform in [0, 1)."""
        dtype = dtype_argument(dtype)
        shape, dtype, device = normalize_shape(shape), _float_dtype(dtype), canonical_device(device)
        x0, x1 = random_words(cls, shape, device)
        if dtype is dtypes.float64:
            return unit_double(x0, x1)
        return unit_float(x0, dtype)

    @classmethod
    @takes_requires_grad
    def randn(cls, *shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Standard normal (Box-Muller on the two words of every hash, computed in float32)."""
        dtype = dtype_argument(dtype)
        shape, dtype, device = normalize_shape(shape), _float_dtype(dtype), canonical_device(device)
        x0, x1 = random_words(cls, shape, device)
        compute = dtypes.float64 if dtype is dtypes.float64 else dtypes.float32
        radius_uniform = 1.0 - unit_float(x0, compute)  # in (0, 1]: log never sees 0
        angle_uniform = unit_float(x1, compute)
        radius = (radius_uniform.log() * -2.0).sqrt()
        return (radius * (angle_uniform * (2 * math.pi)).cos()).cast(dtype)

    @classmethod
    @takes_requires_grad
    def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, **kwargs) -> Tensor:
        """Uniform in [low, high); an integer dtype draws integers in [low, high), as `randint`."""
        dtype = dtype_argument(kwargs.get("dtype"))
        if dtype is not None and dtypes.is_int(dtype):
            if not all(float(bound).is_integer() for bound in (low, high)):
                raise ValueError(f"uniform with an integer dtype needs integer bounds, got [{low}, {high})")
            return cls.randint(*shape, low=int(low), high=int(high), **kwargs)
        if low > high:
            raise ArgumentError(f"uniform needs low <= high, got [{low}, {high})")
        dtype = _float_dtype(dtype)
        return (cls.rand(*shape, **kwargs).cast(dtypes.float32) * (high - low) + low).cast(dtype)

    @classmethod
    @takes_requires_grad
    def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs) -> Tensor:
        dtype = _float_dtype(kwargs.get("dtype"))
        return (cls.randn(*shape, **kwargs).cast(dtypes.float32) * std + mean).cast(dtype)

    @classmethod
    @takes_requires_grad
    def randint(
        cls, *shape: Any, low: int = 0, high: int = 10, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        """Uniform integers in [low, high): (word * (high - low)) >> 32, then + low."""
        if not all(isinstance(bound, int) and not isinstance(bound, bool) for bound in (low, high)):
            raise TypeError(f"randint needs int bounds, got low={low!r}, high={high!r}")
        if high <= low:
            raise ArgumentError(f"randint needs low < high, got [{low}, {high})")
        shape, device = normalize_shape(shape), canonical_device(device)
        dtype = dtype_argument(dtype) or dtypes.default_int
        x0, _ = random_words(cls, shape, device)
        scaled = (x0.cast(dtypes.uint64) * (high - low)) >> 32
        return (scaled.cast(dtypes.int64) + low).cast(dtype)

    @classmethod
    @takes_requires_grad
    def randperm(cls, n: int, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """A random permutation of 0..n-1: the order that sorts n random keys."""
        dtype = dtype_argument(dtype)
        keys, _ = random_words(cls, (n,), canonical_device(device))
        return keys.argsort().cast(dtypes.default_int if dtype is None else dtype)

    @classmethod
    @takes_requires_grad
    def scaled_uniform(cls, *shape: Any, **kwargs) -> Tensor:
        """Uniform in [-1, 1) scaled by 1 / sqrt(number of elements)."""
        shape = normalize_shape(shape)
        return cls.uniform(*shape, low=-1.0, high=1.0, **kwargs) * (_element_count(shape) ** -0.5)

    @classmethod
    @takes_requires_grad
    def glorot_uniform(cls, *shape: Any, **kwargs) -> Tensor:
        """Uniform in +-sqrt(6 / (fan_out + fan_in)), fan_out = shape[0], fan_in = the rest (Glorot & Bengio)."""
        shape = normalize_shape(shape)
        fan_out = concrete_size(shape[0], "a scaled initializer")
        bound = math.sqrt(6 / (fan_out + _element_count(shape[1:])))
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    @takes_requires_grad
    def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs) -> Tensor:
        """Uniform in +-sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a**2)) (He et al.)."""
        shape = normalize_shape(shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a**2)) / math.sqrt(_element_count(shape[1:]))
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    @takes_requires_grad
    def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs) -> Tensor:
        """Normal with std gain / sqrt(fan_in), gain = sqrt(2 / (1 + a**2)) (He et al.)."""
        shape = normalize_shape(shape)
        std = math.sqrt(2.0 / (1 + a**2)) / math.sqrt(_element_count(shape[1:]))
        return cls.normal(*shape, mean=0.0, std=std, **kwargs)

    @takes_requires_grad
    def rand_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return type(self).rand(self.shape, dtype=dtype or _like_float(as_tensor(self)), device=device or self.device)

    @takes_requires_grad
    def randn_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return type(self).randn(self.shape, dtype=dtype or _like_float(as_tensor(self)), device=device or self.device)

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """Category indices drawn with the weights in the last axis of this 1-d or 2-d tensor (int32)."""
        if self.ndim not in (1, 2):
            raise ArgumentError(f"multinomial needs 1-d or 2-d weights, got shape {self.shape}")
        if num_samples <= 0:
            raise ArgumentError(f"multinomial needs a positive number of samples, got {num_samples}")
        if not replacement and num_samples > self.shape[-1]:
            raise ArgumentError(f"cannot draw {num_samples} samples without replacement from {self.shape[-1]}")
        weights = self.reshape(-1, self.shape[-1]).cast(dtypes.float32)
        if replacement:
            samples = _inverse_cdf_samples(weights, num_samples)
        else:
            samples = _race_samples(weights, num_samples)
        return samples if self.ndim == 2 else samples.reshape(num_samples)

    def dropout(self, p: float = 0.5) -> Tensor:
        """While `Tensor.training`: zero each element with probability p and scale the rest by 1 / (1 - p)."""
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability must be between 0 and 1, got {p}")
        if not type(self).training or p == 0:
            return as_tensor(self)
        if p == 1:
            return self.zeros_like()
        keep = self.rand_like(dtype=dtypes.float32) >= p
        return keep.where(self * (1.0 / (1.0 - p)), 0).cast(self.dtype)


def _like_float(tensor: Tensor) -> DType:
    return tensor.dtype if dtypes.is_float(tensor.dtype) else dtypes.default_float


def _inverse_cdf_samples(weights: Tensor, num_samples: int) -> Tensor:
    """With replacement: a uniform u times the total lands in one category's slice of the cumulative weights."""
    rows, categories = weights.shape
    at_or_before = type(weights).ones(categories, categories, device=weights.device).tril()  # [i, j]: j <= i
    cumulative = (weights.reshape(rows, 1, categories) * at_or_before).sum(-1)  # (rows, categories)
    total = cumulative[:, categories - 1 :]
    draws = type(weights).rand(rows, num_samples, device=weights.device) * total  # (rows, samples)
    passed = cumulative.reshape(rows, 1, categories) <= draws.reshape(rows, num_samples, 1)
    return passed.cast(dtypes.int32).sum(-1).minimum(categories - 1)


def _race_samples(weights: Tensor, num_samples: int) -> Tensor:
    """Without replacement: every category draws an exponential arrival time with rate = its weight; the first
    `num_samples` to arrive are the sample (the exponential race is sampling without replacement)."""
    uniform = type(weights).rand(weights.shape, device=weights.device)
    arrival = -(1.0 - uniform).log() / weights  # weight 0: never arrives (inf)
    return arrival.argsort(-1)[:, :num_samples].cast(dtypes.int32)
