"""The decode step's quantized matvec kernels alone, single-threaded: µs per call and GB/s of the weights they read.

Run: `CC=gcc uv run python bench/bench_lane_kernels.py [--repeats 30]`. Each kernel of a SmolLM2-135M decode step
(the gated gate_up and qkv with the norm inside, down, and the Q8_0 output head with the final norm) is built from
random blocks whose fp16 fields are normal halves (subnormal ones would cost microcode assists real weights rarely
pay), its C source taken from DEBUG=4, compiled alone with the CPU device's flags and called through ctypes on
one thread, every call of a kernel cut into calls per core in turn. Best of --repeats. The weights of all but the
output head fit in L2, so these are the kernels' compute rates, not the memory's; the load average is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable

import numpy as np

from tg.codegen.compiler.c import default_flags, find_c_compiler
from tg.hcq.host import wide_vectors
from tg.llm.lanes import RMSNorm
from tg.llm.quants import HALF_FIELDS
from tg.llm.weights import Weight, gated_linear, linear, quantized_weight
from tg.tensor import Context, Tensor
from tg.tensor.gguf import GGML_TYPES

GGML_TYPE_IDS = {"Q4_1": 3, "Q8_0": 8}
KERNELS = {  # name: (type, rows, cols, gated, with the norm)
    "gate_up": ("Q4_1", 3072, 576, True, True),
    "qkv": ("Q4_1", 960, 576, False, True),
    "down": ("Q4_1", 576, 1536, False, False),
    "output": ("Q8_0", 49152, 576, False, True),
}


def random_weight(type_name: str, rows: int, cols: int, rng: np.random.Generator) -> Weight:
    ggml_type = GGML_TYPE_IDS[type_name]
    _, block_elements, block_bytes = GGML_TYPES[ggml_type]
    raw = rng.integers(0, 256, size=(rows, cols // block_elements, block_bytes), dtype=np.uint8)
    for offset in HALF_FIELDS[type_name][0]:
        halves = rng.uniform(0.002, 0.05, size=raw.shape[:2]).astype(np.float16)
        raw[..., offset : offset + 2] = halves.view(np.uint8).reshape(*raw.shape[:2], 2)
    return quantized_weight(raw, ggml_type, (rows, cols))


def kernel_source(run: Callable[[], Tensor]) -> str:
    """The C of the one kernel `run` launches."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), Context(DEBUG=4, JIT=0):
        run().realize()
    found = re.findall(r"^void r_.*?^}$", out.getvalue(), re.S | re.M)
    if len(found) != 1:
        raise RuntimeError(f"expected one kernel, the run printed {len(found)}")
    return found[0]


def time_kernel(source: str, inputs: list[np.ndarray], out_size: int, repeats: int) -> tuple[str, float]:
    """(kernel name, best seconds per launch) of `source` called once per chunk on this thread."""
    name = re.search(r"void (r_\w+)\(", source).group(1)  # type: ignore[union-attr]
    chunks_found = re.search(r"core_id / (\d+)", source)
    chunks = int(chunks_found.group(1)) if chunks_found else 1
    with tempfile.TemporaryDirectory() as tmp:
        c_path, so_path = os.path.join(tmp, "k.c"), os.path.join(tmp, "k.so")
        with open(c_path, "w") as f:
            f.write("#include <math.h>\n" + source)
        subprocess.check_call(
            [find_c_compiler(), *default_flags(wide_vectors(), find_c_compiler()), "-o", so_path, c_path]
        )
        function = getattr(ctypes.CDLL(so_path), name)
    out = np.zeros(out_size, np.float32)
    args = [a.ctypes.data_as(ctypes.c_void_p) for a in (out, *inputs)]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for chunk in range(chunks):
            function(*args, ctypes.c_int(chunk))
        best = min(best, time.perf_counter() - start)
    return name, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    rng = np.random.default_rng(0)
    for label, (type_name, rows, cols, gated, with_norm) in KERNELS.items():
        weight = random_weight(type_name, rows, cols, rng)
        x = rng.standard_normal((1, cols)).astype(np.float32)
        norm_weight = rng.uniform(0.5, 2.0, cols).astype(np.float32)
        norm = RMSNorm(Tensor(norm_weight).realize(), 1e-5) if with_norm else None
        x_tensor = Tensor(x).realize()
        project = gated_linear if gated else linear
        source = kernel_source(lambda: project(x_tensor, weight, norm=norm))  # noqa: B023
        # the kernel's buffers after the output: x, the norm's weight when there is one, the words
        words = weight.data.words.numpy()  # type: ignore[union-attr]
        inputs = [x.ravel(), *([norm_weight] if with_norm else []), words.ravel()]
        # the argument order is the source's: put each buffer where its type says
        params = re.search(r"\((.*?)\)", source).group(1).split(", ")[1:-1]  # type: ignore[union-attr]
        floats = iter(a for a in inputs if a.dtype == np.float32)
        ordered = [inputs[-1] if "unsigned int" in p else next(floats) for p in params]
        name, seconds = time_kernel(source, ordered, rows, args.repeats)
        shape, rate = f"{rows}x{cols}", words.nbytes / seconds / 1e9
        print(f"{label:8} {type_name} {shape:10} {name:20} {seconds * 1e6:9.1f} us {rate:6.2f} GB/s")


if __name__ == "__main__":
    main()
