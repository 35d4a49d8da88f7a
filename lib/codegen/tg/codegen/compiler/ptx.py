"""PTX -> cubin with NVIDIA's assembler `ptxas` (from the CUDA toolkit; no GPU needed). `DEV=NULL:PTX` assembles every
kernel with it when it is on PATH, so a PTX renderer bug is an assembler error, not a silent wrong text."""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

from tg.codegen.compiler.base import CompileError, Compiler

PTXAS_MISSING = "ptxas is not on PATH: install the CUDA toolkit (e.g. Debian's nvidia-cuda-toolkit, or NVIDIA's)"


def find_ptxas() -> str | None:
    return shutil.which("ptxas")


@functools.cache
def ptxas_version(path: str) -> str:
    result = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "unknown"


class PTXCompiler(Compiler):
    """Assembles PTX for `arch` (e.g. sm_80) and returns the cubin's bytes."""

    def __init__(self, arch: str, ptxas: str | None = None) -> None:
        found = ptxas or find_ptxas()
        if found is None:
            raise FileNotFoundError(PTXAS_MISSING)
        self.arch, self.ptxas = arch, found

    def identity(self) -> str:
        return f"{self.ptxas} {ptxas_version(self.ptxas)} -arch={self.arch}"

    def compile_uncached(self, source: str) -> bytes:
        with tempfile.TemporaryDirectory() as folder:
            source_path, output = Path(folder) / "kernel.ptx", Path(folder) / "kernel.cubin"
            source_path.write_text(source)
            command = [self.ptxas, f"-arch={self.arch}", "-o", str(output), str(source_path)]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise CompileError(result.stderr or result.stdout, source, " ".join(command))
            return output.read_bytes()
