"""Random chains of movement ops, elementwise ops and reductions against numpy: the index arithmetic of every
movement op composed with every other (seeded, so a failure names its seed)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.dtype import from_numpy
from tg.codegen.schedule.graph import ReduceArg, shape_of

from .test_engine import tensor, to_numpy


def movement(op: Ops, node: UOp, arg: object) -> UOp:
    return UOp(op, node.dtype, (node,), arg)


def random_reshape(node: UOp, array: np.ndarray, rnd: random.Random) -> tuple[UOp, np.ndarray]:
    dims, rest = [], array.size
    for factor in (2, 3, 2, 5):
        if rest % factor == 0 and rnd.random() < 0.5:
            dims.append(factor)
            rest //= factor
    dims.append(rest)
    rnd.shuffle(dims)
    return movement(Ops.RESHAPE, node, tuple(dims)), array.reshape(dims)


def random_step(node: UOp, array: np.ndarray, rnd: random.Random) -> tuple[UOp, np.ndarray]:
    shape = array.shape
    kind = rnd.choice(["reshape", "permute", "pad", "shrink", "flip", "expand", "add", "reduce"])
    if kind == "reshape":
        return random_reshape(node, array, rnd)
    if kind == "permute":
        order = list(range(len(shape)))
        rnd.shuffle(order)
        return movement(Ops.PERMUTE, node, tuple(order)), array.transpose(order)
    if kind == "pad":
        padding = tuple((rnd.randint(0, 2), rnd.randint(0, 2)) for _ in shape)
        return movement(Ops.PAD, node, padding), np.pad(array, padding)
    if kind == "shrink":
        bounds = []
        for size in shape:
            start = rnd.randint(0, size - 1)
            bounds.append((start, rnd.randint(start + 1, size)))
        return movement(Ops.SHRINK, node, tuple(bounds)), array[tuple(slice(s, e) for s, e in bounds)]
    if kind == "flip":
        flips = tuple(rnd.random() < 0.5 for _ in shape)
        return movement(Ops.FLIP, node, flips), array[tuple(slice(None, None, -1 if f else 1) for f in flips)]
    if kind == "expand":
        node, array = movement(Ops.RESHAPE, node, (*shape, 1)), array.reshape(*shape, 1)
        grown = tuple(rnd.randint(1, 3) if size == 1 else size for size in array.shape)
        return movement(Ops.EXPAND, node, grown), np.broadcast_to(array, grown)
    if kind == "add":
        return UOp(Ops.ADD, dtypes.float32, (node, node)), array + array
    axes = tuple(sorted(rnd.sample(range(len(shape)), rnd.randint(1, len(shape)))))
    op = rnd.choice([Ops.ADD, Ops.MAX])
    expected = array.sum(axes, keepdims=True) if op is Ops.ADD else array.max(axes, keepdims=True)
    return UOp(Ops.REDUCE_AXIS, dtypes.float32, (node,), ReduceArg(op, axes)), expected


@pytest.mark.parametrize("seed", range(40))
def test_random_graph_matches_numpy(seed: int) -> None:
    rnd = random.Random(seed)
    device = "CPU" if seed % 4 == 0 else "PYTHON"
    shape = tuple(rnd.randint(1, 4) for _ in range(rnd.randint(1, 3)))
    array = np.random.default_rng(seed).integers(-5, 5, shape).astype(np.float32)  # small ints: sums are exact
    node = tensor(array, device)
    for _ in range(rnd.randint(1, 7)):
        if array.size > 2000:
            break
        node, array = random_step(node, array, rnd)
        assert shape_of(node) == array.shape
    np.testing.assert_array_equal(to_numpy(node), array, err_msg=f"seed {seed} on {device}")


DTYPES = [np.int32, np.int8, np.uint8, np.int16, np.uint32, np.int64, np.float32, np.float16, np.float64]
INT_OPS = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR]
FLOAT_OPS = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX]
EXACT_UNARY = [Ops.NEG, Ops.SQRT, Ops.TRUNC, Ops.RECIPROCAL]  # correctly rounded in C and in the emulator


def random_expression(rnd: random.Random, leaves: dict, dtype, depth: int) -> UOp:  # noqa: ANN001
    if depth == 0 or rnd.random() < 0.2:
        return leaves[dtype]
    sub = lambda dt=dtype: random_expression(rnd, leaves, dt, depth - 1)  # noqa: E731
    choice = rnd.random()
    if choice < 0.15:
        return UOp(Ops.CAST, dtype, (sub(rnd.choice(list(leaves))),))
    if choice < 0.3 and dtypes.is_float(dtype):
        return UOp(rnd.choice(EXACT_UNARY), dtype, (sub(),))
    if choice < 0.4:
        return UOp(Ops.WHERE, dtype, (UOp(Ops.CMPLT, dtypes.bool, (sub(), sub())), sub(), sub()))
    return UOp(rnd.choice(FLOAT_OPS if dtypes.is_float(dtype) else INT_OPS), dtype, (sub(), sub()))


@pytest.mark.parametrize("seed", range(25))
def test_c_renderer_and_python_emulator_agree_bit_for_bit(seed: int) -> None:
    """Random expressions over many dtypes (casts, wrapping, division by zero, NaN) on CPU and PYTHON."""
    generator = np.random.default_rng(seed)
    arrays = {}
    for np_dtype in DTYPES:
        if np.issubdtype(np_dtype, np.floating):
            arrays[from_numpy(np.dtype(np_dtype))] = (generator.standard_normal(16) * 4).astype(np_dtype)
        else:
            arrays[from_numpy(np.dtype(np_dtype))] = generator.integers(-1000, 1000, 16).astype(np_dtype)
    results = []
    for device in ("CPU", "PYTHON"):
        rnd = random.Random(seed)
        leaves = {dt: tensor(array, device) for dt, array in arrays.items()}
        dtype = from_numpy(np.dtype(rnd.choice(DTYPES)))
        results.append(to_numpy(random_expression(rnd, leaves, dtype, 4)))
    np.testing.assert_array_equal(results[0], results[1], err_msg=f"seed {seed}")
