"""Loss functions with torch's conventions: cross_entropy (class axis 1), sparse_categorical_crossentropy (class
axis last, tinygrad's), binary_crossentropy and its stable logits form, nll_loss.

`reduction` is "mean", "sum" or "none". Class indices become one-hot masks by comparing them with an arange of
the classes, so an index outside [0, classes) simply selects nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen import UOp, dtypes
from tg.tensor.activations import stable_softplus
from tg.tensor.base import TensorBase
from tg.tensor.errors import ArgumentError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

REDUCTIONS = ("mean", "sum", "none")


def reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, not {reduction!r}")
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def class_mask(indices: Tensor, classes: int | UOp, axis: int) -> Tensor:
    """A bool one-hot mask: a new axis of size `classes` inserted at `axis` of the index tensor's shape."""
    position = axis if axis >= 0 else indices.ndim + 1 + axis
    labels = indices.unsqueeze(position)
    arange_shape = tuple(classes if i == position else 1 for i in range(indices.ndim + 1))
    classes_range = indices.arange(classes, dtype=indices.dtype, device=indices.device).reshape(arange_shape)
    return labels == classes_range


def _is_index_tensor(t: Tensor) -> bool:
    return dtypes.is_int(t.dtype)


class LossOps(TensorBase):
    """`cross_entropy, sparse_categorical_crossentropy, binary_crossentropy, binary_crossentropy_logits, nll_loss`;
    `self` holds the predictions (logits, probabilities or log-probabilities, as each name says)."""

    def cross_entropy(self, target: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
        """torch's cross_entropy over logits of shape (N, C, ...) or (C,): `target` holds class indices
        (shape without C) or class probabilities (same shape)."""
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"label_smoothing must be between 0 and 1, got {label_smoothing}")
        class_axis = 1 if self.ndim > 1 else 0
        classes = self.shape[class_axis]
        if _is_index_tensor(target):
            target = class_mask(target, classes, class_axis).cast(self.dtype)
        target = target * (1 - label_smoothing) + label_smoothing / classes
        loss = -(self.log_softmax(class_axis) * target).sum(class_axis)
        return reduce_loss(loss, reduction)

    def nll_loss(
        self,
        target: Tensor,
        weight: Tensor | None = None,
        ignore_index: int | None = None,
        reduction: str = "mean",
    ) -> Tensor:
        """torch's nll_loss over log-probabilities (N, C, ...) or (C,): -weight[y] * self[y]; "mean" divides by
        the total weight of the targets that are not `ignore_index`."""
        class_axis = 1 if self.ndim > 1 else 0
        classes = self.shape[class_axis]
        mask = class_mask(target, classes, class_axis)
        if ignore_index is not None:
            mask = mask & (target != ignore_index).unsqueeze(class_axis)
        class_weights = mask.cast(self.dtype)
        if weight is not None:
            weight_shape = tuple(classes if i == class_axis else 1 for i in range(self.ndim))
            class_weights = class_weights * weight.reshape(weight_shape)
        picked = -(self * class_weights).sum(class_axis)
        if reduction == "mean":
            return picked.sum() / class_weights.sum()
        return reduce_loss(picked, reduction)

    def sparse_categorical_crossentropy(
        self, target: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean"
    ) -> Tensor:
        """tinygrad's form: logits with classes on the last axis, integer targets; targets equal to
        `ignore_index` add nothing and "mean" averages over the others."""
        classes = self.shape[-1]
        log_probabilities = self.log_softmax(-1)
        kept = (target != ignore_index).cast(self.dtype)
        picked = -(log_probabilities * class_mask(target, classes, -1).cast(self.dtype)).sum(-1)
        smoothing = -log_probabilities.mean(-1)
        loss = ((1 - label_smoothing) * picked + label_smoothing * smoothing) * kept
        if reduction == "mean":
            return loss.sum() / kept.sum()
        return reduce_loss(loss, reduction)

    def binary_crossentropy(self, target: Tensor, reduction: str = "mean") -> Tensor:
        """-(y log p + (1 - y) log(1 - p)) over probabilities; each log is clamped at -100, as torch does."""
        log_p = self.log().maximum(-100)
        log_not_p = (1 - self).log().maximum(-100)
        return reduce_loss(-(target * log_p + (1 - target) * log_not_p), reduction)

    def binary_crossentropy_logits(
        self, target: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None
    ) -> Tensor:
        """The same from logits, without forming sigmoid: (1 - y) x + w softplus(-x), w = 1 + (pos_weight - 1) y;
        exact for logits of any size (softplus never overflows)."""
        positive_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
        loss = (1 - target) * self + positive_weight * stable_softplus(-self)
        return reduce_loss(loss, reduction)
