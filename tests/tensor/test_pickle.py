"""Pickling tensors (each load owns fresh storage, views carry their own values) and TinyJit functions (a captured
one replays in another process; an uncaptured one carries its function)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tg.tensor import Tensor
from tg.tensor.jit import JitError, TinyJit
from tg.tensor.jit_pickle import JitPickleError


def test_each_load_of_a_realized_tensor_has_its_own_storage():
    t = Tensor([1, 2, 3, 4]).realize()
    blob = pickle.dumps(t)
    first, second = pickle.loads(blob), pickle.loads(blob)
    assert first.uop is not second.uop
    first[0] = 9
    first.realize()
    assert (first.tolist(), second.tolist(), t.tolist()) == ([9, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4])


def test_a_pickled_view_carries_its_own_values():
    t = Tensor([1, 2, 3, 4]).realize()
    view = t[1:3]
    loaded = pickle.loads(pickle.dumps(view))
    assert loaded.tolist() == [2, 3]
    t[1] = 7
    t.realize()
    loaded_again = pickle.loads(pickle.dumps(view))
    loaded_again[0] = 5
    loaded_again.realize()
    assert (loaded.tolist(), loaded_again.tolist(), view.tolist()) == ([2, 3], [5, 3], [7, 3])


def _captured_add() -> TinyJit:
    weights = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()

    @TinyJit
    def add(a: Tensor, b: Tensor) -> Tensor:  # a local function: pickle could not name it
        return (a.sum() + b + 1) @ weights

    for seed in range(3):
        rng = np.random.default_rng(seed)
        add(Tensor(rng.random((4, 4), dtype=np.float32)), Tensor(rng.random((4, 4), dtype=np.float32)))
    return add


def _expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.sum() + b + 1) @ np.arange(16, dtype=np.float32).reshape(4, 4)


def test_a_captured_jit_pickles_and_replays_with_its_baked_in_weights():
    blob = pickle.dumps(_captured_add())
    loaded = pickle.loads(blob)
    for fill in (1.0, 2.0):
        a, b = np.full((4, 4), fill, np.float32), np.ones((4, 4), np.float32)
        out = loaded(Tensor(a).contiguous().realize(), Tensor(b).contiguous().realize())
        np.testing.assert_allclose(out.numpy(), _expected(a, b), rtol=1e-6)
    with pytest.raises(JitError, match="changed shape"):
        loaded(Tensor.ones(2, 2).contiguous().realize(), Tensor.ones(2, 2).contiguous().realize())
    loaded.reset()
    with pytest.raises(JitError, match="loaded from a pickle"):
        loaded(Tensor.ones(4, 4).contiguous().realize(), Tensor.ones(4, 4).contiguous().realize())


@pytest.mark.slow
def test_a_captured_jit_replays_in_another_process(tmp_path):
    path = tmp_path / "add.pkl"
    path.write_bytes(pickle.dumps(_captured_add()))
    script = textwrap.dedent(f"""
        import pickle
        import numpy as np
        from tg.tensor import Tensor
        add = pickle.loads(open({str(path)!r}, "rb").read())
        out = add(Tensor.ones(4, 4).contiguous().realize(), Tensor.full((4, 4), 3.0).contiguous().realize())
        print(out.numpy().tolist())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    a, b = np.ones((4, 4), np.float32), np.full((4, 4), 3.0, np.float32)
    np.testing.assert_allclose(np.array(eval(done.stdout)), _expected(a, b), rtol=1e-6)


def double(x: Tensor) -> Tensor:
    return x * 2


def test_an_uncaptured_jit_pickles_its_function_and_options():
    loaded = pickle.loads(pickle.dumps(TinyJit(double, plain_calls=0, prune=True)))
    assert loaded.fn is double and loaded.plain_calls == 0 and loaded.prune
    for value in (1.0, 2.0, 3.0):
        assert loaded(Tensor.full((3,), value).contiguous().realize()).tolist() == [2 * value] * 3
    assert loaded.captured


def test_a_capture_that_draws_random_numbers_cannot_be_pickled():
    @TinyJit
    def noisy(x: Tensor) -> Tensor:
        return x + Tensor.rand(3)

    for _ in range(3):
        noisy(Tensor.zeros(3).contiguous().realize())
    with pytest.raises(JitPickleError, match="random numbers"):
        pickle.dumps(noisy)


# ------------------------------------------------------------------------- stored captures (dumps/loads_capture)


def _captured_scaled(weights: Tensor) -> TinyJit:
    """A capture that reads `weights` (closed over) and makes a scratch buffer (the sum) before its output."""

    @TinyJit
    def scaled(x: Tensor) -> Tensor:
        return (x * 2).contiguous().sum(axis=0) @ weights

    for fill in (1.0, 2.0, 3.0):
        scaled(Tensor.full((3, 4), fill).contiguous().realize())
    return scaled


def _named(tensor: Tensor, name: str):  # noqa: ANN202
    from tg.codegen.schedule.realize import buffer_holding
    from tg.hcq.engine.buffers import buffer_of

    node = buffer_holding(tensor.uop)
    assert node is not None
    return lambda buf: name if buf is buffer_of(node) else None


def test_a_stored_capture_rebinds_a_shared_buffer_by_name_instead_of_storing_it():
    from tg.codegen.schedule.realize import buffer_holding
    from tg.tensor.jit_pickle import dumps_capture, loads_capture

    marker = np.float32(1234.5678)  # its bytes would be in the data if the weights were stored
    weights = Tensor(np.full((4, 2), marker, np.float32)).realize()
    data = dumps_capture(_captured_scaled(weights), _named(weights, "w"))
    assert marker.tobytes() not in data
    other = np.arange(8, dtype=np.float32).reshape(4, 2)
    loaded = loads_capture(data, {"w": buffer_holding(Tensor(other).realize().uop)})
    x = np.full((3, 4), 5.0, np.float32)
    np.testing.assert_allclose(loaded(Tensor(x).contiguous().realize()).numpy(), (x * 2).sum(0) @ other, rtol=1e-6)


def test_a_stored_capture_refuses_a_missing_or_different_shared_buffer():
    from tg.codegen.schedule.realize import buffer_holding
    from tg.tensor.jit_pickle import dumps_capture, loads_capture

    weights = Tensor.ones(4, 2).contiguous().realize()
    data = dumps_capture(_captured_scaled(weights), _named(weights, "w"))
    with pytest.raises(JitPickleError, match="'w', which was not given"):
        loads_capture(data, {})
    with pytest.raises(JitPickleError, match="'w' is 6 x"):
        loads_capture(data, {"w": buffer_holding(Tensor.ones(3, 2).contiguous().realize().uop)})


def test_scratch_empty_leaves_out_the_buffers_written_before_they_are_read():
    from tg.tensor.jit_pickle import dumps_capture, loads_capture

    weights = Tensor.ones(4, 2).contiguous().realize()
    jit = _captured_scaled(weights)
    jit(Tensor.full((3, 4), 4321.0).contiguous().realize())  # the scratch sum now holds 8642 in every lane
    scratch_value = np.float32(8642.0).tobytes()
    assert scratch_value in dumps_capture(jit, _named(weights, "w"))
    data = dumps_capture(jit, _named(weights, "w"), scratch_empty=True)
    assert scratch_value not in data
    from tg.codegen.schedule.realize import buffer_holding

    loaded = loads_capture(data, {"w": buffer_holding(weights.uop)})
    x = np.full((3, 4), 1.5, np.float32)
    np.testing.assert_allclose(loaded(Tensor(x).contiguous().realize()).numpy(), (x * 2).sum(0) @ np.ones((4, 2)))


def test_loading_a_stored_capture_never_runs_code_from_the_data(tmp_path):
    import os

    from tg.codegen.serial import IRLoadError
    from tg.tensor.jit_pickle import loads_capture

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):  # noqa: ANN204
            return (os.system, (f"touch {marker}",))

    with pytest.raises(IRLoadError, match="refused"):
        loads_capture(pickle.dumps(Evil()))
    assert not marker.exists()
    with pytest.raises(IRLoadError):
        loads_capture(b"not a pickle at all")


def test_a_captured_partial_pickles():
    """Regression: a TinyJit of a functools.partial (no __name__) failed to pickle with an AttributeError."""
    import functools

    def scale(factor: float, x: Tensor) -> Tensor:
        return x * factor

    jit = TinyJit(functools.partial(scale, 3.0), plain_calls=0)
    jit(Tensor.ones(2).contiguous().realize())
    loaded = pickle.loads(pickle.dumps(jit))
    assert loaded(Tensor.full((2,), 2.0).contiguous().realize()).tolist() == [6.0, 6.0]


def test_a_restored_capture_loads_each_distinct_kernel_once():
    """Regression: every launch of a restored capture loaded its own copy of its program (one shared object per
    launch: a server's dozens of stored steps ran out of mappings), though launches of one kernel share it."""
    from tg.hcq.engine.capture import KernelLaunch
    from tg.tensor.jit_pickle import dumps_capture, loads_capture

    @TinyJit
    def doubled(a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return (a * 2).contiguous(), (b * 2).contiguous(), (c * 2).contiguous()

    for fill in (1.0, 2.0, 3.0):
        doubled(*(Tensor.full((4,), fill + i).contiguous().realize() for i in range(3)))
    data = dumps_capture(doubled)
    first, second = loads_capture(data), loads_capture(data)
    programs = [launch.program for jit in (first, second) for launch in jit.graph.launches
                if isinstance(launch, KernelLaunch)]  # fmt: skip
    assert len(programs) == 6 and len({id(program) for program in programs}) == 1
    assert [t.tolist() for t in second(*(Tensor.full((4,), 5.0 + i).contiguous().realize() for i in range(3)))] == [
        [10.0] * 4,
        [12.0] * 4,
        [14.0] * 4,
    ]
