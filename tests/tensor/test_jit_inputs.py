"""TinyJit as a torch/tinygrad user drives it: random numbers advance per replay, Tensors inside containers are
inputs, state updated with assign advances once per call, outputs fed back as inputs, functions returning None,
`prune=`, kernel counters during replays, and the forms of arguments a capture accepts or refuses."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

from tg.tensor import GlobalCounters, Tensor, TinyJit
from tg.tensor.jit import JitError

CALLS = 5


def test_rand_inside_a_jit_draws_new_numbers_on_every_replay() -> None:
    step = TinyJit(lambda x: x + Tensor.rand(64))
    draws = [step(Tensor.zeros(64).contiguous().realize()).numpy() for _ in range(CALLS)]
    for i in range(CALLS):
        for j in range(i):
            assert not np.array_equal(draws[i], draws[j]), f"calls {j} and {i} drew the same numbers"
    assert all(((d >= 0) & (d < 1)).all() for d in draws)


def test_rand_inside_a_jit_follows_the_seed_like_eager_calls() -> None:
    """A replay takes the next counters exactly as an eager call would: the same seed gives the same sequence."""
    Tensor.manual_seed(7)
    eager = [(Tensor.rand(8) * 2).numpy() for _ in range(CALLS)]
    Tensor.manual_seed(7)
    step = TinyJit(lambda x: x * Tensor.rand(8))
    jitted = [step(Tensor.full((8,), 2.0).contiguous().realize()).numpy() for _ in range(CALLS)]
    np.testing.assert_array_equal(np.stack(jitted), np.stack(eager))


def test_a_jitted_dropout_uses_a_new_mask_per_call() -> None:
    Tensor.training = True
    try:
        step = TinyJit(lambda x: x.dropout(0.5))
        masks = [(step(Tensor.ones(256).contiguous().realize()).numpy() != 0) for _ in range(CALLS)]
    finally:
        Tensor.training = False
    assert len({m.tobytes() for m in masks}) == CALLS


@pytest.mark.parametrize("wrap", [list, tuple])
def test_tensors_inside_a_list_or_tuple_argument_are_inputs(wrap) -> None:
    step = TinyJit(lambda a, ts: (a + ts[0] * ts[1]).contiguous())
    for i in range(CALLS):
        a, b, c = np.full(3, i, np.float32), np.arange(3, dtype=np.float32) + i, np.full(3, 2.0 + i, np.float32)
        got = step(Tensor(a), wrap([Tensor(b), Tensor(c)]))
        np.testing.assert_array_equal(got.numpy(), a + b * c)


def test_tensors_inside_nested_containers_and_dicts_are_inputs() -> None:
    def body(x: Tensor, pack: dict, *, extra: list) -> Tensor:
        return (x + pack["w"] * pack["inner"][0][1] - extra[0]).contiguous()

    step = TinyJit(body)
    for i in range(CALLS):
        x, w, v, e = (np.full(4, i * k + 1.0, np.float32) for k in (1, 2, 3, 4))
        got = step(Tensor(x), {"w": Tensor(w), "inner": [(1, Tensor(v))]}, extra=[Tensor(e)])
        np.testing.assert_array_equal(got.numpy(), x + w * v - e)


def test_a_closure_tensor_updated_with_assign_advances_once_per_call() -> None:
    counter = Tensor([1.0]).contiguous().realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        counter.assign(counter + 1)
        return (x * counter).contiguous()

    outs = [step(Tensor([2.0])).item() for _ in range(CALLS)]
    assert counter.item() == 1.0 + CALLS  # torch: the update runs once per call
    assert outs == [2.0 * (2 + i) for i in range(CALLS)]


def test_an_output_fed_back_as_the_next_input_reads_the_value_it_held() -> None:
    step = TinyJit(lambda x: (x.flip(0) * 2 + x).contiguous())  # each element reads another one
    x, expected = Tensor([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0], np.float32)
    for _ in range(CALLS):
        x = step(x)
        expected = expected[::-1] * 2 + expected
        np.testing.assert_array_equal(x.numpy(), expected)


def test_a_function_returning_none_replays_its_assigns() -> None:
    total = Tensor([0.0]).contiguous().realize()

    @TinyJit
    def accumulate(x: Tensor) -> None:
        total.assign(total + x.sum())

    for i in range(CALLS):
        assert accumulate(Tensor([float(i), 1.0])) is None
    assert total.item() == sum(i + 1.0 for i in range(CALLS))


def test_prune_runs_kernels_that_do_not_depend_on_inputs_once() -> None:
    weight = Tensor([1.0, 2.0, 3.0])
    launched = []

    def body(x: Tensor) -> Tensor:
        constant = (weight * 10).contiguous()  # depends on no input: pruned from the replay
        return (x + constant).contiguous()

    pruned, full = TinyJit(body, prune=True), TinyJit(body)
    for i in range(CALLS):
        x = np.full(3, float(i), np.float32)
        GlobalCounters.reset()
        got = pruned(Tensor(x))
        launched.append(GlobalCounters.kernel_count)
        np.testing.assert_array_equal(got.numpy(), x + np.array([10.0, 20.0, 30.0], np.float32))
        np.testing.assert_array_equal(full(Tensor(x)).numpy(), got.numpy())
    assert pruned.graph is not None and full.graph is not None
    assert len(pruned.graph.launches) == len(full.graph.launches) - 1
    assert launched[2:] == [1] * (CALLS - 2)  # replays: only the kernel that reads the input


def test_global_counters_count_the_kernels_of_a_replay() -> None:
    step = TinyJit(lambda x: ((x + 1).contiguous() * 2).contiguous())
    counts, ops = [], []
    for _ in range(4):
        GlobalCounters.reset()
        step(Tensor(np.ones(16, np.float32)))
        counts.append(GlobalCounters.kernel_count)
        ops.append(GlobalCounters.global_ops)
    assert counts[1:] == [2, 2, 2]  # the capture and the replays count the same two kernels
    assert ops[2] == ops[1] > 0


def test_changing_a_non_tensor_argument_after_the_capture_is_an_error() -> None:
    step = TinyJit(lambda x, scale: (x * scale).contiguous())
    step(Tensor([1.0]), 2.0)
    step(Tensor([1.0]), 2.0)
    assert step(Tensor([3.0]), 2.0).item() == 6.0
    with pytest.raises(JitError, match="arg 1 changed from 2.0 to 3.0"):
        step(Tensor([1.0]), 3.0)


def test_changing_the_structure_of_a_container_argument_is_an_error() -> None:
    step = TinyJit(lambda ts: sum(ts[1:], ts[0] + 0).contiguous())
    for _ in range(3):
        step([Tensor([1.0]), Tensor([2.0])])
    with pytest.raises(JitError, match="Tensor inputs changed"):
        step([Tensor([1.0]), Tensor([2.0]), Tensor([3.0])])


def test_the_same_tensor_passed_twice_is_an_error_after_capture_like_two_inputs() -> None:
    step = TinyJit(lambda a, b: (a * b).contiguous())
    for i in range(CALLS):
        t = Tensor([float(i)])
        assert step(t, t).item() == float(i * i)


def test_namedtuple_and_keyword_tensor_inputs_replay_with_new_values() -> None:
    pair = namedtuple("pair", "a b")
    step = TinyJit(lambda p, *, k: (p.a * p.b + k).contiguous())
    for i in range(CALLS):
        got = step(pair(Tensor([float(i)]), Tensor([2.0])), k=Tensor([1.0]))
        assert got.item() == 2.0 * i + 1.0


def test_a_changed_keyword_constant_or_nested_dtype_after_capture_is_an_error() -> None:
    step = TinyJit(lambda x, ts, mode="double": (x * (2 if mode == "double" else 3) + ts[0]).contiguous())
    for _ in range(3):
        assert step(Tensor([1.0]), [Tensor([1.0])], mode="double").item() == 3.0
    with pytest.raises(JitError, match="kwarg mode changed from 'double' to 'triple'"):
        step(Tensor([1.0]), [Tensor([1.0])], mode="triple")
    with pytest.raises(JitError, match=r"arg 1\[0\] changed dtype"):
        step(Tensor([1.0]), [Tensor([1], dtype="int32")], mode="double")


def test_prune_with_nothing_left_to_replay_returns_the_computed_value() -> None:
    weight = Tensor([4.0, 5.0])
    step = TinyJit(lambda x: (weight * 2).contiguous() + x.sum() * 0, prune=True)
    for _ in range(CALLS):
        np.testing.assert_array_equal(step(Tensor([1.0])).numpy(), [8.0, 10.0])


def test_global_counters_count_the_bytes_of_a_replay_like_a_plain_call() -> None:
    step = TinyJit(lambda x: ((x + 1).contiguous() * 2).contiguous())
    touched = []
    for _ in range(4):
        GlobalCounters.reset()
        step(Tensor(np.ones(16, np.float32)))
        touched.append(GlobalCounters.global_mem)
    assert touched[1:] == [4 * 16 * 4] * 3  # the capture and the replays: two kernels, each reading and writing 64 B
