"""Kernels as tg-beam reads them (k.pkl) and checks them (--verify).

A k.pkl may hold any of:
    a kernel AST                           a SINK UOp whose arg is KernelInfo (what `tg-beam dump` writes)
    (ast, applied_opts)                    the opts are applied first and the search goes on from there
    a process-replay row                   (ast, renderer, flags, applied_opts), as tg-replay captures them
    a list of any of these                 processed in order

It is read with tg.codegen.serial's restricted unpickler: a file that names anything but tg IR types (a crafted
`__reduce__` calling os.system) is refused before anything is called, and ops are stored by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tg.codegen.opt.opts import Opt
from tg.codegen.pipeline import CodegenFlags, with_opts
from tg.codegen.serial import IRLoadError, read_file
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.ops import Ops, UOp
from tg.hcq.buffer import Buffer
from tg.hcq.device import Device
from tg.hcq.engine import compile_program, scratch_buffers
from tg.hcq.engine.timing import time_program


class BeamError(Exception):
    """An expected failure: printed as one `error:` line, exit 1."""


@dataclass(frozen=True)
class KernelJob:
    ast: UOp  # the kernel as scheduled (no opts applied)
    preapplied: tuple[Opt, ...]  # opts to start the search from
    var_vals: dict[str, int] = field(default_factory=dict)  # the values its variables are timed with (--var)

    @property
    def name(self) -> str:
        return self.ast.arg.name if isinstance(self.ast.arg, KernelInfo) else "kernel"


def check_device(device: str) -> str:
    """The canonical name of `device`, or a BeamError when it cannot time kernels."""
    try:
        name = Device.canonicalize(device)
        if name.split(":")[0] == "NULL":
            raise BeamError(f"device {name} runs no kernels (it reports a fixed time): BEAM needs one that runs them")
        if Device[name].renderer is None:
            raise BeamError(f"device {name} cannot run kernels (it has no renderer)")
    except (KeyError, ValueError, RuntimeError) as error:
        raise BeamError(str(error).strip("'\"")) from None
    return name


def _is_kernel(value: Any) -> bool:
    return isinstance(value, UOp) and value.op is Ops.SINK


def parse_var_values(texts: list[str]) -> dict[str, int]:
    """`--var n=16` options as {"n": 16} (a BeamError names the malformed one)."""
    values: dict[str, int] = {}
    for text in texts:
        name, equals, value = text.partition("=")
        if not equals or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise BeamError(f"--var {text!r}: expected NAME=INTEGER, e.g. --var n=16")
        values[name.strip()] = int(value)
    return values


def _timeable(job: KernelJob, path: Path, var_vals: dict[str, int]) -> KernelJob:
    """`job` with the values its variables are timed with, or a BeamError when it cannot be timed: a kernel with
    variables has sizes only their values fix (--var NAME=VALUE, within the variable's bounds)."""
    variables = {u.arg.name: u.arg for u in job.ast.toposort() if u.op is Ops.DEFINE_VAR}
    missing = sorted(set(variables) - set(var_vals))
    if missing:
        raise BeamError(f"{path}: kernel {job.name} has unbound variables ({', '.join(missing)}): give each a value "
                        f"to time it with, e.g. --var {missing[0]}={variables[missing[0]].vmax}")  # fmt: skip
    for name, arg in sorted(variables.items()):
        value = var_vals[name]
        if not arg.vmin <= value <= arg.vmax:
            raise BeamError(f"--var {name}={value}: {name} of kernel {job.name} lies in {arg.vmin}..{arg.vmax}")
    return KernelJob(job.ast, job.preapplied, {name: var_vals[name] for name in variables})


def _as_job(value: Any, path: Path, var_vals: dict[str, int]) -> KernelJob:
    if _is_kernel(value):
        info = value.arg if isinstance(value.arg, KernelInfo) else KernelInfo()
        return _timeable(KernelJob(value, tuple(info.opts_to_apply or ())), path, var_vals)
    if isinstance(value, tuple) and value and _is_kernel(value[0]):
        opts = value[1] if len(value) == 2 else value[3] if len(value) == 4 else ()
        if not all(isinstance(opt, Opt) for opt in opts):
            raise BeamError(f"{path}: the opts next to the kernel are not Opt values")
        return _timeable(KernelJob(value[0], tuple(opts)), path, var_vals)
    raise BeamError(
        f"{path} holds {type(value).__name__}, not a kernel: expected a kernel AST (a SINK UOp), (ast, opts), "
        "a process-replay row or a list of them"
    )


def load_kernels(path: Path, var_vals: dict[str, int] | None = None) -> list[KernelJob]:
    """The kernels in a k.pkl, in order; `var_vals` gives the variables of symbolic kernels their timing values."""
    return load_kernel_file(path, var_vals)[0]


def load_kernel_file(path: Path, var_vals: dict[str, int] | None = None) -> tuple[list[KernelJob], dict[str, str]]:
    """The kernels in a k.pkl, in order, and the file's provenance (`tg-beam dump` records the device)."""
    try:
        value, provenance = read_file(path)
    except OSError as error:
        raise BeamError(f"cannot read {path}: {error.strerror}") from None
    except IRLoadError as error:
        raise BeamError(f"{path}: {error}") from None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise BeamError(f"{path} holds an empty list")
    return [_as_job(item, path, var_vals or {}) for item in items], provenance


# Input families --verify runs both kernels on: a wrong kernel is often right on one family and wrong on another
# (a max whose start value is 0 instead of -inf is right on every row holding a positive value)
FAMILIES = ("normal", "all-negative", "large magnitude", "mixed-sign integers", "inf/nan")


def _float_values(family: str, count: int, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    normal = rng.standard_normal(count)
    if family == "all-negative":
        return (-np.abs(normal) - 0.125).astype(dtype)
    if family == "large magnitude":
        return (normal * (1e2 if dtype.itemsize <= 2 else 1e4)).astype(dtype)
    if family == "mixed-sign integers":
        return rng.integers(-8, 9, count).astype(dtype)
    if family == "inf/nan":
        special = rng.choice(np.array([np.inf, -np.inf, np.nan]), count)
        return np.where(rng.random(count) < 0.125, special, normal).astype(dtype)
    return normal.astype(dtype)


def _int_values(family: str, count: int, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray | None:
    signed = dtype.kind == "i"
    if family == "normal":
        return rng.integers(0, 8, count).astype(dtype)
    if family in ("all-negative", "mixed-sign integers") and signed:
        return rng.integers(-8, 0 if family == "all-negative" else 9, count).astype(dtype)
    if family == "large magnitude":  # large, yet a product of two stays in range (no overflow to tell apart)
        bound = 2 ** max(0, 4 * dtype.itemsize - 2)
        return rng.integers(-bound if signed else 0, bound, count).astype(dtype)
    return None


def family_contents(buffer: Buffer, family: str, rng: np.random.Generator) -> bytes | None:
    """Contents for `buffer` from input `family` (None: the family has no values of its type, e.g. negative
    unsigned integers or a NaN boolean)."""
    dtype = np.dtype(getattr(buffer.dtype, "fmt", None) or "B")
    count = buffer.nbytes // dtype.itemsize
    if dtype.kind == "b":
        values = rng.integers(0, 2, count).astype(dtype) if family == "normal" else None
    elif dtype.kind == "f":
        values = _float_values(family, count, dtype, rng)
    else:
        values = _int_values(family, count, dtype, rng)
    return None if values is None else values.tobytes()


def _order_sensitive_to_nan(ast: UOp) -> bool:
    """A MAX reduction's NaN result depends on the order it meets the NaN in: the inf/nan family would fail opts
    that only reorder it."""
    return any(u.op is Ops.REDUCE and u.arg is Ops.MAX for u in ast.toposort())


@dataclass(frozen=True)
class Verification:
    matches: bool
    detail: str


def _largest_finite(values: np.ndarray) -> float:
    """The largest finite magnitude in `values`, at least 1."""
    finite = np.abs(values[np.isfinite(values)].astype(np.float64))
    return max(1.0, float(finite.max())) if finite.size else 1.0


def _compare(first: list[Buffer], second: list[Buffer], family: str) -> Verification | None:
    for slot, (a, b) in enumerate(zip(first, second, strict=True)):
        want, got = a.numpy(), b.numpy()
        if want.dtype.kind == "f":
            # reordered float sums differ by rounding in proportion to the values summed, not to each result (large
            # inputs that cancel to a small output): the absolute tolerance scales with the buffer's largest value
            same = np.allclose(got, want, rtol=1e-3, atol=1e-3 * _largest_finite(want), equal_nan=True)
        else:
            same = np.array_equal(got, want)
        if not same:
            with np.errstate(invalid="ignore", over="ignore"):
                difference = np.abs(got.astype(np.float64) - want.astype(np.float64))
            finite = difference[np.isfinite(difference)]
            worst = finite.max() if finite.size else math.nan
            return Verification(False, f"{family} inputs: buffer {slot} differs from the unoptimized kernel "
                                       f"(max difference {worst:.3g})")  # fmt: skip
    return None


def compare_kernels(
    reference: UOp,
    candidate: UOp,
    device: str,
    flags: CodegenFlags,
    seed: int = 0,
    var_vals: dict[str, int] | None = None,
) -> Verification:
    """Run `reference` and `candidate` (kernels with the same buffers; variables set to `var_vals`) on the same
    inputs of every family in FAMILIES that their buffer types allow, and compare every buffer; the first family
    that differs is named."""
    reference_program = compile_program(device, reference, flags)
    candidate_program = compile_program(device, candidate, flags)
    rng = np.random.default_rng(seed)
    checked = []
    for family in FAMILIES:
        if family == "inf/nan" and _order_sensitive_to_nan(reference):
            continue
        first, second = scratch_buffers(reference, device), scratch_buffers(reference, device)
        contents = [family_contents(buffer, family, rng) for buffer in first]
        if all(c is None for c in contents):
            continue
        for a, b, data in zip(first, second, contents, strict=True):
            data = data if data is not None else family_contents(a, "normal", rng)
            assert data is not None  # (every buffer type has normal values)
            a.copyin(data)
            b.copyin(data)
        time_program(reference_program, first, repeats=1, var_vals=var_vals)
        time_program(candidate_program, second, repeats=1, var_vals=var_vals)
        failure = _compare(first, second, family)
        if failure is not None:
            return failure
        checked.append(family)
    return Verification(True, f"matches the unoptimized kernel on {', '.join(checked)} inputs")


def verify(job: KernelJob, opts: tuple[Opt, ...], device: str, flags: CodegenFlags, seed: int = 0) -> Verification:
    """Run the unoptimized kernel and the kernel with `opts` on the same inputs of several families (normal,
    all-negative, large magnitude, mixed-sign integers, inf/nan) and compare every buffer."""
    return compare_kernels(with_opts(job.ast, ()), with_opts(job.ast, opts), device, flags, seed, job.var_vals)
