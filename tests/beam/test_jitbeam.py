"""JITBEAM=N searches the kernels a TinyJit captures (and only those); replays give the same numbers."""

from __future__ import annotations

import numpy as np

from tg.codegen.flags import Context
from tg.hcq.engine import beam as engine_beam
from tg.tensor import Tensor, TinyJit


def test_jitbeam_searches_only_inside_the_capture(monkeypatch) -> None:
    searched = []
    original = engine_beam.search_opts

    def counting(ast, device, width, **kwargs):
        searched.append(width)
        return original(ast, device, width, **kwargs)

    monkeypatch.setattr(engine_beam, "search_opts", counting)
    step = TinyJit(lambda x, w: (x @ w).relu())
    rng = np.random.default_rng(0)
    w = rng.standard_normal((12, 5)).astype(np.float32)
    with Context(JITBEAM=1):
        for i in range(4):
            x = rng.standard_normal((7, 12)).astype(np.float32)
            got = step(Tensor(x), Tensor(w)).numpy()
            np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
            if i == 0:
                assert searched == []  # the plain first call compiles with the heuristics
        assert searched and set(searched) == {1}
        before = len(searched)
        (Tensor(np.ones((3, 3), np.float32)) * 2).numpy()  # outside a capture: no search
        assert len(searched) == before
