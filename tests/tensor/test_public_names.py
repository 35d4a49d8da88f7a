"""The names users import from tg.tensor keep working now that the engine lives in tg.hcq.engine."""

from __future__ import annotations

import numpy as np


def test_tensor_reexports_the_engine_and_runtime_names() -> None:
    import tg.codegen.flags
    import tg.hcq
    import tg.hcq.engine
    from tg.tensor import Context, Device, GlobalCounters, Tensor, dtypes

    assert GlobalCounters is tg.hcq.engine.GlobalCounters
    assert Device is tg.hcq.Device and Context is tg.codegen.flags.Context
    GlobalCounters.reset()
    assert Tensor(np.ones(4, np.float32)).add(1).sum().item() == 8.0
    assert GlobalCounters.kernel_count >= 1 and dtypes.float32.itemsize == 4
