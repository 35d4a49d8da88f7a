"""Run kernels of the AMD renderer on the RDNA3 emulator (tg.drivers.amd.rdna3) and, for comparison, on the PYTHON
renderer: the test-side launcher (what tg.hcq's AMD device does with PM4 packets, done here directly).

    run_on_emulator(source, binary, buffers) -> the buffers after the kernel ran
    run_schedule(tensor, executor) -> every kernel output of the tensor's schedule, run kernel by kernel

The launch follows the kernel ABI of tg.codegen.render.amd: the code object is loaded by tg.drivers.amd.code_object
at a 256-byte aligned address, the kernarg segment holds the buffers' 8-byte addresses then the int variables, the
user SGPRs are the kernarg address (s[0:1]) padded with zeros to the descriptor's count, and the grid is the
renderer's `global_size` workgroups of `local_size` threads.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

from tg.codegen.pipeline import CodegenFlags, ProgramSource, for_renderer, lower_kernel
from tg.codegen.render.amd import AMDRenderer
from tg.codegen.render.emulate import load_function
from tg.codegen.render.python import PythonRenderer
from tg.codegen.uop.ops import Ops, UOp

from ..drivers.amd_emu.harness import FlatMemory  # GPU memory for tests: mapped ranges, anything else faults


def run_on_emulator(
    source: ProgramSource, binary: bytes, buffers: list[bytes], vals: tuple[int, ...] = ()
) -> list[bytes]:
    """Run the compiled kernel `source` with `buffers` (in parameter order) on the emulator; their contents after."""
    from tg.drivers.amd.code_object import build_program
    from tg.drivers.amd.iface import WaveLaunch
    from tg.drivers.amd.rdna3 import RDNA3Emulator

    memory = FlatMemory()
    program = build_program(binary, source.name)
    image_base = memory.alloc(len(program.image))
    memory.write(image_base, program.code_object.image_at(image_base))
    addresses = [memory.alloc(len(data), data) for data in buffers]
    kernargs = b"".join(struct.pack("<Q", a) for a in addresses) + b"".join(struct.pack("<i", v) for v in vals)
    kernarg_address = memory.alloc(max(len(kernargs), program.kernargs_alloc_size), kernargs)
    user_data = [kernarg_address & 0xFFFFFFFF, kernarg_address >> 32]
    user_data += [0] * (program.user_sgpr_count - len(user_data))
    launch = WaveLaunch(
        program_address=image_base + program.entry_point_offset,
        rsrc1=program.rsrc1,
        rsrc2=program.rsrc2,
        rsrc3=program.rsrc3,
        user_data=tuple(user_data),
        grid=tuple(int(g) for g in source.global_size),  # type: ignore[arg-type]
        workgroup=source.local_size,
        wave32=program.wave32,
    )
    RDNA3Emulator().run_dispatch(memory, launch)
    return [memory.read(address, len(data)) for address, data in zip(addresses, buffers, strict=True)]


def param_sizes(ast: UOp) -> list[int]:
    """Bytes of each global buffer parameter of a kernel, in slot order."""
    params = {u.arg.slot: u for u in ast.toposort() if u.op is Ops.PARAM and u.addrspace.name == "GLOBAL"}
    return [params[s].ptrdtype.size * params[s].ptrdtype.base.itemsize for s in sorted(params)]


def amd_executor(ast: UOp, buffers: list[bytes]) -> list[bytes]:
    """Kernel `ast` rendered by the AMD renderer, compiled, run on the emulator."""
    from tg.codegen.compiler.amd import AMDCompiler
    from tg.codegen.pipeline import kernel_to_program

    source = kernel_to_program(ast, AMDRenderer(), CodegenFlags.from_environment())
    return run_on_emulator(source, AMDCompiler().compile(source.src), buffers)


def python_executor(ast: UOp, buffers: list[bytes]) -> list[bytes]:
    """The same linear program (the AMD renderer's flags and opts) on the PYTHON renderer: the reference."""
    linear = lower_kernel(ast, for_renderer(CodegenFlags.from_environment(), AMDRenderer()))
    kernel = PythonRenderer().render(linear)
    memories = [bytearray(b) for b in buffers]
    load_function(kernel.src, kernel.name)(*(memoryview(m) for m in memories), 0)
    return [bytes(m) for m in memories]


Executor = Callable[[UOp, list[bytes]], list[bytes]]


def run_schedule(roots: tuple[UOp, ...], inputs: dict[UOp, bytes], executor: Executor) -> list[tuple[str, bytes]]:
    """Every kernel of the schedule of `roots` run in order by `executor`, buffers threaded through (the input
    BUFFER nodes hold `inputs`); (kernel name, output bytes) per kernel."""
    from tg.codegen.schedule.schedule import KernelCall, create_schedule

    schedule = create_schedule(roots)
    memory: dict[UOp, bytes] = dict(inputs)
    outputs = []
    for item in schedule.items:
        if not isinstance(item, KernelCall):
            raise NotImplementedError(f"the test launcher runs kernels only, not {type(item).__name__}")
        sizes = param_sizes(item.ast)
        buffers = [memory.get(node, bytes(size)) for node, size in zip(item.buffers, sizes, strict=True)]
        after = executor(item.ast, buffers)
        memory[item.buffers[0]] = after[0]
        outputs.append((item.ast.arg.name, after[0]))
    return outputs


def as_array(data: bytes, dtype: np.dtype) -> np.ndarray:
    return np.frombuffer(data, dtype=dtype)
