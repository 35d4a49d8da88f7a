"""Resizing the spatial axes (all axes after the first two): `interpolate` with mode 'nearest', 'nearest-exact' or
'linear' (bilinear, trilinear: linear along every axis in turn), following torch's source-coordinate formulas.

The source positions depend only on the sizes, so they are computed on the host (like `arange`) and the values
are selected with `gather` along each axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen import dtypes
from tg.codegen.schedule.graph import ShapeError
from tg.tensor.errors import ArgumentError, UnsupportedModeError
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _take(x: Tensor, axis: int, sources: list[int]) -> Tensor:
    """x with `axis` replaced by x's elements at `sources` along it."""
    import numpy as np

    from tg.tensor.gather_scatter import gather

    index_shape = [1] * x.ndim
    index_shape[axis] = len(sources)
    index = type(x)(np.array(sources, dtype=np.int32).reshape(index_shape), device=x.device)
    full_shape = x.shape[:axis] + (len(sources),) + x.shape[axis + 1 :]
    view = [(0, size) if a != axis else (0, x.shape[axis]) for a, size in enumerate(full_shape)]
    return gather(x.shrink(view), axis, index.expand(full_shape))


def _nearest_sources(size_in: int, size_out: int, exact: bool) -> list[int]:
    """torch 'nearest': floor(out * scale); 'nearest-exact': floor((out + 0.5) * scale); scale = in / out in
    float32 as torch computes it; clamped to the last element."""
    import numpy as np

    scale = np.float32(size_in / size_out)
    offset = np.float32(0.5 if exact else 0.0)
    return [min(int(np.floor((np.float32(o) + offset) * scale)), size_in - 1) for o in range(size_out)]


def _linear_sources(size_in: int, size_out: int, align_corners: bool) -> tuple[list[int], list[int], list[float]]:
    """(lower neighbour, upper neighbour, weight of the upper) for every output position."""
    lower: list[int] = []
    upper: list[int] = []
    weights: list[float] = []
    for o in range(size_out):
        if align_corners:
            source = 0.0 if size_out == 1 else o * (size_in - 1) / (size_out - 1)
        else:
            source = max((o + 0.5) * size_in / size_out - 0.5, 0.0)
        below = min(int(source), size_in - 1)
        lower.append(below)
        upper.append(min(below + 1, size_in - 1))
        weights.append(source - below)
    return lower, upper, weights


def _linear_along(x: Tensor, axis: int, size_out: int, align_corners: bool) -> Tensor:
    import numpy as np

    lower, upper, weights = _linear_sources(concrete_size(x.shape[axis], "interpolate"), size_out, align_corners)
    weight_shape = [1] * x.ndim
    weight_shape[axis] = size_out
    weight = type(x)(np.array(weights, dtype=np.float32).reshape(weight_shape), device=x.device)
    below, above = _take(x, axis, lower), _take(x, axis, upper)
    return below + (above - below) * weight.cast(below.dtype)


def interpolate(x: Tensor, size: tuple[int, ...], mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resize x (N, C, *spatial) to `size` (one entry per spatial axis)."""
    spatial = x.ndim - 2
    if len(size) != spatial:
        raise ShapeError(f"interpolate of shape {x.shape} needs {spatial} output sizes, got {size}")
    if any(size_out <= 0 for size_out in size):
        raise ArgumentError(f"interpolate needs output sizes above 0, got {tuple(size)} (as torch)")
    if mode not in ("nearest", "nearest-exact", "linear", "bilinear", "trilinear"):
        raise UnsupportedModeError(f"interpolate mode must be 'nearest', 'nearest-exact' or 'linear', got {mode!r}")
    nearest = mode.startswith("nearest")
    if not nearest and not dtypes.is_float(x.dtype):
        x = x.cast(dtypes.default_float)
    for i, size_out in enumerate(size):
        axis = 2 + i
        if nearest:
            size_in = concrete_size(x.shape[axis], "interpolate")
            x = _take(x, axis, _nearest_sources(size_in, size_out, exact=mode == "nearest-exact"))
        else:
            x = _linear_along(x, axis, size_out, align_corners)
    return x
