"""TinyJit: replays equal eager runs bit for bit, a CPU replay is one submit, and misuse is a clear error."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen.flags import Context
from tg.hcq.devices.cpu import CPUComputeQueue
from tg.tensor import Tensor, TinyJit
from tg.tensor.jit import JitError


def eager_and_jitted(fn: Callable[..., Tensor], make_inputs: Callable[[int], list[np.ndarray]], calls: int = 5,
                     device: str = "CPU") -> None:  # fmt: skip
    """Call a jitted `fn` on fresh inputs `calls` times; each result equals the plain function's, bit for bit."""
    jitted = TinyJit(fn)
    for i in range(calls):
        arrays = make_inputs(i)
        got = jitted(*[Tensor(a, device=device) for a in arrays])
        want = fn(*[Tensor(a, device=device) for a in arrays])
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for g, w in zip(got, want, strict=True):
            assert g.numpy().tobytes() == w.numpy().tobytes(), f"call {i}"
    assert jitted.graph is not None


def random_inputs(*shapes: tuple[int, ...]) -> Callable[[int], list[np.ndarray]]:
    def make(seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]

    return make


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_elementwise_and_reduction_replay_like_eager(device: str) -> None:
    eager_and_jitted(lambda x, y: ((x * y + 1).exp().sum(axis=1), (x - y).abs().max()), random_inputs((4, 6), (4, 6)),
                     device=device)  # fmt: skip


def test_matmul_softmax_replay_like_eager() -> None:
    eager_and_jitted(lambda x, w: (x @ w).softmax(axis=-1), random_inputs((5, 16), (16, 7)))


def test_many_kernels_replay_like_eager() -> None:
    def chain(x: Tensor) -> Tensor:
        for _ in range(20):
            x = (x * 1.01 + 0.5).contiguous()
        return x

    eager_and_jitted(chain, random_inputs((32,)))


def test_a_replay_on_the_cpu_is_one_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    step = TinyJit(lambda x: ((x + 1).contiguous() * 2).contiguous().sum())
    for _ in range(2):
        step(Tensor(np.ones(64, np.float32)))
    submits = []
    original = CPUComputeQueue._submit

    def counting(self: CPUComputeQueue, device: object, commands: tuple) -> None:
        submits.append(len(commands))
        original(self, device, commands)

    monkeypatch.setattr(CPUComputeQueue, "_submit", counting)
    result = step(Tensor(np.full(64, 3.0, np.float32)))
    assert step.graph is not None and step.graph.one_submit
    assert len(submits) == 1 and submits[0] >= 3 + 2  # wait, three kernels, signal
    assert result.item() == pytest.approx(64 * 8.0)


def test_a_step_that_assigns_into_its_own_input_replays() -> None:
    cache = Tensor(np.zeros((4, 3), np.float32)).realize()

    @TinyJit
    def write_row(cache: Tensor, row: Tensor) -> Tensor:
        cache.assign(cache * 0.5 + row)
        return cache.sum(axis=0)

    expected = np.zeros((4, 3), np.float32)
    for i in range(5):
        row = np.full((4, 3), float(i), np.float32)
        total = write_row(cache, Tensor(row))
        expected = expected * 0.5 + row
        np.testing.assert_array_equal(cache.numpy(), expected)
        np.testing.assert_array_equal(total.numpy(), expected.sum(axis=0))


def test_outputs_that_are_inputs_follow_the_new_input() -> None:
    step = TinyJit(lambda x, y: (x, (x + y).contiguous()))
    for i in range(4):
        x, y = np.full(3, float(i), np.float32), np.ones(3, np.float32)
        same, total = step(Tensor(x), Tensor(y))
        np.testing.assert_array_equal(same.numpy(), x)
        np.testing.assert_array_equal(total.numpy(), x + y)


@pytest.mark.parametrize(
    ("second", "message"),
    [((np.ones((5, 3), np.float32),), "arg 0 changed shape from (4, 3) to (5, 3)"),
     ((np.ones((4, 3), np.int32),), "arg 0 changed dtype"),
     ((np.ones((4, 3), np.float32), np.ones(3, np.float32)), "Tensor inputs changed")],
)  # fmt: skip
def test_changed_inputs_are_errors_naming_the_change(second: tuple[np.ndarray, ...], message: str) -> None:
    step = TinyJit(lambda *xs: sum((x.float() for x in xs[1:]), xs[0].float() + 1))
    for _ in range(3):
        step(Tensor(np.ones((4, 3), np.float32)))
    with pytest.raises(JitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        step(*[Tensor(a) for a in second])


def test_non_tensor_outputs_are_an_error() -> None:
    step = TinyJit(lambda x: (x + 1).sum().item())
    with pytest.raises(JitError, match="must return Tensors"):
        step(Tensor([1.0, 2.0]))


def test_a_function_that_launches_nothing_is_an_error() -> None:
    step = TinyJit(lambda x: x)
    step(Tensor([1.0, 2.0]).realize())
    with pytest.raises(JitError, match="launched no kernels"):
        step(Tensor([1.0, 2.0]).realize())


def test_jit_0_runs_the_function_every_time() -> None:
    runs = []

    def body(x: Tensor) -> Tensor:
        runs.append(1)
        return x * 2

    step = TinyJit(body)
    with Context(JIT=0):
        for _ in range(4):
            step(Tensor([1.0]))
    assert len(runs) == 4
    for _ in range(4):
        step(Tensor([1.0]))
    assert len(runs) == 4 + 2  # plain call and capture; replays do not run Python


def test_each_replay_writes_the_same_output_buffers() -> None:
    step = TinyJit(lambda x: (x * 2).contiguous())
    for value in (1.0, 2.0):
        step(Tensor(np.full(3, value, np.float32)))
    first = step(Tensor(np.full(3, 3.0, np.float32)))
    kept = first.numpy()
    second = step(Tensor(np.full(3, 4.0, np.float32)))
    np.testing.assert_array_equal(kept, np.full(3, 6.0, np.float32))
    np.testing.assert_array_equal(first.numpy(), second.numpy())  # the earlier output now shows the newer result
    np.testing.assert_array_equal(second.numpy(), np.full(3, 8.0, np.float32))


def test_plain_calls_0_captures_the_first_call() -> None:
    runs = []

    def body(x: Tensor) -> Tensor:
        runs.append(1)
        return (x * 2).contiguous()

    step = TinyJit(body, plain_calls=0)
    first = step(Tensor(np.full(3, 1.0, np.float32))).numpy()
    assert step.graph is not None and len(runs) == 1
    second = step(Tensor(np.full(3, 5.0, np.float32))).numpy()
    assert len(runs) == 1  # replayed
    np.testing.assert_array_equal(first, np.full(3, 2.0, np.float32))
    np.testing.assert_array_equal(second, np.full(3, 10.0, np.float32))
