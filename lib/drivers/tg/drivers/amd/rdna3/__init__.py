"""The RDNA3 (gfx1100, wave32) instruction decoder, disassembler and emulator (spec hcq §1.23).

`RDNA3Emulator().run_dispatch(memory, launch)` implements tg.drivers.amd.iface.ShaderEngines; `decode`,
`decode_program` and `disassemble` give the instructions of a code object in LLVM's syntax."""

from .decoder import IllegalInstruction, Instruction, decode, decode_program
from .disasm import disassemble, disassemble_instruction
from .emulator import RDNA3Emulator

__all__ = [
    "IllegalInstruction",
    "Instruction",
    "RDNA3Emulator",
    "decode",
    "decode_program",
    "disassemble",
    "disassemble_instruction",
]
