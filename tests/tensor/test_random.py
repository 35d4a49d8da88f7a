"""The counter-based generator: Threefry known-answer vectors, statistics, reproducibility, realize-order and
device independence of rand, randn, randint, uniform, normal, randperm, multinomial and dropout."""

import numpy as np
import pytest

from tg.codegen import dtypes
from tg.tensor import Tensor
from tg.tensor.threefry import Key, threefry2x32

from .devices import DEVICES

# Random123's known-answer vectors for threefry2x32_20: (counter, key) -> output
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vector", KNOWN_ANSWERS, ids=lambda v: hex(v[0][0]))
def test_threefry_matches_random123_known_answers(device, vector):
    counter, key, expected = vector
    low = Tensor([counter[0]], dtype=dtypes.uint32, device=device)
    high = Tensor([counter[1]], dtype=dtypes.uint32, device=device)
    x0, x1 = threefry2x32(Key(*key), low, high)
    assert (x0.item(), x1.item()) == expected


@pytest.mark.parametrize("device", DEVICES)
def test_rand_is_uniform_in_unit_interval(device):
    Tensor.manual_seed(3)
    values = Tensor.rand(4000, device=device).numpy()
    assert values.dtype == np.float32
    assert values.min() >= 0 and values.max() < 1
    assert abs(values.mean() - 0.5) < 0.02 and abs(values.var() - 1 / 12) < 0.01
    counts, _ = np.histogram(values, bins=10, range=(0, 1))
    assert counts.min() > 300  # 400 expected per bin


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float64])
def test_rand_other_float_dtypes_stay_below_one(dtype):
    Tensor.manual_seed(4)
    values = Tensor.rand(2000, dtype=dtype, device="CPU")
    assert values.dtype is dtype
    as_float = values.cast(dtypes.float32).numpy() if dtype is dtypes.bfloat16 else values.numpy()
    assert as_float.min() >= 0 and as_float.max() < 1 and abs(as_float.mean() - 0.5) < 0.03


@pytest.mark.parametrize("device", DEVICES)
def test_randn_is_standard_normal(device):
    Tensor.manual_seed(5)
    values = Tensor.randn(4000, device=device).numpy()
    assert np.isfinite(values).all()
    assert abs(values.mean()) < 0.05 and abs(values.var() - 1) < 0.08
    assert 0.6 < np.mean(np.abs(values) < 1) < 0.76  # 68.3% within one sigma


def test_normal_and_uniform_scale_and_shift():
    Tensor.manual_seed(6)
    normal = Tensor.normal(3000, mean=5.0, std=2.0, device="CPU").numpy()
    uniform = Tensor.uniform(3000, low=-2.0, high=4.0, device="CPU").numpy()
    assert abs(normal.mean() - 5) < 0.15 and abs(normal.std() - 2) < 0.15
    assert uniform.min() >= -2 and uniform.max() < 4 and abs(uniform.mean() - 1) < 0.15


@pytest.mark.parametrize("device", DEVICES)
def test_randint_covers_the_range_evenly(device):
    Tensor.manual_seed(7)
    values = Tensor.randint(3000, low=-3, high=4, device=device).numpy()
    assert values.dtype == np.int32
    counts = np.bincount(values + 3, minlength=7)
    assert len(counts) == 7 and counts.min() > 350  # 428 expected each


def test_same_seed_same_values_other_seed_other_values():
    Tensor.manual_seed(11)
    first = Tensor.rand(64, device="CPU").numpy()
    Tensor.manual_seed(11)
    again = Tensor.rand(64, device="CPU").numpy()
    Tensor.manual_seed(12)
    other = Tensor.rand(64, device="CPU").numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_successive_draws_differ():
    Tensor.manual_seed(13)
    a, b = Tensor.rand(64, device="CPU"), Tensor.rand(64, device="CPU")
    assert not np.array_equal(a.numpy(), b.numpy())


def test_values_do_not_depend_on_realize_order():
    Tensor.manual_seed(1)
    in_order = [Tensor.rand(4, device="CPU") for _ in range(4)]
    expected = [t.numpy() for t in in_order]
    Tensor.manual_seed(1)
    out_of_order = [Tensor.rand(4, device="CPU") for _ in range(4)]
    for i in (3, 1, 0, 2):
        np.testing.assert_array_equal(out_of_order[i].numpy(), expected[i])


def test_values_do_not_depend_on_the_device():
    Tensor.manual_seed(21)
    on_cpu = Tensor.rand(50, device="CPU").numpy()
    Tensor.manual_seed(21)
    on_python = Tensor.rand(50, device="PYTHON").numpy()
    np.testing.assert_array_equal(on_cpu, on_python)


def test_counters_carry_into_the_high_word():
    from tg.tensor import random

    Tensor.manual_seed(2)
    random.STATE.counter = (1 << 32) - 3
    crossing = Tensor.rand(6, device="CPU").numpy()
    Tensor.manual_seed(2)
    random.STATE.counter = 1 << 32
    after = Tensor.rand(3, device="CPU").numpy()
    np.testing.assert_array_equal(crossing[3:], after)


@pytest.mark.parametrize("device", DEVICES)
def test_randperm_is_a_permutation(device):
    Tensor.manual_seed(8)
    perm = Tensor.randperm(20, device=device).numpy()
    np.testing.assert_array_equal(np.sort(perm), np.arange(20))
    assert not np.array_equal(perm, np.arange(20))


def test_multinomial_with_replacement_follows_the_weights():
    Tensor.manual_seed(9)
    weights = np.array([1.0, 0.0, 3.0, 4.0], dtype=np.float32)
    samples = Tensor(weights, device="CPU").multinomial(4000, replacement=True).numpy()
    frequencies = np.bincount(samples, minlength=4) / 4000
    np.testing.assert_allclose(frequencies, weights / weights.sum(), atol=0.03)
    assert frequencies[1] == 0


def test_multinomial_without_replacement_draws_distinct_categories():
    Tensor.manual_seed(10)
    weights = Tensor([[1.0, 2.0, 0.0, 5.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0]], device="CPU")
    samples = weights.multinomial(3).numpy()
    assert samples.shape == (2, 3)
    for row in samples:
        assert len(set(row.tolist())) == 3
    assert 2 not in samples[0]
    with pytest.raises(ValueError):
        weights.multinomial(6)


def test_dropout_only_in_training_and_keeps_the_mean():
    x = Tensor.ones(4000, device="CPU")
    assert x.dropout(0.5) is x
    Tensor.training = True
    try:
        Tensor.manual_seed(14)
        dropped = x.dropout(0.25).numpy()
    finally:
        Tensor.training = False
    assert set(np.unique(dropped).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
    assert abs(np.mean(dropped == 0) - 0.25) < 0.03


def test_seed_and_counter_are_not_baked_into_the_kernel():
    """Regression: with the seed and counter as constants every draw compiled a new kernel (650 ms per rand)."""
    from tg.codegen import Ops

    Tensor.manual_seed(0x12345678)
    Tensor.rand(7, device="CPU")  # moves the counter to 7
    graph = Tensor.rand(5, device="CPU").uop.toposort()
    constants = {node.arg for node in graph if node.op is Ops.CONST}
    assert 0x12345678 not in constants and 7 not in constants


@pytest.mark.parametrize(
    "name, bound",
    [
        ("scaled_uniform", 1 / np.sqrt(64 * 48)),
        ("glorot_uniform", np.sqrt(6 / (64 + 48))),
        ("kaiming_uniform", np.sqrt(3) * np.sqrt(2 / (1 + 0.01**2)) / np.sqrt(48)),
    ],
)
def test_uniform_initializers_fill_their_bounds(name, bound):
    Tensor.manual_seed(15)
    values = getattr(Tensor, name)(64, 48, device="CPU").numpy()
    assert values.shape == (64, 48)
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.95 * bound
    assert abs(values.var() - bound**2 / 3) < 0.1 * bound**2 / 3


def test_kaiming_normal_has_he_std():
    Tensor.manual_seed(16)
    values = Tensor.kaiming_normal(64, 48, device="CPU").numpy()
    assert abs(values.std() - np.sqrt(2 / (1 + 0.01**2)) / np.sqrt(48)) < 0.01


@pytest.mark.parametrize("device", DEVICES)
def test_rand_like_and_randn_like_follow_the_tensor(device):
    base = Tensor.zeros(3, 5, dtype=dtypes.float16, device=device)
    assert base.rand_like().shape == (3, 5) and base.rand_like().dtype is dtypes.float16
    assert base.randn_like(dtype=dtypes.float32).dtype is dtypes.float32
    assert Tensor.zeros(4, dtype=dtypes.int32, device=device).rand_like().dtype is dtypes.default_float


def _draw_everything(device: str) -> list[np.ndarray]:
    Tensor.manual_seed(17)
    weights = Tensor([[1.0, 0.0, 3.0, 2.0]], device=device)
    Tensor.training = True
    try:
        dropped = Tensor.ones(16, device=device).dropout(0.5)
    finally:
        Tensor.training = False
    draws = [
        Tensor.uniform(8, low=-2.0, high=3.0, device=device),
        Tensor.normal(8, mean=1.0, std=0.5, device=device),
        weights.multinomial(6, replacement=True),
        weights.multinomial(3),
        dropped,
        Tensor.scaled_uniform(4, 3, device=device),
        Tensor.glorot_uniform(4, 3, device=device),
        Tensor.kaiming_uniform(4, 3, device=device),
        Tensor.kaiming_normal(4, 3, device=device),
    ]
    return [draw.numpy() for draw in draws]


def test_every_random_op_gives_the_same_values_on_python_as_on_cpu():
    """The CPU results are checked statistically above; PYTHON must reproduce them (to float rounding)."""
    for on_python, on_cpu in zip(_draw_everything("PYTHON"), _draw_everything("CPU"), strict=True):
        if np.issubdtype(on_cpu.dtype, np.floating):
            np.testing.assert_allclose(on_python, on_cpu, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(on_python, on_cpu)
