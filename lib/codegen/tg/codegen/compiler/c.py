"""C source -> shared object bytes with the system C compiler (clang when installed, else gcc; CC overrides).
`DEBUG=1` names the compiler and its version when a CPU device starts.

Flags: `-O3 -march=native` for speed on this CPU. We deliberately do NOT use `-ffast-math`: it lets the
compiler assume no NaN or inf exists (`-ffinite-math-only`), which breaks ops whose results must keep
IEEE semantics (max with NaN, isnan checks, inf from overflow, x*0). `-fno-math-errno` is the part of
fast-math that is safe and useful: math calls such as sqrtf no longer set errno, so they become single
instructions and loops containing them vectorise. `-ffp-contract=off` stops the compiler from fusing
a*b+c into one FMA on its own: fused and unfused results differ in the last bit, and the CPU device must
agree bit for bit with numpy and with the PYTHON reference device. A renderer that wants an FMA asks for
it explicitly (fmaf / __builtin_fmaf), which this flag does not affect. No flag or pragma asks for vectorization:
the C renderer writes loops both compilers vectorize by themselves (see tg.codegen.render.c). On an x86 CPU with
AVX-512, `-mprefer-vector-width=512` lets them use its 512-bit registers (both prefer 256-bit ones there otherwise);
the CPU device then gives the heuristics twice the register lanes. Whether the CPU has AVX-512, and its model (part
of the cache key: -march=native means "this CPU"), are facts the device in tg.hcq reads (tg.hcq.host) and passes in:
this module reads nothing of the machine. gcc on an x86 CPU without AVX-512 gets GCC_WITHOUT_AVX512_FLAGS, three
passes off, so that loops with selects still vectorize.

Whether the compiler vectorizes a `_Float16` -> float conversion is a fact about the compiler
(`CCompiler.vectorizes_half_conversion`): clang does (vcvtph2ps), gcc 12 converts one element at a time and keeps the
whole loop scalar. The CPU device puts it in its Target, and the C renderer works around it (tg.codegen.render.c).
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import sys
import tempfile

from tg.codegen.compiler.base import CompileError, Compiler
from tg.codegen.flags import CC, DEBUG

CLANG_CANDIDATES = ("clang", *(f"clang-{version}" for version in range(19, 13, -1)))
DEFAULT_FLAGS = (
    "-O3", "-march=native", "-fno-math-errno", "-ffp-contract=off", "-fPIC", "-shared", "-std=gnu11",
)  # fmt: skip
WIDE_VECTOR_FLAGS = ("-mprefer-vector-width=512",)
# gcc on an x86 CPU without AVX-512: its partial redundancy elimination, code sinking and dominator-based jump
# threading duplicate the paths around the selects of a decomposed exp2/log2 (clamps, NaN and inf checks), leaving
# __builtin_fmaf calls under branches, and its if-conversion cannot vectorize such a loop (with AVX-512's masked
# operations it can). gcc 12 on an AVX2 EPYC kept the exp, log, tanh, gelu and softmax loops scalar; without these
# three passes they vectorize as on AVX-512. (-fno-thread-jumps alone is not used: gcc 12.2 miscompiles a padding
# kernel with it, see tests/codegen/test_transcendental.py.)
GCC_WITHOUT_AVX512_FLAGS = ("-fno-tree-pre", "-fno-tree-sink", "-fno-tree-dominator-opts")


def default_flags(wide_vectors: bool = False, cc: str | None = None) -> tuple[str, ...]:
    """DEFAULT_FLAGS, plus WIDE_VECTOR_FLAGS for a CPU with AVX-512 (`wide_vectors`, tg.hcq.host tells), or
    GCC_WITHOUT_AVX512_FLAGS when the compiler `cc` (default: find_c_compiler()) is gcc on an x86 CPU without it."""
    if wide_vectors:
        return DEFAULT_FLAGS + WIDE_VECTOR_FLAGS
    x86 = platform.machine() in ("x86_64", "AMD64")
    return DEFAULT_FLAGS + (GCC_WITHOUT_AVX512_FLAGS if x86 and is_gcc(cc or find_c_compiler()) else ())


@functools.cache
def is_gcc(path: str) -> bool:
    """Whether the compiler at `path` is gcc, from its predefined macros (clang defines __GNUC__ as well, and
    either may be installed as `cc`)."""
    result = subprocess.run([path, "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True, check=False)
    return "__GNUC__" in result.stdout and "__clang__" not in result.stdout


@functools.cache
def gcc_major_version(path: str) -> int:
    """The major version of the gcc at `path` (`gcc -dumpversion` prints `12`, or `12.2.0` where configured so)."""
    result = subprocess.run([path, "-dumpversion"], capture_output=True, text=True, check=False)
    return int(result.stdout.strip().split(".")[0] or 0)


def vectorizes_half_conversion(path: str) -> bool:
    """Whether the compiler at `path` converts `_Float16` to float in vector instructions: clang does, gcc before 13
    does not (gcc 12.2 with -O3 -march=native on an AVX-512 FP16 CPU converted one element at a time with vcvtsh2ss,
    4x slower than its integer form, and any `_Float16` value in a loop kept that loop scalar)."""
    return not is_gcc(path) or gcc_major_version(path) >= 13


def find_c_compiler() -> str:
    """The compiler to use: the CC flag, else the first clang found on PATH, else gcc."""
    if CC.value:
        found = shutil.which(CC.value)
        if found is None:
            raise FileNotFoundError(f"CC={CC.value!r} is not an executable on PATH")
        return found
    for name in (*CLANG_CANDIDATES, "gcc", "cc"):
        found = shutil.which(name)
        if found is not None:
            return found
    raise FileNotFoundError(
        f"no C compiler found on PATH (tried {', '.join(CLANG_CANDIDATES)}, gcc, cc). The CPU device compiles its "
        f"kernels with one: install gcc or clang (Debian/Ubuntu: sudo apt-get install gcc; "
        f"Fedora: sudo dnf install gcc), or set CC to a compiler's path"
    )


@functools.cache
def compiler_version(path: str) -> str:
    """First line of `cc --version`; part of the cache key so a compiler upgrade recompiles."""
    result = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return result.stdout.splitlines()[0] if result.stdout else "unknown"


class CCompiler(Compiler):
    """Compiles C source to a shared object and returns its bytes.

    `cc` is a path or a name on PATH (default: `find_c_compiler()`), `flags` replaces `default_flags(wide_vectors)`.
    `wide_vectors` (the CPU has AVX-512) and `cpu_model` describe the machine, which the CPU device reads
    (tg.hcq.host.host_c_compiler); the model is part of the binary cache key.
    """

    def __init__(
        self, cc: str | None = None, flags: tuple[str, ...] | None = None, wide_vectors: bool = False,
        cpu_model: str = "",
    ) -> None:  # fmt: skip
        if cc is None:
            self.cc = find_c_compiler()
        else:
            self.cc = shutil.which(cc) or cc
        self.flags = default_flags(wide_vectors, self.cc) if flags is None else tuple(flags)
        self.cpu_model = cpu_model or platform.processor()
        if DEBUG >= 1:
            print(f"CPU kernels compile with {self.describe()} (the CC flag chooses another)", file=sys.stderr)

    @property
    def vectorizes_half_conversion(self) -> bool:
        """Whether this compiler converts `_Float16` to float in vector instructions (vectorizes_half_conversion)."""
        return vectorizes_half_conversion(self.cc)

    def describe(self) -> str:
        """The compiler, its version and where it is, e.g. `gcc (Debian 12.2.0-14) 12.2.0 at /usr/bin/gcc`."""
        return f"{compiler_version(self.cc)} at {self.cc}"

    def identity(self) -> str:
        # -march=native means "this CPU", so the CPU model belongs in the key as well.
        return f"{self.cc}|{compiler_version(self.cc)}|{' '.join(self.flags)}|{platform.machine()}|{self.cpu_model}"

    def compile_uncached(self, source: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="tg-cc-") as tmp:
            source_path = os.path.join(tmp, "kernel.c")
            output_path = os.path.join(tmp, "kernel.so")
            with open(source_path, "w") as f:
                f.write(source)
            command = [self.cc, *self.flags, "-o", output_path, source_path]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise CompileError(result.stderr or result.stdout, source, " ".join(command))
            with open(output_path, "rb") as f:
                return f.read()
