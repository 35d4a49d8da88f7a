"""The CPU device: C kernels compiled to shared objects, run by worker threads through HCQ queues.

Kernel ABI (what the C renderer emits and what `CPUProgram` calls):

    void NAME(T* restrict buf0, ..., T* restrict bufN, int val0, ..., int valM, int core_id);

Buffers come first in slot order (pointers), then the integer values (int32) in order, then `core_id`.
A launch with global size (x, y, z) calls the function x*y*z times with core_id = 0 .. x*y*z-1 (on CPU
only the product matters; renderers launch (n, 1, 1)). The calls are spread across the device's core
threads (one per core, `CPU_COUNT` overrides) and the exec completes when every call returned. The local
size is ignored on CPU. The calls are made from a small C library (tg.hcq.devices.cpu_calls, compiled once per
process), which reads the arguments below from memory: a run of consecutive launches is one call from Python per
thread that makes its calls, and a lone split launch one per helping thread; without a C compiler (CPU:LLVM on a
machine with none) they go through ctypes.

Raw buffers are `HCQBuffer`s over aligned host memory (tg.hcq.memory.HostMemory): `va_addr` is the real address that the
kernel receives, and `view` is a memoryview of the same bytes. Kernel arguments are stored in the
device's kernel-argument ring (u64 address per buffer, then int32 per value) and read back when the
exec runs, so symbolic arguments patched at submit time take effect.

Queues: a compute engine (kernels) and a copy engine (memmove), each one thread, so copies overlap
with compute; order between them is expressed with signals, exactly as on a GPU. `Buffer.copyin` on a
busy device goes through a staging buffer and the copy engine instead of waiting for the device. A host
thread that waits on one of the device's signals (`synchronize`, `.item()`) first runs the queued lists
that the engine threads have not started itself (`CPUDevice.run_pending_until`): a kernel submitted and
then awaited costs no thread wake-up, neither to start it nor to report its end.
"""

from __future__ import annotations

import ctypes
import functools
import os
import tempfile
from collections.abc import Callable
from typing import Any

from tg.codegen.compiler import CCompiler
from tg.codegen.render.c import C_RENDERER_NAMES, CRenderer
from tg.codegen.render.llvmir import LLVMRenderer
from tg.hcq.allocator import BufferSpec, DeferredFrees, LRUAllocator
from tg.hcq.commands import Command
from tg.hcq.compiled import HCQCompiled
from tg.hcq.device import DeviceSpec
from tg.hcq.devices.cpu_calls import NativeCalls, load_native_calls
from tg.hcq.devices.cpu_workers import CommandEngine, CorePool
from tg.hcq.flags import CPU_COUNT
from tg.hcq.host import cpu_target, host_c_compiler
from tg.hcq.memory import HCQBuffer, HostMemory
from tg.hcq.program import HCQProgram
from tg.hcq.queue import HWQueue


def core_count() -> int:
    """Worker threads per CPU device: CPU_COUNT when set, else the cores this process may run on."""
    if CPU_COUNT.value > 0:
        return CPU_COUNT.value
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class CPUComputeQueue(HWQueue):
    def _submit(self, device: Any, commands: tuple[Command, ...]) -> None:
        device.compute_engine.submit(commands)


class CPUCopyQueue(HWQueue):
    supports_exec = False

    def _submit(self, device: Any, commands: tuple[Command, ...]) -> None:
        device.copy_engine.submit(commands)


def load_shared_object(lib: bytes) -> ctypes.CDLL:
    """dlopen a shared object given as bytes (written to a temporary file that is removed once loaded)."""
    fd, path = tempfile.mkstemp(prefix="tg-kernel-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        return ctypes.CDLL(path)
    finally:
        os.unlink(path)


_CALL_LIBRARY: list[NativeCalls | None] = []  # loaded once per process, by the first CPU engine that launches


def load_call_library(compiler: CCompiler | None = None) -> NativeCalls | None:
    """The C call library of the CPU engines (one per process, built with `compiler` or the system C compiler), or
    None when there is no C compiler: the engines then call kernels through ctypes (see tg.hcq.devices.cpu_calls)."""
    if not _CALL_LIBRARY:
        if compiler is None:
            try:
                compiler = host_c_compiler()
            except FileNotFoundError:
                _CALL_LIBRARY.append(None)
                return None
        _CALL_LIBRARY.append(load_native_calls(compiler, load_shared_object))
    return _CALL_LIBRARY[0]


class CPUProgram(HCQProgram):
    """A C kernel loaded from shared-object bytes; `function` is the ctypes entry point NAME."""

    def __init__(self, dev: Any, name: str, lib: bytes) -> None:
        super().__init__(dev, name)
        self.lib = lib
        self._dll = load_shared_object(lib)
        try:
            self.function = getattr(self._dll, name)
        except AttributeError:
            raise ValueError(f"the compiled library has no function named {name!r}") from None
        self.function.restype = None


class LLVMProgram(HCQProgram):
    """A kernel compiled by `CPU:LLVM`: an object file linked in memory (no shared object, no dlopen).

    `function` is a ctypes function pointer with the same calling convention as `CPUProgram.function`."""

    def __init__(self, dev: Any, name: str, lib: bytes) -> None:
        from tg.codegen.compiler.llvm import load_object

        super().__init__(dev, name)
        self.lib = lib
        self.function = _untyped_function_pointer(load_object(lib, name))


def _untyped_function_pointer(address: int) -> Any:
    """A ctypes function pointer with no declared argument types (callers pass ctypes values), returning void."""
    function = ctypes.CDLL(None)._FuncPtr(
        address
    )  # CDLL's pointer type: argtypes may stay unset, like a dlsym'd C kernel
    function.restype = None
    return function


class CPUAllocator(LRUAllocator):
    """Host memory for the CPU device; copies are memmoves after waiting for queued work."""

    def __init__(self) -> None:
        super().__init__()
        self.freed = DeferredFrees(self._release_block)  # (a free never waits for the device: see DeferredFrees)

    def _alloc(self, size: int, options: BufferSpec) -> HCQBuffer:
        self.freed.release(self.device, wait=False)
        return HostMemory(size).handle(owner=self.device)

    def _free(self, raw: HCQBuffer, options: BufferSpec) -> None:
        # Queued kernels may still use the memory: it goes once they finished.
        self.freed.add(self.device, raw)

    @staticmethod
    def _release_block(raw: HCQBuffer) -> None:
        raw.view = None
        raw.meta = None

    def free_cache(self) -> None:
        super().free_cache()
        self.freed.release(self.device, wait=True)

    def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
        """Copy host data in without waiting for a busy device.

        Idle device: copy directly. Busy device: snapshot `src` into a staging buffer and let the copy
        engine move it after the work already queued (which may still read `dest`), on the timeline,
        so later kernels see the new data and the host goes on at once.
        """
        dev = self.device
        dev._raise_error_state()
        if dev.is_idle():
            dest.cpu_view()[:] = src
            return
        staging = HostMemory(src.nbytes).handle(owner=dev)
        staging.cpu_view()[:] = src
        queue = dev.hw_copy_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
        queue.copy(dest, staging, src.nbytes).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)

    def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
        self.device.synchronize()
        dest[:] = src.cpu_view()

    def _as_buffer(self, raw: HCQBuffer) -> memoryview:
        return raw.cpu_view()

    def _transfer(self, dest: HCQBuffer, src: HCQBuffer, size: int, src_dev: Any, dest_dev: Any) -> None:
        """Device-to-device copy on the source's copy engine, ordered after both devices' earlier work."""
        copy_queue = src_dev.hw_copy_queue_t()
        copy_queue.wait(src_dev.timeline_signal, src_dev.timeline_value - 1)
        copy_queue.wait(dest_dev.timeline_signal, dest_dev.timeline_value - 1)
        copy_queue.copy(dest, src, size).signal(src_dev.timeline_signal, src_dev.next_timeline()).submit(src_dev)
        if dest_dev is not src_dev:
            follow = dest_dev.hw_compute_queue_t().wait(src_dev.timeline_signal, src_dev.timeline_value - 1)
            follow.signal(dest_dev.timeline_signal, dest_dev.next_timeline()).submit(dest_dev)


class CPUDevice(HCQCompiled):
    """`Device["CPU"]`, `Device["CPU:1"]`: every index is an independent device in the "CPU" peer group."""

    def __init__(self, spec: DeviceSpec) -> None:
        self.cores = CorePool(core_count(), name=spec.canonical)
        self.compute_engine = CommandEngine(f"{spec.canonical}-compute", self.cores, self._record_error)
        self.copy_engine = CommandEngine(f"{spec.canonical}-copy", None, self._record_error)
        allocator = CPUAllocator()
        compiler: Any
        program: Any
        renderer: Any
        if spec.renderer == "LLVM":
            from tg.codegen.compiler.llvm import LLVMCompiler

            renderer = LLVMRenderer(cpu_target(LLVMRenderer, self.cores.count))
            compiler, program = LLVMCompiler(), LLVMProgram
        else:
            compiler, program, renderer = host_c_compiler(), CPUProgram, None
            if spec.renderer in C_RENDERER_NAMES:
                renderer = CRenderer(cpu_target(CRenderer, self.cores.count, compiler))
        # the call library is built on the first launch, with this device's compiler when it is the C one
        c_compiler = compiler if isinstance(compiler, CCompiler) else None
        self.compute_engine.load_native = functools.partial(load_call_library, c_compiler)
        super().__init__(spec, allocator, compiler, program, CPUComputeQueue, CPUCopyQueue)
        allocator.device = self
        self.renderer = renderer

    def is_busy(self) -> bool:
        """True while an engine runs a kernel or a copy (so a long kernel is not mistaken for a hang)."""
        return self.compute_engine.busy or self.copy_engine.busy

    def run_pending_until(self, done: Callable[[], bool]) -> None:
        """Run this device's queued commands on the calling thread, which is about to wait for `done()`: cheaper than
        waking an engine thread and being woken by it (see CommandEngine.run_pending_until)."""
        engines = (self.compute_engine, self.copy_engine)
        while not done() and any([engine.run_pending_until(done) for engine in engines]):
            pass  # a copy that ran may let the compute list go on, and the other way round

    def _record_error(self, error: BaseException) -> None:
        if self.error_state is None:
            self.error_state = error
