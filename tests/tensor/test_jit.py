"""TinyJit: replays equal eager runs bit for bit, a CPU replay is one submit, and misuse is a clear error; a capture
with bound Variables replays for every value of them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen import UOp
from tg.codegen.flags import Context
from tg.hcq import Device
from tg.hcq.devices.cpu import CPUComputeQueue
from tg.tensor import Tensor, TinyJit, Variable
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
        step(Tensor(np.ones(64, np.float32), device="CPU"))
    submits = []
    original = CPUComputeQueue._submit

    def counting(self: CPUComputeQueue, device: object, commands: tuple) -> None:
        submits.append(len(commands))
        original(self, device, commands)

    monkeypatch.setattr(CPUComputeQueue, "_submit", counting)
    result = step(Tensor(np.full(64, 3.0, np.float32), device="CPU"))
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


# ---------------------------------------------------------------------------------------------------- symbolic shapes


def _attention_step(x: Tensor, w: Tensor, n: UOp) -> tuple[Tensor, Tensor]:
    rows = x[:n]
    return (rows @ w).softmax(0), rows.max(0) + rows.mean(0) * n


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_capture_with_a_variable_replays_every_bound_value_like_eager(device: str) -> None:
    n = Variable("n", 1, 12)
    rng = np.random.default_rng(3)
    x, w = Tensor(rng.standard_normal((12, 8)).astype(np.float32), device=device), Tensor(
        rng.standard_normal((8, 5)).astype(np.float32), device=device)  # fmt: skip
    runs = []

    def step(x: Tensor, w: Tensor, n: UOp) -> tuple[Tensor, Tensor]:
        runs.append(1)
        return _attention_step(x, w, n)

    jitted = TinyJit(step)
    values = (4, 7, 1, 12, 2, 9, 12, 3) if device == "CPU" else (4, 7, 1, 12)
    for k in values:
        got = jitted(x, w, n.bind(k))
        want = _attention_step(x, w, n.bind(k))
        for g, e in zip(got, want, strict=True):
            assert g.shape == e.shape
            assert g.numpy().tobytes() == e.numpy().tobytes(), f"n={k}"
    assert len(runs) == 2  # later values replay the capture of the second call
    assert jitted.graph is not None and jitted.graph.one_submit == (device == "CPU")


def test_a_symbolic_input_shape_replays_with_the_new_value() -> None:
    n = Variable("n", 1, 16)
    base = Tensor(np.arange(64, dtype=np.float32).reshape(16, 4))
    step = TinyJit(lambda x: (x * 2).sum(0))
    for k in (3, 5, 16, 1, 8):
        got = step(base[: n.bind(k)].contiguous())
        np.testing.assert_array_equal(got.numpy(), (np.arange(64, dtype=np.float32).reshape(16, 4)[:k] * 2).sum(0))


def test_a_jitted_kv_cache_step_equals_eager_bit_for_bit() -> None:
    heads, context, dim = 2, 16, 8
    pos = Variable("pos", 0, context - 1)

    def step(cache: Tensor, new: Tensor, q: Tensor, p: UOp) -> Tensor:
        cache[:, p : p + 1].assign(new)
        keys = cache[:, 0 : p + 1]
        return ((q @ keys.transpose(1, 2)) / 4).softmax(-1) @ keys

    caches = [Tensor.zeros(heads, context, dim).contiguous().realize() for _ in range(2)]
    jitted = TinyJit(step)
    rng = np.random.default_rng(4)
    for p in range(10):
        new, q = (Tensor(a) for a in rng.standard_normal((2, heads, 1, dim)).astype(np.float32))
        got = jitted(caches[0], new, q, pos.bind(p))
        want = step(caches[1], new, q, pos.bind(p))
        assert got.numpy().tobytes() == want.numpy().tobytes(), f"pos={p}"
        assert caches[0].numpy().tobytes() == caches[1].numpy().tobytes(), f"pos={p}"
    assert jitted.graph is not None and jitted.graph.one_submit


@pytest.mark.usefixtures("cpu_default")  # the CPU's split across cores
def test_a_launch_size_that_depends_on_a_variable_is_resolved_per_replay() -> None:
    """Big enough to be cut across cores: one to CALLS_PER_CORE calls per core (at most the trip count), patched at
    submit."""
    rows = 1 << 17
    n = Variable("n", 1, rows)
    data = np.arange(rows, dtype=np.float32)
    base = Tensor(data)
    step = TinyJit(lambda x, v: x[:v] * 3)
    for k in (3, 1, rows, 2, rows - 1):  # captured with n=1 (one call): a stale size would leave rows unwritten
        np.testing.assert_array_equal(step(base, n.bind(k)).numpy(), data[:k] * 3)
    assert step.graph is not None
    sizes = {k: [c.global_size for c in step.graph.exec_queue.resolve({"n": k})] for k in (1, rows)}
    assert len(sizes[1]) == 1 and sizes[1][0][0] == 1  # one element: one call whatever the core count
    from tg.codegen.lower.multicore import CALLS_PER_CORE

    cores = Device["CPU"].cores.count
    assert cores <= sizes[rows][0][0] <= CALLS_PER_CORE * cores  # all of them: one to a few calls per core


@pytest.mark.parametrize(
    ("second", "message"),
    [(lambda x: (x, Variable("m", 1, 8).bind(2)), "Variable arguments changed"),
     (lambda x: (x, Variable("n", 1, 9).bind(2)), "Variable arguments changed"),
     (lambda x: (x, Variable("n", 1, 8)), "without a value"),
     (lambda x: (x,), "Variable arguments changed")],
    ids=["another name", "another range", "unbound", "missing"],
)  # fmt: skip
def test_changed_variables_are_errors(second: Callable, message: str) -> None:
    n = Variable("n", 1, 8)
    step = TinyJit(lambda x, *v: x[: v[0]].sum(0) if v else x.sum(0))
    x = Tensor(np.ones((8, 3), np.float32))
    for k in (1, 2, 3):
        step(x, n.bind(k))
    with pytest.raises(JitError, match=message):
        step(*second(x))


def test_a_replay_with_a_value_outside_the_range_is_an_error() -> None:
    n = Variable("n", 1, 8)
    step = TinyJit(lambda x, v: x[:v] + 1)
    x = Tensor(np.ones((8, 3), np.float32))
    for k in (1, 2, 3):
        step(x, n.bind(k))
    assert step.graph is not None
    with pytest.raises(ValueError, match="outside its range"):
        step.graph.replay([step.graph.inputs[0]], {"n": 9})
    with pytest.raises(ValueError, match="outside the bounds"):
        n.bind(9)


@pytest.mark.usefixtures("cpu_default")  # the CPU queue's one submit
def test_copies_and_a_second_cpu_device_replay_in_one_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies (one straight from an input) and kernels on CPU:1 are commands of the one replayed queue."""

    def step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        moved = ((x * 2).to("CPU:1") + y.to("CPU:1")).contiguous()
        return (moved.to("CPU") * 3).sum(0), moved

    jitted = TinyJit(step)
    make = random_inputs((8, 4), (8, 4))
    for i in range(2):
        jitted(*[Tensor(a) for a in make(i)])
    assert jitted.graph is not None and jitted.graph.one_submit and jitted.graph.copies_read_inputs
    submits = []
    original = CPUComputeQueue._submit

    def counting(self: CPUComputeQueue, device: object, commands: tuple) -> None:
        submits.append(device)
        original(self, device, commands)

    for i in range(2, 6):
        arrays = make(i)
        monkeypatch.setattr(CPUComputeQueue, "_submit", counting)
        got = jitted(*[Tensor(a) for a in arrays])
        assert len(submits) == 1, f"call {i}: {len(submits)} submits"
        monkeypatch.setattr(CPUComputeQueue, "_submit", original)
        submits.clear()
        want = step(*[Tensor(a) for a in arrays])
        assert got[1].device == "CPU:1"
        for g, w in zip(got, want, strict=True):
            assert g.numpy().tobytes() == w.numpy().tobytes(), f"call {i}"


def test_a_variable_that_only_shapes_an_output_view_replays() -> None:
    n = Variable("n", 1, 6)
    step = TinyJit(lambda x, v: (x * 2).contiguous()[:v])
    data = np.arange(6, dtype=np.float32)
    for k in (2, 3, 6, 1):
        got = step(Tensor(data), n.bind(k))
        assert got.shape == (n.bind(k),)
        np.testing.assert_array_equal(got.numpy(), data[:k] * 2)


def test_a_new_value_patches_only_the_variable_slots_of_the_argument_memory() -> None:
    n = Variable("n", 1, 12)
    x = Tensor(np.ones((12, 8), np.float32))
    step = TinyJit(lambda x, v: ((x[:v] * 2).contiguous().sum(0), x[:v].max(1)))
    for k in (2, 3, 3):
        step(x, n.bind(k))
    assert step.graph is not None
    before = bytes(step.graph.args_memory.raw.cpu_view())
    step(x, n.bind(7))
    Device["CPU"].synchronize()
    after = bytes(step.graph.args_memory.raw.cpu_view())
    words = [i for i in range(0, len(before), 4) if before[i : i + 4] != after[i : i + 4]]
    assert words, "the variable's argument slots should change"
    for i in words:
        assert int.from_bytes(before[i : i + 4], "little") == 3 and int.from_bytes(after[i : i + 4], "little") == 7


def test_an_input_of_symbolic_shape_over_another_variable_is_an_error() -> None:
    step = TinyJit(lambda x: x * 2)
    base = Tensor(np.ones((8, 2), np.float32))
    for k in (1, 2, 3):
        step(base[: Variable("n", 1, 8).bind(k)].contiguous())
    with pytest.raises(JitError, match="arg 0 changed shape"):
        step(base[: Variable("m", 1, 8).bind(2)].contiguous())


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


def test_a_capture_does_not_keep_the_lazy_graph_it_was_built_from() -> None:
    """A replay runs the captured kernels on their buffers; the graphs the step built (here the intermediate
    realized inside it, whose buffer the capture keeps) must be freed, or an LLM's decode step keeps ~60k UOps."""
    import gc
    import weakref

    traced: list[weakref.ref[UOp]] = []

    def step(x: Tensor) -> Tensor:
        hidden = ((x * 2.0).exp() + x.sum()).realize()  # realized inside the step: a buffer the capture holds
        lazy = hidden * 3.0 + 1.0
        traced.append(weakref.ref(lazy.uop))
        return lazy.sum(0)

    jitted = TinyJit(step)
    for i in range(3):
        jitted(Tensor(np.full((4, 4), float(i), dtype=np.float32)))
    assert jitted.graph is not None
    gc.collect()
    assert traced and all(ref() is None for ref in traced)
    x = np.full((4, 4), 5.0, dtype=np.float32)
    want = (np.exp(x * 2.0) + x.sum()) * 3.0 + 1.0
    np.testing.assert_allclose(jitted(Tensor(x)).numpy(), want.sum(0), rtol=1e-5)


def test_gradients_in_a_capture_read_the_new_inputs_not_the_graph_they_came_from():
    # regression: the JIT realizes a lazy input, autograd then walked back into the graph that computed it, and the
    # capture baked that graph (the second call's input) into every replay
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True).realize()

    @TinyJit
    def grad_of(x: Tensor) -> Tensor:
        return (x * w).sum().gradient(w)[0]

    for value in (1.0, 2.0, 3.0, 4.0):
        assert grad_of(Tensor.full((3,), value) + 0).tolist() == [value] * 3
