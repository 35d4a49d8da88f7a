"""Correctness fuzzer for kernel optimizations: random legal opt lists applied to matmuls (prime and composite
sizes), a convolution with padding, reductions and a broadcast must compute what the unoptimized kernel does,
which in turn must agree with numpy. Illegal opts in a random list raise KernelOptError and are skipped."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from tg.codegen import AxisType, KernelInfo, Ops, UOp, dtypes
from tg.codegen.dtype import from_numpy
from tg.codegen.flags import Context
from tg.codegen.opt import KernelOptError, KernelOptimizer, Opt, OptOps, hand_coded_optimizations
from tg.codegen.pipeline import CodegenFlags, kernel_to_program
from tg.hcq import Buffer, Device


@dataclass(frozen=True)
class Case:
    """A hand-built kernel AST, its input arrays, and numpy's answer."""

    ast: UOp
    inputs: tuple[np.ndarray, ...]
    expected: np.ndarray


def idx(value: int) -> UOp:
    return UOp.const(value, dtypes.index)


def params(out_size: int, *sizes: int) -> list[UOp]:
    return [UOp.param(slot, dtypes.float32, size) for slot, size in enumerate((out_size, *sizes))]


def matmul(rng: np.random.Generator, n: int, k: int, m: int, batch: int = 1) -> Case:
    out, a, b = params(batch * n * m, batch * n * k, batch * k * m)
    bi, i, j, r = UOp.range(batch, 0), UOp.range(n, 1), UOp.range(m, 2), UOp.range(k, 3, AxisType.REDUCE)
    bi = idx(0) if batch == 1 else bi
    product = a.index(bi * (n * k) + i * k + r).load() * b.index(bi * (k * m) + r * m + j).load()
    ast = UOp.sink(out.index(bi * (n * m) + i * m + j).store(product.reduce(r)), arg=KernelInfo("matmul"))
    x, y = rng.standard_normal((batch, n, k), np.float32), rng.standard_normal((batch, k, m), np.float32)
    return Case(ast, (x, y), x @ y)


def conv(rng: np.random.Generator, batch: int, cin: int, cout: int, size: int, window: int, pad: int) -> Case:
    out_size = size + 2 * pad - window + 1
    out, x, w = params(batch * cout * out_size**2, batch * cin * size**2, cout * cin * window**2)
    b, o, y, z = (UOp.range(s, axis) for axis, s in enumerate((batch, cout, out_size, out_size)))
    c, ky, kx = (UOp.range(s, 4 + axis, AxisType.REDUCE) for axis, s in enumerate((cin, window, window)))
    row, col = y + ky - pad, z + kx - pad
    inside = (idx(-1) < row) & (row < size) & (idx(-1) < col) & (col < size)
    pixel = x.index(b * (cin * size * size) + c * (size * size) + row * size + col, inside)
    weight = w.index(o * (cin * window * window) + c * (window * window) + ky * window + kx).load()
    value = (pixel.load(UOp.const(0.0, dtypes.float32)) * weight).reduce(c, ky, kx)
    address = b * (cout * out_size**2) + o * out_size**2 + y * out_size + z
    ast = UOp.sink(out.index(address).store(value), arg=KernelInfo("conv"))
    xs = rng.standard_normal((batch, cin, size, size), np.float32)
    ws = rng.standard_normal((cout, cin, window, window), np.float32)
    padded = np.pad(xs, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    expected = np.zeros((batch, cout, out_size, out_size), np.float32)
    for dy in range(window):
        for dx in range(window):
            patch = padded[:, :, dy : dy + out_size, dx : dx + out_size]
            expected += np.einsum("bchw,oc->bohw", patch, ws[:, :, dy, dx])
    return Case(ast, (xs, ws), expected)


def reduce_inner(rng: np.random.Generator, a: int, b: int, c: int, op: Ops) -> Case:
    """out[i, t] = reduce_j x[i, j, t]: a reduction over an inner (not the last) axis."""
    out, x = params(a * c, a * b * c)
    i, t, j = UOp.range(a, 0), UOp.range(c, 1), UOp.range(b, 2, AxisType.REDUCE)
    value = x.index(i * (b * c) + j * c + t).load().reduce(j, arg=op)
    ast = UOp.sink(out.index(i * c + t).store(value), arg=KernelInfo("reduce_inner"))
    xs = rng.standard_normal((a, b, c), np.float32)
    return Case(ast, (xs,), xs.sum(1) if op is Ops.ADD else xs.max(1))


def reduce_last(rng: np.random.Generator, n: int, m: int) -> Case:
    """out[i] = sum_j x[i, j] * 2 + 1."""
    out, x = params(n, n * m)
    i, j = UOp.range(n, 0), UOp.range(m, 1, AxisType.REDUCE)
    value = (x.index(i * m + j).load() * 2.0).reduce(j) + 1.0
    ast = UOp.sink(out.index(i).store(value), arg=KernelInfo("reduce_last"))
    xs = rng.standard_normal((n, m), np.float32)
    return Case(ast, (xs,), (xs * 2).sum(1) + 1)


def minus_row_max(rng: np.random.Generator, n: int, m: int) -> Case:
    """out[i, j] = x[i, j] - max_k x[i, k]: a reduction used by an elementwise kernel."""
    out, x = params(n * m, n * m)
    i, j, k = UOp.range(n, 0), UOp.range(m, 1), UOp.range(m, 2, AxisType.REDUCE)
    largest = x.index(i * m + k).load().reduce(k, arg=Ops.MAX)
    ast = UOp.sink(out.index(i * m + j).store(x.index(i * m + j).load() - largest), arg=KernelInfo("minus_max"))
    xs = rng.standard_normal((n, m), np.float32)
    return Case(ast, (xs,), xs - xs.max(1, keepdims=True))


def reduce_all(rng: np.random.Generator, n: int, op: Ops) -> Case:
    """out[0] = reduce_j x[j]: no output loop, so a GROUP across the CPU's cores is legal."""
    out, x = params(1, n)
    j = UOp.range(n, 0, AxisType.REDUCE)
    ast = UOp.sink(out.index(idx(0)).store(x.index(j).load().reduce(j, arg=op)), arg=KernelInfo("reduce_all"))
    xs = rng.standard_normal(n, np.float32)
    return Case(ast, (xs,), np.array([xs.sum() if op is Ops.ADD else xs.max()], np.float32))


def dots(rng: np.random.Generator, rows: int, n: int) -> Case:
    """out[i] = sum_j x[i, j] * y[i, j] for a few rows (upcast them all and the rows can be grouped across cores)."""
    out, x, y = params(rows, rows * n, rows * n)
    i, j = UOp.range(rows, 0), UOp.range(n, 1, AxisType.REDUCE)
    value = (x.index(i * n + j).load() * y.index(i * n + j).load()).reduce(j)
    ast = UOp.sink(out.index(i).store(value), arg=KernelInfo("dots"))
    xs, ys = rng.standard_normal((rows, n), np.float32), rng.standard_normal((rows, n), np.float32)
    return Case(ast, (xs, ys), (xs * ys).sum(1))


def broadcast(rng: np.random.Generator, n: int, m: int) -> Case:
    """out[i, j] = a[i] + b[j] * 3: elementwise with broadcasting."""
    out, a, b = params(n * m, n, m)
    i, j = UOp.range(n, 0), UOp.range(m, 1)
    value = a.index(i).load() + b.index(j).load() * 3.0
    ast = UOp.sink(out.index(i * m + j).store(value), arg=KernelInfo("broadcast"))
    xs, ys = rng.standard_normal(n, np.float32), rng.standard_normal(m, np.float32)
    return Case(ast, (xs, ys), xs[:, None] + ys[None, :] * 3)


CASES: dict[str, Callable[[np.random.Generator], Case]] = {
    "matmul_primes": lambda rng: matmul(rng, 7, 13, 11),
    "matmul_composite": lambda rng: matmul(rng, 12, 20, 16),
    "batched_matmul": lambda rng: matmul(rng, 6, 8, 10, batch=3),
    "conv_pad": lambda rng: conv(rng, 2, 3, 4, 6, 3, 1),
    "sum_inner_axis": lambda rng: reduce_inner(rng, 3, 10, 8, Ops.ADD),
    "max_inner_axis": lambda rng: reduce_inner(rng, 5, 6, 7, Ops.MAX),
    "sum_last_axis": lambda rng: reduce_last(rng, 9, 24),
    "minus_row_max": lambda rng: minus_row_max(rng, 6, 16),
    "broadcast": lambda rng: broadcast(rng, 10, 12),
    "sum_all": lambda rng: reduce_all(rng, 1120, Ops.ADD),
    "max_all": lambda rng: reduce_all(rng, 90, Ops.MAX),
    "dots": lambda rng: dots(rng, 3, 96),
}


def run(ast: UOp, inputs: tuple[np.ndarray, ...], shape: tuple[int, ...], device: str = "CPU") -> np.ndarray:
    dev = Device[device]
    rendered = kernel_to_program(ast, dev.renderer, CodegenFlags.from_environment())
    program = dev.runtime(rendered.name, dev.compiler.compile(rendered.src))
    out = Buffer(device, int(np.prod(shape)), dtypes.float32).ensure_allocated()
    out.copyin(np.full(shape, np.nan, np.float32).tobytes())  # an element the kernel misses stays NaN
    buffers = [out]
    for array in inputs:
        buf = Buffer(device, array.size, from_numpy(array.dtype)).ensure_allocated()
        buf.copyin(np.ascontiguousarray(array).tobytes())
        buffers.append(buf)
    program(*(b.raw for b in buffers), global_size=rendered.global_size, wait=True)
    return np.frombuffer(out.as_buffer(), np.float32).reshape(shape).copy()


def with_opts(ast: UOp, opts: list[Opt]) -> UOp:
    return ast.replace(arg=dataclasses.replace(ast.arg, opts_to_apply=tuple(opts)))


AMOUNTS = (0, 2, 3, 4, 5, 7, 8, 16)
SPLIT_TYPES = (AxisType.UPCAST, AxisType.UNROLL, AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.BLOCK_REDUCE)


def random_amount(rng: np.random.Generator, k: KernelOptimizer, axis: int) -> int:
    """Mostly a divisor of the axis (likely legal), sometimes anything (likely not)."""
    if axis < k.shape_len and rng.random() < 0.7:
        size = k.full_shape[axis]
        return int(rng.choice([d for d in range(2, min(size, 16) + 1) if size % d == 0] or [0]))
    return int(rng.choice(AMOUNTS))


def random_opt(rng: np.random.Generator, k: KernelOptimizer) -> Opt:
    """Any opt at all, legal or not: the KernelOptimizer must sort them out."""
    axis = int(rng.integers(max(k.shape_len, 1) + 1))  # one past the end now and then
    kind = int(rng.integers(8))
    amount = random_amount(rng, k, axis)
    if kind <= 1:
        new_type = SPLIT_TYPES[int(rng.integers(len(SPLIT_TYPES)))]
        return Opt(OptOps.SPLIT, axis, (amount, new_type, bool(rng.integers(2))))
    if kind == 2:
        return Opt(OptOps.UPCAST, axis, amount)
    if kind == 3:
        unrollable = [i for i, t in enumerate(k.axis_types) if t is AxisType.REDUCE]
        which = int(rng.integers(len(unrollable) + 1))
        return Opt(OptOps.UNROLL, which, random_amount(rng, k, unrollable[which]) if which < len(unrollable) else 4)
    if kind == 4:
        return Opt(OptOps.PADTO, axis, int(rng.choice((2, 3, 4, 8))))
    if kind == 5:
        return Opt(OptOps.SWAP, axis, int(rng.integers(max(k.shape_len, 1))))
    if kind == 6:
        reducible = [i for i, t in enumerate(k.axis_types) if t is AxisType.REDUCE]
        which = int(rng.integers(len(reducible) + 1))
        return Opt(OptOps.BLOCK, which, random_amount(rng, k, reducible[which]) if which < len(reducible) else 4)
    return Opt(OptOps.GROUPTOP if rng.integers(2) else OptOps.GROUP, int(rng.integers(2)), amount)


def random_legal_opts(rng: np.random.Generator, ast: UOp, attempts: int) -> list[Opt]:
    k = KernelOptimizer(ast, core_groups=True)  # what the CPU renderer allows
    for _ in range(attempts):
        opt = random_opt(rng, k)
        before = k.ast
        try:
            k.apply_opt(opt)
        except KernelOptError:
            assert k.ast is before, f"{opt} was refused but changed the kernel"
    return k.applied_opts


def fuzz(name: str, lists: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    case = CASES[name](rng)
    shape = case.expected.shape
    with Context(NOOPT=1):
        plain = run(case.ast, case.inputs, shape)
    np.testing.assert_allclose(plain, case.expected, rtol=1e-4, atol=1e-4)
    opt_lists = [hand_coded_optimizations(KernelOptimizer(case.ast, core_groups=True))]
    opt_lists += [random_legal_opts(rng, case.ast, attempts=10) for _ in range(lists)]
    for opts in opt_lists:
        result = run(with_opts(case.ast, opts), case.inputs, shape)
        np.testing.assert_allclose(result, plain, rtol=1e-5, atol=1e-5, err_msg=f"{name} with {opts}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_random_legal_opts_compute_what_the_unoptimized_kernel_does(name: str) -> None:
    fuzz(name, lists=6, seed=sorted(CASES).index(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_many_random_legal_opts_compute_what_the_unoptimized_kernel_does(name: str) -> None:
    fuzz(name, lists=60, seed=1000 + sorted(CASES).index(name))


def test_optimized_kernels_run_on_the_python_emulator_too() -> None:
    rng = np.random.default_rng(7)
    case = matmul(rng, 5, 6, 8)
    opts = [Opt(OptOps.PADTO, 0, 2), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 3)]
    result = run(with_opts(case.ast, opts), case.inputs, case.expected.shape, device="PYTHON")
    np.testing.assert_allclose(result, case.expected, rtol=1e-5, atol=1e-5)
