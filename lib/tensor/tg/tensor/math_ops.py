"""The math half of the op surface, gathered into one mixin for Tensor: activations, special functions, derived
reductions and scans, losses, normalization and attention (each family in its own module)."""

from tg.tensor.activations import ActivationOps
from tg.tensor.attention import AttentionOps
from tg.tensor.derived_reductions import DerivedReductionOps
from tg.tensor.losses import LossOps
from tg.tensor.normalization import NormalizationOps
from tg.tensor.scans import ScanOps
from tg.tensor.special import SpecialFunctionOps


class MathOps(ActivationOps, SpecialFunctionOps, DerivedReductionOps, ScanOps, LossOps, NormalizationOps, AttentionOps):
    """Mixed into Tensor after the primitive op families, whose methods these are built from."""
