"""Tensor.custom_kernel: kernels written in tg's IR, run on tensors (issue 32 item 1; spec tensor.md §1.10)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tg.codegen import Ops
from tg.codegen.schedule.graph import ShapeError
from tg.codegen.uop.args import AxisType
from tg.codegen.uop.spec import SpecError
from tg.hcq import Device
from tg.tensor import Context, GlobalCounters, KernelInfo, Tensor, TinyJit, UOp, dtypes
from tg.tensor.custom_kernel import CustomKernelError, outputs_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_attention.py"


def affine(size: int, scale: float = 2.0, shift: float = 1.0):
    """out[i] = x[i] * scale + shift, with `.end(i)` as the specification's examples write it."""

    def fxn(out: UOp, x: UOp) -> UOp:
        i = UOp.range(size, 0)
        return out.index(i).store(x.index(i).load() * scale + shift).end(i).sink(arg=KernelInfo(name="affine"))

    return fxn


def row_sums(rows: int, cols: int):
    def fxn(out: UOp, x: UOp) -> UOp:
        i, j = UOp.range(rows, 0), UOp.range(cols, 1, AxisType.REDUCE)
        return out.index(i).store(x.index(i * cols + j).load().reduce(j)).sink(arg=KernelInfo(name="row_sums"))

    return fxn


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_elementwise_kernel_matches_numpy_in_both_forms(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    static = Tensor.custom_kernel(Tensor.empty(3, 4, device=device), Tensor(x, device=device), fxn=affine(12))
    method = Tensor.empty(3, 4, device=device).custom_kernel(Tensor(x, device=device), fxn=affine(12, 3.0, -1.0))
    assert static[0].device == method[0].device == device
    assert len(static) == 2 and static[0].shape == (3, 4)
    np.testing.assert_array_equal(static[0].numpy(), x * 2 + 1)
    np.testing.assert_array_equal(method[0].numpy(), x * 3 - 1)
    np.testing.assert_array_equal(static[1].numpy(), x)  # the input after a kernel that only reads it


def test_reduction_kernel_and_lazy_inputs():
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    lazy = Tensor(x) * 2 + 1  # realized into a buffer of its own before the kernel reads it
    (out, _) = Tensor.custom_kernel(Tensor.empty(5), lazy, fxn=row_sums(5, 7))
    np.testing.assert_allclose(out.numpy(), (x * 2 + 1).sum(1), rtol=1e-5, atol=1e-5)
    # the output is an ordinary tensor to further ops, which fuse after the kernel ran
    np.testing.assert_allclose((out.reshape(5, 1) + lazy).numpy(), (x * 2 + 1).sum(1, keepdims=True) + x * 2 + 1,
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_nothing_runs_until_realize_and_a_realized_input_is_written_in_place():
    target = Tensor.zeros(4).contiguous().realize()
    before = GlobalCounters.kernel_count
    (out, _) = target.custom_kernel(Tensor([1.0, 2.0, 3.0, 4.0]), fxn=affine(4, 1.0, 0.0))
    assert GlobalCounters.kernel_count == before  # lazy: building the call launches nothing
    assert out.uop.op is Ops.AFTER and out.uop.src[1].op is Ops.CALL
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert GlobalCounters.kernel_count > before
    assert target.tolist() == [1.0, 2.0, 3.0, 4.0]  # "the inputs after the kernel": its storage was written


def test_a_kernel_with_several_stores_writes_several_outputs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    def fxn(total: UOp, doubled: UOp, src: UOp) -> UOp:
        i, j = UOp.range(2, 0), UOp.range(3, 1, AxisType.REDUCE)
        k = UOp.range(6, 2)
        return UOp.sink(
            total.index(i).store(src.index(i * 3 + j).load().reduce(j)),
            doubled.index(k).store(src.index(k).load() * 2),
            arg=KernelInfo(name="two_stores"),
        )

    total, doubled, _ = Tensor.custom_kernel(Tensor.empty(2), Tensor.empty(2, 3), Tensor(x), fxn=fxn)
    np.testing.assert_array_equal(total.numpy(), x.sum(1))
    np.testing.assert_array_equal(doubled.numpy(), x * 2)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_grad_fxn_gives_the_gradient_checked_by_finite_differences(device):
    def square(out: UOp, x: UOp) -> UOp:
        i = UOp.range(3, 0)
        value = x.index(i).load()
        return out.index(i).store(value * value).sink(arg=KernelInfo(name="square"))

    def grad_fxn(grad: UOp, call: UOp):
        x = Tensor(call.src[2])
        return (None, (Tensor(grad) * x * 2).uop)

    data = np.array([0.5, -1.25, 2.0])
    x = Tensor(data, dtype=dtypes.float64, device=device, requires_grad=True)
    out = Tensor.empty(3, dtype=dtypes.float64, device=device)
    (y, _) = Tensor.custom_kernel(out, x, fxn=square, grad_fxn=grad_fxn)
    weights = np.array([1.0, 2.0, -3.0])
    (y * Tensor(weights, dtype=dtypes.float64, device=device)).sum().backward()
    eps = 1e-6
    numeric = [((data + eps * e) ** 2 @ weights - (data - eps * e) ** 2 @ weights) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-7)


def test_backward_after_the_kernel_ran():
    """The output was realized first: its buffer is the one the kernel wrote, which the kernel's own graph reads
    (as its contents before the kernel); autograd finds the graph again without going round in a circle."""

    def grad_fxn(grad: UOp, call: UOp):
        return (None, (Tensor(grad) * 2).uop)

    x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    (y, _) = Tensor.custom_kernel(Tensor.empty(4), x, fxn=affine(4), grad_fxn=grad_fxn)
    assert y.tolist() == [3.0, 5.0, 7.0, 9.0]
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0, 2.0]


def test_without_grad_fxn_backward_raises_a_clear_error():
    x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    (y, _) = Tensor.custom_kernel(Tensor.empty(4), x, fxn=affine(4))
    with pytest.raises(CustomKernelError, match="grad_fxn"):
        y.sum().backward()


def test_grad_fxn_answers_are_checked():
    x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    (y, _) = Tensor.custom_kernel(Tensor.empty(4), x, fxn=affine(4), grad_fxn=lambda g, call: (g,))
    with pytest.raises(CustomKernelError, match="1 gradients for 2 inputs"):
        y.sum().backward()
    x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    (y, _) = Tensor.custom_kernel(Tensor.empty(4), x, fxn=affine(4), grad_fxn=lambda g, c: (None, Tensor.ones(2).uop))
    with pytest.raises(ShapeError, match="shape"):
        y.sum().backward()


def test_outputs_of_a_call_are_the_kernels_outputs():
    (out, x) = Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0]), fxn=affine(4))
    assert outputs_of(out.uop.src[1]) == [out.uop, x.uop]
    with pytest.raises(CustomKernelError, match="CALL"):
        outputs_of(out.uop)


@pytest.mark.parametrize(
    ("fxn", "message"),
    [
        (lambda out, x: out, "must return a kernel AST"),
        (lambda out, x: 3, "must return a kernel AST"),
        (lambda out, x: out.index(UOp.const(0)).store(UOp.param(2, dtypes.float, 4).index(UOp.const(0)).load()).sink(),
         "slot 2, but got 2 tensors"),
        (lambda out, x: out.index(UOp.const(0)).store(UOp.param(1, dtypes.int32, 4).index(UOp.const(0)).load().cast(
            dtypes.float)).sink(), "slot 1 is"),
        (lambda out, x: UOp.sink(x.index(UOp.const(0)).load()), "stores nothing"),
    ],
)  # fmt: skip
def test_a_bad_kernel_is_a_clear_error(fxn, message):
    with pytest.raises(CustomKernelError, match=message):
        Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0]), fxn=fxn)


def test_a_param_made_by_hand_in_the_right_slot_and_type_is_the_placeholder():
    def fxn(out: UOp, x: UOp) -> UOp:
        mine = UOp.param(1, dtypes.float, 4)  # not the placeholder object (no name), the same slot and pointer type
        i = UOp.range(4, 0)
        return out.index(i).store(mine.index(i).load() * 3).sink(arg=KernelInfo(name="by_hand"))

    (out, _) = Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0]), fxn=fxn)
    assert out.tolist() == [3.0, 6.0, 9.0, 12.0]


def test_misuse_of_the_arguments_is_a_clear_error():
    with pytest.raises(CustomKernelError, match="at least one tensor"):
        Tensor.custom_kernel(fxn=affine(4))
    with pytest.raises(CustomKernelError, match="takes Tensors"):
        Tensor.custom_kernel(Tensor.empty(4), [1.0, 2.0], fxn=affine(4))
    with pytest.raises(CustomKernelError, match="one device"):
        Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0], device="CPU:1"), fxn=affine(4))


def test_the_kernel_spec_checks_the_ast():
    def cast_store(out: UOp, x: UOp) -> UOp:  # a float buffer stored an int: KERNEL_SPEC rejects the STORE
        i = UOp.range(4, 0)
        return out.index(i).store(x.index(i).load().cast(dtypes.int32)).sink()

    with pytest.raises(SpecError, match="STORE"):
        Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0]), fxn=cast_store)


def test_strict_spec_accepts_a_tensor_graph_with_custom_kernels():
    with Context(SPEC=2):
        (out, _) = Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0]), fxn=affine(4))
        assert (out + 1).tolist() == [4.0, 6.0, 8.0, 10.0]


def test_spec_checks_the_tensor_graph_and_the_kernel_under_a_call():
    from tg.codegen.schedule.calls import live_bodies

    x = Tensor([1.0, 2.0, 3.0, 4.0])
    i = UOp.range(4, 0)
    out_param, x_param = UOp.param(0, dtypes.float, 4), UOp.param(1, dtypes.float, 4)
    # built by hand, past custom_kernel's own checks: a STORE of an int into a float buffer
    bad = out_param.index(i).store(x_param.index(i).load().cast(dtypes.int32)).sink(arg=KernelInfo(name="bad"))
    call = UOp(Ops.CALL, dtypes.void, (bad, Tensor.empty(4).uop, x.uop))
    live_bodies.add(bad)
    after = Tensor(UOp(Ops.AFTER, dtypes.float, (call.src[1], call)))
    with Context(SPEC=1), pytest.raises(SpecError, match="STORE"):
        after.realize()


def test_tinyjit_replays_a_custom_kernel_on_new_inputs():
    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (Tensor.empty(4).custom_kernel(x, fxn=affine(4))[0] + 1).realize()

    for n in range(4):
        assert step(Tensor([float(n)] * 4)).tolist() == [2.0 * n + 2] * 4


def _example():
    spec = importlib.util.spec_from_file_location("custom_attention", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.usefixtures("cpu_default")
@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_example_matches_sdpa_and_its_gradient(causal):
    """On the CPU: the example's kernels have stores over different loop nests, so on a GPU none of their loops
    becomes a grid axis and each runs as one thread; the simulated Navi31 would emulate about 10^8 instructions in
    one wave (84 s for the forward alone) and its per-wave cap refuses that long before (`exceeded 1000000
    instructions in one wave`)."""
    out_error, grad_error = _example().compare(causal)
    assert out_error < 1e-5
    assert grad_error < 1e-5


# ------------------------------------------------------------------------------------------------ shaped placeholders


def test_placeholders_have_their_tensors_shape_and_flatten_to_the_param():
    seen = {}

    def fxn(out: UOp, x: UOp) -> UOp:
        seen.update(shape=x.shape, numel=x.numel(), base=x.base, flat=x.flatten(), out_shape=out.shape)
        i = UOp.range(12, 0)
        return out.flatten()[i].store(x.flatten()[i] * 2).sink(arg=KernelInfo(name="flat"))

    (out, _) = Tensor.custom_kernel(Tensor.empty(2, 6), Tensor(np.ones((3, 4), np.float32)), fxn=fxn)
    assert seen["shape"] == (3, 4) and seen["numel"] == 12 and seen["out_shape"] == (2, 6)
    assert seen["base"].op is Ops.PARAM and seen["flat"] is seen["base"] and seen["base"].arg.slot == 1
    assert out.tolist() == [[2.0] * 6] * 2


def test_a_placeholder_takes_one_index_per_axis_and_addresses_are_loaded_where_used_as_values():
    def transpose_plus_one(out: UOp, x: UOp) -> UOp:  # the specification's `C[i].store(A[i] + 1)` form, in 2-D
        rows, cols = x.shape
        i, j = UOp.range(rows, 0), UOp.range(cols, 1)
        return out[j, i].store(x[i, j] + 1).sink(arg=KernelInfo(name="transpose"))

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (out, _) = Tensor.custom_kernel(Tensor.empty(4, 3), Tensor(x), fxn=transpose_plus_one)
    np.testing.assert_array_equal(out.numpy(), x.T + 1)


def test_a_placeholder_indexed_with_constants_and_a_gate():
    def corner(out: UOp, x: UOp) -> UOp:
        i = UOp.range(2, 0)
        return out[i].store(x.index(UOp.const(1), i, i < 1).load(UOp.const(-1.0, dtypes.float))).sink()

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out, _) = Tensor.custom_kernel(Tensor.empty(2), Tensor(x), fxn=corner)
    assert out.tolist() == [x[1, 0], -1.0]  # x[1, i] where i < 1, else the alternative


def test_the_wrong_number_of_indices_is_a_clear_error_and_a_uop_is_not_iterable():
    def three_indices(out: UOp, x: UOp) -> UOp:
        i = UOp.range(3, 0)
        return out[i].store(x[i, i, i]).sink()

    with pytest.raises(IndexError, match="shape \\(3, 4\\) takes 1 \\(flat\\) or 2 indices, got 3"):
        Tensor.custom_kernel(Tensor.empty(3), Tensor(np.ones((3, 4), np.float32)), fxn=three_indices)
    with pytest.raises(TypeError, match="not iterable"):
        list(UOp.param(0, dtypes.float, 4))
    with pytest.raises(TypeError, match="only a buffer"):
        _ = UOp.const(1.0, dtypes.float)[0]


# ---------------------------------------------------------------------------------------------------- sharded tensors

DEVICES = ("CPU:0", "CPU:1")


def shard_row_sums(seen: list):
    def fxn(out: UOp, x: UOp) -> UOp:
        seen.append((out.shape, x.shape))
        rows, cols = x.shape
        i, j = UOp.range(rows, 0), UOp.range(cols, 1, AxisType.REDUCE)
        return out[i].store(x[i, j].reduce(j)).sink(arg=KernelInfo(name="shard_row_sums"))

    return fxn


def test_a_custom_kernel_on_sharded_tensors_sees_shard_shapes_and_runs_once_per_device():
    x = np.arange(48, dtype=np.float32).reshape(8, 6)
    shards = Tensor(x).shard(DEVICES, axis=0).contiguous().realize()  # (each shard a whole buffer of its own)
    out = Tensor.zeros(8).shard(DEVICES, axis=0).realize()
    seen: list = []
    (sums, _) = Tensor.custom_kernel(out, shards, fxn=shard_row_sums(seen))
    assert seen == [((4,), (4, 6))]  # fxn ran once, on one shard's shapes
    assert isinstance(sums.device, tuple) and len(sums.device) == 2 and sums.shard_axis == 0
    before = GlobalCounters.kernel_count
    sums.realize()
    assert GlobalCounters.kernel_count - before == 2  # the kernel, once on each device
    np.testing.assert_array_equal(sums.numpy(), x.sum(1))
    np.testing.assert_array_equal((sums * 2 + 1).numpy(), x.sum(1) * 2 + 1)  # a sharded tensor to further ops


def test_a_sharded_custom_kernel_reads_a_whole_copy_on_each_device():
    def matvec(out: UOp, x: UOp, w: UOp) -> UOp:  # rows split across devices, w whole on each
        rows, cols = x.shape
        i, j = UOp.range(rows, 0), UOp.range(cols, 1, AxisType.REDUCE)
        return out[i].store((x[i, j] * w[j]).reduce(j)).sink(arg=KernelInfo(name="shard_matvec"))

    x, w = np.arange(48, dtype=np.float32).reshape(8, 6), np.arange(6, dtype=np.float32)
    out = Tensor.zeros(8).shard(DEVICES, axis=0)
    (result, _, _) = Tensor.custom_kernel(out, Tensor(x).shard(DEVICES, axis=0), Tensor(w).shard(DEVICES), fxn=matvec)
    np.testing.assert_array_equal(result.numpy(), x @ w)


def test_a_sharded_custom_kernel_gets_its_gradient_from_grad_fxn():
    def grad_fxn(grad: UOp, call: UOp):  # d(row sum)/dx: each row's gradient spread over its columns
        return None, Tensor(grad).reshape(8, 1).expand(8, 6).uop

    x = Tensor(np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)).shard(DEVICES, axis=0)
    x.requires_grad = True
    (sums, _) = Tensor.custom_kernel(Tensor.zeros(8).shard(DEVICES, axis=0), x, fxn=shard_row_sums([]),
                                     grad_fxn=grad_fxn)  # fmt: skip
    weights = np.arange(8, dtype=np.float32)
    (sums * Tensor(weights).shard(DEVICES, axis=0)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat(weights[:, None], 6, axis=1))


def test_a_custom_kernel_mixing_sharded_and_single_device_tensors_is_a_clear_error():
    x = Tensor(np.ones((8, 6), np.float32)).shard(DEVICES, axis=0)
    with pytest.raises(CustomKernelError, match="one device, or all sharded across the same devices"):
        Tensor.custom_kernel(Tensor.zeros(8), x, fxn=shard_row_sums([]))


def test_tinyjit_replays_a_sharded_custom_kernel():
    @TinyJit
    def step(x: Tensor) -> Tensor:
        out = Tensor.zeros(8).shard(DEVICES, axis=0)
        return (Tensor.custom_kernel(out, x, fxn=shard_row_sums([]))[0] + 1).realize()

    for n in range(4):
        data = np.full((8, 6), float(n), np.float32)
        np.testing.assert_array_equal(step(Tensor(data).shard(DEVICES, axis=0)).numpy(), data.sum(1) + 1)


def test_backward_after_a_kernel_ran_once_any_tensor_was_sharded():
    """Regression: once a MULTI existed, realizing a kernel's output did not remember the graph it came from (the
    buffer the kernel wrote is in that graph), and backward found no gradient."""
    Tensor(np.ones((2, 4), np.float32)).shard(DEVICES, axis=1)
    x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    (y, _) = Tensor.custom_kernel(Tensor.empty(4), x, fxn=affine(4), grad_fxn=lambda g, c: (None, (Tensor(g) * 2).uop))
    assert y.tolist() == [3.0, 5.0, 7.0, 9.0]
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0, 2.0]


# ---------------------------------------------------------------------------------------------------- programs


def test_a_precompiled_program_returned_by_fxn_runs_as_it_is(monkeypatch):
    import tg.hcq.engine.programs as programs

    written = affine(4, 3.0, 0.5)(UOp.param(0, dtypes.float, 4), UOp.param(1, dtypes.float, 4))
    program = programs.to_program(written, Device.DEFAULT)  # for the device the tensors below live on
    assert program.op is Ops.PROGRAM and [s.op for s in program.src] == [Ops.SINK, Ops.SOURCE, Ops.BINARY]
    assert program.arg.name in program.src[1].arg and program.src[2].arg  # the source names it; a binary is kept

    def no_compiling(*args, **kwargs):
        raise AssertionError("a PROGRAM was compiled again")

    monkeypatch.setattr(programs, "compile_program", no_compiling)
    (out, _) = Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0]), fxn=lambda out, x: program)
    assert out.uop.src[1].src[0] is program  # the call holds the program itself
    assert out.tolist() == [3.5, 6.5, 9.5, 12.5]


def test_a_program_for_other_tensors_is_a_clear_error():
    from tg.hcq.engine.programs import to_program

    program = to_program(affine(4)(UOp.param(0, dtypes.float, 4), UOp.param(1, dtypes.float, 4)), "CPU")
    with pytest.raises(CustomKernelError, match="parameter slot 1 is"):
        Tensor.custom_kernel(Tensor.empty(4), Tensor([1, 2, 3, 4], dtype=dtypes.int32), fxn=lambda out, x: program)


def test_a_sharded_kernel_compiles_once_for_devices_of_one_kind():
    from tg.hcq.engine.programs import program_cache_stats

    scale = float(np.random.default_rng().integers(1000, 10**6))  # a kernel no other test compiled
    x = Tensor(np.ones((8,), np.float32)).shard(DEVICES, axis=0).contiguous().realize()
    out = Tensor.zeros(8).shard(DEVICES, axis=0).realize()
    compiles, misses = program_cache_stats.compiles, program_cache_stats.misses
    (result, _) = Tensor.custom_kernel(out, x, fxn=affine(4, scale, 0.0))
    result.realize()
    assert program_cache_stats.misses - misses == 2  # a program for each device ...
    assert program_cache_stats.compiles - compiles == 1  # ... compiled once: the second loads the first's binary
    assert result.tolist() == [scale] * 8


def test_a_view_write_of_a_kernels_output_runs_with_the_kernel_first():
    """A KV cache's update: a custom kernel's lazy output assigned into a view of a realized buffer, realized with
    another tensor (the queries), then the buffer read. The pending write used to be run through the engine with
    the kernel's CALL still in it ("Ops.AFTER must be realized"), and run again by the next realize of the buffer."""
    cache = Tensor.zeros(2, 4).contiguous().realize()
    (out, _) = Tensor.empty(4).custom_kernel(Tensor([1.0, 2.0, 3.0, 4.0]), fxn=affine(4))
    row = cache[1].assign(out)
    queries = out * 10
    Tensor.realize(row, queries)
    np.testing.assert_array_equal(queries.numpy(), [30.0, 50.0, 70.0, 90.0])
    before = GlobalCounters.kernel_count
    doubled = (cache * 2).realize()  # the write ran above: this realize runs one kernel, not the write again
    assert GlobalCounters.kernel_count == before + 1
    np.testing.assert_array_equal(doubled.numpy(), [[0.0] * 4, [6.0, 10.0, 14.0, 18.0]])
    np.testing.assert_array_equal(cache.numpy(), [[0.0] * 4, [3.0, 5.0, 7.0, 9.0]])


def test_a_pending_view_write_runs_before_a_kernel_that_reads_its_buffer():
    """A custom kernel reading a buffer that a not-yet-run view write updates sees the write (it used to run the
    kernel first, on the old contents)."""
    storage = Tensor.zeros(4).contiguous().realize()
    storage[1:3].assign(Tensor([5.0, 6.0]))
    (out, _) = Tensor.empty(4).custom_kernel(storage, fxn=affine(4, 1.0, 0.0))
    np.testing.assert_array_equal(out.numpy(), [0.0, 5.0, 6.0, 0.0])


def test_contiguous_of_a_kernels_output_is_its_buffer():
    """A custom kernel's output is a whole buffer: made contiguous (as a model does to a projection it slices), it
    is that buffer, with no copy kernel after the custom kernel."""
    (out, _) = Tensor.empty(2, 2).custom_kernel(Tensor([1.0, 2.0, 3.0, 4.0]), fxn=affine(4))
    GlobalCounters.reset()
    made = out.reshape(4).contiguous().realize()
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_array_equal(made.numpy(), [3.0, 5.0, 7.0, 9.0])


def test_a_computed_input_that_the_kernel_only_reads_is_computed_once():
    """A computed input (here one that must have a buffer: a CONTIGUOUS) is realized for the kernel; the rest of
    the graph reads it from that buffer instead of computing it again (a model's residual stream read by a custom
    matvec and by the next residual add)."""
    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    tripled = (x * 3).contiguous()
    (out, _) = Tensor.empty(4).custom_kernel(tripled, fxn=affine(4))
    total = out + tripled
    GlobalCounters.reset()
    total.realize()
    assert GlobalCounters.kernel_count == 3  # tripled, the custom kernel, the add
    np.testing.assert_array_equal(total.numpy(), np.arange(4) * 3 * 2 + 1 + np.arange(4) * 3)


def test_a_computed_input_that_the_kernel_writes_is_read_as_it_was_before_the_kernel():
    def double_in_place(out: UOp, x: UOp) -> UOp:
        i = UOp.range(4, 0)
        value = x.index(i).load()
        return UOp.sink(out.index(i).store(value), x.index(i).store(value * 2), arg=KernelInfo(name="in_place"))

    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    tripled = (x * 3).contiguous()
    (out, after) = Tensor.empty(4).custom_kernel(tripled, fxn=double_in_place)
    before = tripled + 0
    Tensor.realize(out, after, before)
    np.testing.assert_array_equal(out.numpy(), np.arange(4) * 3)
    np.testing.assert_array_equal(after.numpy(), np.arange(4) * 6)
    np.testing.assert_array_equal(before.numpy(), np.arange(4) * 3)  # the value the kernel read, not its write
