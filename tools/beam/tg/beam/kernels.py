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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tg.codegen.opt.opts import Opt
from tg.codegen.pipeline import CodegenFlags, with_opts
from tg.codegen.serial import IRLoadError, read_file
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.ops import Ops, UOp
from tg.hcq.buffer import Buffer
from tg.hcq.engine import compile_program, scratch_buffers
from tg.hcq.engine.timing import time_program


class BeamError(Exception):
    """An expected failure: printed as one `error:` line, exit 1."""


@dataclass(frozen=True)
class KernelJob:
    ast: UOp  # the kernel as scheduled (no opts applied)
    preapplied: tuple[Opt, ...]  # opts to start the search from

    @property
    def name(self) -> str:
        return self.ast.arg.name if isinstance(self.ast.arg, KernelInfo) else "kernel"


def _is_kernel(value: Any) -> bool:
    return isinstance(value, UOp) and value.op is Ops.SINK


def _timeable(job: KernelJob, path: Path) -> KernelJob:
    """`job`, or a BeamError when it cannot be timed: a kernel with variables has sizes no scratch buffer fixes."""
    variables = sorted({u.arg.name for u in job.ast.toposort() if u.op is Ops.DEFINE_VAR})
    if variables:
        raise BeamError(f"{path}: kernel {job.name} has unbound variables ({', '.join(variables)}): tg-beam times "
                        "kernels with fixed sizes only; dump the kernel from a run with those sizes fixed")  # fmt: skip
    return job


def _as_job(value: Any, path: Path) -> KernelJob:
    if _is_kernel(value):
        info = value.arg if isinstance(value.arg, KernelInfo) else KernelInfo()
        return _timeable(KernelJob(value, tuple(info.opts_to_apply or ())), path)
    if isinstance(value, tuple) and value and _is_kernel(value[0]):
        opts = value[1] if len(value) == 2 else value[3] if len(value) == 4 else ()
        if not all(isinstance(opt, Opt) for opt in opts):
            raise BeamError(f"{path}: the opts next to the kernel are not Opt values")
        return _timeable(KernelJob(value[0], tuple(opts)), path)
    raise BeamError(
        f"{path} holds {type(value).__name__}, not a kernel: expected a kernel AST (a SINK UOp), (ast, opts), "
        "a process-replay row or a list of them"
    )


def load_kernels(path: Path) -> list[KernelJob]:
    """The kernels in a k.pkl, in order."""
    try:
        value, _ = read_file(path)
    except OSError as error:
        raise BeamError(f"cannot read {path}: {error.strerror}") from None
    except IRLoadError as error:
        raise BeamError(f"{path}: {error}") from None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise BeamError(f"{path} holds an empty list")
    return [_as_job(item, path) for item in items]


def _random_contents(buffer: Buffer, rng: np.random.Generator) -> bytes:
    dtype = np.dtype(getattr(buffer.dtype, "fmt", None) or "B")
    count = buffer.nbytes // dtype.itemsize
    if dtype.kind == "f":
        values = rng.standard_normal(count).astype(dtype)
    elif dtype.kind == "b":
        values = rng.integers(0, 2, count).astype(dtype)
    else:
        values = rng.integers(0, 8, count).astype(dtype)
    return values.tobytes()


@dataclass(frozen=True)
class Verification:
    matches: bool
    detail: str


def verify(job: KernelJob, opts: tuple[Opt, ...], device: str, flags: CodegenFlags, seed: int = 0) -> Verification:
    """Run the unoptimized kernel and the kernel with `opts` on the same random inputs and compare every buffer."""
    reference = compile_program(device, with_opts(job.ast, ()), flags)
    candidate = compile_program(device, with_opts(job.ast, opts), flags)
    rng = np.random.default_rng(seed)
    first, second = scratch_buffers(job.ast, device), scratch_buffers(job.ast, device)
    for a, b in zip(first, second, strict=True):
        contents = _random_contents(a, rng)
        a.copyin(contents)
        b.copyin(contents)
    time_program(reference, first, repeats=1)
    time_program(candidate, second, repeats=1)
    for slot, (a, b) in enumerate(zip(first, second, strict=True)):
        want, got = a.numpy(), b.numpy()
        if want.dtype.kind == "f":
            same = np.allclose(got, want, rtol=1e-3, atol=1e-3, equal_nan=True)
        else:
            same = np.array_equal(got, want)
        if not same:
            worst = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))
            return Verification(
                False, f"buffer {slot} differs from the unoptimized kernel (max difference {worst:.3g})"
            )
    return Verification(True, "matches the unoptimized kernel on random inputs")
