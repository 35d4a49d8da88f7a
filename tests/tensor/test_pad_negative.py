"""Issue 30 item 6: negative padding crops in every pad mode, as torch's F.pad and tinygrad: output position j of
an axis padded by (before, after) reads the padded input at j - before, so a negative amount removes elements of
that side. The expected rows below are written out by hand from torch's definition."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor

from .devices import DEVICES

NUMPY_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}

# [0, 1, 2, 3, 4] padded by (before, after): torch's rows
KNOWN_ROWS = {
    ("reflect", (-1, 2)): [1, 2, 3, 4, 3, 2],
    ("reflect", (2, -3)): [2, 1, 0, 1],
    ("reflect", (-2, -2)): [2],
    ("replicate", (-1, 2)): [1, 2, 3, 4, 4, 4],
    ("replicate", (3, -4)): [0, 0, 0, 0],
    ("circular", (-1, 2)): [1, 2, 3, 4, 0, 1],
    ("circular", (2, -1)): [3, 4, 0, 1, 2, 3],
    ("circular", (-4, 0)): [4],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode_and_pad", list(KNOWN_ROWS), ids=str)
def test_negative_padding_crops_a_known_row(device: str, mode_and_pad: tuple) -> None:
    mode, padding = mode_and_pad
    row = Tensor([0, 1, 2, 3, 4], device=device)
    assert row.pad(padding, mode=mode).tolist() == KNOWN_ROWS[mode_and_pad]


def _cropped_numpy_pad(x: np.ndarray, per_axis: tuple, mode: str) -> np.ndarray:
    """numpy's pad of the positive amounts, then the negative amounts cut off (torch's index mapping)."""
    grown = np.pad(x, tuple((max(b, 0), max(a, 0)) for b, a in per_axis), mode=NUMPY_MODE[mode])
    return grown[tuple(slice(max(-b, 0), grown.shape[i] - max(-a, 0)) for i, (b, a) in enumerate(per_axis))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", list(NUMPY_MODE))
def test_mixed_signed_padding_on_several_axes(device: str, mode: str) -> None:
    x = np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)
    per_axis = ((0, -1), (-2, 3), (2, -1))
    result = Tensor(x, device=device).pad(per_axis, mode=mode)
    np.testing.assert_array_equal(result.numpy(), _cropped_numpy_pad(x, per_axis, mode))


def test_negative_padding_has_the_gradient_of_a_crop() -> None:
    x = Tensor(np.arange(5.0), dtype=dtypes.float64, requires_grad=True)
    x.pad((-1, 2), mode="reflect").sum().backward()
    # out = x[1], x[2], x[3], x[4], x[3], x[2]
    assert x.grad.tolist() == [0.0, 1.0, 2.0, 2.0, 1.0]


@pytest.mark.parametrize("mode", list(NUMPY_MODE))
def test_cropping_more_than_the_axis_is_an_error(mode: str) -> None:
    with pytest.raises(ValueError):
        Tensor([1.0, 2.0, 3.0]).pad((-2, -2), mode=mode)
