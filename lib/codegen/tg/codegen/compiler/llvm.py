"""LLVM IR -> an ELF object for the host CPU, in process, with llvmlite (which ships its own LLVM; no system compiler).

The object is what the on-disk cache stores (same cache and keying as the C path: the source and `identity()`, which
names llvmlite, its LLVM, the target triple, CPU and features). `load_object` links an object into memory with an
MCJIT engine and returns the address of a function, so the CPU device calls it exactly as it calls a C kernel from a
shared object. libm functions (exp2f, sinf, ...) resolve against the running process, which has libm loaded.

Optimization is LLVM's O3 pipeline. Like the C path, no global fast-math: the renderer puts fast-math flags only on
the instructions where the C renderer's pragmas allow them. llvmlite is imported lazily (it is a 50 MB library), and
its global state is guarded by a lock so that compiles from several threads do not interleave.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from tg.codegen.compiler.base import CompileError, Compiler

_llvm_lock = threading.Lock()


@functools.cache
def _llvm() -> Any:
    """llvmlite.binding with the native target initialized (once)."""
    try:
        import llvmlite.binding as llvm
    except ImportError as error:  # pragma: no cover - llvmlite is a dependency of tg-codegen
        raise RuntimeError("CPU:LLVM needs llvmlite (pip install llvmlite)") from error
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    try:  # half conversions (__truncdfhf2, ...) that LLVM lowers to libcalls, from the runtime gcc's kernels use too
        llvm.load_library_permanently("libgcc_s.so.1")
    except RuntimeError:
        pass
    return llvm


@functools.cache
def host_target_machine() -> Any:
    """A target machine for this CPU (its name and features, like -march=native), PIC, O3."""
    llvm = _llvm()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3, reloc="pic"
    )


class LLVMCompiler(Compiler):
    """Compiles LLVM IR text to object-file bytes for the host CPU."""

    def identity(self) -> str:
        import llvmlite

        llvm = _llvm()
        machine = host_target_machine()
        version = ".".join(map(str, llvm.llvm_version_info))
        return f"llvmlite {llvmlite.__version__}|llvm {version}|{machine.triple}|{llvm.get_host_cpu_name()}|O3+slp|" + (
            llvm.get_host_cpu_features().flatten()
        )

    def compile_uncached(self, source: str) -> bytes:
        llvm = _llvm()
        with _llvm_lock:
            try:
                module = llvm.parse_assembly(source)
                module.verify()
            except RuntimeError as error:
                raise CompileError(str(error), source, "llvmlite parse_assembly") from None
            machine = host_target_machine()
            module.triple = machine.triple
            module.data_layout = str(machine.target_data)
            _optimize(module, machine)
            return machine.emit_object(module)

    def optimized_ir(self, source: str) -> str:
        """The IR after the O3 pipeline (for DEBUG output and tests that look at what LLVM made of a kernel)."""
        llvm = _llvm()
        with _llvm_lock:
            module = llvm.parse_assembly(source)
            _optimize(module, host_target_machine())
            return str(module)


def _optimize(module: Any, machine: Any) -> None:
    """LLVM's O3 pipeline, with the SLP vectorizer on (llvmlite turns it off by default, clang -O3 has it on): it is
    what packs the unrolled lanes of an UPCAST kernel into SIMD vectors."""
    llvm = _llvm()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.slp_vectorization = True
    tuning.loop_vectorization = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)


_loaded_engines: dict[bytes, Any] = {}


def load_object(obj: bytes, name: str) -> int:
    """Link object file `obj` into memory (once per distinct object) and return the address of function `name`.

    Engines are never freed, as ctypes never unloads a shared object: a queued launch may still run the code, and
    disposing an llvmlite MCJIT engine that holds object files crashes. The same object loaded again reuses its engine.
    """
    llvm = _llvm()
    with _llvm_lock:
        engine = _loaded_engines.get(obj)
        if engine is None:
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine())
            engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            engine.finalize_object()
            _loaded_engines[obj] = engine
        address = engine.get_function_address(name)
    if not address:
        raise ValueError(f"the compiled object has no function named {name!r}")
    return address
