"""Issue 12 item 6: SPEC=1 and SPEC=2 check every stage's graph on real Tensor code (the tensor graph after each
scheduler stage, each kernel AST, the linear program) and the code still computes what numpy does.

Shapes are unusual on purpose, so no schedule or program cache from another test skips the stages."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen.flags import Context
from tg.tensor import Tensor


@pytest.mark.parametrize("level", [1, 2])
def test_spec_levels_pass_on_scaling_and_softmax(level: int) -> None:
    rng = np.random.default_rng(level)
    values = rng.random(5 + level, dtype=np.float32)
    logits = rng.random((3 + level, 7 + level), dtype=np.float32)
    with Context(SPEC=level):
        scaled = (Tensor(values) * 2).numpy()
        probabilities = Tensor(logits).softmax(-1).numpy()
    np.testing.assert_array_equal(scaled, values * 2)
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(probabilities, exp / exp.sum(-1, keepdims=True), rtol=1e-6)
