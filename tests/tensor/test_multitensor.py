"""Tensors sharded across the CPU devices (CPU:0, CPU:1, CPU:2): ops on shards against numpy, all-reduce in each
algorithm, gathering, assigns, gradients, TinyJit, pickling, the errors of misuse, and data-parallel training."""

from __future__ import annotations

import importlib.util
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from tg.codegen import Ops, dtypes
from tg.codegen.flags import Context
from tg.codegen.schedule.graph import device_of, shape_of
from tg.hcq import Device
from tg.tensor import Tensor
from tg.tensor.errors import ArgumentError
from tg.tensor.jit import TinyJit
from tg.tensor.multi import RING_THRESHOLD, MultiAxisError, all_reduce, all_reduce_algorithm, lower

TWO = ("CPU:0", "CPU:1")
THREE = ("CPU:0", "CPU:1", "CPU:2")


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


def _shards(t: Tensor) -> list:
    """The per-device nodes of a realized sharded tensor."""
    node = lower([t.uop])[0]
    assert node.op is Ops.MULTI
    return list(node.src)


def test_shard_splits_the_axis_one_shard_per_device():
    a = _data(4, 6)
    t = Tensor(a).shard(TWO, axis=0).realize()
    assert t.device == ("CPU", "CPU:1")  # CPU:0 is CPU's canonical name
    assert t.shape == (4, 6) and t.shard_shape == (2, 6) and t.shard_axis == 0
    shards = _shards(t)
    assert [device_of(s) for s in shards] == ["CPU", "CPU:1"]
    assert [shape_of(s) for s in shards] == [(2, 6), (2, 6)]
    np.testing.assert_array_equal(t.numpy(), a)


def test_shard_without_axis_copies_the_whole_tensor_to_each_device():
    a = _data(3, 5)
    t = Tensor(a).shard(THREE).realize()
    assert t.shard_axis is None and t.shard_shape == (3, 5)
    assert [shape_of(s) for s in _shards(t)] == [(3, 5)] * 3
    np.testing.assert_array_equal(t.numpy(), a)
    assert Tensor(a).to(THREE).shard_axis is None  # to() several devices: a whole copy on each


def test_a_negative_axis_counts_from_the_back():
    t = Tensor(_data(2, 4)).shard(TWO, axis=-1)
    assert t.shard_axis == 1 and t.shard_shape == (2, 2)


def test_shard_in_place_and_shard_like():
    a = _data(4, 2, seed=40)
    w = Tensor(a)
    assert w.shard_(TWO, 0) is w and w.device == ("CPU", "CPU:1") and w.shard_axis == 0
    np.testing.assert_array_equal(w.numpy(), a)
    x = Tensor(_data(6, 2, seed=41)).shard_like(w)
    assert x.device == w.device and x.shard_axis == 0 and x.shard_shape == (3, 2)
    assert Tensor([1.0]).shard_like(Tensor([2.0], device="CPU:1")).device == "CPU:1"  # not sharded: moved there
    assert Tensor([1.0]).shard_axis is None and Tensor([1.0]).shard_shape == (1,)


@pytest.mark.parametrize("axis", [0, 1, None])
def test_elementwise_ops_against_numpy(axis):
    a, b = _data(4, 6, seed=1), _data(4, 6, seed=2)
    x, y = Tensor(a).shard(TWO, axis), Tensor(b).shard(TWO, axis)
    np.testing.assert_allclose(((x + y) * 2 - y.exp()).numpy(), (a + b) * 2 - np.exp(b), rtol=1e-6)
    np.testing.assert_array_equal((x < y).where(x, 3.0).numpy(), np.where(a < b, a, 3.0))
    assert (x + y).shard_axis == axis
    np.testing.assert_array_equal(x.cast(dtypes.int32).numpy(), a.astype(np.int32))


def test_operands_sharded_differently_are_resplit_to_match():
    a, b = _data(4, 6, seed=3), _data(4, 6, seed=4)
    rows, columns, whole = Tensor(a).shard(TWO, 0), Tensor(b).shard(TWO, 1), Tensor(b).shard(TWO)
    np.testing.assert_allclose((rows * columns).numpy(), a * b, rtol=1e-6)
    np.testing.assert_allclose((whole - rows).numpy(), b - a, rtol=1e-6)
    assert (whole - rows).shard_axis == 0


@pytest.mark.parametrize("devices", [TWO, THREE], ids=["2 devices", "3 devices"])
@pytest.mark.parametrize("op", ["sum", "prod", "max"])
def test_every_reduce_over_every_shard_axis(devices, op):
    a = _data(6, 6, 3, seed=5)
    for shard_axis in range(3):
        if a.shape[shard_axis] % len(devices):
            continue
        t = Tensor(a).shard(devices, shard_axis)
        for reduce_axis in (0, 1, 2, None):
            got = getattr(t, op)(reduce_axis)
            want = getattr(np, op)(a, axis=reduce_axis)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6, err_msg=f"{shard_axis=} {reduce_axis=}")
            crossed = reduce_axis is None or reduce_axis == shard_axis
            assert got.shard_axis == (
                None if crossed else shard_axis - (reduce_axis is not None and reduce_axis < shard_axis)
            )


@pytest.mark.parametrize("setting", [{"RING": 0}, {"RING": 2}, {"ALL2ALL": 2}], ids=["naive", "ring", "all2all"])
def test_each_all_reduce_algorithm_gives_the_sum_on_every_device(setting):
    a = _data(9, 7, seed=6)  # 7 elements per row: chunks of unequal size on 3 devices
    with Context(**setting):
        t = Tensor(a).shard(THREE, 0).sum(0)
        result = t.realize()
        for shard in _shards(result):
            np.testing.assert_allclose(Tensor(shard, device=device_of(shard)).numpy(), a.sum(0), rtol=1e-5)
        np.testing.assert_allclose(result.numpy(), a.sum(0), rtol=1e-5)


def test_the_all_reduce_is_chosen_by_size_and_device_count():
    big = RING_THRESHOLD + 1
    with Context(RING=1, ALL2ALL=0):
        assert all_reduce_algorithm(2, big) == "naive"  # two devices: each reads the other's once either way
        assert all_reduce_algorithm(3, RING_THRESHOLD) == "naive"
        assert all_reduce_algorithm(3, big) == "ring"
    with Context(RING=0, ALL2ALL=0):
        assert all_reduce_algorithm(3, big) == "naive"
    with Context(RING=2):
        assert all_reduce_algorithm(2, 4) == "ring"
    with Context(ALL2ALL=1):
        assert all_reduce_algorithm(3, big) == "all2all"
        assert all_reduce_algorithm(3, 4) != "all2all"


def test_ring_and_all2all_copy_chunks_where_naive_copies_whole_partials():
    partials = [Tensor(_data(40, seed=30 + i), device=d).uop for i, d in enumerate(THREE)]
    expected = sum(_data(40, seed=30 + i) for i in range(3))

    def copied(setting):
        with Context(**setting):
            result = all_reduce(Ops.ADD, partials)
        for shard in result.src:
            np.testing.assert_allclose(Tensor(shard, device=device_of(shard)).numpy(), expected, rtol=1e-5)
        copies = [n for n in result.toposort() if n.op is Ops.COPY]
        return len(copies), sum(shape_of(n)[0] for n in copies)

    assert copied({"RING": 0}) == (6, 6 * 40)  # each device copies the two others' whole partials
    # ring: each chunk (14, 14, 12 elements) hops twice around the ring, then goes to the two other devices
    assert copied({"RING": 2}) == (12, 4 * 40)
    assert copied({"ALL2ALL": 2}) == (12, 4 * 40)  # each chunk's owner gets it from two, then sends it to two


@pytest.mark.parametrize("setting", [{"RING": 0}, {"RING": 2}, {"ALL2ALL": 2}], ids=["naive", "ring", "all2all"])
def test_fuzz_all_reduce_random_shapes_on_two_to_four_devices(setting):
    rng = np.random.default_rng(8)
    for _ in range(3):
        count = int(rng.integers(2, 5))
        devices = tuple(f"CPU:{i}" for i in range(count))
        shape = (count * int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(1, 5)))
        a = rng.uniform(-1, 1, shape).astype(np.float32)
        with Context(**setting):
            total = Tensor(a).shard(devices, 0).sum(0).realize()
        assert total.shard_axis is None and len(_shards(total)) == count
        np.testing.assert_allclose(total.numpy(), a.sum(0), rtol=1e-5, atol=1e-6, err_msg=f"{devices} {shape}")


def test_matmul_with_sharded_batch_and_with_sharded_contraction():
    a, w = _data(8, 6, seed=8), _data(6, 4, seed=9)
    batch = Tensor(a).shard(TWO, 0) @ Tensor(w).shard(TWO)
    assert batch.shard_axis == 0
    np.testing.assert_allclose(batch.numpy(), a @ w, rtol=1e-5, atol=1e-5)
    contracted = Tensor(a).shard(TWO, 1) @ Tensor(w).shard(TWO, 0)  # partial products all-reduced
    assert contracted.shard_axis is None
    np.testing.assert_allclose(contracted.numpy(), a @ w, rtol=1e-5, atol=1e-5)


def test_movement_ops_follow_the_shard_axis_or_gather():
    a = _data(4, 6, seed=10)
    t = Tensor(a).shard(TWO, 0)
    cases = [
        (t.T, a.T, 1),
        (t.reshape(2, 2, 6), a.reshape(2, 2, 6), 0),
        (t.reshape(4, 2, 3), a.reshape(4, 2, 3), 0),
        (t.reshape(1, 4, 6), a.reshape(1, 4, 6), 1),
        (t.reshape(24), a.reshape(24), 0),
        (t[:, 1:4], a[:, 1:4], 0),
        (t.pad(((0, 0), (1, 2))), np.pad(a, ((0, 0), (1, 2))), 0),
        (t.flip(1), a[:, ::-1], 0),
        (t.reshape(4, 1, 6).expand(4, 3, 6), np.broadcast_to(a.reshape(4, 1, 6), (4, 3, 6)), 0),
        (t[1:3], a[1:3], None),  # cuts across the shards: gathered
        (t.flip(0), a[::-1], None),
        (t.pad(((1, 0), (0, 0))), np.pad(a, ((1, 0), (0, 0))), None),
        (t.reshape(3, 8), a.reshape(3, 8), None),
    ]
    for got, want, axis in cases:
        np.testing.assert_array_equal(got.numpy(), want)
        assert got.shard_axis == axis, (want.shape, got.shard_axis)


def test_to_gathers_the_shards_on_one_device():
    a = _data(6, 4, seed=11)
    for axis in (0, 1, None):
        gathered = Tensor(a).shard(TWO, axis).to("CPU:1")
        assert gathered.device == "CPU:1"
        np.testing.assert_array_equal(gathered.realize().numpy(), a)
    flags = Tensor(a > 0).shard(TWO, 0).to("CPU")  # bools are joined with OR, not ADD
    np.testing.assert_array_equal(flags.numpy(), a > 0)


def test_assign_into_a_sharded_tensor_realized_or_not():
    out = Tensor.zeros(4).shard(TWO, 0).contiguous().realize()
    out.assign(Tensor.ones(4).shard(TWO, 0)).realize()
    assert out.tolist() == [1, 1, 1, 1] and out.shard_axis == 0
    lazy = Tensor.zeros(4).shard(TWO, 0)  # no storage yet: the assign makes one shard per device
    lazy.assign(Tensor([1.0, 2.0, 3.0, 4.0]).shard(TWO, 0)).realize()
    assert lazy.tolist() == [1, 2, 3, 4] and lazy.shard_shape == (2,)
    replicated_value = Tensor.zeros(4).shard(TWO, 0).contiguous().realize()
    replicated_value.assign(Tensor([5.0, 6.0, 7.0, 8.0]).shard(TWO)).realize()  # a whole copy is split to fit
    assert replicated_value.tolist() == [5, 6, 7, 8]


def test_clone_of_a_sharded_tensor_is_split_alike_in_its_own_storage():
    a = _data(4, 6, seed=42)
    for axis in (0, 1, None):
        source = Tensor(a).shard(TWO, axis).contiguous().realize()
        copy = source.clone()
        assert copy.shard_axis == axis
        copy.assign(copy + 1).realize()
        np.testing.assert_array_equal(source.numpy(), a)
        np.testing.assert_array_equal(copy.numpy(), a + 1)


def test_ops_built_from_primitives_work_on_shards():
    a = _data(4, 6, seed=43)
    t = Tensor(a).shard(TWO, 0)
    np.testing.assert_array_equal(Tensor.stack(t, t).numpy(), np.stack([a, a]))
    np.testing.assert_array_equal(t.cat(t, dim=1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(t.cat(t, dim=0).numpy(), np.concatenate([a, a], 0))
    np.testing.assert_allclose(t.softmax(1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(t.argmax(0).numpy(), a.argmax(0))
    np.testing.assert_allclose(t.cumsum(0).numpy(), a.cumsum(0), rtol=1e-6)
    np.testing.assert_array_equal(t.sort(1)[0].numpy(), np.sort(a, 1))
    np.testing.assert_array_equal(t[Tensor([0, 3, 1]).shard(TWO)].numpy(), a[[0, 3, 1]])


def test_assign_into_a_column_of_a_sharded_tensor():
    out = Tensor.zeros(4, 4).shard(TWO, 0).contiguous().realize()
    buffers = [n for s in _shards(out) for n in s.toposort() if n.op is Ops.BUFFER]
    out[:, 2:3].assign(Tensor.ones(4, 1).shard(TWO, 0)).realize()
    assert out.tolist() == [[0, 0, 1, 0]] * 4
    assert [n for s in _shards(out) for n in s.toposort() if n.op is Ops.BUFFER] == buffers  # written in place
    across = Tensor.zeros(4, 4).shard(TWO, 1).contiguous().realize()  # the column cuts the shard axis
    across[:, 1:3].assign(Tensor.full((4, 2), 7.0).shard(TWO)).realize()
    across[2] = 5.0
    expected = np.zeros((4, 4))
    expected[:, 1:3], expected[2] = 7, 5
    np.testing.assert_array_equal(across.numpy(), expected)
    across += 1
    np.testing.assert_array_equal(across.numpy(), expected + 1)


def test_gradients_flow_through_shard_and_all_reduce():
    a, w = _data(4, 3, seed=12).astype(np.float64), _data(3, 2, seed=13).astype(np.float64)
    x = Tensor(a, requires_grad=True)
    weight = Tensor(w, requires_grad=True)
    loss = ((x.shard(TWO, 0) @ weight.shard(TWO)).relu() ** 2).sum()
    loss.backward()
    h = a @ w
    upstream = 2 * np.maximum(h, 0)
    np.testing.assert_allclose(loss.numpy(), (np.maximum(h, 0) ** 2).sum(), rtol=1e-10)
    np.testing.assert_allclose(weight.grad.numpy(), a.T @ upstream, rtol=1e-10)
    np.testing.assert_allclose(x.grad.numpy(), upstream @ w.T, rtol=1e-10)
    assert x.grad.device == x.device and weight.grad.device == weight.device  # each gradient where its tensor is


def test_gradient_through_a_gather_goes_back_to_the_shards():
    a = _data(4, 3, seed=44).astype(np.float64)
    x = Tensor(a, requires_grad=True)
    sharded = x.shard(TWO, 0)
    ((sharded.to("CPU:1") * Tensor(a, device="CPU:1")).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), a, rtol=1e-12)


def test_tinyjit_over_a_sharded_step_captures_and_replays():
    w = Tensor(_data(4, 3, seed=14)).shard(TWO).realize()
    calls = []

    @TinyJit
    def step(x: Tensor) -> Tensor:
        calls.append(1)
        return (x @ w).relu().sum(0) * 2

    for i in range(4):
        a = _data(8, 4, seed=20 + i)
        out = step(Tensor(a).shard(TWO, 0))
        assert out.device == ("CPU", "CPU:1")
        np.testing.assert_allclose(out.numpy(), np.maximum(a @ w.numpy(), 0).sum(0) * 2, rtol=1e-5, atol=1e-6)
    assert len(calls) == 2 and step.graph is not None  # a plain call, the capture, then replays


def test_a_sharded_tensor_pickles_sharded_into_its_own_storage():
    t = Tensor([1.0, 2.0, 3.0, 4.0]).shard(TWO, 0).realize()
    first, second = pickle.loads(pickle.dumps(t)), pickle.loads(pickle.dumps(t))
    assert first.device == t.device and first.shard_axis == 0
    first[0] = 9.0
    first.realize()
    assert (first.tolist(), second.tolist(), t.tolist()) == ([9, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4])


def test_misuse_raises_a_clear_error():
    with pytest.raises(ArgumentError, match="size 3 does not divide by 2"):
        Tensor.zeros(3, 4).shard(TWO, 0)
    with pytest.raises(ArgumentError, match="distinct devices"):
        Tensor.zeros(4).shard(("CPU:0", "CPU"), 0)
    with pytest.raises(ArgumentError, match="tuple of device names"):
        Tensor.zeros(4).shard("CPU:1", 0)
    with pytest.raises(ArgumentError, match="already sharded"):
        Tensor.zeros(4).shard(TWO, 0).shard(THREE)
    with pytest.raises(ValueError, match="different devices"):
        Tensor.zeros(4).shard(TWO, 0) + Tensor.zeros(4)
    with pytest.raises(ValueError, match="assign device mismatch"):
        Tensor.zeros(4).shard(TWO, 0).contiguous().realize().assign(Tensor.ones(4))
    with pytest.raises(MultiAxisError, match="multi axis mismatch"):
        target = Tensor.zeros(4, 4).shard(TWO, 0).contiguous().realize()
        target.assign(Tensor.ones(4, 4).shard(TWO, 1)).realize()
    with pytest.raises(ValueError, match="different devices"):
        Tensor.zeros(6).shard(TWO, 0) + Tensor.zeros(6).shard(("CPU:1", "CPU:2"), 0)


def _example():
    path = Path(__file__).resolve().parents[2] / "examples" / "train_digits.py"
    spec = importlib.util.spec_from_file_location("train_digits", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.usefixtures("cpu_default")  # one CPU against CPU:0+CPU:1; a CNN step on the simulated GPU takes minutes
def test_data_parallel_digits_training_on_two_devices_gives_the_weights_of_one():
    example = _example()
    data = example.load_digits_split(0)
    trained = []
    for devices in (None, TWO):
        model, optimizer = example.make_model(0, 3e-3, devices)
        losses = []
        with Tensor.train():
            for step in range(3):
                batch = slice(step * 32, (step + 1) * 32)
                loss = example.train_step(model, optimizer, data.train_images[batch], data.train_labels[batch], devices)
                losses.append(loss.item())
        parameters = example.nn.get_parameters(model)
        assert all(p.device == (devices and ("CPU", "CPU:1") or Device.DEFAULT) for p in parameters)
        trained.append((losses, [p.numpy() for p in parameters]))
    (one_losses, one), (two_losses, two) = trained
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    for single, parallel in zip(one, two, strict=True):
        np.testing.assert_allclose(parallel, single, rtol=1e-4, atol=1e-6)
    assert max(float(np.abs(single - start).max()) for single, start in zip(one, _initial(example), strict=True)) > 1e-3


def _initial(example):
    model, _ = example.make_model(0, 3e-3)
    return [p.numpy() for p in example.nn.get_parameters(model)]


@pytest.mark.slow
@pytest.mark.usefixtures("cpu_default")  # one CPU against CPU:0+CPU:1; a CNN step on the simulated GPU takes minutes
def test_a_jitted_data_parallel_step_trains_as_the_plain_one_device_step():
    example = _example()
    data = example.load_digits_split(0)
    batches = [slice(step * 16, (step + 1) * 16) for step in range(4)]
    model, optimizer = example.make_model(0, 3e-3)
    with Tensor.train():
        plain = [
            example.train_step(model, optimizer, data.train_images[b], data.train_labels[b]).item() for b in batches
        ]
    weights = [p.numpy() for p in example.nn.get_parameters(model)]

    sharded_model, sharded_optimizer = example.make_model(0, 3e-3, TWO)

    step = TinyJit(lambda x, y: example.tensor_step(sharded_model, sharded_optimizer, x, y))

    jitted = []
    with Tensor.train():
        for b in batches:
            x, y = Tensor(data.train_images[b]).shard(TWO, 0), Tensor(data.train_labels[b]).shard(TWO, 0)
            jitted.append(step(x, y).item())
    assert step.graph is not None  # the last two steps were replays
    np.testing.assert_allclose(jitted, plain, rtol=1e-5)
    for single, parallel in zip(weights, [p.numpy() for p in example.nn.get_parameters(sharded_model)], strict=True):
        np.testing.assert_allclose(parallel, single, rtol=1e-4, atol=1e-6)


def test_the_example_takes_its_devices_from_the_command_line(monkeypatch):
    example = _example()
    seen = {}
    monkeypatch.setattr(example, "train", lambda *args: seen.setdefault("args", args) and example.Result(1.0, 0.0, []))
    monkeypatch.setattr(sys, "argv", ["train_digits.py", "--epochs", "1", "--devices", "CPU:0,CPU:1"])
    example.main()
    assert seen["args"][0] == 1 and seen["args"][-1] == ("CPU:0", "CPU:1")


def test_the_same_kernel_on_three_devices_compiles_once():
    from tg.hcq.engine.programs import program_cache_stats

    scale = float(np.random.default_rng().integers(1000, 10**6))  # a kernel no other test compiled
    a = _data(6, 4)
    t = Tensor(a).shard(THREE, axis=0).contiguous().realize()
    compiles, misses = program_cache_stats.compiles, program_cache_stats.misses
    result = (t * scale).realize()
    assert program_cache_stats.misses - misses == 3  # one program per device ...
    assert program_cache_stats.compiles - compiles == 1  # ... compiled once, the binary loaded on the others
    np.testing.assert_allclose(result.numpy(), a * scale, rtol=1e-6)
